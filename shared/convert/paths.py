"""Input files named by a path: resolved strictly inside the work dir, or refused."""

from __future__ import annotations

from pathlib import Path

from shared.errors import InvalidInputError
from shared.paths import resolve_inside

__all__ = ["work_file"]


def work_file(work_dir: Path, rel_path: str) -> Path:
    """The file ``rel_path`` names inside ``work_dir``; never one outside it.

    Args:
        work_dir: the root every path stays in.
        rel_path: a path relative to it, with ``/`` separators.

    Returns:
        The resolved path of an existing regular file.

    Raises:
        InvalidInputError: the path is empty or absolute, has ``..``, leads outside the work
            dir (through a symlink too), or is not a regular file.
        NotFoundError: nothing exists at the path.
    """
    if not rel_path.strip():
        raise InvalidInputError("a path must name a file of the work dir", path=rel_path)
    path = resolve_inside(work_dir, rel_path, root_name="work dir")
    if not path.is_file():
        raise InvalidInputError(f"{rel_path!r} is not a file", path=rel_path)
    return path
