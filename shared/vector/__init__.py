"""Vector data from PostGIS: the layer catalogue, GeoJSON, TileJSON and vector tiles."""
