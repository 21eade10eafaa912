"""Raster metadata in the shape of ``gdalinfo -json`` (GDAL 3.6), read in-process with rasterio."""

from __future__ import annotations

import copy
import math
import queue
import re
import threading
import warnings
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
from rasterio.crs import CRS
from rasterio.enums import ColorInterp, MaskFlags
from rasterio.errors import NotGeoreferencedWarning, RasterioError
from rasterio.warp import transform as warp_transform
from rasterio.windows import Window

from shared.errors import NotFoundError, UnprocessableError
from shared.raster.gdal import GDAL_ERRORS, GDAL_TYPES, gdal_message

__all__ = ["raster_info"]

#: GDAL settings for the read. The first makes GDAL hand rasterio the dataset's CRS as WKT2:
#: the WKT1 it gives otherwise loses names and usage that gdalinfo prints. rasterio's defaults
#: for the other two differ from plain GDAL's, which gdalinfo runs with.
_GDAL_ENV: dict[str, Any] = {
    "OSR_WKT_FORMAT": "WKT2_2019",
    "GTIFF_IMPLICIT_JPEG_OVR": True,
    "CHECK_WITH_INVERT_PROJ": False,
}

#: Dataset metadata domains gdalinfo prints without ``-mdd``, after the default one.
_DATASET_DOMAINS = ("IMAGE_STRUCTURE", "TILING_SCHEME", "SUBDATASETS", "GEOLOCATION", "RPC")
_BAND_DOMAINS = ("IMAGE_STRUCTURE",)

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

