"""The foundation: what raster, vector and tile code all stand on, importing nothing of ours
but the leaf modules ``shared.errors``, ``shared.settings`` and ``shared.mapnik_env``: the
tile grid and addresses (``grid``), tile formats and their encoders (``formats``, ``png``,
``encoding``, ``encoder``), atomic files (``files``) and the S3 client (``s3``)."""
