"""Realistic, deterministic sample runs of a finished MarinSkyRL/SkyRL training run, one per scenario.

`write_sample_run(dest, scenario)` writes Layout A (Marin executor step: durable root
`dest/durable/<name>/<version>`, temp root `dest/tmp/ttl=14d/skyrl/<name>/<version>`) or, for `legacy-metrics`,
Layout C (`dest/rl_ckpts/<RUN>`), and returns the durable run root. Budget 20, ckpt/hf interval 5 and
`max_ckpts_to_keep` 2 unless a scenario says otherwise; exports are tiny llama-shaped safetensors models.

Scenarios (see SCENARIOS): completed-resumed (preempted link 1, overlapping resume), failed-first-link (OOM in
link 1 of 3, teardown-only links 2-3), completed-budget-plus-one (final save at budget+1, redundant tail),
missing-shard / truncated-shard / index-size-mismatch (one broken export), legacy-metrics (Layout C, dict
metrics), agentic, selection-policy (declared cleanup.selection, reward peaks early), vanished-controller
(stale RUNNING, settled by artifacts), launch-yaml (launch.yaml envelope), unknown (no classification signals),
partial-checkpoint (missing rank shard at the marker, stray dir above it); the run-layout-v3 export shapes
deferred-export and lora (samples/exports_v3.py, applied on top of a standard run).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from rlcleanup.samples import configs
from rlcleanup.samples.chain import Link, LinkLogs, RunCtx, hexid, render_link
from rlcleanup.samples.curves import reward_curve
from rlcleanup.samples.exports_v3 import DEFERRED_DROPPED, LORA_STEPS, SCENARIOS_EXPORTS_V3, finish_exports_v3
from rlcleanup.samples.hf_export import write_checkpoint_dir, write_hf_export
from rlcleanup.samples.rendezvous import SCENARIOS_RDV, add_rendezvous_evidence
from rlcleanup.samples.skyrl_head import SCENARIOS_HEAD, write_head_run
from rlcleanup.samples.trials import write_trace_jobs
from rlcleanup.samples.v2 import SCENARIOS_V2, write_v2_run
from rlcleanup.samples.v3 import SCENARIOS_V3, write_v3_run

SCENARIOS: dict[str, str] = {
    "completed-resumed": "budget 20; link 1 steps 1-12 then preempted (SIGTERM); link 2 resumes from 10, re-logs 11-12, finishes",
    "metrics-late": "the completed-resumed run whose link 1 logged no metric rows (its sink was not up): exports 5 and 10 have no reward to score; no declared policy",
    "failed-first-link": "3 links; CUDA OOM in link 1 (worker .err) after step 7; links 2-3 resume from 5 and die in teardown noise",
    "completed-budget-plus-one": "budget 20, final save labelled global_step_21 (marker 21); redundant tail link exits 0",
    "missing-shard": "completed at 20; export 10 lacks model-00002-of-00003.safetensors",
    "truncated-shard": "completed at 20; export 15's shard 3 is cut short",
    "index-size-mismatch": "completed at 20; export 10's index total_size is the parameter count, not bytes",
    "legacy-metrics": "Layout C Slurm run, 2 links (time limit, resume), legacy Python-dict metric blocks",
    "agentic": "terminal_bench entrypoint with harbor/Daytona keys and per-trial trace_jobs outputs; budget 10",
    "selection-policy": "budget 40, exports 10..40, declared cleanup.selection/registration; reward peaks mid-run",
    "vanished-controller": "no terminal.json, stale RUNNING status, attempt still 'submitted'; artifacts show completion",
    "launch-yaml": "newer launch.yaml envelope (SkyRL config under `skyrl`), standard run with Marin-injected keys",
    "unknown": "config with no entrypoint, environment or data kind: neither standard nor agentic",
    "partial-checkpoint": "marker 20 but global_step_20 misses model_world_size_2_rank_1.pt; stray global_step_30",
    "many-candidates": "budget 200, exports every 5 (40 valid candidates, no declared policy): a report read at scale",
    **SCENARIOS_V2,
    **SCENARIOS_HEAD,
    **SCENARIOS_EXPORTS_V3,
    **SCENARIOS_V3,
    **SCENARIOS_RDV,
}

VERSION = "2026.11.30"
_T0 = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)
_RUNTIME = {
    "launcher_commit": hexid("marin-launcher", n=40),
    "task_image": "us-central2-docker.pkg.dev/hai-gcp-models/marin/skyrl-task:2026.11.28-7f3c2a1",
    "trainer_commit": hexid("skyrl-trainer", n=40),
}
_SLURM_JOBS = (481516, 481902)


DEFAULT_NAME = "math-rl-qwen"


@dataclass(frozen=True)
class _Spec:
    links: tuple[Link, ...]
    budget: int = 20
    config: str = "standard"  # standard | agentic | unknown | selection
    layout: str = "A"  # A | yaml | C
    curve: str = "rise"
    breakage: dict[int, str] = field(default_factory=dict)
    drop_exports: tuple[int, ...] = ()
    status: str | None = None  # .executor_status override (else from the last link)
    terminal: bool = True
    ckpt_missing: tuple[str, ...] = ()
    stray_ckpt: int | None = None
    name: str = DEFAULT_NAME


def _done(last: int = 20) -> tuple[Link, ...]:
    return (Link(1, last, None, "done"),)


def _failed(msg: str, job_state: str = "FAILED") -> dict[str, Any]:
    return {"state": "failed", "iris_job_state": job_state, "failure": msg}


_PREEMPT = "[iris] task 0 preempted: spot node gke-marin-h100-spot-7c1f reclaimed; sending SIGTERM (grace 30s)"
_SLURM_TIMEOUT = (
    f"slurmstepd: error: *** JOB {_SLURM_JOBS[0]} ON nid004012 CANCELLED AT 2026-11-30T08:40:00 DUE TO TIME LIMIT ***"
)
_SPECS: dict[str, _Spec] = {
    "completed-resumed": _Spec(
        (
            Link(1, 12, None, "sigterm", notice=(_PREEMPT,), **_failed("preempted", "WORKER_FAILED")),
            Link(11, 20, 10, "done", stream=1),
        )
    ),
    "metrics-late": _Spec(
        (
            Link(1, 12, None, "sigterm", notice=(_PREEMPT,), silent=True, **_failed("preempted", "WORKER_FAILED")),
            Link(11, 20, 10, "done", stream=1),
        )
    ),
    "failed-first-link": _Spec(
        (
            Link(1, 7, None, "oom", **_failed("Iris job failed: task 0 exited with code 1")),
            Link(6, 8, 5, "teardown", stream=1, **_failed("Iris job failed: task 0 exited with code 1")),
            Link(6, 5, 5, "teardown", stream=2, **_failed("Iris job failed: task 0 exited with code 1")),
        )
    ),
    "completed-budget-plus-one": _Spec(
        (
            Link(
                1,
                20,
                None,
                "done_plus_one",
                notice=("[iris] task 0: worker heartbeat lost during shutdown; marking WORKER_FAILED",),
                **_failed("worker heartbeat lost during shutdown", "WORKER_FAILED"),
            ),
            Link(22, 21, 21, "already_complete"),
        )
    ),
    "missing-shard": _Spec(_done(), breakage={10: "missing_shard"}),
    "truncated-shard": _Spec(_done(), breakage={15: "truncated_shard"}),
    "index-size-mismatch": _Spec(_done(), breakage={10: "index_total_size"}),
    "legacy-metrics": _Spec(
        (Link(1, 12, None, "sigterm", notice=(_SLURM_TIMEOUT,)), Link(11, 20, 10, "done", stream=1)),
        layout="C",
        name="math-grpo-tiny-llama-legacy",
    ),
    "agentic": _Spec(_done(10), budget=10, config="agentic", name="tbench-rl-qwen"),
    "selection-policy": _Spec(_done(40), budget=40, config="selection", curve="peak", drop_exports=(5,)),
    "vanished-controller": _Spec(
        (Link(1, 20, None, "done", state="submitted", iris_job_state="PENDING"),), status="RUNNING", terminal=False
    ),
    "launch-yaml": _Spec(_done(), layout="yaml"),
    "unknown": _Spec(_done(), config="unknown", name="scratch-rl"),
    "partial-checkpoint": _Spec(_done(), ckpt_missing=("policy/model_world_size_2_rank_1.pt",), stray_ckpt=30),
    "many-candidates": _Spec(_done(200), budget=200),
    # run-layout-v3 export shapes: the exports the training run did not write are dropped, then samples/exports_v3.py
    "deferred-export": _Spec(_done(), drop_exports=DEFERRED_DROPPED),
    "lora": _Spec(_done(), drop_exports=LORA_STEPS),
}


def write_sample_run(dest: Path, scenario: str) -> Path:
    """Write `scenario` under `dest`; return the durable run root R."""
    if scenario in SCENARIOS_V2:
        return write_v2_run(dest, scenario)
    if scenario in SCENARIOS_HEAD:
        return write_head_run(dest, scenario)
    if scenario in SCENARIOS_V3:
        return write_v3_run(dest, scenario)
    if scenario in SCENARIOS_RDV:  # a link that dies in teardown noise; the cause is elsewhere (samples/rendezvous.py)
        spec = _Spec((Link(1, 7, None, "teardown", **_failed("Iris job failed: task 0 exited with code 1")),))
        spec = replace(spec, name=f"math-rl-{scenario}")
        run = _write_layout_a(dest, scenario, spec)
        add_rendezvous_evidence(dest / "tmp" / "ttl=14d" / "skyrl" / spec.name / VERSION, scenario)
        return run
    if scenario not in _SPECS:
        raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
    spec = _SPECS[scenario]
    if spec.name == DEFAULT_NAME:  # distinct runs get distinct ids, so samples never collide in one record store
        spec = replace(spec, name=f"math-rl-{scenario}")
    if spec.layout == "C":
        return _write_layout_c(dest, scenario, spec)
    run = _write_layout_a(dest, scenario, spec)
    if scenario in SCENARIOS_EXPORTS_V3:
        finish_exports_v3(scenario, run, _temp_root(dest, spec))
    return run


def _ctx(spec: _Spec, ckpt_root: Path, export_root: Path) -> RunCtx:
    return RunCtx(
        budget=spec.budget,
        interval=5,
        hf_interval=5,
        ckpt_dir=lambda s: str(ckpt_root / f"global_step_{s}"),
        export_dir=lambda s: str(export_root / f"global_step_{s}" / "policy"),
        reward=lambda s, stream: reward_curve(s, stream, spec.curve),
        legacy=spec.layout == "C",
    )


def _render_chain(ctx: RunCtx, spec: _Spec, key: str) -> list[LinkLogs]:
    out: list[LinkLogs] = []
    start = _T0
    for i, link in enumerate(spec.links):
        logs = render_link(ctx, link, start, pid=4100 + 37 * i, run_key=f"{key}/{i}")
        out.append(logs)
        start = logs.ended + timedelta(minutes=7)
    return out


def _write_artifacts(spec: _Spec, ctx: RunCtx, ckpt_root: Path, export_root: Path, marker_dir: Path) -> int:
    for step in sorted(ctx.exports - set(spec.drop_exports)):
        write_hf_export(export_root / f"global_step_{step}" / "policy", spec.breakage.get(step))
    for step in ctx.kept:
        missing = spec.ckpt_missing if step == ctx.kept[-1] else ()
        write_checkpoint_dir(ckpt_root / f"global_step_{step}", step, missing=missing)
    if spec.stray_ckpt is not None:
        stray = ("trainer_state.pt", "policy/model_world_size_2_rank_1.pt", "policy/optim_world_size_2_rank_1.pt")
        write_checkpoint_dir(ckpt_root / f"global_step_{spec.stray_ckpt}", spec.stray_ckpt, missing=stray)
    marker = ctx.kept[-1]
    marker_dir.mkdir(parents=True, exist_ok=True)
    (marker_dir / "latest_ckpt_global_step.txt").write_text(str(marker))
    return marker


def _iso(t: datetime | None) -> str | None:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ") if t is not None else None


def _dump_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n")


def _write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def _config(spec: _Spec, r: Path, t: Path, run_name: str) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "budget": spec.budget,
        "ckpt_path": str(t / "checkpoints"),
        "export_path": str(r / "exports"),
        "temp_root": str(t),
        "run_name": run_name,
    }
    if spec.config == "agentic":
        return configs.agentic_config(**kw)
    if spec.config == "unknown":
        return configs.unknown_config(**kw)
    cfg = configs.standard_config(**kw)
    if spec.config == "selection":
        cfg["cleanup"] = configs.SELECTION_BLOCK
    return cfg


def _command(cfg: dict[str, Any], config_uri: Path) -> list[str]:
    module = {
        configs.MAIN_BASE: configs.MAIN_BASE,
        "terminal_bench": "examples.terminal_bench.entrypoints.main_tbench",
    }.get(cfg.get("entrypoint", ""), "lab_rl.train")
    tr = cfg["trainer"]
    return [
        *("uv", "run", "--frozen", "--directory", "/app/skyrl-train", "python", "-m", module),
        f"+resolved_config={config_uri}",
        f"trainer.ckpt_path={tr['ckpt_path']}",
        f"trainer.export_path={tr['export_path']}",
        f"trainer.max_steps={tr['max_steps']}",
        "trainer.resume_mode=latest",
        f"trials_dir={cfg['trials_dir']}",
        f"generator.trajectory_retention.output_path={cfg['generator']['trajectory_retention']['output_path']}",
    ]


def _temp_root(dest: Path, spec: _Spec) -> Path:
    return dest / "tmp" / "ttl=14d" / "skyrl" / spec.name / VERSION


def _write_layout_a(dest: Path, scenario: str, spec: _Spec) -> Path:
    r = dest / "durable" / spec.name / VERSION
    t = _temp_root(dest, spec)
    run_id = f"{spec.name}-{VERSION}"
    ckpt_root = t / "checkpoints"
    ctx = _ctx(spec, ckpt_root, r / "exports")
    chain = _render_chain(ctx, spec, scenario)
    marker = _write_artifacts(spec, ctx, ckpt_root, r / "exports", ckpt_root)

    cfg = _config(spec, r, t, run_id)
    if spec.layout == "yaml":
        config_uri = r / "launch.yaml"
        doc = configs.launch_yaml(
            cfg, name=spec.name, version=VERSION, run_root=str(r), temp_root=str(t), runtime=_RUNTIME
        )
        config_uri.parent.mkdir(parents=True, exist_ok=True)
        config_uri.write_text(yaml.safe_dump(doc, sort_keys=False))
    else:
        config_uri = r / "resolved-skyrl.json"
        _dump_json(config_uri, cfg)
    command = _command(cfg, config_uri)
    if spec.config == "agentic":
        write_trace_jobs(t / "attempts" / "trace_jobs", scenario, _T0)

    final_export = str(r / "exports" / f"global_step_{marker}" / "policy")
    request_base: dict[str, Any] = {"run_id": run_id, "name": spec.name, "version": VERSION, "output_path": str(r)}
    request_base |= {"resolved_config_uri": str(config_uri), "checkpoint_root": str(ckpt_root), "command": command}
    responses: list[dict[str, Any]] = []
    attempt_ids: list[str] = []
    for i, (link, logs) in enumerate(zip(spec.links, chain, strict=True)):
        aid = hexid(scenario, run_id, "attempt", i, n=12)
        attempt_ids.append(aid)
        job_id = f"/marin/{run_id.replace('.', '-')}-{aid}"
        ok = link.state == "succeeded"
        model: dict[str, Any] | None = None
        if ok:
            model = {"policy_export_uri": final_export, "global_step": marker, "tokenizer_uri": final_export}
            model |= {"tokenizer_revision": None, "checkpoint_root": str(ckpt_root)}
            model |= {"terminal_manifest_uri": str(r / "terminal.json"), "iris_job_id": job_id}
        response: dict[str, Any] = {"run_id": run_id, "attempt_id": aid, "state": link.state, "iris_job_id": job_id}
        response |= {"iris_job_state": link.iris_job_state, "runtime": dict(_RUNTIME), "model": model}
        response["failure"] = link.failure
        responses.append(response)
        finished = link.state in ("succeeded", "failed")
        exit_code = 0 if ok else (143 if link.ending == "sigterm" else 1)
        execution: dict[str, Any] = {
            "started_at": _iso(logs.started),
            "ended_at": _iso(logs.ended if finished else None),
        }
        execution["exit_code"] = exit_code if finished else None
        _dump_json(
            t / "attempts" / f"{aid}.json",
            {"request": request_base | {"attempt_id": aid}, "execution": execution, "response": response},
        )
        banner = [
            f"[rl-iris] run_id={run_id} attempt_id={aid} iris_job_id={job_id}",
            f"Rendezvous: {t}/rendezvous/{aid}",
            f"[rl-iris] Durable resumable ckpt_path: {ckpt_root}",
            f"[rl-iris] Durable export_path: {r / 'exports'}",
            f"{logs.started:%Y-%m-%d %H:%M:%S},402\tINFO worker.py:1852 -- Connected to Ray cluster. View the dashboard at http://127.0.0.1:8265 ",
        ]
        trailer = [f"[rl-iris] attempt {aid} finished: iris_job_state={link.iris_job_state} exit_code={exit_code}"]
        log_dir = t / "attempts" / aid / "logs"
        _write_lines(log_dir / "finelog.log", banner + logs.driver + (trailer if finished else []))
        for name, lines in logs.workers.items():
            _write_lines(log_dir / "ray_session_logs" / name, lines)

    last = responses[-1]
    status = spec.status or ("SUCCESS" if last["state"] == "succeeded" else "FAILED")
    (r / ".executor_status").write_text(status + "\n")
    fingerprint = hexid(scenario, "fingerprint", n=16)
    _dump_json(
        r / ".executor_info",
        {"executor_version": "step_runner", "name": spec.name, "version": VERSION, "output_path": str(r)}
        | {
            "fn": "marin.rl.skyrl.skyrl_step",
            "fingerprint": fingerprint,
            "scheduled_at": _iso(_T0 - timedelta(minutes=4)),
        },
    )
    if spec.terminal:
        summary: dict[str, Any] = {
            "started_at": _iso(chain[0].started),
            "ended_at": _iso(chain[-1].ended),
            "attempt_ids": attempt_ids,
        }
        _dump_json(r / "terminal.json", {"request": request_base, "execution": summary, "response": last})
    if spec.terminal and last["state"] == "succeeded":
        _dump_json(
            r / ".artifact.json",
            {
                "name": spec.name,
                "version": VERSION,
                "fingerprint": fingerprint,
                "result_type": "marin.rl.skyrl.SkyRLModel",
            }
            | {"output_path": str(r), "deps": [], "config": {"resolved_config_uri": str(config_uri)}}
            | {"result": last["model"], "provenance": dict(_RUNTIME) | {"created_at": _iso(chain[-1].ended)}},
        )
    return r


def _write_layout_c(dest: Path, scenario: str, spec: _Spec) -> Path:
    r = dest / "rl_ckpts" / spec.name
    ctx = _ctx(spec, r, r / "exports")
    chain = _render_chain(ctx, spec, scenario)
    _write_artifacts(spec, ctx, r, r / "exports", r)
    cfg = configs.standard_config(
        budget=spec.budget, ckpt_path=str(r), export_path=str(r / "exports"), temp_root=str(r), run_name=spec.name
    )
    del cfg["trials_dir"], cfg["generator"]["trajectory_retention"]
    cfg["trainer"]["logger"] = "console"
    cfg["extra_env"]["WANDB_MODE"] = "offline"
    (r / "resolved_config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    job = "skyrl_math_grpo"
    for jobid, link, logs in zip(_SLURM_JOBS, spec.links, chain, strict=True):
        head = [
            f"SLURM_JOB_ID={jobid} SLURM_JOB_NAME={job} SLURM_NNODES=1 nodes=nid004012",
            f"Starting Ray head on nid004012:6379 (logs: logs/{job}_{jobid}_rayhead.out)",
            f"+ python -m {configs.MAIN_BASE} +config={r / 'resolved_config.yaml'} trainer.resume_mode=latest",
        ]
        tail = [f"[slurm] job {jobid} step 0 exited with code {0 if link.ending == 'done' else 143}"]
        _write_lines(r / "logs" / f"{job}_{jobid}.out", head + logs.driver + tail)
        _write_lines(
            r / "logs" / f"{job}_{jobid}_rayhead.out",
            [
                "Local node IP: 10.0.3.17",
                "Ray runtime started.",
                "Next steps",
                "  To connect to this Ray cluster: ray.init()",
            ],
        )
        rayw = [line for lines in logs.workers.values() for line in lines]
        _write_lines(r / "logs" / f"{job}_{jobid}_rayw.out", rayw)
    return r
