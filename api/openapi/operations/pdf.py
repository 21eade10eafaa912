"""The operation of the PDF merge route (``api.routes.pdf``)."""

from __future__ import annotations

from api.openapi.models import Schema
from api.openapi.operation import Operation, binary
from shared.convert.merge import MAX_FILES

__all__ = ["operations"]

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


def operations() -> dict[str, Operation]:
    """The operation of the PDF merge route by name."""
    return {
        "post_pdf_merge": Operation(
            "Merge PDFs in order (uploaded, or named inside the work dir)",
            "convert",
            responses={"200": binary("application/pdf", "The merged PDF")},
            errors=[404, 413],
            request_body={
                "required": True,
                "content": {
                    "multipart/form-data": {"schema": _PDF_FORM},
                    "application/json": {"schema": _PDF_JSON},
                },
            },
        ),
    }
