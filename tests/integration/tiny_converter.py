"""The tiny converter an export grant runs in tests/integration/test_export_ray.py, on a real local Ray head.

It takes what upstream's export job takes (MarinSkyRL `cloud/iris/export_hf_checkpoint.py`@05cb3a6 `build_command`:
the `++checkpoint_export.*` overrides) and moves the request's status as upstream's `submit_export` does: `in_progress`
with attempts + 1 before converting, then `complete` with `last_exit_code` 0 (or back to `pending` with the exit code
on failure). The "conversion" writes the tiny sample model as an HF export (safetensors shards, their index, config
and tokenizer: samples/hf_export.py) into a `.tmp-hf-export-*` staging directory beside `policy/` and renames it into
place when complete, as SkyRL's `_atomic_local_export_dir` does. It reads the checkpoint first, so a missing
checkpoint fails the job (exit 2), as a real converter would. Never run by rlcleanup itself.
"""

from __future__ import annotations

import json
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


def write_request(path: Path, payload: dict[str, Any]) -> None:
    staged = path.with_suffix(".tmp")
    staged.write_text(json.dumps(payload, sort_keys=True))  # hf_export.write_hf_export_request: sort_keys
    staged.replace(path)


def main() -> int:
    args = overrides(sys.argv[1:])
    checkpoint = Path(args["checkpoint_path"])
    request_path = checkpoint / "hf_export_request.json"
    request = json.loads(request_path.read_text())
    request.update(status="in_progress", attempts=request.get("attempts", 0) + 1, last_exit_code=None)
    write_request(request_path, request)
    code = 0 if checkpoint.is_dir() and any(checkpoint.rglob("*.pt")) else 2
    if code == 0:
        step_dir = Path(args["export_root"]) / f"global_step_{args['step']}"
        step_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".tmp-hf-export-", dir=step_dir))
        write_hf_export(staging)
        staging.rename(step_dir / "policy")
    request.update(status="complete" if code == 0 else "pending", last_exit_code=code)
    write_request(request_path, request)
    print(f"tiny_converter: step {args['step']} exit {code}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
