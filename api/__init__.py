"""The HTTP API (Starlette): thin handlers over the domain in ``shared``."""
