"""Rasters: ids and paths, listing, statistics, metadata, configuration, compression."""
