"""Sample runs in the run-layout-v3 shapes MarinSkyRL writes now: Layout D roots (storage policy) and HF exports with
a model manifest.

Layout D (MarinSkyRL `cloud/iris/storage_policy.py` @596dd2f7f732): durable `<bucket>/users/<user>/skyrl/<job>`
(resolved config, `exports/`), temp `<bucket>/tmp/ttl=<N>d/skyrl/users/<user>/<job>` (`checkpoints/`, attempts).
The model manifest follows MarinSkyRL `marinskyrl/model_manifest.py` @0da067315f3b `write_local_model_manifest`.
Here `<bucket>` is `<dest>/marin-us-central2`.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rlcleanup.samples import configs
from rlcleanup.samples.chain import Link, LinkLogs, RunCtx, hexid, render_link
from rlcleanup.samples.curves import reward_curve
from rlcleanup.samples.hf_export import write_checkpoint_dir, write_hf_export

BUCKET = "marin-us-central2"
USER = "dlwh"
TTL_DAYS = 7  # an allowed TTL other than the default 14: discovery must search for it
MANIFEST_NAME = ".marinskyrl-model-manifest.json"
_T0 = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)
_RUNTIME = {"commit": hexid("marinskyrl-v3", n=40), "profile": "fsdp"}

SCENARIOS_V3: dict[str, str] = {
    "layout-d": "storage-policy roots users/<user>/skyrl/<job> + tmp/ttl=7d/skyrl/users/<user>/<job>, config naming "
    "no checkpoint root, no terminal manifest: preempted at 12, resumed from 10, CUDA OOM at 17; failed",
    "model-manifest": "Layout D run completed at 20, every export with .marinskyrl-model-manifest.json: export 10's "
    "tokenizer_config.json grew after manifesting (size), export 15's config.json was rewritten (sha256)",
}


def _dump_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def write_model_manifest(export: Path, *, model_id: str | None, revision: str | None) -> str:
    """`write_local_model_manifest`: every file but the manifest and `.cache/`, sorted; identity over the canonical
    JSON of {files, format_version, model_id, revision}. Returns the identity."""
    paths = sorted(p for p in export.rglob("*") if p.is_file() and p.relative_to(export).parts[0] != ".cache")
    files = [
        {"path": p.relative_to(export).as_posix(), "size": p.stat().st_size, "sha256": _sha256(p)}
        for p in paths
        if p.name != MANIFEST_NAME
    ]
    value = {"files": files, "format_version": 1, "model_id": model_id, "revision": revision}
    identity = "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    manifest = value | {"identity": identity, "tokenizer_mode": "embedded"}
    _dump_json(export / MANIFEST_NAME, manifest)
    return identity


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _roots(dest: Path, job: str) -> tuple[Path, Path]:
    bucket = dest / BUCKET
    return bucket / "users" / USER / "skyrl" / job, bucket / "tmp" / f"ttl={TTL_DAYS}d" / "skyrl" / "users" / USER / job


def _write_logs(attempts_root: Path, aid: str, logs: LinkLogs, banner: list[str]) -> None:
    log_dir = attempts_root / aid / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "finelog.log").write_text("\n".join(banner + logs.driver) + "\n")
    for name, lines in logs.workers.items():
        path = log_dir / "ray_session_logs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")


def _break_after_manifest(export: Path, step: int) -> None:
    """What a later write does to a manifested export: 10 a grown file, 15 a same-size rewrite."""
    if step == 10:
        path = export / "tokenizer_config.json"
        path.write_text(path.read_text() + " ")
    elif step == 15:
        path = export / "config.json"  # same length: only the bytes' digest can tell
        path.write_text(path.read_text().replace('"torch_dtype": "bfloat16"', '"torch_dtype": "float16 "'))


def write_v3_run(dest: Path, scenario: str) -> Path:
    if scenario not in SCENARIOS_V3:
        raise ValueError(f"unknown v3 scenario {scenario!r}")
    job = f"math-rl-{scenario}"
    r, t = _roots(dest, job)
    ckpt_root, attempts_root, export_root = t / "checkpoints", t / "attempts", r / "exports"
    cfg = configs.standard_config(budget=20, ckpt_path="", export_path=str(export_root), temp_root=str(t), run_name=job)
    del cfg["trainer"]["ckpt_path"]  # the storage policy's default: the launcher names no checkpoint root
    _dump_json(r / "resolved-skyrl.json", cfg)
    if scenario == "layout-d":
        links = [
            Link(1, 12, None, "sigterm", state="failed", iris_job_state="failed", failure="preempted"),
            Link(11, 17, 10, "oom", state="failed", iris_job_state="failed", failure="task 0 exited with code 1"),
        ]
    else:
        links = [Link(1, 20, None, "done")]
    ctx = RunCtx(
        budget=20,
        interval=5,
        hf_interval=5,
        ckpt_dir=lambda s: str(ckpt_root / f"global_step_{s}"),
        export_dir=lambda s: str(export_root / f"global_step_{s}" / "policy"),
        reward=lambda s, stream: reward_curve(s, stream, "rise"),
    )
    start = _T0
    records: list[dict[str, Any]] = []
    for i, link in enumerate(links):
        logs = render_link(ctx, link, start, pid=5100 + 37 * i, run_key=f"{scenario}/{i}")
        start = logs.ended + timedelta(minutes=6)
        aid = hexid(scenario, "attempt", i, n=12)
        job_id = f"/{USER}/{job}-{aid}"
        _write_logs(attempts_root, aid, logs, [f"[rl-iris] run_id={job} attempt_id={aid} iris_job_id={job_id}"])
        response: dict[str, Any] = {"run_id": job, "attempt_id": aid, "state": link.state, "iris_job_id": job_id}
        response |= {"iris_job_state": link.iris_job_state, "runtime": dict(_RUNTIME), "model": None}
        response["failure"] = link.failure
        record = {"request": {"run_id": job, "attempt_id": aid, "runtime": dict(_RUNTIME)}}
        record |= {"execution": {"started_at": _iso(logs.started), "ended_at": _iso(logs.ended)}, "response": response}
        _dump_json(attempts_root / f"{aid}.json", record)
        records.append(record)
    for s in sorted(ctx.exports):
        export = export_root / f"global_step_{s}" / "policy"
        write_hf_export(export)
        if scenario == "model-manifest":
            write_model_manifest(export, model_id=f"{USER}/{job}", revision=f"step-{s}")
            _break_after_manifest(export, s)
    for s in ctx.kept:
        write_checkpoint_dir(ckpt_root / f"global_step_{s}", s)
    if ctx.kept:
        ckpt_root.mkdir(parents=True, exist_ok=True)
        (ckpt_root / "latest_ckpt_global_step.txt").write_text(str(ctx.kept[-1]))
    if links[-1].state == "succeeded":
        last = records[-1]
        last["response"]["model"] = {"policy_export_uri": str(export_root / "global_step_20" / "policy")}
        last["response"]["model"] |= {"global_step": 20, "checkpoint_root": str(ckpt_root)}
        _dump_json(r / "terminal.json", last)
    return r
