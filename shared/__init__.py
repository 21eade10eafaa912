"""The mapsvc domain: settings, errors, jobs and events, rasters, tiles, vector data, providers."""
