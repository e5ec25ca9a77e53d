"""The Hub flow's request count for a 30-shard export (issue 15's closing figure), with the real huggingface_hub
client against tests/servers/hub_standin.py (the Hub stand-in, own process group, stopped by group).

A llama-tiny run with one 30-shard export is cleaned up on the embedded stack, then handed off to
hf://rl-team/bench-<n>; the stand-in counts every request per endpoint. A second hand-off of the same export to a
fresh repo after an interruption (the stand-in refusing LFS PUTs after 10) shows what a resume costs. Prints
figures; asserts nothing.

    .venv/bin/python bench/bench_hub_publish.py [--short]

`--short` (CI, tests/unit/test_bench_short.py): a 3-shard export and an interruption after 2 uploads.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "shared"))

from rlcleanup.stack import procs  # noqa: E402

TOKEN = "hf_bench_token"


def _call(url: str, path: str, body: dict[str, object] | None = None) -> dict[str, int]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{url}{path}", data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        out: dict[str, int] = json.loads(resp.read() or b"{}")
        return out


def main() -> None:
    import argparse
    from datetime import UTC, datetime, timedelta

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--short", action="store_true", help="a small export (CI: the bench still works)")
    args = ap.parse_args()
    shards = 3 if args.short else None  # None: the model's default, 30 shards
    interrupt_after = 2 if args.short else 10

    from rlcleanup.adapters.hf_hub import HubDestination
    from rlcleanup.authority.artifact import Pinned, pin
    from rlcleanup.authority.grants import Grant
    from rlcleanup.authority.hub_publish import Outcome, publish_to_hub
    from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
    from rlcleanup.runtime.handlers import resolve_run_id
    from rlcleanup.samples.large import write_large_run

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        port = procs.free_port()
        script = REPO / "tests" / "servers" / "hub_standin.py"
        argv = [sys.executable, str(script), "--port", str(port), "--token", TOKEN]
        server = procs.start("hub-standin", argv, state_dir=tmp, env=dict(os.environ))
        url = f"http://127.0.0.1:{port}"
        try:
            procs.wait_ready(server, lambda: procs.http_status(f"{url}/__standin/stats") == 200, 20)
            os.environ.update({"HF_ENDPOINT": url, "HF_TOKEN": TOKEN})
            sized = {"shards": shards} if shards else {}
            root = write_large_run(
                tmp / "run", ranks=2, attempts=2, exports=1, log_bytes_total=1 << 20, model="llama-tiny", **sized
            )
            stack = EmbeddedStack.create(tmp / "r.db", str(tmp / "preserved"))
            event = manual_event(str(root))
            stack.emit(event)
            record = stack.ports.records.get(resolve_run_id(stack.ports, event))
            assert record is not None
            cand = max((c for c in record.candidates if c.valid), key=lambda c: c.step)
            now = datetime.now(UTC)

            def grant(dest: str) -> Grant:
                return Grant.model_validate(
                    {
                        "run_id": record.run_id,
                        "action": "handoff",
                        "step": cand.step,
                        "digest": cand.digest,
                        "destination": dest,
                        "visibility": "private",
                        "granted_by": "bench",
                        "granted_at": now,
                        "expires_at": now + timedelta(hours=1),
                        "reason": "bench",
                    }
                )

            def publish(dest: str) -> Outcome:
                """What apply-grant does: pin the granted bytes, then hand that very listing off."""
                given = grant(dest)
                pinned = pin(stack.ports.storage, record, given)
                assert isinstance(pinned, Pinned), pinned
                return publish_to_hub(stack.ports.storage, record, given, HubDestination(), pinned)

            print(
                f"export: step {cand.step}, {cand.shard_count} shards, {cand.total_bytes:,} bytes ({cand.size_label})"
            )
            before = _call(url, "/__standin/stats")
            t0 = time.perf_counter()
            out = publish("hf://rl-team/bench-1")
            wall = time.perf_counter() - t0
            after = _call(url, "/__standin/stats")
            spent = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
            print(f"hand-off: {out.state}, {out.verified_objects} files verified, {wall:.2f} s; {out.detail}")
            print(f"requests: {sum(v for k, v in spent.items() if k != 'deleted_paths')} in all")
            for k, v in sorted(spent.items()):
                print(f"  {v:4d}  {k}")

            _call(url, "/__standin/control", {"fail_lfs_put_after": interrupt_after})
            try:
                publish("hf://rl-team/bench-2")
            except Exception as exc:
                print(f"interrupted as planned: {type(exc).__name__}")
            _call(url, "/__standin/control", {"fail_lfs_put_after": None})
            before = _call(url, "/__standin/stats")
            out = publish("hf://rl-team/bench-2")
            after = _call(url, "/__standin/stats")
            puts = after.get("PUT /__lfs/{oid}", 0) - before.get("PUT /__lfs/{oid}", 0)
            print(
                f"resumed: {out.state}; LFS uploads on the resume: {puts} (the first {interrupt_after} were not sent again)"
            )
        finally:
            procs.stop_group(server.pid, popen=server.popen, grace=2)


if __name__ == "__main__":
    main()
