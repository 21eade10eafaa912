"""PDF merging for users: ``POST /pdf-merge``, answered by the Convert gRPC service."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response

from api.access import Rule
from api.bodies import capped
from api.endpoint import Endpoint
from api.openapi.answers import binary
from api.openapi.models import Schema
from api.services import services
from shared.convert.client import ConvertClient, PdfFile
from shared.convert.merge import MAX_FILES, looks_like_pdf
from shared.convert.paths import work_pdf
from shared.errors import InvalidInputError, PayloadTooLargeError, UnavailableError
from shared.settings import Settings

__all__ = ["ENDPOINTS"]

#: largest text field of a multipart body (output name, metadata)
_MAX_FIELD_BYTES = 64 * 1024
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._ -]+")


@dataclass(frozen=True)
class PdfMergeParams:
    """What to merge: the files in order, the output name, document information."""

    files: tuple[PdfFile, ...]
    output_name: str = ""
    metadata: Mapping[str, str] | None = None

    @classmethod
    async def from_request(cls, request: Request) -> PdfMergeParams:
        """Read a multipart upload of PDFs, or JSON naming PDFs inside the work dir.

        Raises:
            InvalidInputError: another content type, a file that is not a PDF, a path that is
                absolute, has ``..`` or leads out of the work dir, a bad field.
            PayloadTooLargeError: the body is over ``upload_max_bytes`` (refused before it is
                read when its ``Content-Length`` says so), a file over ``upload_max_file_bytes``.
            NotFoundError: a path names no file.
        """
        settings = services(request).settings
        request = capped(request, settings.uploads.max_bytes, "MAPSVC_UPLOAD_MAX_BYTES")
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type == "multipart/form-data":
            params = await cls._from_form(request, settings.uploads.max_file_bytes)
        elif content_type == "application/json":
            params = cls._from_json(await _json_body(request), settings)
        else:
            raise InvalidInputError(
                "send PDFs as multipart/form-data, or a JSON list of work-dir paths",
                parameter="content-type",
                value=content_type,
            )
        if not params.files:
            raise InvalidInputError("no PDF to merge", parameter="files")
        return params

    @classmethod
    async def _from_form(cls, request: Request, max_file_bytes: int) -> PdfMergeParams:
        files: list[PdfFile] = []
        output_name, metadata = "", None
        async with request.form(max_files=MAX_FILES, max_part_size=_MAX_FIELD_BYTES) as form:
            for key, value in form.multi_items():
                if isinstance(value, UploadFile):
                    name = value.filename or f"file {len(files) + 1}"
                    if value.size is not None and value.size > max_file_bytes:
                        raise PayloadTooLargeError(
                            f"{name} is larger than {max_file_bytes} bytes"
                            " (MAPSVC_UPLOAD_MAX_FILE_BYTES)",
                            parameter=key,
                            file=name,
                            limit_bytes=max_file_bytes,
                        )
                    data = await value.read()
                    if not looks_like_pdf(data):
                        raise InvalidInputError(f"{name} is not a PDF", parameter=key, file=name)
                    files.append(PdfFile(name=name, data=data))
                elif key == "output_name":
                    output_name = value
                elif key == "metadata":
                    metadata = _metadata(_json_text(value, "metadata"))
                else:
                    raise InvalidInputError(f"unknown form field {key!r}", parameter=key)
        return cls(tuple(files), output_name, metadata)

    @classmethod
    def _from_json(cls, body: Any, settings: Settings) -> PdfMergeParams:
        if isinstance(body, list):
            body = {"paths": body}
        if not isinstance(body, dict) or not isinstance(body.get("paths"), list):
            raise InvalidInputError(
                'send a JSON list of paths, or {"paths": [...], "output_name": …}',
                parameter="paths",
            )
        unknown = set(body) - {"paths", "output_name", "metadata"}
        if unknown:
            raise InvalidInputError(f"unknown field {sorted(unknown)[0]!r}", parameter="body")
        paths = body["paths"]
        if len(paths) > MAX_FILES or not all(isinstance(p, str) for p in paths):
            raise InvalidInputError(f"paths must be at most {MAX_FILES} strings", parameter="paths")
        for path in paths:
            # refuse escapes, large files and non-PDFs here (reading 1 KiB of each); the
            # server checks again before it reads a file
            work_pdf(settings.work_dir, path, settings.uploads.max_file_bytes)
        output_name = body.get("output_name", "")
        if not isinstance(output_name, str):
            raise InvalidInputError("output_name must be a string", parameter="output_name")
        metadata = _metadata(body["metadata"]) if "metadata" in body else None
        return cls(tuple(PdfFile(name=p, path=p) for p in paths), output_name, metadata)


async def _json_body(request: Request) -> Any:
    return _json_text((await request.body()).decode("utf-8", "replace"), "body")


def _json_text(text: str, parameter: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise InvalidInputError(f"{parameter} is not valid JSON", parameter=parameter) from None


def _metadata(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InvalidInputError(
            'metadata must be an object of strings, e.g. {"Title": "…"}', parameter="metadata"
        )
    return value


def _download_name(name: str) -> str:
    safe = _UNSAFE_NAME.sub("_", name).strip(" .")[:200]
    return safe or "merged.pdf"


async def post_pdf_merge(request: Request) -> Response:
    """Merge PDFs in order (uploaded, or named inside the work dir).

    The answer is the merged PDF; the handler reads the body itself (files, or JSON).
    """
    client: ConvertClient | None = services(request).convert
    if client is None:
        raise UnavailableError(
            "convert service not configured",
            service="convert",
            setting="MAPSVC_CONVERT_SERVER_ADDRESS",
        )
    params = await PdfMergeParams.from_request(request)
    result = await client.pdf_merge(
        params.files,
        output_name=params.output_name,
        metadata=params.metadata,
        request_id=str(getattr(request.state, "request_id", "")) or None,
    )
    return Response(
        result.pdf,
        media_type="application/pdf",
        headers={
            "Content-Disposition": f'attachment; filename="{_download_name(result.output_name)}"',
            "X-Page-Count": str(result.page_count),
        },
    )


_PDF_FORM: Schema = {
    "type": "object",
    "properties": {
        "files": {
            "type": "array",
            "items": {"type": "string", "format": "binary"},
            "maxItems": MAX_FILES,
            "description": "The PDFs, in order (any field name)",
        },
        "output_name": {"type": "string", "maxLength": 200},
        "metadata": {"type": "string", "description": 'JSON object of strings: {"Title": …}'},
    },
    "required": ["files"],
}
_PDF_JSON: Schema = {
    "type": "object",
    "properties": {
        "paths": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
            "maxItems": MAX_FILES,
            "description": "PDFs inside the work dir, relative to it",
        },
        "output_name": {"type": "string", "maxLength": 200},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["paths"],
    "additionalProperties": False,
}

ENDPOINTS = [
    Endpoint(
        "POST",
        "/pdf-merge",
        post_pdf_merge,
        rule=Rule("reader"),
        budget="jobs",
        body={
            "required": True,
            "content": {
                "multipart/form-data": {"schema": _PDF_FORM},
                "application/json": {"schema": _PDF_JSON},
            },
        },
        answer={"200": binary("application/pdf", "The merged PDF")},
        errors=(404, 413),
        tag="convert",
    )
]
