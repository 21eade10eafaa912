"""Authentication and authorisation: principals, users, API keys, OAuth 2.0 clients and grants.

The domain side (no Starlette): storage in PostgreSQL (schema ``mapsvc_auth``, Alembic
migrations), password and secret hashing, JWT signing. The API checks credentials with it.
"""
