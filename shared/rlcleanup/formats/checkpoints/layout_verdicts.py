"""Tensor-layout verdicts kept on disk between processes, so a process whose candidate has a config and a set of
header names already decided does not import torch + transformers again (~5 s CPU and ~300 MB for the first
check of each process: every `rlcleanup run`, every function instance, bench/bench_tensor_layout.py).

A verdict is a pure function of the config, the header names, the installed transformers and torch, and the code
that decides it (tensor_layout.py): all of them are in the key, so a new transformers, torch or checker never
reads an older verdict. Without transformers or torch installed there is no key and nothing is read: the check is
skipped as before. Verdicts of a quantized config are not kept (what the quantizer needs depends on other installed
packages). An entry that does not read back as a verdict is ignored and decided again; entries are written whole
(a temporary file renamed over), so concurrent processes never read half of one.

Where: `$RLCLEANUP_LAYOUT_VERDICTS_DIR`, else `$XDG_CACHE_HOME/rlcleanup/tensor-layout/` (rlcleanup.paths: the
operator's settings, never a run's input), one small JSON file per key named by its sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from rlcleanup.paths import layout_verdicts_dir

CHECKER = Path(__file__).with_name("tensor_layout.py")


def verdicts_dir() -> Path:
    return layout_verdicts_dir()


@lru_cache(maxsize=1)
def _decided_by() -> str | None:
    """What decides a verdict besides its inputs: the installed transformers and torch, and the checker's source;
    None when either package is not installed (no verdict is then read or kept)."""
    try:
        versions = [metadata.version("transformers"), metadata.version("torch")]
    except metadata.PackageNotFoundError:
        return None
    return "|".join([*versions, hashlib.sha256(CHECKER.read_bytes()).hexdigest()])


def verdict_key(config_json: str, tensor_names: frozenset[str]) -> str | None:
    decided_by = _decided_by()
    if decided_by is None:
        return None
    text = json.dumps({"decided_by": decided_by, "config": config_json, "names": sorted(tensor_names)})
    return hashlib.sha256(text.encode()).hexdigest()


def load_verdict(key: str) -> dict[str, Any] | None:
    """The verdict's fields as kept, or None (never kept, unreadable, not an object)."""
    try:
        kept = json.loads((verdicts_dir() / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return kept if isinstance(kept, dict) else None


def keep_verdict(key: str, fields: dict[str, Any]) -> None:
    """Write the verdict whole; a cache directory that cannot be written costs only the next process's import."""
    directory = verdicts_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{key}.", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(fields, out)
        os.replace(temporary, directory / f"{key}.json")
    except OSError:
        Path(temporary).unlink(missing_ok=True)
