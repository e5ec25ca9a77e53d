"""The tiny converter an export grant runs on a real local Ray head (tests/e2e/test_model_events_stack.py) and as a
child process (tests/unit/test_export_follow.py).

It takes what upstream's export job takes (MarinSkyRL `cloud/iris/export_hf_checkpoint.py`@05cb3a6 `build_command`:
the `++checkpoint_export.*` overrides) and moves the request's status as upstream's `submit_export` does: `in_progress`
with attempts + 1 before converting, then `complete` with `last_exit_code` 0 (or back to `pending` with the exit code
on failure). The "conversion" writes the tiny sample model as an HF export (safetensors shards, their index, config
and tokenizer: samples/hf_export.py). On a local disk it is written into a `.tmp-hf-export-*` staging directory beside
`policy/` and renamed into place when complete, as SkyRL's `_atomic_local_export_dir` does; on gs:// (the stack's
fake-gcs-server, through STORAGE_EMULATOR_HOST) it is uploaded object by object, as SkyRL's cloud export does. It
reads the checkpoint first, so a missing checkpoint fails the job (exit 2), as a real converter would. Never run by
rlcleanup itself.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from rlcleanup.samples.hf_export import write_hf_export

PREFIX = "++checkpoint_export."


def overrides(argv: list[str]) -> dict[str, str]:
    found = {}
    for arg in argv:
        if not arg.startswith(PREFIX) or "=" not in arg:
            raise SystemExit(f"tiny_converter: unexpected argument {arg!r}")
        key, _, value = arg[len(PREFIX) :].partition("=")
        found[key] = value
    return found


class Local:
    def read(self, path: str) -> str:
        return Path(path).read_text()

    def write(self, path: str, text: str) -> None:
        staged = Path(path).with_suffix(".tmp")
        staged.write_text(text)
        staged.replace(path)

    def has_checkpoint(self, checkpoint: str) -> bool:
        return Path(checkpoint).is_dir() and any(Path(checkpoint).rglob("*.pt"))

    def export(self, step_dir: str) -> None:
        Path(step_dir).mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".tmp-hf-export-", dir=step_dir))
        write_hf_export(staging)
        staging.rename(Path(step_dir) / "policy")


class Gcs:
    def __init__(self) -> None:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        self.client = storage.Client(
            project=os.environ.get("GOOGLE_CLOUD_PROJECT", "tiny"), credentials=AnonymousCredentials()
        )

    def _blob(self, uri: str) -> Any:
        bucket, _, name = uri.removeprefix("gs://").partition("/")
        return self.client.bucket(bucket).blob(name)

    def read(self, uri: str) -> str:
        return str(self._blob(uri).download_as_text())

    def write(self, uri: str, text: str) -> None:
        self._blob(uri).upload_from_string(text)

    def has_checkpoint(self, checkpoint: str) -> bool:
        bucket, _, prefix = checkpoint.removeprefix("gs://").partition("/")
        return any(b.name.endswith(".pt") for b in self.client.list_blobs(bucket, prefix=prefix.rstrip("/") + "/"))

    def export(self, step_dir: str) -> None:
        with tempfile.TemporaryDirectory() as local:
            write_hf_export(Path(local))
            for path in sorted(Path(local).rglob("*")):
                if path.is_file():
                    self._blob(f"{step_dir}/policy/{path.relative_to(local)}").upload_from_filename(str(path))


def main() -> int:
    args = overrides(sys.argv[1:])
    checkpoint = args["checkpoint_path"].rstrip("/")
    store: Local | Gcs = Gcs() if checkpoint.startswith("gs://") else Local()
    request_path = f"{checkpoint}/hf_export_request.json"
    request = json.loads(store.read(request_path))
    request.update(status="in_progress", attempts=request.get("attempts", 0) + 1, last_exit_code=None)
    store.write(request_path, json.dumps(request, sort_keys=True))  # hf_export.write_hf_export_request: sort_keys
    code = 0 if store.has_checkpoint(checkpoint) else 2
    if code == 0:
        store.export(f"{args['export_root'].rstrip('/')}/global_step_{args['step']}")
    request.update(status="complete" if code == 0 else "pending", last_exit_code=code)
    store.write(request_path, json.dumps(request, sort_keys=True))
    print(f"tiny_converter: step {args['step']} exit {code}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
