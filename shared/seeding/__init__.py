"""The seeding and export use cases, above ``shared.tiles`` (tile caches and rendering),
``shared.raster`` and ``shared.vector``: pre-tiling's plan, chunks and runs (``pretile``,
``pretile_run``), coverages (``coverage``, ``coverage_ask``, ``tile_sets``), exports
(``export``, ``archives``, ``export_s3``), truncation and expiry (``truncate``, ``expiry``,
``cache_walk``) and the speed test (``speed``)."""