_NO_GEOTRANSFORM = (0.0, 1.0, 0.0, 0.0, 0.0, 1.0)
_WGS84_SEMI_MAJOR = 6378137.0
_INT64_MAX = 2**63 - 1
_LEADING_NUMBER = re.compile(
    r"\s*([-+]?(?:inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?))", re.I
)
_LEADING_INT = re.compile(r"\s*([-+]?\d+)")
_WKT_KEYWORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\[")


def raster_info(path: Path) -> dict[str, Any]:
    """Describe a raster file as ``gdalinfo -json`` (GDAL 3.6) does, without running it.

    Args:
        path: a GeoTIFF or VRT file; the path string as given becomes ``description`` and the
            base of the ``files`` entries.

    Returns:
        The object ``gdalinfo -json`` prints: driver, files, size, coordinate system,
        geotransform, GCPs, metadata, corner coordinates, long/lat extent, bands and ``stac``.

    Raises:
        NotFoundError: there is no file at ``path``.
        UnprocessableError: GDAL cannot open the file, or a block of its image data lies past
            the end of the file; the message carries GDAL's own words.
    """
    if not path.is_file():
        raise NotFoundError(f"raster not found: {path}", path=str(path))
    return _READERS.run(path)


class _ThreadPerFile:
    """Reads each file in a thread that has read no other file.

    GDAL keeps one PROJ context per thread, and its object cache leaks from file to file:
    after a UTM GeoTIFF an EPSG:4326 one comes back with the WGS 84 datum instead of its
    ensemble, or the other way round. A thread of its own reads each file as a fresh gdalinfo
    would. Making a thread's PROJ context costs more than reading the file, so the thread of
    a file is kept (the most recent ``size`` of them) for the next read of the same file.
    """

    def __init__(self, size: int = 32) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._readers: OrderedDict[str, _Reader] = OrderedDict()

    def run(self, path: Path) -> dict[str, Any]:
        with self._lock:
            reader = self._readers.pop(str(path), None) or _Reader()
            self._readers[str(path)] = reader
            if len(self._readers) > self._size:
                self._readers.popitem(last=False)[1].stop()
        return reader.read(path)


class _Reader:
    """One thread that reads the files handed to it, one at a time."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Path, Future[dict[str, Any]]] | None] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._main, name="raster-info", daemon=True).start()

    def _main(self) -> None:
        while (job := self._jobs.get()) is not None:
            path, result = job
            try:
                result.set_result(_read(path))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller as it is
                result.set_exception(exc)

    def read(self, path: Path) -> dict[str, Any]:
        result: Future[dict[str, Any]] = Future()
        self._jobs.put((path, result))
        return result.result()

    def stop(self) -> None:
        self._jobs.put(None)


_READERS = _ThreadPerFile()


def _read(path: Path) -> dict[str, Any]:
    name = str(path)
    try:
        with rasterio.Env(**_GDAL_ENV) as env:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NotGeoreferencedWarning)
                dataset = rasterio.open(name)
            with dataset as ds:
                # rasterio hands out the identity where GDAL has no geotransform (and a
                # GeoTIFF cannot store the identity as one)
                has_geotransform = ds.transform.to_gdal() != _NO_GEOTRANSFORM
                levels = _overview_levels(ds, name)
                _check_image_data(ds, path, levels)
                return _describe(ds, name, env.drivers(), has_geotransform, levels)
    except GDAL_ERRORS as exc:
        raise UnprocessableError(f"{name}: {gdal_message(exc)}", path=name) from exc


def _describe(
    ds: Any, name: str, driver_names: dict[str, str], has_geotransform: bool, levels: list[_Level]
) -> dict[str, Any]:
    info: dict[str, Any] = {
        "description": name,
        "driverShortName": ds.driver,
        "driverLongName": driver_names.get(ds.driver, ds.driver),
        "files": list(ds.files),
        "size": [ds.width, ds.height],
    }
    # sic: GDAL 3.6 puts width first in proj:shape too
    stac: dict[str, Any] = {"proj:shape": [ds.width, ds.height]}
    if ds.crs is not None:
        wkt = _pretty_wkt(ds.crs.to_wkt(version="WKT2_2019"))
        projjson = ds.crs.to_dict(projjson=True)
        info["coordinateSystem"] = {"wkt": wkt, "dataAxisToSRSAxisMapping": _axis_mapping(projjson)}
        stac["proj:wkt2"] = wkt
        root_id = projjson.get("id") or (projjson.get("ids") or [{}])[0]
        if str(root_id.get("authority", "")).upper() == "EPSG":
            stac["proj:epsg"] = int(root_id["code"])
        stac["proj:projjson"] = projjson
    geotransform = list(ds.transform.to_gdal()) if has_geotransform else None
    if geotransform is not None:
        info["geoTransform"] = geotransform
        stac["proj:transform"] = list(geotransform)
    gcps, gcp_crs = ds.gcps
    if gcps:
        info["gcps"] = _gcps(gcps, gcp_crs)
    info["metadata"] = _metadata(ds, None, ("", *_DATASET_DOMAINS))
    cloud_cover = ds.tags(ns="IMAGERY").get("CLOUDCOVER")
    if cloud_cover is not None:
        stac["eo:cloud_cover"] = _atoi(cloud_cover)
    if ds.width:
        info.update(_corners(ds, geotransform))
    overview_sizes = [[level.width, level.height] for level in levels]
    bands = [_band(ds, bidx, overview_sizes) for bidx in ds.indexes]
    info["bands"] = [band for band, _, _ in bands]
    stac["raster:bands"] = [raster for _, raster, _ in bands]
    stac["eo:bands"] = [eo for _, _, eo in bands]
    info["stac"] = stac
    return info


def _band(
    ds: Any, bidx: int, overview_sizes: list[list[int]]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """One element of ``bands``, with its ``raster:bands`` and ``eo:bands`` STAC twins."""
    gdal_type = GDAL_TYPES.get(ds.dtypes[bidx - 1], "Unknown")
    interp = ds.colorinterp[bidx - 1].value
    color_name = _COLOR_NAMES[interp] if 0 <= interp < len(_COLOR_NAMES) else "Undefined"
    block_rows, block_cols = ds.block_shapes[bidx - 1]
    band: dict[str, Any] = {
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
        band["description"] = description

    # Without -stats gdalinfo reports only statistics stored with the file (the STATISTICS_*
    # items, from the TIFF or its .aux.xml), to 3 decimals.
    tags = ds.tags(bidx)
    for key, item in (("min", "STATISTICS_MINIMUM"), ("max", "STATISTICS_MAXIMUM")):
        if item in tags:
            band[key] = _rounded(_atof(tags[item]), 3)
    if all(item in tags for item in _STATISTICS.values()):
        stats = {key: _rounded(_atof(tags[item]), 3) for key, item in _STATISTICS.items()}
        band.update(stats)
        raster["stats"] = {key.lower(): value for key, value in stats.items()}

    nodata = ds.nodatavals[bidx - 1]
    if nodata is not None:
        if gdal_type == "UInt64" and int(nodata) >= _INT64_MAX:
            band["noDataValue"] = str(int(nodata))  # json-c has no unsigned 64-bit numbers
        elif gdal_type in ("Int64", "UInt64"):
            band["noDataValue"] = raster["nodata"] = int(nodata)
        else:
            band["noDataValue"] = _non_finite_as_text(nodata)
            raster["nodata"] = _stac_nodata(nodata, gdal_type)

    if ds.overviews(bidx):
        band["overviews"] = [{"size": size} for size in overview_sizes]
    mask = _mask(ds, bidx, overview_sizes)
    if mask is not None:
        band["mask"] = mask
    unit = ds.units[bidx - 1]
    if unit:
        band["unit"] = raster["unit"] = unit
    scale, offset = ds.scales[bidx - 1], ds.offsets[bidx - 1]
    if scale != 1.0 or offset != 0.0:
        band["offset"], band["scale"] = offset, scale
        # gdalinfo deep-copies these into STAC, which json-c refuses for numbers carrying a
        # precision of their own: they come out null.
        raster["scale"] = raster["offset"] = None
    band["metadata"] = _metadata(ds, bidx, ("", *_BAND_DOMAINS))
    if color_name == "Palette":
        band.update(_color_table(ds, bidx))
    return band, raster, eo


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


def _metadata(ds: Any, bidx: int | None, domains: tuple[str, ...]) -> dict[str, Any]:
    """The non-empty domains among ``domains``, in that order (``""`` is the default one)."""
    metadata: dict[str, Any] = {}
    for domain in domains:
        items = ds.tags(ns=domain or None) if bidx is None else ds.tags(bidx, ns=domain or None)
        if items:
            metadata[domain] = dict(items)
    return metadata


def _gcps(gcps: list[Any], gcp_crs: CRS | None) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if gcp_crs is not None:
        result["coordinateSystem"] = {
            "wkt": _pretty_wkt(gcp_crs.to_wkt(version="WKT2_2019")),
            "dataAxisToSRSAxisMapping": _axis_mapping(gcp_crs.to_dict(projjson=True)),
        }
    result["gcpList"] = [
        {
            "id": gcp.id or "",
            "info": gcp.info or "",
            "pixel": gcp.col,
            "line": gcp.row,
            "x": gcp.x,
            "y": gcp.y,
            "z": gcp.z or 0.0,
        }
        for gcp in gcps
    ]
    return result


def _corners(ds: Any, geotransform: list[float] | None) -> dict[str, Any]:
    """``cornerCoordinates`` and the long/lat ring (``wgs84Extent``, or ``extent`` off Earth)."""
    pixels = {
        "upperLeft": (0.0, 0.0),
        "lowerLeft": (0.0, float(ds.height)),
        "lowerRight": (float(ds.width), float(ds.height)),
        "upperRight": (float(ds.width), 0.0),
        "center": (ds.width / 2.0, ds.height / 2.0),
    }
    corners: dict[str, list[Any]] = {}
    for key, (col, row) in pixels.items():
        if geotransform is None:
            corners[key] = [_rounded(col, 1), _rounded(row, 1)]
            continue
        x, y = _georeference(geotransform, col, row)
        # gdalinfo's precision: 7 decimals where the numbers look like degrees, else 3
        digits = 7 if abs(x) < 181 and abs(y) < 91 else 3
        corners[key] = [_rounded(x, digits), _rounded(y, digits)]

    ring: list[list[Any]] = []
    to_wgs84 = False
    if geotransform is not None and ds.crs is not None:
        target, to_wgs84 = _long_lat_crs(ds.crs)
        if target is not None:
            order = ("upperLeft", "lowerLeft", "lowerRight", "upperRight", "upperLeft")
            points = [_georeference(geotransform, *pixels[key]) for key in order]
            ring = _long_lat_ring(ds.crs, target, points)
    extent = {"type": "Polygon", "coordinates": [ring]}
    return {"cornerCoordinates": corners, ("wgs84Extent" if to_wgs84 else "extent"): extent}


def _georeference(geotransform: list[float], col: float, row: float) -> tuple[float, float]:
    x = geotransform[0] + geotransform[1] * col + geotransform[2] * row
    y = geotransform[3] + geotransform[4] * col + geotransform[5] * row
    return x, y


def _long_lat_crs(crs: CRS) -> tuple[CRS | None, bool]:
    """WGS 84 if the CRS looks like Earth's, else its own geographic CRS in degrees, and which."""
    projjson = crs.to_dict(projjson=True)
    geographic = _geographic_part(projjson)
    if geographic is None:
        return None, False
    datum = geographic.get("datum") or geographic.get("datum_ensemble") or {}
    semi_major = _metres(datum.get("ellipsoid", {}).get("semi_major_axis"))
    if semi_major is None:
        semi_major = _metres(datum.get("ellipsoid", {}).get("radius"))
    if semi_major is not None and abs(semi_major - _WGS84_SEMI_MAJOR) < 10000.0:
        return CRS.from_epsg(4326), True
    for axis in geographic.get("coordinate_system", {}).get("axis", []):
        axis["unit"] = "degree"
    try:
        return CRS.from_dict(geographic, projjson=True), False
    except RasterioError:
        return None, False


def _long_lat_ring(source: CRS, target: CRS, points: list[tuple[float, float]]) -> list[list[Any]]:
    xs, ys = [x for x, _ in points], [y for _, y in points]
    try:
        lons, lats = warp_transform(source, target, xs, ys)
    except (RasterioError, ValueError):
        return []
    # a corner that does not transform is left out, as gdalinfo does
    return [
        [_rounded(lon, 7), _rounded(lat, 7)]
        for lon, lat in zip(lons, lats, strict=True)
        if math.isfinite(lon) and math.isfinite(lat)
    ]


def _geographic_part(projjson: dict[str, Any]) -> dict[str, Any] | None:
    """A copy of the geodetic CRS a CRS is built on (its base, or itself), as PROJJSON."""
    crs = projjson
    while crs.get("type") in ("BoundCRS", "CompoundCRS"):
        crs = crs["source_crs"] if crs["type"] == "BoundCRS" else crs["components"][0]
    while "base_crs" in crs:
        crs = crs["base_crs"]
    if not (crs.get("datum") or crs.get("datum_ensemble")):
        return None
    return copy.deepcopy(crs)


def _metres(value: Any) -> float | None:
    if isinstance(value, dict):
        unit = value.get("unit")
        factor = unit.get("conversion_factor", 1.0) if isinstance(unit, dict) else 1.0
        return float(value["value"]) * float(factor)
    return float(value) if value is not None else None


def _axis_mapping(projjson: dict[str, Any]) -> list[int]:
    """dataAxisToSRSAxisMapping under GDAL's traditional GIS order (easting first)."""
    crs = projjson
    while crs.get("type") == "BoundCRS":
        crs = crs["source_crs"]
    parts = crs["components"] if crs.get("type") == "CompoundCRS" else [crs]
    axes = [part.get("coordinate_system", {}).get("axis", []) for part in parts]
    mapping = list(range(1, sum(len(a) for a in axes) + 1))
    if len(axes[0]) >= 2:
        first, second = axes[0][0].get("direction"), axes[0][1].get("direction")
        if first in ("north", "south") and second in ("east", "west"):
            mapping[0], mapping[1] = 2, 1
    return mapping


def _pretty_wkt(wkt: str) -> str:
    """PROJ's multi-line layout of a one-line WKT2, as gdalinfo asks for it (MULTILINE=YES).

    rasterio only exports one-line WKT. Each keyword node below the root starts a line indented
    four spaces per open node; the axes after ``CS[...]`` sit one level deeper, in the anonymous
    node PROJ's formatter opens for them.
    """
    out: list[str] = []
    stack: list[str] = []  # open nodes; "" is the anonymous one holding a CS's axes
    i, in_string = 0, False
    while i < len(wkt):
        char = wkt[i]
        if in_string:
            if char == '"' and wkt.startswith('""', i):  # an escaped quote
                out.append('""')
                i += 2
                continue
            in_string = char != '"'
        elif char == '"':
            in_string = True
        elif char == "]":
            if stack and stack[-1] == "":
                stack.pop()
            if stack and stack.pop() == "CS" and stack:
                stack.append("")
        elif i == 0 or wkt[i - 1] in ",[":
            keyword = _WKT_KEYWORD.match(wkt, i)
            if keyword:
                if stack and stack[-1] == "" and keyword.group(1) != "AXIS":
                    stack.pop()
                if stack:
                    out.append("\n" + " " * (4 * len(stack)))
                stack.append(keyword.group(1))
                out.append(keyword.group(0))
                i = keyword.end()
                continue
        out.append(char)
        i += 1
    return "".join(out)


def _stac_nodata(value: float, gdal_type: str) -> float | str | None:
    """STAC ``nodata`` as gdalinfo 3.6 prints it, null included.

    gdalinfo writes nodata with the fewest significant digits that read back exactly, then
    deep-copies that JSON number into the STAC block. json-c cannot copy a number that carries
    a digit count, so the copy is null unless the count came out as 0 (a value exact with one
    digit, such as 0) or the value is not finite (written as a string).
    """
    if not math.isfinite(value):
        return _non_finite_as_text(value)
    single = gdal_type == "Float32" and float(np.float32(value)) == value
    digits, best = (8 if single else 18), ""
    while digits > 0:
        candidate = f"{value:.{digits}g}"
        if single:
            exact = np.float32(float(candidate)) == np.float32(value)
        else:
            exact = float(candidate) == value
        if best and not exact:
            digits += 1
            break
        best = candidate
        digits -= 1
    return value if digits == 0 else None


def _non_finite_as_text(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _rounded(value: float, digits: int) -> float | str:
    return round(value, digits) if math.isfinite(value) else _non_finite_as_text(value)


def _atof(text: str) -> float:
    """The leading number of ``text``, 0 when there is none (GDAL's CPLAtofM)."""
    match = _LEADING_NUMBER.match(text)
    return float(match.group(1)) if match else 0.0


def _atoi(text: str) -> int:
    match = _LEADING_INT.match(text)
    return int(match.group(1)) if match else 0


@dataclass(frozen=True)
class _Level:
    """A resolution level (-1 the full one, else the overview's index) and its layout."""

    index: int
    width: int
    height: int
    blocks: list[tuple[int, int]]  # per band, (rows, columns)


def _overview_levels(ds: Any, name: str) -> list[_Level]:
    """The overview levels of the first band (rasterio itself only gives decimation factors)."""
    levels = []
    for index in range(len(ds.overviews(1)) if ds.count else 0):
        with rasterio.open(name, overview_level=index) as overview:
            levels.append(
                _Level(index, overview.width, overview.height, list(overview.block_shapes))
            )
    return levels


def _check_image_data(ds: Any, path: Path, levels: list[_Level]) -> None:
    """Raise if a GeoTIFF block lies (partly) past the end of its file, in GDAL's words.

    gdalinfo reads no pixels, so it describes a truncated file without a word, and reading
    every block would cost as much as the file. The TIFF directory has each block's offset and
    size: this checks those and reads only a block found wanting, to let GDAL say what is wrong.
    """
    if ds.driver != "GTiff" or not ds.count:
        return
    pixel_interleaved = ds.tags(ns="IMAGE_STRUCTURE").get("INTERLEAVE") == "PIXEL"
    bands = list(ds.indexes[:1] if pixel_interleaved else ds.indexes)
    # overviews come from the .ovr file when there is one
    ovr = f"{ds.name}.ovr"
    ovr_size = Path(ovr).stat().st_size if ovr in ds.files else path.stat().st_size
    full = _Level(-1, ds.width, ds.height, list(ds.block_shapes))
    for level in [full, *levels]:
        file_size = path.stat().st_size if level is full else ovr_size
        for bidx in bands:
            _check_blocks(ds, level, bidx, file_size)


def _check_blocks(ds: Any, level: _Level, bidx: int, file_size: int) -> None:
    overview = None if level.index < 0 else level.index
    block_rows, block_cols = level.blocks[bidx - 1]
    for row in range(math.ceil(level.height / block_rows)):
        for col in range(math.ceil(level.width / block_cols)):
            offset = ds.get_tag_item(f"BLOCK_OFFSET_{col}_{row}", "TIFF", bidx, overview)
            size = ds.get_tag_item(f"BLOCK_SIZE_{col}_{row}", "TIFF", bidx, overview)
            if offset is None or size is None or int(offset) + int(size) <= file_size:
                continue
            window = Window(
                col * block_cols,
                row * block_rows,
                min(block_cols, level.width - col * block_cols),
                min(block_rows, level.height - row * block_rows),
            )
            options = {} if overview is None else {"overview_level": overview}
            with rasterio.open(ds.name, **options) as source:
                source.read(bidx, window=window)  # for GDAL's own words, if it has some
            where = "" if overview is None else f" of overview {overview + 1}"
            raise UnprocessableError(
                f"{ds.name}: block {col},{row} of band {bidx}{where} ends past the end of the "
                f"file ({int(offset) + int(size)} > {file_size} bytes)",
                path=ds.name,
            )
