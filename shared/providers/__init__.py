"""External providers behind one API: geocoding, routing, weather, elevation, parcels, proxy.

A provider is a base URL, credentials and TTL/rate settings (:mod:`.config`), reached through
one long-lived ``httpx.AsyncClient`` per process with retries, a rate limit shared through
Redis and a Redis cache (:mod:`.upstream`); one module per kind of provider turns the
provider's answer into the spec's shape.
"""
