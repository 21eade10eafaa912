"""The merge itself (pypdf, no gRPC): order, metadata, refusals, the cancellation hook."""

from __future__ import annotations

import pytest

from shared.convert.merge import looks_like_pdf, merge_pdfs
from shared.errors import InvalidInputError
from tests.convert.pdfs import encrypted_pdf, info_of, make_pdf, pages_of

A = make_pdf([(100, 200, "a1")])
B = make_pdf([(300, 400, "b1"), (310, 410, "b2")])


def test_merge_in_order_with_metadata() -> None:
    merged = merge_pdfs([("b", B), ("a", A), ("b again", B)], {"Title": "T", "/Subject": "S"})
    assert merged.page_count == 5
    assert pages_of(merged.data) == [
        (300, 400, "b1"),
        (310, 410, "b2"),
        (100, 200, "a1"),
        (300, 400, "b1"),
        (310, 410, "b2"),
    ]
    assert info_of(merged.data)["/Title"] == "T"
    assert info_of(merged.data)["/Subject"] == "S"


def test_the_hook_sees_each_file_and_may_stop_the_merge() -> None:
    seen: list[tuple[int, str]] = []

    def hook(index: int, name: str) -> None:
        seen.append((index, name))
        if index == 1:
            raise KeyboardInterrupt  # anything the caller raises goes through

    with pytest.raises(KeyboardInterrupt):
        merge_pdfs([("a", A), ("b", B), ("c", A)], before_file=hook)
    assert seen == [(0, "a"), (1, "b")]


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"PK\x03\x04 a zip", "x.pdf is not a PDF"),
        (A[:200], "x.pdf is not a readable PDF"),
        (b"%PDF-1.4\n" + b"\x00" * 300, "x.pdf is not a readable PDF"),
        (encrypted_pdf("pw"), "x.pdf is encrypted"),
    ],
)
def test_unusable_files_are_refused_by_name(data: bytes, words: str) -> None:
    with pytest.raises(InvalidInputError, match=words) as caught:
        merge_pdfs([("a.pdf", A), ("x.pdf", data)])
    assert caught.value.detail == {"file": "x.pdf"}


def test_nothing_to_merge_and_bad_metadata_keys() -> None:
    with pytest.raises(InvalidInputError, match="no PDF to merge"):
        merge_pdfs([])
    with pytest.raises(InvalidInputError, match="not a PDF name"):
        merge_pdfs([("a", A)], {"Bad Key": "x"})


def test_looks_like_pdf() -> None:
    assert looks_like_pdf(A)
    assert looks_like_pdf(b"junk before\n%PDF-1.7")
    assert not looks_like_pdf(b"\x89PNG")
