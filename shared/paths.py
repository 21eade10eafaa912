"""User-given paths resolved inside a root folder: never a path outside it."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from shared.errors import InvalidInputError, NotFoundError

__all__ = ["checked_parts", "resolve_inside"]

#: Longest path and longest file name the file system takes (Linux: PATH_MAX, NAME_MAX).
_MAX_PATH, _MAX_NAME = 4096, 255


def resolve_inside(root: Path, rel_path: str, *, root_name: str, must_exist: bool = True) -> Path:
    """The path ``rel_path`` names inside ``root``.

    Args:
        root: the folder every path must stay in.
        rel_path: a path relative to it, with ``/`` separators (``""`` is the root itself).
        root_name: how messages name the root (``"work dir"``, ``"raster folder"``).
        must_exist: raise NotFoundError when nothing is there.

    Returns:
        The resolved path (symlinks followed).

    Raises:
        InvalidInputError: the path is absolute, has ``..`` or a backslash, is too long, cannot
            be resolved, or leads outside the root (through a symlink too).
        NotFoundError: nothing exists at the path.
    """
    pure = PurePosixPath(*checked_parts(rel_path, root_name=root_name))
    real_root = root.resolve()
    try:
        path = (real_root / pure).resolve()
    except (OSError, RuntimeError):  # a symlink loop, a name too long
        raise InvalidInputError(f"{rel_path!r} cannot be resolved", path=rel_path) from None
    if not path.is_relative_to(real_root):
        raise InvalidInputError(f"{rel_path!r} leads outside the {root_name}", path=rel_path)
    if must_exist and not path.exists():
        raise NotFoundError(f"no file {rel_path!r} in the {root_name}", path=rel_path)
    return path


def checked_parts(rel_path: str, *, root_name: str) -> tuple[str, ...]:
    """The names of ``rel_path`` (``.`` and empty ones dropped), once it passes the path rules.

    The rules of every user-given path, on a file system or as an object storage key: relative,
    without ``..``, a backslash or a NUL, at most 4096 bytes and 255 bytes a name.

    Args:
        rel_path: a path relative to a root, with ``/`` separators (``""`` is the root itself).
        root_name: how messages name the root (``"work dir"``, ``"raster folder"``).

    Raises:
        InvalidInputError: the path breaks a rule.
    """
    pure = PurePosixPath(rel_path)
    if "\x00" in rel_path or "\\" in rel_path or pure.is_absolute() or ".." in pure.parts:
        raise InvalidInputError(
            f"a path must be relative to the {root_name}, without '..'", path=rel_path
        )
    if len(rel_path.encode()) > _MAX_PATH or any(len(p.encode()) > _MAX_NAME for p in pure.parts):
        raise InvalidInputError(
            f"a path has at most {_MAX_PATH} bytes, and each name at most {_MAX_NAME}",
            path=rel_path[:64],
        )
    return pure.parts
