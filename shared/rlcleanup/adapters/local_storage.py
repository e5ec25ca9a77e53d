"""Storage on the local filesystem: the embedded default, for runs that live on local disk."""

from __future__ import annotations

import base64
import hashlib
import heapq
import os
import shutil
import stat as stat_mode
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import google_crc32c

from rlcleanup.errors import ObjectTooLarge
from rlcleanup.ports.lifecycle import LOCAL_MIRROR
from rlcleanup.ports.lines import bounded_lines
from rlcleanup.ports.storage import ChildPage, ObjectInfo, UnsafePathError, WriteOutcome, stat_fingerprint
from rlcleanup.uris import strip_file_scheme

WALK_CHUNK = 10_000  # names one pass of a directory walk holds (LocalStorage._walk_in_name_order)

_CHUNK = 1024 * 1024


def file_checksums(path: Path) -> tuple[str, str]:
    """(crc32c, md5), base64 like GCS reports them; streamed in 1 MiB chunks."""
    crc = google_crc32c.Checksum()
    md5 = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            crc.update(chunk)
            md5.update(chunk)
    return base64.b64encode(crc.digest()).decode(), base64.b64encode(md5.digest()).decode()


# Checksumming a local file means reading all of it: fine for logs and configs, not for 5 GB shards.
# Larger files are listed with size only (GCS reports checksums for free, so gs:// listings always have them).
CHECKSUM_MAX_BYTES = 64 * 1024 * 1024


