"""Real PDFs made in the tests: pages of distinct sizes, each with a line of text."""

from __future__ import annotations

import io

from pypdf import PdfReader, PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject


def make_pdf(pages: list[tuple[int, int, str]], pad: int = 0) -> bytes:
    """A PDF whose pages have these ``(width, height, text)``; ``pad`` adds comment bytes."""
    writer = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    for width, height, text in pages:
        page = writer.add_blank_page(width, height)
        content = DecodedStreamObject()
        body = f"BT /F1 12 Tf 10 10 Td ({text}) Tj ET\n".encode()
        content.set_data(body + (b"%" + b"x" * pad + b"\n" if pad else b""))
        page[NameObject("/Contents")] = writer._add_object(content)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def encrypted_pdf(user_password: str, owner_password: str = "owner") -> bytes:
    """A one-page PDF protected with RC4 (no optional crypto package needed)."""
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf([(100, 100, "secret")]))))
    writer.encrypt(user_password, owner_password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def pages_of(data: bytes) -> list[tuple[int, int, str]]:
    """``(width, height, text)`` of each page of a PDF."""
    reader = PdfReader(io.BytesIO(data))
    return [
        (round(p.mediabox.width), round(p.mediabox.height), p.extract_text().strip())
        for p in reader.pages
    ]


def info_of(data: bytes) -> dict[str, str]:
    """The document information of a PDF."""
    meta = PdfReader(io.BytesIO(data)).metadata or {}
    return {str(k): str(v) for k, v in meta.items()}
