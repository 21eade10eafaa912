"""Map tiles: the tile grid, map styles, rendering with Mapnik, the tile cache, pre-tiling."""
