"""Generating the gRPC stubs of ``protos/`` (what ``make protos`` runs).

The stubs go to ``shared/convert/_pb/`` and are committed, so that ``pip install .`` and the
Docker image need no code generation; a test regenerates them into a temporary folder and
fails when they differ. This module imports no stub, so it still runs when they are broken.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["PROTO_DIR", "STUB_DIR", "STUB_PACKAGE", "generate", "main"]

ROOT = Path(__file__).resolve().parents[2]
#: where the ``.proto`` files live
PROTO_DIR = ROOT / "protos"
#: the package the stubs are generated into (imports in the stubs name it)
STUB_PACKAGE = "shared.convert._pb"
#: the folder of that package in this checkout
STUB_DIR = ROOT.joinpath(*STUB_PACKAGE.split("."))
_PROTOS = ("convert.proto",)
_INIT = '"""gRPC stubs generated from protos/ by ``make protos``: never edit them by hand."""\n'


def generate(out_root: Path) -> list[Path]:
    """Generate the stubs of every proto under ``out_root`` (as ``<out_root>/shared/convert/_pb``).

    Messages and service stubs come from ``grpc_tools.protoc``, their ``.pyi`` type stubs from
    mypy-protobuf. The protos are mapped onto the stub package's folder, so the generated
    imports are absolute (``from shared.convert._pb import convert_pb2``).

    Args:
        out_root: the folder standing for the repository root.

    Returns:
        The files written, sorted.

    Raises:
        RuntimeError: protoc failed (its message included).
    """
    package_dir = STUB_PACKAGE.replace(".", "/")
    out = out_root.joinpath(*STUB_PACKAGE.split("."))
    out.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    argv = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{package_dir}={PROTO_DIR}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
        f"--mypy_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        *(f"{package_dir}/{name}" for name in _PROTOS),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"protoc failed ({done.returncode}): {done.stderr.strip()}")
    (out / "__init__.py").write_text(_INIT)
    return sorted(p for p in out.iterdir() if p.is_file())


def main() -> int:
    """Regenerate the stubs in this checkout."""
    for path in generate(ROOT):
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
