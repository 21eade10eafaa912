"""The committed gRPC stubs are what ``make protos`` makes from protos/ today."""

from __future__ import annotations

import re
from pathlib import Path

from shared.convert.protos import STUB_DIR, STUB_PACKAGE, generate

# Lines that carry only the generators' versions: a newer grpcio-tools or protobuf alone does
# not make the stubs stale (the version checks in them still pass); a change of the proto does.
_VERSIONS = [
    re.compile(r"^# Protobuf Python Version: .*$", re.M),
    re.compile(r"_runtime_version\.ValidateProtobufRuntimeVersion\([^)]*\)", re.S),
    re.compile(r"^GRPC_GENERATED_VERSION = .*$", re.M),
]


def _normalised(text: str) -> str:
    for pattern in _VERSIONS:
        text = pattern.sub("<version>", text)
    return text


def test_stubs_are_not_stale(tmp_path: Path) -> None:
    fresh = {p.name: p for p in generate(tmp_path)}
    used = {p.name: p for p in STUB_DIR.iterdir() if p.is_file()}
    assert sorted(used) == sorted(fresh), "stub files differ: run `make protos`"
    assert {"convert_pb2.py", "convert_pb2_grpc.py", "convert_pb2.pyi"} <= set(used)
    for name, path in fresh.items():
        assert _normalised(used[name].read_text()) == _normalised(path.read_text()), (
            f"{STUB_PACKAGE}.{name} is stale: run `make protos`"
        )


def test_the_stubs_import_by_their_package() -> None:
    text = (STUB_DIR / "convert_pb2_grpc.py").read_text()
    assert f"from {STUB_PACKAGE} import convert_pb2" in text
