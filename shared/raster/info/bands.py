"""One element of gdalinfo's ``bands``, with its STAC twins."""

from __future__ import annotations

from typing import Any

from rasterio.enums import ColorInterp, MaskFlags

from shared.raster.gdal import GDAL_TYPES
from shared.raster.info.metadata import BAND_DOMAINS, metadata
from shared.raster.info.numbers import atof, non_finite_as_text, rounded, stac_nodata

__all__ = ["band"]

_STAC_TYPES = {
    "Byte": "uint8",
    "Int8": "int8",
    "UInt16": "uint16",
    "Int16": "int16",
    "UInt32": "uint32",
    "Int32": "int32",
    "UInt64": "uint64",
    "Int64": "int64",
    "Float32": "float32",
    "Float64": "float64",
    "CInt16": "cint16",
    "CFloat32": "cfloat32",
    "CFloat64": "cfloat64",
}

#: GDALGetColorInterpretationName for the values GDAL 3.6 knows; it has none of the later ones.
_COLOR_NAMES = (
    "Undefined",
    "Gray",
    "Palette",
    "Red",
    "Green",
    "Blue",
    "Alpha",
    "Hue",
    "Saturation",
    "Lightness",
    "Cyan",
    "Magenta",
    "Yellow",
    "Black",
    "YCbCr_Y",
    "YCbCr_Cb",
    "YCbCr_Cr",
)

_STATISTICS = {
    "minimum": "STATISTICS_MINIMUM",
    "maximum": "STATISTICS_MAXIMUM",
    "mean": "STATISTICS_MEAN",
    "stdDev": "STATISTICS_STDDEV",
}

_INT64_MAX = 2**63 - 1


def band(
    ds: Any, bidx: int, overview_sizes: list[list[int]]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """One element of ``bands``, with its ``raster:bands`` and ``eo:bands`` STAC twins.

    Args:
        ds: the open dataset.
        bidx: the band's index, from 1.
        overview_sizes: ``[width, height]`` of each overview level.

    Returns:
        The band's object, its ``raster:bands`` entry and its ``eo:bands`` entry.
    """
    gdal_type = GDAL_TYPES.get(ds.dtypes[bidx - 1], "Unknown")
    interp = ds.colorinterp[bidx - 1].value
    color_name = _COLOR_NAMES[interp] if 0 <= interp < len(_COLOR_NAMES) else "Undefined"
    block_rows, block_cols = ds.block_shapes[bidx - 1]
    info: dict[str, Any] = {
        "band": bidx,
        "block": [block_cols, block_rows],
        "type": gdal_type,
        "colorInterpretation": color_name,
    }
    raster: dict[str, Any] = {}
    if gdal_type in _STAC_TYPES:
        raster["data_type"] = _STAC_TYPES[gdal_type]
    description = ds.descriptions[bidx - 1]
    eo = {"name": f"b{bidx}", "description": description or color_name}
    if description:
        info["description"] = description

    # Without -stats gdalinfo reports only statistics stored with the file (the STATISTICS_*
    # items, from the TIFF or its .aux.xml), to 3 decimals.
    tags = ds.tags(bidx)
    for key, item in (("min", "STATISTICS_MINIMUM"), ("max", "STATISTICS_MAXIMUM")):
        if item in tags:
            info[key] = rounded(atof(tags[item]), 3)
    if all(item in tags for item in _STATISTICS.values()):
        stats = {key: rounded(atof(tags[item]), 3) for key, item in _STATISTICS.items()}
        info.update(stats)
        raster["stats"] = {key.lower(): value for key, value in stats.items()}

    nodata = ds.nodatavals[bidx - 1]
    if nodata is not None:
        if gdal_type == "UInt64" and int(nodata) >= _INT64_MAX:
            info["noDataValue"] = str(int(nodata))  # json-c has no unsigned 64-bit numbers
        elif gdal_type in ("Int64", "UInt64"):
            info["noDataValue"] = raster["nodata"] = int(nodata)
        else:
            info["noDataValue"] = non_finite_as_text(nodata)
            raster["nodata"] = stac_nodata(nodata, gdal_type)

    if ds.overviews(bidx):
        info["overviews"] = [{"size": size} for size in overview_sizes]
    mask = _mask(ds, bidx, overview_sizes)
    if mask is not None:
        info["mask"] = mask
    unit = ds.units[bidx - 1]
    if unit:
        info["unit"] = raster["unit"] = unit
    scale, offset = ds.scales[bidx - 1], ds.offsets[bidx - 1]
    if scale != 1.0 or offset != 0.0:
        info["offset"], info["scale"] = offset, scale
        # gdalinfo deep-copies these into STAC, which json-c refuses for numbers carrying a
        # precision of their own: they come out null.
        raster["scale"] = raster["offset"] = None
    info["metadata"] = metadata(ds, bidx, BAND_DOMAINS)
    if color_name == "Palette":
        info.update(_color_table(ds, bidx))
    return info, raster, eo


def _mask(ds: Any, bidx: int, overview_sizes: list[list[int]]) -> dict[str, Any] | None:
    """The band's ``mask``, which gdalinfo prints unless all pixels are valid or nodata rules."""
    flags = sum(flag.value for flag in ds.mask_flag_enums[bidx - 1])
    if flags & (MaskFlags.nodata.value | MaskFlags.all_valid.value) and flags != (
        MaskFlags.nodata.value | MaskFlags.per_dataset.value
    ):
        return None
    labels = (
        (MaskFlags.per_dataset, "PER_DATASET"),
        (MaskFlags.alpha, "ALPHA"),
        (MaskFlags.nodata, "NODATA"),
    )
    # rasterio does not reach the mask band itself. An alpha mask is the alpha band, with the
    # dataset's overviews; a mask of its own (internal or .msk) gets overviews along with the
    # bands' (gdaladdo builds both); a mask computed from nodata values has none.
    if flags & MaskFlags.alpha.value:
        alphas = [i for i in ds.indexes if ds.colorinterp[i - 1] == ColorInterp.alpha]
        has_overviews = bool(alphas) and bool(ds.overviews(alphas[0]))
    else:
        has_overviews = not flags & MaskFlags.nodata.value and bool(ds.overviews(bidx))
    return {
        "flags": [label for flag, label in labels if flags & flag.value],
        "overviews": [{"size": size} for size in overview_sizes] if has_overviews else [],
    }


def _color_table(ds: Any, bidx: int) -> dict[str, Any]:
    try:
        colormap = ds.colormap(bidx)
    except ValueError:
        return {}
    entries = [list(colormap[i]) for i in sorted(colormap)]
    # rasterio does not tell the palette's interpretation; GeoTIFF palettes are always RGB
    return {"colorTable": {"palette": "RGB", "count": len(entries), "entries": entries}}
