"""Who can read a local destination: its permission bits, capped by every ancestor's search bits.

The destination directory (or its nearest existing ancestor) with world-read bits is public, group-read is
internal; a 0755 directory inside a 0700 one is private.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from rlcleanup.models.vocab import Visibility
from rlcleanup.ports.storage import VisibilityReading
from rlcleanup.uris import strip_file_scheme

_WORDS = {Visibility.public: "world-readable", Visibility.internal: "group-readable", Visibility.private: "owner-only"}


def _level(mode: int, read: bool) -> Visibility:
    other, group = (stat.S_IROTH, stat.S_IRGRP) if read else (stat.S_IXOTH, stat.S_IXGRP)
    return Visibility.public if mode & other else Visibility.internal if mode & group else Visibility.private


def path_visibility(uri: str) -> VisibilityReading:
    """Readable by others only if the directory is and every ancestor lets them through (search bit)."""
    # The real directory: a symlinked destination is read where it leads, not where the link sits.
    path = Path(os.path.realpath(strip_file_scheme(uri)))
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    mode = os.stat(probe).st_mode
    level, limiter = _level(mode, read=True), f"{probe} mode {stat.filemode(mode)}"
    for ancestor in probe.parents:
        amode = os.stat(ancestor).st_mode
        capped = _level(amode, read=False)
        if capped.rank < level.rank:
            level, limiter = capped, f"ancestor {ancestor} mode {stat.filemode(amode)}"
    return VisibilityReading(level, f"{_WORDS[level]}: {limiter}")
