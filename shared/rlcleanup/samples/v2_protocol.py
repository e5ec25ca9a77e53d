"""Protocol v2 sample runs, Marin's 3-step run (split from samples/v2.py): the `<name>-training` or `<name>-metrics`
step with its receipt, and the export step."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlcleanup.samples import configs
from rlcleanup.samples.chain import Link, hexid
from rlcleanup.samples.hf_export import write_checkpoint_dir, write_hf_export
from rlcleanup.samples.v2_common import (
    BUCKET,
    RUNTIME,
    VERSION,
    MarinStep,
    digest,
    dump_json,
    executor_files,
    marin_step,
    render_links,
    run_ctx,
    write_logs,
    write_marker,
)


@dataclass
class V2Training:
    step: MarinStep
    aid: str
    manifest: dict[str, Any]
    receipt: dict[str, Any]
    job_id: str
    extra: dict[str, Any] = field(default_factory=dict)


def _checkpoint_inventory(ckpt_dir: Path) -> dict[str, Any]:
    files = sorted(p for p in ckpt_dir.rglob("*") if p.is_file())
    return {
        "checkpoint_path": str(ckpt_dir),
        "trainer_state_sha256": hashlib.sha256((ckpt_dir / "trainer_state.pt").read_bytes()).hexdigest(),
        "files": [{"path": str(p.relative_to(ckpt_dir)), "size": p.stat().st_size} for p in files],
    }


def write_v2_training(dest: Path, scenario: str, *, mode: str) -> V2Training:
    """The `<name>-training` (checkpoint) or `<name>-metrics` step of marin skyrl.py `_training_step`."""
    suffix = "-training" if mode == "checkpoint" else "-metrics"
    base = f"math-rl-{scenario}"
    step = marin_step(dest, base + suffix)
    aid = hexid(scenario, "attempt", 0, n=12)
    budget = 20
    ckpt_root, attempts_root = step.t / "checkpoints", step.t / "attempts"
    output = {
        "checkpoint_root": str(ckpt_root),
        "export_root": str(step.r / "exports"),
        "attempts_root": str(attempts_root),
        "resolved_config_uri": str(step.r / "resolved-skyrl.json"),
        "terminal_manifest_uri": str(step.r / "terminal.json"),
    }
    request = {
        "run_id": step.run_id,
        "attempt_id": aid,
        "config_yaml": yaml.safe_dump({"trainer": {"strategy": "fsdp2", "max_steps": budget}}),
        "runtime": dict(RUNTIME),
        "model": {"uri": f"gs://{BUCKET}/models/tiny-llama/{VERSION}", "identity": "tiny-llama@v1:3f9a"}
        | {
            "local_path": "/tmp/marinskyrl/models/tiny-llama",
            "tokenizer_uri": "gs://x/tok",
            "tokenizer_revision": "main",
        },
        "train_data": [
            {"uri": configs.DATA_ROOT, "identity": "math-rl@v3:9c1d", "local_path": "/tmp/d", "relative_path": ""}
        ],
        "validation_data": [],
        "topology": {"num_nodes": 1, "gpus_per_node": 4, "gpu_variant": "H100", "role_plan": {"colocate_all": False}},
        "output": output,
        "seed": 42,
        "overrides": [],
        "completion_mode": mode,
        "checkpoint_retention_days": 14 if mode == "checkpoint" else None,
    }
    receipt_uri = str(step.r / "receipts" / f"{aid}.json")
    fingerprint = digest({"schema_version": 2, "request": request, "receipt_uri": receipt_uri})
    interval = 5 if mode == "checkpoint" else -1
    # The overrides the launcher hands the trainer (Hydra strings; Marin's injected ones use `++`).
    hydra_args = [
        f"data.train_data=['{configs.DATA_ROOT}/train-00000-of-00004.parquet','{configs.DATA_ROOT}/train-00001-of-00004.parquet']",
        f"data.val_data=['{configs.DATA_ROOT}/aime24.parquet']",
        "environment.env_class=gsm8k",
        f"trainer.policy.model.path={configs.BASE_MODEL}",
        "trainer.strategy=fsdp2",
        "trainer.epochs=20",
        f"trainer.max_steps={budget}",
        "trainer.train_batch_size=64",
        "trainer.policy_mini_batch_size=64",
        "trainer.placement.colocate_all=false",
        "trainer.resume_mode=latest",
        "trainer.logger=wandb",
        "trainer.seed=42",
        "generator.backend=vllm",
        "generator.n_samples_per_prompt=8",
        "++trainer.max_ckpts_to_keep=2",
        f"++terminal_bench_config.trials_dir='{attempts_root / 'trace_jobs'}'",
        f"++generator.trajectory_retention.output_path='{attempts_root / 'trajectories'}'",
        f"++trainer.ckpt_interval={interval}",
        "++trainer.hf_save_interval=-1",
        f"++trainer.completion.mode={mode}",
        f"++trainer.completion.run_id={step.run_id}",
        f"++trainer.completion.attempt_id={aid}",
        f"++trainer.completion.request_fingerprint={fingerprint}",
        f"++trainer.completion.receipt_uri='{receipt_uri}'",
    ]
    dump_json(step.r / "resolved-skyrl.json", {"entrypoint": configs.MAIN_BASE, "hydra_args": hydra_args})

    ctx = run_ctx(budget, ckpt_root, step.r / "exports", hf_interval=0, interval=interval if interval > 0 else 10**6)
    (logs,) = render_links(ctx, [Link(1, budget, None, "done")], scenario)
    checkpoint: dict[str, Any] | None = None
    if mode == "checkpoint":
        for s in ctx.kept:
            write_checkpoint_dir(ckpt_root / f"global_step_{s}", s)
        write_marker(ckpt_root, budget)
        checkpoint = {"global_step": budget} | _checkpoint_inventory(ckpt_root / f"global_step_{budget}")
    receipt: dict[str, Any] = {
        "schema_version": 1,
        "run_id": step.run_id,
        "attempt_id": aid,
        "request_fingerprint": fingerprint,
        "completion_mode": mode,
        "global_step": budget,
    }
    if checkpoint is not None:
        receipt["checkpoint"] = checkpoint
    dump_json(Path(receipt_uri), receipt)
    job_id = f"/marin/{step.run_id.replace('.', '-')}-{aid}"
    write_logs(attempts_root, aid, logs, [f"[rl-iris] run_id={step.run_id} attempt_id={aid} iris_job_id={job_id}"])
    training = {"global_step": budget, "receipt_uri": receipt_uri, "resolved_config_uri": output["resolved_config_uri"]}
    training["checkpoint"] = checkpoint
    manifest = {
        "schema_version": 2,
        "request": request,
        "execution": {"cluster": "marin-us-central2", "job_name": job_id.rsplit("/", 1)[-1], "max_retries": 3},
        "response": {
            "run_id": step.run_id,
            "attempt_id": aid,
            "state": "succeeded",
            "iris_job_id": job_id,
            "iris_job_state": "succeeded",
            "runtime": dict(RUNTIME),
            "training": training,
            "failure": None,
        },
    }
    dump_json(attempts_root / f"{aid}.json", manifest)
    dump_json(step.r / "terminal.json", manifest)
    executor_files(step, "SUCCESS", "marin.rl.skyrl._training_step", result=training)
    return V2Training(step, aid, manifest, receipt, job_id)


def write_v2_export(dest: Path, scenario: str, training: V2Training, *, expired: bool) -> Path:
    """The export step `<name>` of marin skyrl.py `skyrl_export_step` (MarinSkyRL cloud/iris/export_job.py)."""
    step = marin_step(dest, training.step.name.removesuffix("-training"))
    aid = hexid(scenario, "export-attempt", 0, n=12)
    gs = training.receipt["global_step"]
    export_path = step.r / "exports" / f"global_step_{gs}" / "policy"
    ckpt_dir = Path(training.receipt["checkpoint"]["checkpoint_path"])
    fingerprint = digest({"schema_version": 2, "training_manifest": training.manifest, "export_path": str(export_path)})
    receipt_uri = step.r / "exports" / "receipts" / f"{fingerprint}.json"
    request = {
        "training_manifest_uri": str(training.step.r / "terminal.json"),
        "attempt_id": aid,
        "output": {
            "export_root": str(step.r / "exports"),
            "attempts_root": str(step.r / "attempts"),
            "terminal_manifest_uri": str(step.r / "terminal.json"),
        },
    }
    runtime = dict(RUNTIME)
    if expired:
        # The temp area's lifecycle rule deleted T: checkpoints, attempt records and Ray logs alike.
        shutil.rmtree(training.step.t)
        response: dict[str, Any] = {"run_id": training.step.run_id, "attempt_id": aid, "state": "failed"}
        response["runtime"] = runtime
        response |= {"training_iris_job_id": training.job_id, "model": None, "reused_export": False}
        response["failure"] = f"Checkpoint file is missing or changed: {ckpt_dir}/trainer_state.pt"
        status = "FAILED"
    else:
        write_hf_export(export_path)
        dump_json(
            receipt_uri,
            {"schema_version": 1, "request_fingerprint": fingerprint, "attempt_id": aid}
            | {"export_path": str(export_path), "global_step": gs},
        )
        model = {
            "policy_export_uri": str(export_path),
            "global_step": gs,
            "tokenizer_uri": "gs://x/tok",
            "tokenizer_revision": "main",
            "checkpoint_root": str(ckpt_dir.parent),
            "terminal_manifest_uri": str(step.r / "terminal.json"),
        }
        response = {"run_id": training.step.run_id, "attempt_id": aid, "state": "succeeded", "runtime": runtime}
        response |= {"training_iris_job_id": training.job_id, "model": model, "failure": None, "reused_export": False}
        status = "SUCCESS"
    payload = {
        "schema_version": 2,
        "request": request,
        "execution": {"cluster": "marin-us-central2", "job_name": f"{aid}-export", "max_retries": 3},
        "response": response,
        "training_manifest_sha256": digest(training.manifest),
        "export_receipt_uri": str(receipt_uri),
    }
    dump_json(step.r / "attempts" / f"{aid}.json", payload)
    if not expired:
        dump_json(step.r / "terminal.json", payload)
    executor_files(
        step, status, "marin.rl.skyrl.skyrl_export_step", deps=[str(training.step.r)], result=response.get("model")
    )
    return step.r


# -- v1 runs whose logs carry today's teardown wording ---------------------------------------------------------
