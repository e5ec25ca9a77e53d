"""Sample runs in the shapes MarinSkyRL / Marin write today (run-layout-v2.md): SkyRLLaunchConfig launch.yaml runs,
protocol v2 runs with receipts, Marin's 3-step `-training` / `-metrics` + export runs, Megatron checkpoints, a
killed Iris job, teardown cascades in real wording, generation-only runs.

Marin's storage rule (§3): durable `R(n) = <bucket>/<n>/<version>`, temp `T(n) = <bucket>/tmp/ttl=14d/skyrl/<n>/
<version>`; here `<bucket>` is `<dest>/marin-us-central2`. Every path a manifest names is the real local path.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from rlcleanup.samples import configs
from rlcleanup.samples import logtext as lt
from rlcleanup.samples.chain import Link, LinkLogs, hexid
from rlcleanup.samples.hf_export import write_checkpoint_dir, write_hf_export
from rlcleanup.samples.megatron import write_megatron_checkpoint
from rlcleanup.samples.moe import MOE_EXPERTS, write_moe_export
from rlcleanup.samples.v2_common import (
    BUCKET,
    RUNTIME,
    T0,
    VERSION,
    MarinStep,
    dump_json,
    executor_files,
    iso,
    marin_step,
    render_links,
    run_ctx,
    write_logs,
    write_marker,
)
from rlcleanup.samples.v2_protocol import write_v2_export, write_v2_training
from rlcleanup.samples.v2_teardown import (
    absl_sigterm,
    ray_actor_died,
    torch_teardown,
    vllm_engine_dead,
    vllm_engine_fatal,
)

MAIN_BASE = configs.MAIN_BASE
MAIN_GENERATE = "skyrl_train.entrypoints.main_generate"

SCENARIOS_V2: dict[str, str] = {
    "launch-yaml-v1": "SkyRLLaunchConfig resolved-launch.yaml (schema_version 1: runtime.entrypoint, inputs.data_kind, "
    "artifacts.*), launch manifests {config, result}; completed at 20 with exports every 5",
    "protocol-v2": "3-step Marin run: <name>-training (resolved-skyrl.json {entrypoint, hydra_args}, budget only in "
    "hydra_args, training receipt) + export step <name> (export receipt); completed, one candidate at 20",
    "export-expired": "3-step run whose export step ran after the training step's temp checkpoints expired: export "
    "FAILED ('Checkpoint file is missing or changed'), training receipt still valid",
    "metrics-mode": "<name>-metrics step, completion_mode=metrics: no checkpoints, no exports, a receipt without "
    "checkpoint; completed, no candidates, not resumable",
    "killed-iris": "Iris job KILLED (launcher interrupted): Marin says FAILED, attempt iris_job_state=killed, logs end "
    "in absl SIGTERM notices and NCCL teardown; cancelled, no cause",
    "teardown-cascade": "link 1 dies in teardown only (c10::DistBackendError terminate + what() watchdog, Ray "
    "ActorDiedError prose naming SIGSEGV, Fatal Python error: Aborted); link 2 has the real cause, a vLLM EngineCore "
    "fatal CUDA error behind vLLM prefixes",
    "all-teardown": "one failed link whose every error line is teardown: no cause, no_causal_error_found, earliest symptom",
    "megatron-checkpoint": "trainer.strategy megatron: torch_dist checkpoints; the marker's step was an async save "
    "without metadata.json (not resumable); completed at 20",
    "generation-only": "launch.yaml with runtime.entrypoint main_generate (training_type null): no budget, no "
    "checkpoints, no candidates; completed",
    "fused-moe-export": "launch.yaml run of a tiny Qwen3-MoE: exports 5 and 15 carry per-expert tensors (load fine), "
    "export 10 names 8 experts against num_experts=4 and export 20 fused mlp.moe.experts.w1/w2/w3 ones (both "
    "tensor_layout_mismatch)",
}

# A tiny Qwen3-MoE (transformers `qwen3_moe`): 2 layers, 4 experts.


def _skyrl_trainer(budget: int, *, strategy: str = "fsdp2", ckpt_path: str | None = None) -> dict[str, Any]:
    trainer = configs.standard_config(
        budget=budget, ckpt_path=ckpt_path or "", export_path="", temp_root="", run_name="r"
    )["trainer"]
    trainer["strategy"] = strategy
    if ckpt_path is None:
        del trainer["ckpt_path"]
    del trainer["export_path"]
    return trainer


# -- launch.yaml (SkyRLLaunchConfig, schema_version 1) ---------------------------------------------------------


def _launch_doc(
    step: MarinStep, aid: str, *, entrypoint: str, training_type: str | None, budget: int
) -> dict[str, Any]:
    """The resolved launch document (MarinSkyRL cloud/iris/launch_config.py SkyRLLaunchConfig)."""
    skyrl = configs.standard_config(
        budget=budget,
        ckpt_path=str(step.t / "checkpoints"),
        export_path=str(step.r / "exports"),
        temp_root=str(step.t),
        run_name=step.run_id,
    )
    del skyrl["entrypoint"], skyrl["trials_dir"]
    del skyrl["data"]["kind"]  # the composed SkyRL subtree has no data kind: inputs.data_kind carries it
    skyrl["terminal_bench_config"] = {"trials_dir": str(step.t / "attempts" / "trace_jobs")}  # Marin-injected
    return {
        "schema_version": 1,
        "run": {"id": step.run_id, "attempt_id": aid, "seed": 42, "mode": "train", "submission": "wait"}
        | {"export_hf": True},
        "runtime": {
            "launcher_commit": RUNTIME["commit"],
            "profile": "fsdp",
            "entrypoint": entrypoint,
            "training_type": training_type,
            "experiments_dir": "/app/experiments",
            "task_env": {},
        },
        "iris": {
            "cluster": "marin-us-central2",
            "cluster_config": "infra/marin-us-central2.yaml",
            "job_name": f"{step.run_id}-{aid}".replace(".", "-"),
            "allocation": {"num_nodes": 1, "gpus_per_node": 4, "gpu_variant": "H100"}
            | {"cpu": 32.0, "memory": "512Gi", "disk": "1Ti"},
            "priority": "interactive",
            "max_retries": 3,
            "timeout": 0,
        },
        "ingress": {"mode": "direct", "host": "", "record_literal": False, "vllm_http_port": 8000},
        "ray": {"port": 6379, "spill_backend": "local", "spill_dir": "/tmp/ray-spill"}
        | {"rendezvous_dir": str(step.t / "rendezvous"), "log_dir": str(step.t / "attempts" / "ray-logs")},
        "artifacts": {
            "checkpoint_root": str(step.t / "checkpoints"),
            "export_root": str(step.r / "exports"),
            "attempts_root": str(step.t / "attempts"),
            "resolved_config_uri": str(step.r / "resolved-launch.yaml"),
            "terminal_manifest_uri": str(step.r / "terminal.json"),
            "resume_checkpoint_count": 2,
            "draft_model_cache_ttl_days": 14,
        },
        "inputs": {
            "model": {
                "uri": f"gs://{BUCKET}/models/tiny-llama/{VERSION}",
                "identity": "tiny-llama@v1:3f9a",
                "local_path": "/tmp/marinskyrl/models/tiny-llama",
                "tokenizer_uri": f"gs://{BUCKET}/models/tiny-llama/{VERSION}",
                "tokenizer_revision": "main",
            },
            "data_kind": "parquet",
            "train_data": [{"kind": "directory", "uri": configs.DATA_ROOT, "identity": "math-rl@v3:9c1d"}],
            "validation_data": [],
        },
        "skyrl": skyrl,
    }


def _write_launch_run(dest: Path, scenario: str, *, generation: bool = False, moe: bool = False) -> Path:
    step = marin_step(dest, f"math-rl-{scenario}")
    aid = hexid(scenario, "attempt", 0, n=12)
    budget = 20
    doc = _launch_doc(
        step,
        aid,
        entrypoint=MAIN_GENERATE if generation else MAIN_BASE,
        training_type=None if generation else "sync",
        budget=budget,
    )
    step.r.mkdir(parents=True, exist_ok=True)
    (step.r / "resolved-launch.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    job_id = f"/marin/{step.run_id.replace('.', '-')}-{aid}"
    started = T0
    if generation:
        lines = [
            lt.ray_prefix(4100, lt.loguru(started, "INFO", "skyrl_train.entrypoints.main_generate:main:88", msg))
            for msg in (
                "Generating on 512 prompts with 2 inference engines (tp=2)",
                "Generated 4096 samples; avg_num_tokens=812.4",
                f"Wrote generations to {step.t / 'attempts' / 'trajectories' / 'generations.jsonl'}",
                "Generation done!",
            )
        ]
        logs = LinkLogs(driver=lines, workers={}, started=started, ended=started + timedelta(minutes=20))
        model = None
    else:
        ctx = run_ctx(budget, step.t / "checkpoints", step.r / "exports", hf_interval=5)
        (logs,) = render_links(ctx, [Link(1, budget, None, "done")], scenario)
        for s in sorted(ctx.exports):
            policy = step.r / "exports" / f"global_step_{s}" / "policy"
            if moe:
                # Export 10 came from a model trained with 8 experts: names that load, experts that do not fit.
                write_moe_export(policy, fused=s == budget, experts_named=8 if s == 10 else MOE_EXPERTS)
            else:
                write_hf_export(policy)
        for s in ctx.kept:
            write_checkpoint_dir(step.t / "checkpoints" / f"global_step_{s}", s)
        write_marker(step.t / "checkpoints", ctx.kept[-1])
        model = {
            "policy_export_uri": str(step.r / "exports" / f"global_step_{budget}" / "policy"),
            "global_step": budget,
            "tokenizer_uri": doc["inputs"]["model"]["tokenizer_uri"],
            "tokenizer_revision": "main",
            "checkpoint_root": str(step.t / "checkpoints"),
            "terminal_manifest_uri": str(step.r / "terminal.json"),
        }
    write_logs(
        step.t / "attempts", aid, logs, [f"[rl-iris] run_id={step.run_id} attempt_id={aid} iris_job_id={job_id}"]
    )
    # The launch manifest shape (§0 [LA]): {config, result{..., runtime_profile, model|null}}.
    manifest = {
        "config": doc,
        "result": {
            "run_id": step.run_id,
            "attempt_id": aid,
            "state": "succeeded",
            "iris_job_id": job_id,
            "iris_job_state": "succeeded",
            "runtime_profile": "fsdp",
            "model": model,
            "failure": None,
        },
    }
    dump_json(step.t / "attempts" / f"{aid}.json", manifest)
    dump_json(step.r / "terminal.json", manifest)
    executor_files(step, "SUCCESS", "marin.rl.skyrl.skyrl_step", result=model)
    return step.r


# -- protocol v2, Marin's 3-step run ---------------------------------------------------------------------------


def _v1_run(
    dest: Path,
    scenario: str,
    links: list[Link],
    *,
    extra_logs: dict[int, dict[str, list[str]]] | None = None,
    status: str = "FAILED",
    strategy: str = "fsdp2",
    megatron_incomplete: bool = False,
) -> Path:
    """A 1-step run with a flat resolved-skyrl.json (protocol v1): attempts in T, logs per attempt."""
    step = marin_step(dest, f"math-rl-{scenario}")
    ckpt_root, attempts_root = step.t / "checkpoints", step.t / "attempts"
    cfg = configs.standard_config(
        budget=20,
        ckpt_path=str(ckpt_root),
        export_path=str(step.r / "exports"),
        temp_root=str(step.t),
        run_name=step.run_id,
    )
    cfg["trainer"]["strategy"] = strategy
    dump_json(step.r / "resolved-skyrl.json", cfg)
    ctx = run_ctx(20, ckpt_root, step.r / "exports", hf_interval=5)
    chain = render_links(ctx, links, scenario)
    for s in sorted(ctx.exports):
        write_hf_export(step.r / "exports" / f"global_step_{s}" / "policy")
    for s in ctx.kept:
        if strategy == "megatron":
            write_megatron_checkpoint(
                ckpt_root / f"global_step_{s}", s, finished=not (megatron_incomplete and s == ctx.kept[-1])
            )
        else:
            write_checkpoint_dir(ckpt_root / f"global_step_{s}", s)
    if ctx.kept:
        write_marker(ckpt_root, ctx.kept[-1])
    last_state = "failed"
    for i, (link, logs) in enumerate(zip(links, chain, strict=True)):
        aid = hexid(scenario, "attempt", i, n=12)
        job_id = f"/marin/{step.run_id.replace('.', '-')}-{aid}"
        for name, lines in (extra_logs or {}).get(i, {}).items():
            if name == "finelog":
                logs.driver.extend(lines)
            else:
                logs.workers[name] = logs.workers.get(name, []) + lines
        write_logs(attempts_root, aid, logs, [f"[rl-iris] run_id={step.run_id} attempt_id={aid} iris_job_id={job_id}"])
        response: dict[str, Any] = {"run_id": step.run_id, "attempt_id": aid, "state": link.state}
        response["iris_job_id"] = job_id
        response |= {"iris_job_state": link.iris_job_state, "runtime": {"launcher_commit": RUNTIME["commit"]}}
        response |= {"model": None, "failure": link.failure}
        execution = {"started_at": iso(logs.started), "ended_at": iso(logs.ended)}
        dump_json(
            attempts_root / f"{aid}.json",
            {"request": {"run_id": step.run_id, "attempt_id": aid}} | {"execution": execution, "response": response},
        )
        last_state = link.state
    if last_state == "succeeded":
        last = json.loads((attempts_root / f"{hexid(scenario, 'attempt', len(links) - 1, n=12)}.json").read_text())
        last["response"]["model"] = {"policy_export_uri": str(step.r / "exports" / "global_step_20" / "policy")}
        last["response"]["model"] |= {"global_step": 20, "checkpoint_root": str(ckpt_root)}
        dump_json(step.r / "terminal.json", last)
    executor_files(step, status, "marin.rl.skyrl.skyrl_step")
    return step.r


def _t(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def write_v2_run(dest: Path, scenario: str) -> Path:
    if scenario == "launch-yaml-v1":
        return _write_launch_run(dest, scenario)
    if scenario == "generation-only":
        return _write_launch_run(dest, scenario, generation=True)
    if scenario == "fused-moe-export":
        return _write_launch_run(dest, scenario, moe=True)
    if scenario in ("protocol-v2", "export-expired"):
        training = write_v2_training(dest, scenario, mode="checkpoint")
        return write_v2_export(dest, scenario, training, expired=scenario == "export-expired")
    if scenario == "metrics-mode":
        return write_v2_training(dest, scenario, mode="metrics").step.r
    if scenario == "killed-iris":
        kill = "Iris job /marin/math-rl-killed-iris reached JOB_STATE_KILLED (the launcher was interrupted)"
        notice = (
            "[iris] job /marin/math-rl-killed-iris: kill requested by marin (launcher interrupted); sending SIGTERM"
        )
        link = Link(1, 8, None, "sigterm", state="failed", iris_job_state="killed", failure=kill, notice=(notice,))
        extra = {0: {"finelog": absl_sigterm(_t(30), 3) + torch_teardown(_t(31), 0, 4164)[:3]}}
        return _v1_run(dest, scenario, [link], extra_logs=extra)
    if scenario == "teardown-cascade":
        links = [
            Link(
                1,
                7,
                None,
                "sigterm",
                state="failed",
                iris_job_state="failed",
                failure="Iris job failed: task 0 exited with code 134",
            ),
            Link(
                6,
                9,
                5,
                "sigterm",
                state="failed",
                iris_job_state="failed",
                failure="Iris job failed: task 0 exited with code 1",
                stream=1,
            ),
        ]
        first = torch_teardown(_t(25), 1, 4165) + ray_actor_died(4100, 4165)
        engine_pid = 4137 + 97
        second = vllm_engine_fatal(_t(80), engine_pid) + vllm_engine_dead(_t(80), engine_pid + 1)
        second += torch_teardown(_t(81), 0, 4201)
        extra = {0: {"finelog": first}, 1: {"worker-engine-core-01000000-4234.err": second}}
        return _v1_run(dest, scenario, links, extra_logs=extra)
    if scenario == "all-teardown":
        link = Link(
            1,
            7,
            None,
            "sigterm",
            state="failed",
            iris_job_state="failed",
            failure="Iris job failed: task 0 exited with code 134",
        )
        extra = {0: {"finelog": torch_teardown(_t(25), 1, 4165) + ray_actor_died(4100, 4165)}}
        return _v1_run(dest, scenario, [link], extra_logs=extra)
    if scenario == "megatron-checkpoint":
        link = Link(1, 20, None, "done")
        return _v1_run(dest, scenario, [link], status="SUCCESS", strategy="megatron", megatron_incomplete=True)
    raise ValueError(f"unknown v2 scenario {scenario!r}")
