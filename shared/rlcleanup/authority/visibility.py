"""Read back who can actually read a destination; never trust the requested flag.

The backend answers (adapters/gcs_visibility.py: bucket IAM; adapters/local_visibility.py: permission bits),
through the storage port's `read_visibility`, and only where its capabilities say it can. Whenever the answer is
not known — a backend without read-back, a scheme no backend serves, an emulator without IAM — the reading is
"unknown" and the caller refuses.
"""

from __future__ import annotations

from rlcleanup.ports.storage import SchemeAwareStorage, Storage, UnknownSchemeError, VisibilityReading


def read_visibility(storage: Storage, uri: str) -> VisibilityReading:
    if not isinstance(storage, SchemeAwareStorage):
        return VisibilityReading(None, f"{type(storage).__name__} cannot read back who can read {uri}")
    try:
        if not storage.capabilities(uri).visibility_readback:
            return VisibilityReading(None, f"the storage for {uri} cannot read back who can read it")
        return storage.read_visibility(uri)
    except UnknownSchemeError as exc:
        return VisibilityReading(None, str(exc))
