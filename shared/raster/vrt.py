"""GDAL virtual rasters (VRT) written as XML: a mosaic of files, a subset of bands, overviews.

GDAL reads the XML as a file or straight from a string, so the same documents serve as layer
sources (Mapnik, rasterio) and as the input of a copy (compression). A source is a local file or
a GDAL virtual path (``/vsis3/…``); the latter is always named as it is, never relative.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import rasterio

from shared.errors import UnprocessableError
from shared.raster.gdal import GDAL_ERRORS, GDAL_TYPES, file_name, gdal_message, is_vsi

__all__ = ["RasterPath", "band_subset_vrt", "mosaic_vrt", "with_overviews"]

#: A raster file: a local path, or a path GDAL reads through a virtual file system.
RasterPath = str | Path


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    element = ET.SubElement(parent, tag, attrs)
    if text is not None:
        element.text = text
    return element


def _metadata(parent: ET.Element, tags: dict[str, str]) -> None:
    if tags:
        metadata = _sub(parent, "Metadata")
        for key, value in tags.items():
            _sub(metadata, "MDI", value, key=key)


def _nodata_text(value: float) -> str:
    return repr(int(value)) if float(value).is_integer() else repr(float(value))


def _source(
    vband: ET.Element,
    tag: str,
    path: RasterPath,
    vrt_dir: Path | None,
    band: int,
    meta: dict[str, Any],
    block: tuple[int, int],
) -> ET.Element:
    """A source of a VRT band: its file (relative to ``vrt_dir`` when given and local), band,
    shape."""
    source = _sub(vband, tag)
    if is_vsi(path):
        _sub(source, "SourceFilename", str(path), relativeToVRT="0")
    elif vrt_dir is None:
        _sub(source, "SourceFilename", str(Path(path).resolve()), relativeToVRT="0")
    else:
        name = os.path.relpath(Path(path).resolve(), vrt_dir.resolve())
        _sub(source, "SourceFilename", name, relativeToVRT="1")
    _sub(source, "SourceBand", str(band))
    _sub(
        source,
        "SourceProperties",
        RasterXSize=str(meta["width"]),
        RasterYSize=str(meta["height"]),
        DataType=GDAL_TYPES[meta["dtype"]],
        BlockXSize=str(block[1]),
        BlockYSize=str(block[0]),
    )
    return source


def mosaic_vrt(files: Sequence[RasterPath], vrt_dir: Path) -> str:
    """A VRT that mosaics raster files of one CRS, band count and data type.

    The resolution is the average of the files' (as ``gdalbuildvrt`` does); local sources are
    written relative to ``vrt_dir``, where the VRT is to be saved.

    Args:
        files: the rasters (local or ``/vsis3/…``), in the order later files are drawn over
            earlier ones.
        vrt_dir: the folder the VRT will be written to.

    Returns:
        The VRT XML.

    Raises:
        UnprocessableError: a file cannot be read, or the files do not fit together
            (different CRSs, band counts or data types, rotated grids).
    """
    metas = []
    for path in files:
        try:
            with rasterio.open(path) as ds:
                metas.append(
                    (
                        path,
                        ds.meta.copy(),
                        ds.bounds,
                        ds.res,
                        list(ds.colorinterp),
                        ds.block_shapes[0],
                    )
                )
        except GDAL_ERRORS as exc:
            name = file_name(path)
            raise UnprocessableError(f"{name}: {gdal_message(exc)}", file=name) from exc
    first = metas[0][1]
    for path, meta, *_ in metas:
        name = file_name(path)
        if meta["crs"] != first["crs"]:
            crss = sorted({str(m["crs"]) for _, m, *_ in metas})
            raise UnprocessableError(
                "the files of this folder are in different coordinate systems "
                f"({', '.join(crss)}); put each CRS in a folder of its own",
                file=name,
            )
        if meta["count"] != first["count"] or meta["dtype"] != first["dtype"]:
            raise UnprocessableError(
                f"{name} has {meta['count']} band(s) of {meta['dtype']}, "
                f"{file_name(metas[0][0])} has {first['count']} of {first['dtype']}",
                file=name,
            )
        if meta["transform"].b or meta["transform"].d:
            raise UnprocessableError(f"{name} has a rotated grid", file=name)
    resx = sum(res[0] for *_, res, _, _ in metas) / len(metas)
    resy = sum(res[1] for *_, res, _, _ in metas) / len(metas)
    minx = min(b.left for _, _, b, *_ in metas)
    maxx = max(b.right for _, _, b, *_ in metas)
    miny = min(b.bottom for _, _, b, *_ in metas)
    maxy = max(b.top for _, _, b, *_ in metas)
    width, height = round((maxx - minx) / resx), round((maxy - miny) / resy)

    root = ET.Element("VRTDataset", rasterXSize=str(width), rasterYSize=str(height))
    if first["crs"] is not None:
        _sub(root, "SRS", first["crs"].to_wkt())
    _sub(root, "GeoTransform", f"{minx!r}, {resx!r}, 0.0, {maxy!r}, 0.0, {-resy!r}")
    gdal_type = GDAL_TYPES[first["dtype"]]
    for band in range(1, first["count"] + 1):
        vband = _sub(root, "VRTRasterBand", dataType=gdal_type, band=str(band))
        if first["nodata"] is not None:
            _sub(vband, "NoDataValue", _nodata_text(first["nodata"]))
        _sub(vband, "ColorInterp", metas[0][4][band - 1].name.capitalize())
        for path, meta, bounds, res, _, block in metas:
            source = _source(vband, "ComplexSource", path, vrt_dir, band, meta, block)
            _sub(
                source,
                "SrcRect",
                xOff="0",
                yOff="0",
                xSize=str(meta["width"]),
                ySize=str(meta["height"]),
            )
            _sub(
                source,
                "DstRect",
                xOff=repr((bounds.left - minx) / resx),
                yOff=repr((maxy - bounds.top) / resy),
                xSize=repr(meta["width"] * res[0] / resx),
                ySize=repr(meta["height"] * res[1] / resy),
            )
            if meta["nodata"] is not None:
                _sub(source, "NODATA", _nodata_text(meta["nodata"]))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode")


def band_subset_vrt(
    source: RasterPath,
    bands: list[int],
    data_type: str,
    color_interp: list[str],
    vrt_dir: Path | None = None,
) -> str:
    """A VRT of some bands of one raster, converted to ``data_type`` (values are clamped).

    This is what ``gdal_translate -ot <type> -b 1 -b 2 … -colorinterp …`` builds internally.
    The source is named by its absolute path, or relative to ``vrt_dir`` when the VRT is to be
    saved there (a ``/vsis3/…`` source always as it is).

    Raises:
        UnprocessableError: the raster cannot be read or lacks one of the bands.
    """
    try:
        with rasterio.open(source) as ds:
            meta, tags = ds.meta.copy(), ds.tags()
            band_tags = {b: ds.tags(b) for b in bands if b <= ds.count}
            block = ds.block_shapes[0]
    except GDAL_ERRORS as exc:
        name = file_name(source)
        raise UnprocessableError(f"{name}: {gdal_message(exc)}", file=name) from exc
    missing = [b for b in bands if b > meta["count"]]
    if missing:
        raise UnprocessableError(
            f"{file_name(source)} has {meta['count']} band(s); band(s) {missing} are required",
            file=file_name(source),
        )
    root = ET.Element("VRTDataset", rasterXSize=str(meta["width"]), rasterYSize=str(meta["height"]))
    if meta["crs"] is not None:
        _sub(root, "SRS", meta["crs"].to_wkt())
    _sub(root, "GeoTransform", ", ".join(repr(v) for v in meta["transform"].to_gdal()))
    _metadata(root, tags)
    same_type = GDAL_TYPES[meta["dtype"]] == data_type
    for index, (band, interp) in enumerate(zip(bands, color_interp, strict=True), start=1):
        vband = _sub(root, "VRTRasterBand", dataType=data_type, band=str(index))
        if meta["nodata"] is not None:
            _sub(vband, "NoDataValue", _nodata_text(meta["nodata"]))
        # statistics no longer hold once values are converted (gdal_translate drops them too)
        _metadata(
            vband,
            {
                k: v
                for k, v in band_tags[band].items()
                if same_type or not k.startswith("STATISTICS_")
            },
        )
        _sub(vband, "ColorInterp", interp)
        _source(vband, "SimpleSource", source, vrt_dir, band, meta, block)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode")


def with_overviews(xml: str, levels: list[Path], vrt_dir: Path) -> str:
    """The VRT ``xml`` with ``levels`` as the overviews of each of its bands.

    Each level is a raster with the VRT's bands, finest first; GDAL (and so Mapnik) reads a
    reduced view from the level that fits it instead of the full resolution.

    Args:
        xml: a VRT, as the functions of this module write it.
        levels: the overview rasters, named relative to ``vrt_dir``.
        vrt_dir: the folder the VRT will be written to.
    """
    root = ET.fromstring(xml)
    for vband in root.iter("VRTRasterBand"):
        for level in levels:
            overview = _sub(vband, "Overview")
            name = os.path.relpath(level.resolve(), vrt_dir.resolve())
            _sub(overview, "SourceFilename", name, relativeToVRT="1")
            _sub(overview, "SourceBand", vband.get("band", "1"))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode")
