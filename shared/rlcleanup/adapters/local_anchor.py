"""Local paths resolved under an anchor, one component at a time, never through a link (issue 45).

An anchor is a directory whoever names it trusts (the run's bucket, i.e. the run root's parent; the record's
roots; an approver's destination; the operator's expiry root). Its real path is resolved once and opened once
(`O_DIRECTORY|O_NOFOLLOW`); every path below it is reached from that descriptor with `openat`-style calls
(`os.open(name, O_NOFOLLOW, dir_fd=...)`, `os.mkdir`/`os.unlink`/`os.link` with `dir_fd=`, `os.stat` with
`follow_symlinks=False`), so a symlink planted at any depth (a directory, a file, dangling, a loop) is met as a
link and refused (`UnsafePathError`, code `unsafe_path`) before anything is read, created or deleted through it,
and a directory renamed or replaced meanwhile cannot redirect the walk: the descriptors already held are the
directories that were checked.
"""

from __future__ import annotations

import contextlib
import os
import stat as stat_mode
from collections.abc import Sequence

from rlcleanup.ports.storage import UnsafePathError

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in after the lstat must not block the open (a regular file ignores the flag)
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def plain_parts(relative: str, shown: str) -> list[str]:
    """The components of a path below an anchor; an empty, `.` or `..` component is refused (never normalised
    away: `a/../../x` names a place outside)."""
    if not relative:
        return []
    parts = relative.split("/")
    if any(part in {"", ".", ".."} or "\x00" in part for part in parts):
        raise UnsafePathError(f"refusing {shown[:300]!r}: not a plain path (empty, '.' or '..' component)")
    return parts


def special_kind(mode: int) -> str:
    if stat_mode.S_ISFIFO(mode):
        return "named pipe"
    if stat_mode.S_ISSOCK(mode):
        return "socket"
    return "device" if stat_mode.S_ISCHR(mode) or stat_mode.S_ISBLK(mode) else "not a regular file"


def lstat_at(dir_fd: int, name: str, shown: str) -> os.stat_result | None:
    """`name` in the directory `dir_fd`, not followed: None when absent; a symlink or a special file (FIFO,
    socket, device) is refused, so what is returned is a regular file or a directory."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat_mode.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"refusing symlink {shown[:300]!r}")
    if not (stat_mode.S_ISREG(st.st_mode) or stat_mode.S_ISDIR(st.st_mode)):
        raise UnsafePathError(f"refusing special file ({special_kind(st.st_mode)}) {shown[:300]!r}: never opened")
    return st


def _open_child_dir(dir_fd: int, name: str, shown: str, *, create: bool) -> int | None:
    """The directory `name` in `dir_fd`, opened without following a link (created when asked); None when it is
    absent or a regular file and nothing is to be created."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            return None
    except OSError:  # ELOOP (a link), ENOTDIR (a file): say which, refusing links and special files
        lstat_at(dir_fd, name, f"{shown}: {name!r} on its path")
        if not create:
            return None
        raise UnsafePathError(f"refusing {shown[:300]!r}: {name!r} on its path is a file, not a directory") from None
    with contextlib.suppress(FileExistsError):  # made meanwhile by someone else: opened and checked below
        os.mkdir(name, dir_fd=dir_fd)
    return _open_child_dir(dir_fd, name, shown, create=False) or _not_a_dir(name, shown)


def _not_a_dir(name: str, shown: str) -> int:
    raise UnsafePathError(f"refusing {shown[:300]!r}: {name!r} on its path is not a directory")


def open_dir(top: int, parts: Sequence[str], shown: str, *, create: bool) -> int | None:
    """A new descriptor for the directory `parts` below `top` (the caller closes it); None when absent."""
    fd: int | None = os.dup(top)
    try:
        for name in parts:
            assert fd is not None
            child = _open_child_dir(fd, name, shown, create=create)
            os.close(fd)
            fd = child
            if fd is None:
                return None
        held, fd = fd, None
        return held
    finally:
        if fd is not None:
            os.close(fd)


class Anchor:
    """A directory opened once, its last component never a link; `parts` maps a path onto it."""

    def __init__(self, root: str) -> None:
        self.shown = root.rstrip("/") or "/"
        self.real = os.path.realpath(self.shown)  # where the trusted name leads now, resolved once
        self._fd: int | None = None

    def parts(self, path: str) -> list[str] | None:
        """`path`'s components below this anchor as it was named; None: not below it. (Never matched by the real
        path: a root replaced by a link would make wherever it leads count as "below" it.)"""
        if path == self.shown:
            return []
        head = self.shown.rstrip("/") + "/"
        return plain_parts(path[len(head) :].rstrip("/"), path) if path.startswith(head) else None

    def fd(self, *, create: bool) -> int | None:
        if self._fd is None:
            try:
                self._fd = os.open(self.real, DIR_FLAGS)
            except FileNotFoundError:
                if not create:
                    return None
                os.makedirs(self.real, exist_ok=True)
                self._fd = os.open(self.real, DIR_FLAGS)
            except NotADirectoryError:
                return None
            except OSError as exc:  # ELOOP: its real path became a link after it was resolved
                raise UnsafePathError(f"refusing anchor {self.shown[:300]!r}: {exc.strerror}") from None
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def outermost(anchors: Sequence[Anchor], path: str) -> tuple[Anchor, list[str]] | None:
    """The anchor `path` lies under with the most components below it (the outermost: the most of the path is
    walked without links), and those components."""
    best: tuple[Anchor, list[str]] | None = None
    for anchor in anchors:
        parts = anchor.parts(path)
        if parts is not None and (best is None or len(parts) > len(best[1])):
            best = (anchor, parts)
    return best
