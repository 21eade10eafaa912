"""What WMS and WMTS share: case-insensitive KVP names, OGC exception reports, the raster layers.

OGC's key-value requests name their parameters in any case (``layers``, ``LAYERS``): the
:class:`KvpMiddleware` of each OWS endpoint upper-cases them before the endpoint's wrapper runs,
so its rule (``Rule(layers=("LAYERS",))``) and its query model read one spelling (``api_key``,
our credential, is left as it is; a raster's rendering parameters, TiTiler's ``bidx``,
``rescale``, …, are lower-cased: one model reads them on every route). Every error answer of
those endpoints — the rule's ``401`` and ``404``, a budget's ``429``, a refused parameter's
``400`` — leaves as OGC XML with its
HTTP status kept: WMS 1.3.0's ``ServiceExceptionReport``, WMTS's ``ows:ExceptionReport``, the
exception code from the error (:func:`ogc_error`, else from the parameter it names).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Literal, TypeVar
from urllib.parse import parse_qsl, urlencode
from xml.etree import ElementTree as ET

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.endpoint import Endpoint
from api.errors import error_for
from api.services import services
from shared.errors import InvalidInputError, NotFoundError
from shared.raster.rendering import RENDER_PARAMETERS
from shared.tiles.styles import StyleInfo

__all__ = [
    "OWS_NS",
    "WMS_NS",
    "WMTS_NS",
    "XLINK_NS",
    "KvpMiddleware",
    "Service",
    "exception_report",
    "layer_info",
    "missing",
    "needed",
    "ows_endpoint",
    "ogc_error",
    "xml_response",
]

Service = Literal["WMS", "WMTS"]
T = TypeVar("T")

WMS_NS = "http://www.opengis.net/wms"
WMTS_NS = "http://www.opengis.net/wmts/1.0"
OWS_NS = "http://www.opengis.net/ows/1.1"
OGC_NS = "http://www.opengis.net/ogc"
XLINK_NS = "http://www.w3.org/1999/xlink"
for _prefix, _uri in (("ows", OWS_NS), ("xlink", XLINK_NS)):
    ET.register_namespace(_prefix, _uri)

#: the one parameter name kept as given: our credential (``api.authn``)
_KEPT = frozenset({"api_key"})
#: the WMS exception code of a refused parameter, by its name (WMS 1.3.0, 6.11 / Table E.1)
_WMS_CODES = {
    "FORMAT": "InvalidFormat",
    "CRS": "InvalidCRS",
    "LAYERS": "LayerNotDefined",
    "QUERY_LAYERS": "LayerNotDefined",
    "STYLES": "StyleNotDefined",
    "REQUEST": "OperationNotSupported",
    "VERSION": "InvalidParameterValue",
}
#: where the exception reports' schemas are
_WMS_SCHEMA = "http://www.opengis.net/ogc http://schemas.opengis.net/wms/1.3.0/exceptions_1_3_0.xsd"
_WMTS_SCHEMA = (
    "http://www.opengis.net/ows/1.1 http://schemas.opengis.net/ows/1.1.0/owsExceptionReport.xsd"
)
_XSI = "{http://www.w3.org/2001/XMLSchema-instance}schemaLocation"


def ogc_error(message: str, code: str, locator: str) -> InvalidInputError:
    """A ``400`` with its OGC exception code (``InvalidCRS``, ``TileOutOfRange``, …), naming
    the parameter ``locator``."""
    return InvalidInputError(message, parameter=locator, exception_code=code)


def missing(name: str) -> InvalidInputError:
    """The refusal of a parameter the request needs and lacks (``MissingParameterValue``)."""
    return ogc_error(f"{name} is required", "MissingParameterValue", name)


def needed(value: T | None, name: str) -> T:
    """The value of parameter ``name``, which the request needs.

    Raises:
        InvalidInputError: it is absent (``MissingParameterValue``).
    """
    if value is None:
        raise missing(name)
    return value


def _code(service: Service, status: int, detail: dict[str, object]) -> str | None:
    """The OGC exception code of an error answer (None: WMS's report names none)."""
    explicit, parameter = detail.get("exception_code"), str(detail.get("parameter") or "")
    if isinstance(explicit, str):
        return explicit
    if service == "WMS":
        if status == 404 and parameter in ("LAYERS", "QUERY_LAYERS"):
            return "LayerNotDefined"
        return _WMS_CODES.get(parameter, "InvalidParameterValue") if status == 400 else None
    if status == 400:
        return "OperationNotSupported" if parameter == "REQUEST" else "InvalidParameterValue"
    return "InvalidParameterValue" if status == 404 and parameter else "NoApplicableCode"


def exception_report(
    service: Service, message: str, code: str | None, locator: str | None
) -> bytes:
    """The XML of one exception: WMS 1.3.0's ``ServiceExceptionReport``, or WMTS's (OWS 1.1)
    ``ows:ExceptionReport``; every text escaped by ElementTree."""
    attributes = {"code": code} if code else {}
    if locator:
        attributes["locator"] = locator
    if service == "WMS":
        root = ET.Element(
            f"{{{OGC_NS}}}ServiceExceptionReport", {"version": "1.3.0", _XSI: _WMS_SCHEMA}
        )
        ET.SubElement(root, f"{{{OGC_NS}}}ServiceException", attributes).text = message
    else:
        root = ET.Element(
            f"{{{OWS_NS}}}ExceptionReport",
            {
                "version": "1.0.0",
                "{http://www.w3.org/XML/1998/namespace}lang": "en",
                _XSI: _WMTS_SCHEMA,
            },
        )
        attributes["exceptionCode"] = attributes.pop("code", "NoApplicableCode")
        exception = ET.SubElement(root, f"{{{OWS_NS}}}Exception", attributes)
        ET.SubElement(exception, f"{{{OWS_NS}}}ExceptionText").text = message
    return _serialised(root)


def _serialised(root: ET.Element) -> bytes:
    """The XML of ``root``, its own namespace the default one (``WMS_Capabilities``, not
    ``ns0:WMS_Capabilities``: GDAL reads root names as written)."""
    prefix = root.tag.partition("}")[0] + "}"
    for element in root.iter():  # (ElementTree's default_namespace refuses plain attributes)
        if element.tag.startswith(prefix):
            element.tag = element.tag.removeprefix(prefix)
    root.set("xmlns", prefix[1:-1])
    xml: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml


def xml_response(root: ET.Element, media_type: str = "application/xml") -> Response:
    """An XML document (a capabilities document holds absolute URLs: never cached)."""
    return Response(_serialised(root), media_type=media_type, headers={"Cache-Control": "no-store"})


def _media_type(service: Service) -> str:
    """The media type of a service's exception reports."""
    return "text/xml" if service == "WMS" else "application/xml"


def ows_endpoint(service: Service) -> Callable[..., Endpoint]:
    """An endpoint of ``service``: a GET of the ``ows`` group, its names upper-cased and its
    errors exception reports (:class:`KvpMiddleware`), documented as such; a parameter it does
    not define is ignored (WMS 1.3.0 6.8.1's vendor parameters, and WMTS 1.0.0's)."""
    return functools.partial(
        Endpoint,
        "GET",
        tag="ows",
        ignores_unknown=True,
        middleware=(Middleware(KvpMiddleware, service=service),),
        error_media=_media_type(service),
    )


def _kvp_name(name: str) -> str:
    """A KVP parameter's name as the query models read it: upper case, but ``api_key`` as it
    is and a raster's rendering parameters (``bidx``, ``rescale``, …: TiTiler's) in lower."""
    if name in _KEPT:
        return name
    return name.lower() if name.lower() in RENDER_PARAMETERS else name.upper()


class KvpMiddleware:
    """Around one OWS endpoint: its query names upper-cased on the way in, its error answers
    made OGC exception reports on the way out (the status and the other headers kept)."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request of the endpoint."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        pairs = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
        named = [(_kvp_name(k), v) for k, v in pairs]
        scope = {**scope, "query_string": urlencode(named).encode("latin-1")}
        report = _Reporter(self.service, send)
        try:
            await self.app(scope, receive, report.send)
        except Exception as exc:  # noqa: BLE001 - every failure answers XML, never a traceback
            if report.started:
                raise
            await (await error_for(Request(scope), exc))(scope, receive, report.send)


class _Reporter:
    """A ``send`` that turns a JSON error answer into the service's exception report."""

    def __init__(self, service: Service, send: Send) -> None:
        self.service, self._send = service, send
        self.started = False
        self._start: Message | None = None
        self._body: list[bytes] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            if message["status"] >= 400 and _is_json(message):
                self._start = message  # held until its body is whole
                return
        elif message["type"] == "http.response.body" and self._start is not None:
            self._body.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            await self._report(self._start, b"".join(self._body))
            return
        await self._send(message)

    async def _report(self, start: Message, body: bytes) -> None:
        status = start["status"]
        try:
            error = json.loads(body)["error"]
            message, detail = str(error["message"]), dict(error.get("detail") or {})
        except (ValueError, KeyError, TypeError):
            message, detail = "the request failed", {}
        locator = detail.get("parameter")
        xml = exception_report(
            self.service,
            message,
            _code(self.service, status, detail),
            str(locator) if locator else None,
        )
        headers = [
            (name, value)
            for name, value in start.get("headers", [])
            if name.lower() not in (b"content-type", b"content-length")
        ]
        headers += [
            (b"content-type", f"{_media_type(self.service)}; charset=utf-8".encode()),
            (b"content-length", str(len(xml)).encode()),
        ]
        await self._send({**start, "headers": headers})
        await self._send({"type": "http.response.body", "body": xml})


def _is_json(start: Message) -> bool:
    headers: dict[bytes, bytes] = dict(start.get("headers", []))
    return headers.get(b"content-type", b"").startswith(b"application/json")


def layer_info(request: Request, style: str, parameter: str) -> StyleInfo:
    """The raster layer ``style`` a parameter names (its rule saw it).

    Raises:
        NotFoundError: no such layer (naming ``parameter``).
    """
    try:
        return services(request).tiles.style(style)
    except NotFoundError as exc:
        exc.detail["parameter"] = parameter
        raise
