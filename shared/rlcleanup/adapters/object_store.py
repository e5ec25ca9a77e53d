"""What the remote object stores (GCS, S3) share: a write-once upload fed through a local temp file."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from rlcleanup.ports.storage import WriteOutcome


class RemoteObjects:
    """Mixed into a remote backend that has `upload_file_if_absent`: never a local file, so a cross-backend copy
    streams through `download_to` into `fill_if_absent`."""

    def upload_file_if_absent(self, path: Path, uri: str) -> WriteOutcome:
        raise NotImplementedError

    def fill_if_absent(self, uri: str, fill: Callable[[Path], object]) -> WriteOutcome:
        """Write-once from a filler that writes a whole local file (another backend's download): via a temp file,
        so memory stays bounded; the upload itself is write-once like upload_file_if_absent."""
        with tempfile.TemporaryDirectory(prefix="rlcleanup-copy-") as tmp_dir:
            tmp = Path(tmp_dir) / "object"
            fill(tmp)
            return self.upload_file_if_absent(tmp, uri)

    def local_file(self, uri: str) -> Path | None:
        return None