def refuse_unsafe(path: Path, shown: str) -> bool:
    """True when `path` exists (as a regular file or a directory). A symlink (it could point anywhere) and a
    special file (FIFO, socket, device: opening a FIFO blocks for ever, a device reads without end) are refused."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    if stat_mode.S_ISLNK(mode):
        raise UnsafePathError(f"refusing symlink {shown!r}")
    if not (stat_mode.S_ISREG(mode) or stat_mode.S_ISDIR(mode)):
        raise UnsafePathError(f"refusing special file ({_special_kind(mode)}) {shown!r}: never opened")
    return True


def _special_kind(mode: int) -> str:
    if stat_mode.S_ISFIFO(mode):
        return "named pipe"
    if stat_mode.S_ISSOCK(mode):
        return "socket"
    return "device" if stat_mode.S_ISCHR(mode) or stat_mode.S_ISBLK(mode) else "not a regular file"


def _holds_an_entry(directory: Path) -> bool:
    """Whether anything but directories lies beneath (a file, or a special file or symlink that list() refuses):
    an empty tree is no prefix on GCS or S3, so it is none here. Stops at the first entry found."""
    for dirpath, dirnames, filenames in os.walk(directory, followlinks=False):
        if filenames or any((Path(dirpath) / d).is_symlink() for d in dirnames):
            return True
    return False


class LocalStorage:
    """Local paths. Symlinks are never followed out of a listing (a run must not smuggle in /etc); special files
    (FIFOs, sockets, devices) are refused like symlinks and never opened."""

    def __init__(self, checksums: bool = True, checksum_max_bytes: int = CHECKSUM_MAX_BYTES) -> None:
        self._checksums = checksums
        self._checksum_max = checksum_max_bytes

    @staticmethod
    def _path(uri: str) -> Path:
        return Path(strip_file_scheme(uri))

    def checked_path(self, uri: str) -> Path:
        """The file behind a uri for streaming copies; a symlink is refused (it could point anywhere)."""
        path = self._path(uri)
        refuse_unsafe(path, uri)
        return path

    def _info(self, path: Path, uri: str) -> ObjectInfo:
        st = path.lstat()  # callers refused symlinks already; lstat keeps a swapped-in link from being followed
        wanted = self._checksums and st.st_size <= self._checksum_max
        crc, md5 = file_checksums(path) if wanted else (None, None)
        return ObjectInfo(
            uri=uri,
            size=st.st_size,
            crc32c=crc,
            md5=md5,
            updated=datetime.fromtimestamp(st.st_mtime, UTC),
            created=datetime.fromtimestamp(st.st_mtime, UTC),  # a local mirror has no creation time: its last write
            fingerprint=stat_fingerprint(st),
            lifecycle=LOCAL_MIRROR,
        )

    def stat(self, uri: str) -> ObjectInfo | None:
        path = self._path(uri)
        if not refuse_unsafe(path, uri) or not path.is_file():
            return None
        return self._info(path, uri)

    def list_children(self, prefix_uri: str, page_token: str | None = None, page_size: int = 200) -> ChildPage:
        """One page of a directory's entries in name order; the token is the last name returned."""
        root = self._path(prefix_uri)
        try:
            names = sorted(e.name for e in os.scandir(root))
        except (FileNotFoundError, NotADirectoryError):
            return ChildPage([], [], None)
        if page_token:
            names = [n for n in names if n > page_token]
        page, more = names[:page_size], len(names) > page_size
        base = prefix_uri.rstrip("/")
        prefixes, objects = [], []
        for name in page:
            path = root / name
            if path.is_symlink():
                continue  # never followed out of the run (as list() does)
            if path.is_dir():
                if _holds_an_entry(path):  # as on an object store, a prefix exists only while something is in it
                    prefixes.append(f"{base}/{name}")
            elif path.is_file():
                objects.append(self._info(path, f"{base}/{name}"))
        return ChildPage(prefixes, objects, page[-1] if more and page else None)

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        root = self._path(prefix_uri)
        if not root.is_dir():
            return
        base = prefix_uri.rstrip("/")
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames.sort()
            for name in dirnames:  # os.walk lists a symlinked dir but never enters it: refuse, do not skip
                if (Path(dirpath) / name).is_symlink():
                    raise UnsafePathError(f"refusing symlinked directory {Path(dirpath) / name} inside {prefix_uri!r}")
            rel_dir = os.path.relpath(dirpath, root)
            for name in sorted(filenames):
                path = Path(dirpath) / name
                refuse_unsafe(path, f"{path} inside {prefix_uri}")
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                yield self._info(path, f"{base}/{rel}")

    def list_after(self, prefix_uri: str, start_after: str | None) -> Iterator[ObjectInfo]:
        """ports.storage.ListsAfter: the files under prefix_uri in name order (of their URIs), strictly after
        `start_after`, walked lazily: a directory wholly before the cursor is never entered and a file before it is
        never hashed, so a paged listing costs one page of hashing per page (sorting and re-listing the whole tree,
        checksums included, on every page made a 100,000-file run quadratic)."""
        root = self._path(prefix_uri)
        if not root.is_dir():
            return
        yield from self._walk_in_name_order(root, prefix_uri.rstrip("/"), prefix_uri, start_after)

    def _walk_in_name_order(self, path: Path, base: str, shown: str, after: str | None) -> Iterator[ObjectInfo]:
        """One directory in name order, in passes of at most WALK_CHUNK entries: each pass scans the directory and
        keeps only the smallest names after where the last pass ended (heapq.nsmallest), so a directory of a
        million files costs a chunk of names in memory, not a million DirEntry objects (~560 MiB per invocation,
        bench/bench_many_files.py). A consumer that stops after one page stops after one pass."""
        resume: str | None = None  # the last key this walk yielded or entered, within this directory
        while True:
            chunk = heapq.nsmallest(WALK_CHUNK, self._keys_after(path, base, after, resume))
            for key, is_dir in chunk:
                entry_path = Path(path, key[len(base) + 1 :].rstrip("/"))
                if is_dir:
                    yield from self._walk_in_name_order(entry_path, key[:-1], shown, after)
                else:
                    refuse_unsafe(entry_path, f"{entry_path} inside {shown}")  # symlinks and special files: refused
                    yield self._info(entry_path, key)
            if len(chunk) < WALK_CHUNK:
                return
            resume = chunk[-1][0]

    @staticmethod
    def _keys_after(path: Path, base: str, after: str | None, resume: str | None) -> Iterator[tuple[str, bool]]:
        """(key, is_dir) of the entries still to walk: a directory's objects sort as "<name>/...", so it is keyed
        so and falls among its siblings by name; entries wholly before the cursor (or walked already) are left out."""
        with os.scandir(path) as listing:
            for entry in listing:
                is_dir = entry.is_dir(follow_symlinks=False)
                key = f"{base}/{entry.name}" + ("/" if is_dir else "")
                if resume is not None and key <= resume:
                    continue
                if after is not None and (key <= after if not is_dir else key < after and not after.startswith(key)):
                    continue  # a file before the cursor; a directory whose every object sorts before it
                yield key, is_dir

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        with self.checked_path(uri).open("rb") as fh:
            fh.seek(start)
            return fh.read(length)

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        path = self.checked_path(uri)
        if path.stat().st_size > max_bytes:
            raise ObjectTooLarge(uri, max_bytes)
        return path.read_bytes()

    def iter_lines(self, uri: str) -> Iterator[str]:
        with self.checked_path(uri).open("r", encoding="utf-8", errors="replace", newline=None) as fh:
            yield from bounded_lines(fh)

    def write_if_absent(self, uri: str, data: bytes, content_type: str = "application/octet-stream") -> WriteOutcome:
        path = self._path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write to a temp file then link(): atomic create-if-absent, and a crash never leaves a half object.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            try:
                os.link(tmp, path)
                return WriteOutcome.created
            except FileExistsError:
                return WriteOutcome.identical if path.read_bytes() == data else WriteOutcome.conflict
        finally:
            os.unlink(tmp)

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        src = self.checked_path(src_uri)
        return self.fill_if_absent(dst_uri, lambda tmp: shutil.copyfile(src, tmp))

    def fill_if_absent(self, uri: str, fill: Callable[[Path], object]) -> WriteOutcome:
        """Write-once from a filler that writes a whole file (a copy, a streamed download): it fills a temp file
        beside the destination, then link() publishes it atomically; an existing file is compared by checksum."""
        dst = self._path(uri)
        dst.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=".tmp-")
        os.close(fd)
        try:
            fill(Path(tmp))
            try:
                os.link(tmp, dst)
                return WriteOutcome.created
            except FileExistsError:
                same = file_checksums(Path(tmp)) == file_checksums(dst)
                return WriteOutcome.identical if same else WriteOutcome.conflict
        finally:
            os.unlink(tmp)

    # -- streaming_copy (ports.storage.StreamingStorage): a local file is already a stream's end

    def local_file(self, uri: str) -> Path | None:
        return self.checked_path(uri)

    def download_to(self, src_uri: str, path: Path) -> None:
        shutil.copyfile(self.checked_path(src_uri), path)

    def upload_file_if_absent(self, path: Path, dst_uri: str) -> WriteOutcome:
        return self.fill_if_absent(dst_uri, lambda tmp: shutil.copyfile(path, tmp))

    def delete(self, uri: str) -> bool:
        try:
            self._path(uri).unlink()
            return True
        except FileNotFoundError:
            return False
