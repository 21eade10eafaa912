"""The revisions of schema ``mapsvc_auth``, oldest first (``0001_…``, ``0002_…``)."""
