"""Storage on the local filesystem: the embedded default, for runs that live on local disk.

Every operation reaches its file from a directory descriptor, one component at a time, never through a link
(adapters/local_anchor.py). Unanchored, the walk starts at `/`: a link anywhere on the path's absolute name (made
absolute and `..` folded by name, never by following a link) is refused, so no read, create, write or delete
follows a symlinked parent (capture, validation, preserved evidence, a publish to a local destination). Inside `anchored(roots)` every path must lie under one of `roots` and is walked from the
outermost such root, so a symlink planted at any depth below it (the run's writer controls every
name in the run's bucket, docs/authority.md §8) is refused before anything is read, created, moved or deleted:
the authority's reclaim, restore, purge and quarantine expiry run so.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import io
import os
import secrets
import shutil
import stat as stat_mode
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import google_crc32c

from rlcleanup.adapters.local_anchor import FILE_FLAGS, Anchor, lstat_at, open_dir, outermost, plain_parts
from rlcleanup.errors import ObjectTooLarge
from rlcleanup.ports.lifecycle import LOCAL_MIRROR
from rlcleanup.ports.lines import bounded_lines
from rlcleanup.ports.storage import ChildPage, ObjectInfo, UnsafePathError, WriteOutcome, stat_fingerprint
from rlcleanup.uris import is_local, strip_file_scheme

WALK_CHUNK = 10_000  # names one pass of a directory walk holds (LocalStorage._walk_in_name_order)

_CHUNK = 1024 * 1024
# The anchors of the operation running in this context (LocalStorage.anchored); None: unanchored.
_ANCHORS: ContextVar[tuple[Anchor, ...] | None] = ContextVar("rlcleanup_local_anchors", default=None)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _hash_stream(fh: BinaryIO) -> tuple[str, str]:
    crc = google_crc32c.Checksum()
    md5 = hashlib.md5(usedforsecurity=False)
    while chunk := fh.read(_CHUNK):
        crc.update(chunk)
        md5.update(chunk)
    return base64.b64encode(crc.digest()).decode(), base64.b64encode(md5.digest()).decode()


def file_checksums(path: Path) -> tuple[str, str]:
    """(crc32c, md5), base64 like GCS reports them; streamed in 1 MiB chunks."""
    with path.open("rb") as fh:
        return _hash_stream(fh)


# Checksumming a local file means reading all of it: fine for logs and configs, not for 5 GB shards.
# Larger files are listed with size only (GCS reports checksums for free, so gs:// listings always have them).
CHECKSUM_MAX_BYTES = 64 * 1024 * 1024


def _open_at(dir_fd: int, name: str, st: os.stat_result, shown: str) -> BinaryIO:
    """The regular file `name` (just lstat'ed as `st`) opened without following a link; the descriptor must be
    that very file (a swap between the lstat and the open is refused)."""
    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    opened = os.fstat(fd)
    if not stat_mode.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise UnsafePathError(f"refusing {shown[:300]!r}: replaced while it was opened")
    return os.fdopen(fd, "rb")


class LocalStorage:
    """Local paths. Symlinks are never followed out of a listing (a run must not smuggle in /etc); special files
    (FIFOs, sockets, devices) are refused like symlinks and never opened."""

    def __init__(self, checksums: bool = True, checksum_max_bytes: int = CHECKSUM_MAX_BYTES) -> None:
        self._checksums = checksums
        self._checksum_max = checksum_max_bytes

    @contextmanager
    def anchored(self, roots: Sequence[str]) -> Iterator[LocalStorage]:
        """ports.storage.AnchorsLocalPaths: for the block (in this thread or task: a context variable, so a
        storage shared with concurrent work is not affected, and the object itself, with anything a caller wraps
        around it, stays the same), every local path must lie under one of `roots` (local ones; others ignored)
        and is walked from the outermost without following a link. Each root is opened once, closed at the end."""
        anchors = tuple(Anchor(strip_file_scheme(root)) for root in roots if is_local(root))
        token = _ANCHORS.set(anchors)
        try:
            yield self
        finally:
            _ANCHORS.reset(token)
            for anchor in anchors:
                anchor.close()

    # -- where a path is: an anchor's descriptor and the components below it

    def _place(self, path: str) -> tuple[Anchor, list[str], bool]:
        """(anchor, components below it, whether the anchor is this call's own). Unanchored, the anchor is `/` and
        every component of the absolute path is walked without following a link: no root was declared, so no
        directory on the way is trusted to be where its name says (a run's writer may plant
        `checkpoints/global_step_10 -> /etc`; resolving the path's directory first would follow it)."""
        anchors = _ANCHORS.get()
        if anchors is not None:
            found = outermost(anchors, path)
            if found is None:
                raise UnsafePathError(f"refusing {path[:300]!r}: outside every root this operation may touch")
            return found[0], found[1], False
        return Anchor("/"), plain_parts(os.path.abspath(path).strip("/"), path), True

    @contextmanager
    def _parent(self, uri: str, *, create: bool) -> Iterator[tuple[int | None, str]]:
        """The directory holding `uri`, held open (None: it does not exist and nothing is created), and its name."""
        with self._held(uri, create=create, leaf=True) as (fd, parts):
            yield fd, parts[-1]

    @contextmanager
    def _directory(self, prefix_uri: str) -> Iterator[int | None]:
        """The directory `prefix_uri` names, held open; None when there is none."""
        with self._held(prefix_uri, create=False, leaf=False) as (fd, _parts):
            yield fd

    @contextmanager
    def _held(self, uri: str, *, create: bool, leaf: bool) -> Iterator[tuple[int | None, list[str]]]:
        """The directory `uri` names (`leaf`: the one holding it), walked from its anchor without following a link
        and held open (None: it does not exist and nothing is created), with the components below the anchor."""
        anchor, parts, owned = self._place(str(self._path(uri)))
        if leaf and not parts:
            raise UnsafePathError(f"refusing {uri[:300]!r}: names a root, not an object in it")
        try:
            top = anchor.fd(create=create)
            fd = None if top is None else open_dir(top, parts[:-1] if leaf else parts, uri, create=create)
            try:
                yield fd, parts
            finally:
                if fd is not None:
                    os.close(fd)
        finally:
            if owned:
                anchor.close()

    @contextmanager
    def _open(self, uri: str) -> Iterator[BinaryIO]:
        with self._parent(uri, create=False) as (fd, name):
            st = None if fd is None else lstat_at(fd, name, uri)
            if fd is None or st is None:
                raise FileNotFoundError(uri)
            if not stat_mode.S_ISREG(st.st_mode):
                raise IsADirectoryError(uri)
            with _open_at(fd, name, st, uri) as fh:
                yield fh

    @staticmethod
    def _path(uri: str) -> Path:
        return Path(strip_file_scheme(uri))

    def _info_at(self, dir_fd: int, name: str, st: os.stat_result, uri: str) -> ObjectInfo:
        crc: str | None = None
        md5: str | None = None
        if self._checksums and st.st_size <= self._checksum_max:
            with _open_at(dir_fd, name, st, uri) as fh:
                crc, md5 = _hash_stream(fh)
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
        with self._parent(uri, create=False) as (fd, name):
            st = None if fd is None else lstat_at(fd, name, uri)
            if fd is None or st is None or not stat_mode.S_ISREG(st.st_mode):
                return None
            return self._info_at(fd, name, st, uri)

    def list_children(self, prefix_uri: str, page_token: str | None = None, page_size: int = 200) -> ChildPage:
        """One page of a directory's entries in name order; the token is the last name returned."""
        base = prefix_uri.rstrip("/")
        with self._directory(prefix_uri) as fd:
            if fd is None:
                return ChildPage([], [], None)
            names = sorted(os.listdir(fd))
            if page_token:
                names = [n for n in names if n > page_token]
            page, more = names[:page_size], len(names) > page_size
            prefixes, objects = [], []
            for name in page:
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat_mode.S_ISDIR(st.st_mode):
                    if _holds_an_entry(fd, name):  # as on an object store, a prefix exists only while it holds one
                        prefixes.append(f"{base}/{name}")
                elif stat_mode.S_ISREG(st.st_mode):  # symlinks and special files: never followed out of the run
                    objects.append(self._info_at(fd, name, st, f"{base}/{name}"))
        return ChildPage(prefixes, objects, page[-1] if more and page else None)

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        base = prefix_uri.rstrip("/")
        with self._directory(prefix_uri) as fd:
            if fd is None:
                return
            for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
                rel_dir = os.path.normpath(dirpath)
                dirnames.sort()
                for name in dirnames:  # fwalk lists a symlinked dir but never enters it: refuse, do not skip
                    if stat_mode.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                        shown = name if rel_dir == "." else f"{rel_dir}/{name}"
                        raise UnsafePathError(f"refusing symlinked directory {base}/{shown} inside {prefix_uri!r}")
                for name in sorted(filenames):
                    rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                    st = lstat_at(dir_fd, name, f"{base}/{rel} inside {prefix_uri}")
                    if st is not None and stat_mode.S_ISREG(st.st_mode):
                        yield self._info_at(dir_fd, name, st, f"{base}/{rel}")

    def list_after(self, prefix_uri: str, start_after: str | None) -> Iterator[ObjectInfo]:
        """ports.storage.ListsAfter: the files under prefix_uri in name order (of their URIs), strictly after
        `start_after`, walked lazily: a directory wholly before the cursor is never entered and a file before it is
        never hashed, so a paged listing costs one page of hashing per page (sorting and re-listing the whole tree,
        checksums included, on every page made a 100,000-file run quadratic)."""
        with self._directory(prefix_uri) as fd:
            if fd is None:
                return
            yield from self._walk_in_name_order(fd, prefix_uri.rstrip("/"), prefix_uri, start_after)

    def _walk_in_name_order(self, dir_fd: int, base: str, shown: str, after: str | None) -> Iterator[ObjectInfo]:
        """One directory in name order, in passes of at most WALK_CHUNK entries: each pass scans the directory and
        keeps only the smallest names after where the last pass ended (heapq.nsmallest), so a directory of a
        million files costs a chunk of names in memory, not a million DirEntry objects (~560 MiB per invocation,
        bench/bench_many_files.py). A consumer that stops after one page stops after one pass."""
        resume: str | None = None  # the last key this walk yielded or entered, within this directory
        while True:
            chunk = heapq.nsmallest(WALK_CHUNK, self._keys_after(dir_fd, base, after, resume))
            for key, is_dir in chunk:
                name = key[len(base) + 1 :].rstrip("/")
                if is_dir:
                    sub = open_dir(dir_fd, [name], f"{key} inside {shown}", create=False)  # a link swapped in: refused
                    if sub is None:
                        continue
                    try:
                        yield from self._walk_in_name_order(sub, key[:-1], shown, after)
                    finally:
                        os.close(sub)
                else:
                    st = lstat_at(dir_fd, name, f"{key} inside {shown}")  # symlinks and special files: refused
                    if st is not None and stat_mode.S_ISREG(st.st_mode):
                        yield self._info_at(dir_fd, name, st, key)
            if len(chunk) < WALK_CHUNK:
                return
            resume = chunk[-1][0]

    @staticmethod
    def _keys_after(dir_fd: int, base: str, after: str | None, resume: str | None) -> Iterator[tuple[str, bool]]:
        """(key, is_dir) of the entries still to walk: a directory's objects sort as "<name>/...", so it is keyed
        so and falls among its siblings by name; entries wholly before the cursor (or walked already) are left out."""
        with os.scandir(dir_fd) as listing:
            for entry in listing:
                is_dir = entry.is_dir(follow_symlinks=False)
                key = f"{base}/{entry.name}" + ("/" if is_dir else "")
                if resume is not None and key <= resume:
                    continue
                if after is not None and (key <= after if not is_dir else key < after and not after.startswith(key)):
                    continue  # a file before the cursor; a directory whose every object sorts before it
                yield key, is_dir

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        with self._open(uri) as fh:
            fh.seek(start)
            return fh.read(length)

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        with self._open(uri) as fh:
            if os.fstat(fh.fileno()).st_size > max_bytes:
                raise ObjectTooLarge(uri, max_bytes)
            return fh.read()

    def iter_lines(self, uri: str) -> Iterator[str]:
        with self._open(uri) as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline=None) as fh:
            yield from bounded_lines(fh)

    def _create_once(self, uri: str, write: Callable[[BinaryIO], object]) -> WriteOutcome:
        """Write-once: `write` fills a temp file created beside the destination (O_EXCL, never through a link),
        then link() publishes it atomically, so a crash never leaves a half object; an existing file is compared
        by checksum and never overwritten."""
        with self._parent(uri, create=True) as (fd, name):
            assert fd is not None  # created
            tmp = f".tmp-{secrets.token_hex(8)}"
            with os.fdopen(os.open(tmp, _CREATE_FLAGS, 0o600, dir_fd=fd), "wb") as out:
                try:
                    write(out)
                except BaseException:
                    os.unlink(tmp, dir_fd=fd)
                    raise
            try:
                try:
                    os.link(tmp, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
                    return WriteOutcome.created
                except FileExistsError:
                    return WriteOutcome.identical if self._same_at(fd, tmp, name, uri) else WriteOutcome.conflict
            finally:
                os.unlink(tmp, dir_fd=fd)

    @staticmethod
    def _same_at(dir_fd: int, ours: str, theirs: str, uri: str) -> bool:
        there = lstat_at(dir_fd, theirs, uri)  # a link or special file where the object would be: refused
        if there is None or not stat_mode.S_ISREG(there.st_mode):
            return False
        ours_st = os.stat(ours, dir_fd=dir_fd, follow_symlinks=False)
        with _open_at(dir_fd, ours, ours_st, uri) as a, _open_at(dir_fd, theirs, there, uri) as b:
            return _hash_stream(a) == _hash_stream(b)

    def write_if_absent(self, uri: str, data: bytes, content_type: str = "application/octet-stream") -> WriteOutcome:
        return self._create_once(uri, lambda out: out.write(data))

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        with self._open(src_uri) as src:
            return self._create_once(dst_uri, lambda out: shutil.copyfileobj(src, out, _CHUNK))

    def fill_if_absent(self, uri: str, fill: Callable[[Path], object]) -> WriteOutcome:
        """Write-once from a filler that writes a whole file (another backend's streamed download): it fills a
        private temp file (never a path under the destination, which a link could redirect), streamed into place."""
        with tempfile.TemporaryDirectory(prefix="rlcleanup-fill-") as staging:
            filled = Path(staging) / "object"
            fill(filled)
            return self.upload_file_if_absent(filled, uri)

    # -- streaming_copy (ports.storage.StreamingStorage): a local file is already a stream's end

    def local_file(self, uri: str) -> Path | None:
        """Never a path to reopen by name: opened by name later, a link swapped onto its path meanwhile would lead
        elsewhere. Copies stream through `download_to` and `read_range`, which walk from the anchor on every open
        (a pinned copy checks the fingerprint before and after, authority/pinning.py)."""
        return None

    def download_to(self, src_uri: str, path: Path) -> None:
        with self._open(src_uri) as src, path.open("wb") as out:
            shutil.copyfileobj(src, out, _CHUNK)

    def upload_file_if_absent(self, path: Path, dst_uri: str) -> WriteOutcome:
        with path.open("rb") as src:
            return self._create_once(dst_uri, lambda out: shutil.copyfileobj(src, out, _CHUNK))

    def delete(self, uri: str) -> bool:
        """Remove one file; a link or a special file at the name (or on its path) is refused, never removed."""
        with self._parent(uri, create=False) as (fd, name):
            st = None if fd is None else lstat_at(fd, name, uri)
            if fd is None or st is None:
                return False
            if stat_mode.S_ISDIR(st.st_mode):
                raise IsADirectoryError(uri)
            try:
                os.unlink(name, dir_fd=fd)
                return True
            except FileNotFoundError:
                return False


def _holds_an_entry(dir_fd: int, name: str) -> bool:
    """Whether anything but directories lies beneath (a file, or a special file or symlink that list() refuses):
    an empty tree is no prefix on GCS or S3, so it is none here. Stops at the first entry found."""
    for _path, dirnames, filenames, sub_fd in os.fwalk(name, dir_fd=dir_fd, follow_symlinks=False):
        if filenames or any(
            stat_mode.S_ISLNK(os.stat(d, dir_fd=sub_fd, follow_symlinks=False).st_mode) for d in dirnames
        ):
            return True
    return False
