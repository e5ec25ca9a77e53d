"""Sample runs in the shapes MarinSkyRL / Marin write today (run-layout-v2.md): SkyRLLaunchConfig launch.yaml runs,
protocol v2 runs with receipts, Marin's 3-step `-training` / `-metrics` + export runs, Megatron checkpoints, a
killed Iris job, teardown cascades in real wording, generation-only runs.

Marin's storage rule (§3): durable `R(n) = <bucket>/<n>/<version>`, temp `T(n) = <bucket>/tmp/ttl=14d/skyrl/<n>/
<version>`; here `<bucket>` is `<dest>/marin-us-central2`. Every path a manifest names is the real local path.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from rlcleanup.samples import configs
from rlcleanup.samples import logtext as lt
from rlcleanup.samples.chain import Link, LinkLogs, RunCtx, hexid, render_link
from rlcleanup.samples.curves import reward_curve
from rlcleanup.samples.hf_export import write_checkpoint_dir, write_hf_export
from rlcleanup.samples.megatron import write_megatron_checkpoint

VERSION = "2026.11.30"
BUCKET = "marin-us-central2"
_T0 = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)
_RUNTIME = {"commit": hexid("marinskyrl", n=40), "profile": "fsdp"}
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
MOE_LAYERS, MOE_EXPERTS, MOE_HIDDEN, MOE_FF, MOE_VOCAB, MOE_HEADS, MOE_KV, MOE_HEAD_DIM = 2, 4, 64, 32, 256, 4, 2, 16


def moe_config() -> dict[str, Any]:
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": MOE_HIDDEN,
        "intermediate_size": 128,
        "moe_intermediate_size": MOE_FF,
        "num_hidden_layers": MOE_LAYERS,
        "num_attention_heads": MOE_HEADS,
        "num_key_value_heads": MOE_KV,
        "head_dim": MOE_HEAD_DIM,
        "num_experts": MOE_EXPERTS,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "vocab_size": MOE_VOCAB,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def moe_tensors(fused: bool, experts_named: int = MOE_EXPERTS) -> dict[str, list[int]]:
    """Per-expert names as Qwen3-MoE checkpoints are published, or a fused w1/w2/w3 layout nothing loads.
    `experts_named` other than the config's 4: an export of a model trained with another expert count (its router
    and its per-expert names say so; the names alone load, transformers 5 fuses them whatever the index)."""
    h, q, kv = MOE_HIDDEN, MOE_HEADS * MOE_HEAD_DIM, MOE_KV * MOE_HEAD_DIM
    out: dict[str, list[int]] = {"model.embed_tokens.weight": [MOE_VOCAB, h], "model.norm.weight": [h]}
    out["lm_head.weight"] = [MOE_VOCAB, h]
    for layer in range(MOE_LAYERS):
        p = f"model.layers.{layer}."
        out |= {p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h]}
        out |= {p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h]}
        out |= {p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q]}
        out |= {p + "self_attn.q_norm.weight": [MOE_HEAD_DIM], p + "self_attn.k_norm.weight": [MOE_HEAD_DIM]}
        out[p + "mlp.gate.weight"] = [experts_named, h]
        if fused:
            out |= {
                p + "mlp.moe.experts.w1": [MOE_EXPERTS, MOE_FF, h],
                p + "mlp.moe.experts.w3": [MOE_EXPERTS, MOE_FF, h],
            }
            out[p + "mlp.moe.experts.w2"] = [MOE_EXPERTS, h, MOE_FF]
        else:
            for e in range(experts_named):
                out[f"{p}mlp.experts.{e}.gate_proj.weight"] = [MOE_FF, h]
                out[f"{p}mlp.experts.{e}.up_proj.weight"] = [MOE_FF, h]
                out[f"{p}mlp.experts.{e}.down_proj.weight"] = [h, MOE_FF]
    return out


def write_moe_export(dest: Path, *, fused: bool, experts_named: int = MOE_EXPERTS) -> None:
    """One model.safetensors (BF16, zero data) plus config and tokenizer files."""
    from rlcleanup.samples.hf_export import write_tokenizer_files

    dest.mkdir(parents=True, exist_ok=True)
    _dump_json(dest / "config.json", moe_config())
    write_tokenizer_files(dest)
    header: dict[str, Any] = {}
    offset = 0
    for name, shape in sorted(moe_tensors(fused, experts_named).items()):
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    (dest / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(offset))


def _dump_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def _write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass
class _Step:
    name: str
    r: Path
    t: Path

    @property
    def run_id(self) -> str:
        return f"{self.name}-{VERSION}"


def _step(dest: Path, name: str) -> _Step:
    bucket = dest / BUCKET
    return _Step(name, bucket / name / VERSION, bucket / "tmp" / "ttl=14d" / "skyrl" / name / VERSION)


def _ctx(budget: int, ckpt_root: Path, export_root: Path, *, hf_interval: int, interval: int = 5) -> RunCtx:
    return RunCtx(
        budget=budget,
        interval=interval,
        hf_interval=hf_interval,
        ckpt_dir=lambda s: str(ckpt_root / f"global_step_{s}"),
        export_dir=lambda s: str(export_root / f"global_step_{s}" / "policy"),
        reward=lambda s, stream: reward_curve(s, stream, "rise"),
    )


def _render(ctx: RunCtx, links: list[Link], key: str) -> list[LinkLogs]:
    out: list[LinkLogs] = []
    start = _T0
    for i, link in enumerate(links):
        logs = render_link(ctx, link, start, pid=4100 + 37 * i, run_key=f"{key}/{i}")
        out.append(logs)
        start = logs.ended + timedelta(minutes=7)
    return out


def _write_logs(attempts_root: Path, aid: str, logs: LinkLogs, banner: list[str]) -> None:
    log_dir = attempts_root / aid / "logs"
    _write_lines(log_dir / "finelog.log", banner + logs.driver)
    for name, lines in logs.workers.items():
        _write_lines(log_dir / "ray_session_logs" / name, lines)


def _executor_files(step: _Step, status: str, fn: str, *, deps: list[str] | None = None, result: Any = None) -> None:
    step.r.mkdir(parents=True, exist_ok=True)
    (step.r / ".executor_status").write_text(status + "\n")
    _dump_json(
        step.r / ".executor_info",
        {"executor_version": "step_runner", "name": step.name, "version": VERSION, "output_path": str(step.r)}
        | {"fn": fn, "scheduled_at": _iso(_T0 - timedelta(minutes=4))},
    )
    if status == "SUCCESS":
        _dump_json(
            step.r / ".artifact.json",
            {"name": step.name, "version": VERSION, "output_path": str(step.r), "deps": deps or [], "result": result},
        )


def _marker(ckpt_root: Path, step: int) -> None:
    ckpt_root.mkdir(parents=True, exist_ok=True)
    (ckpt_root / "latest_ckpt_global_step.txt").write_text(str(step))


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


def _launch_doc(step: _Step, aid: str, *, entrypoint: str, training_type: str | None, budget: int) -> dict[str, Any]:
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
            "launcher_commit": _RUNTIME["commit"],
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
    step = _step(dest, f"math-rl-{scenario}")
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
    started = _T0
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
        ctx = _ctx(budget, step.t / "checkpoints", step.r / "exports", hf_interval=5)
        (logs,) = _render(ctx, [Link(1, budget, None, "done")], scenario)
        for s in sorted(ctx.exports):
            policy = step.r / "exports" / f"global_step_{s}" / "policy"
            if moe:
                # Export 10 came from a model trained with 8 experts: names that load, experts that do not fit.
                write_moe_export(policy, fused=s == budget, experts_named=8 if s == 10 else MOE_EXPERTS)
            else:
                write_hf_export(policy)
        for s in ctx.kept:
            write_checkpoint_dir(step.t / "checkpoints" / f"global_step_{s}", s)
        _marker(step.t / "checkpoints", ctx.kept[-1])
        model = {
            "policy_export_uri": str(step.r / "exports" / f"global_step_{budget}" / "policy"),
            "global_step": budget,
            "tokenizer_uri": doc["inputs"]["model"]["tokenizer_uri"],
            "tokenizer_revision": "main",
            "checkpoint_root": str(step.t / "checkpoints"),
            "terminal_manifest_uri": str(step.r / "terminal.json"),
        }
    _write_logs(
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
    _dump_json(step.t / "attempts" / f"{aid}.json", manifest)
    _dump_json(step.r / "terminal.json", manifest)
    _executor_files(step, "SUCCESS", "marin.rl.skyrl.skyrl_step", result=model)
    return step.r


# -- protocol v2, Marin's 3-step run ---------------------------------------------------------------------------


@dataclass
class _V2Training:
    step: _Step
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


def _write_v2_training(dest: Path, scenario: str, *, mode: str) -> _V2Training:
    """The `<name>-training` (checkpoint) or `<name>-metrics` step of marin skyrl.py `_training_step`."""
    suffix = "-training" if mode == "checkpoint" else "-metrics"
    base = f"math-rl-{scenario}"
    step = _step(dest, base + suffix)
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
        "runtime": dict(_RUNTIME),
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
    fingerprint = _digest({"schema_version": 2, "request": request, "receipt_uri": receipt_uri})
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
    _dump_json(step.r / "resolved-skyrl.json", {"entrypoint": MAIN_BASE, "hydra_args": hydra_args})

    ctx = _ctx(budget, ckpt_root, step.r / "exports", hf_interval=0, interval=interval if interval > 0 else 10**6)
    (logs,) = _render(ctx, [Link(1, budget, None, "done")], scenario)
    checkpoint: dict[str, Any] | None = None
    if mode == "checkpoint":
        for s in ctx.kept:
            write_checkpoint_dir(ckpt_root / f"global_step_{s}", s)
        _marker(ckpt_root, budget)
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
    _dump_json(Path(receipt_uri), receipt)
    job_id = f"/marin/{step.run_id.replace('.', '-')}-{aid}"
    _write_logs(attempts_root, aid, logs, [f"[rl-iris] run_id={step.run_id} attempt_id={aid} iris_job_id={job_id}"])
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
            "runtime": dict(_RUNTIME),
            "training": training,
            "failure": None,
        },
    }
    _dump_json(attempts_root / f"{aid}.json", manifest)
    _dump_json(step.r / "terminal.json", manifest)
    _executor_files(step, "SUCCESS", "marin.rl.skyrl._training_step", result=training)
    return _V2Training(step, aid, manifest, receipt, job_id)


def _write_v2_export(dest: Path, scenario: str, training: _V2Training, *, expired: bool) -> Path:
    """The export step `<name>` of marin skyrl.py `skyrl_export_step` (MarinSkyRL cloud/iris/export_job.py)."""
    step = _step(dest, training.step.name.removesuffix("-training"))
    aid = hexid(scenario, "export-attempt", 0, n=12)
    gs = training.receipt["global_step"]
    export_path = step.r / "exports" / f"global_step_{gs}" / "policy"
    ckpt_dir = Path(training.receipt["checkpoint"]["checkpoint_path"])
    fingerprint = _digest(
        {"schema_version": 2, "training_manifest": training.manifest, "export_path": str(export_path)}
    )
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
    runtime = dict(_RUNTIME)
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
        _dump_json(
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
        "training_manifest_sha256": _digest(training.manifest),
        "export_receipt_uri": str(receipt_uri),
    }
    _dump_json(step.r / "attempts" / f"{aid}.json", payload)
    if not expired:
        _dump_json(step.r / "terminal.json", payload)
    _executor_files(
        step, status, "marin.rl.skyrl.skyrl_export_step", deps=[str(training.step.r)], result=response.get("model")
    )
    return step.r


# -- v1 runs whose logs carry today's teardown wording ---------------------------------------------------------


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
    step = _step(dest, f"math-rl-{scenario}")
    ckpt_root, attempts_root = step.t / "checkpoints", step.t / "attempts"
    cfg = configs.standard_config(
        budget=20,
        ckpt_path=str(ckpt_root),
        export_path=str(step.r / "exports"),
        temp_root=str(step.t),
        run_name=step.run_id,
    )
    cfg["trainer"]["strategy"] = strategy
    _dump_json(step.r / "resolved-skyrl.json", cfg)
    ctx = _ctx(20, ckpt_root, step.r / "exports", hf_interval=5)
    chain = _render(ctx, links, scenario)
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
        _marker(ckpt_root, ctx.kept[-1])
    last_state = "failed"
    for i, (link, logs) in enumerate(zip(links, chain, strict=True)):
        aid = hexid(scenario, "attempt", i, n=12)
        job_id = f"/marin/{step.run_id.replace('.', '-')}-{aid}"
        for name, lines in (extra_logs or {}).get(i, {}).items():
            if name == "finelog":
                logs.driver.extend(lines)
            else:
                logs.workers[name] = logs.workers.get(name, []) + lines
        _write_logs(attempts_root, aid, logs, [f"[rl-iris] run_id={step.run_id} attempt_id={aid} iris_job_id={job_id}"])
        response: dict[str, Any] = {"run_id": step.run_id, "attempt_id": aid, "state": link.state}
        response["iris_job_id"] = job_id
        response |= {"iris_job_state": link.iris_job_state, "runtime": {"launcher_commit": _RUNTIME["commit"]}}
        response |= {"model": None, "failure": link.failure}
        execution = {"started_at": _iso(logs.started), "ended_at": _iso(logs.ended)}
        _dump_json(
            attempts_root / f"{aid}.json",
            {"request": {"run_id": step.run_id, "attempt_id": aid}} | {"execution": execution, "response": response},
        )
        last_state = link.state
    if last_state == "succeeded":
        last = json.loads((attempts_root / f"{hexid(scenario, 'attempt', len(links) - 1, n=12)}.json").read_text())
        last["response"]["model"] = {"policy_export_uri": str(step.r / "exports" / "global_step_20" / "policy")}
        last["response"]["model"] |= {"global_step": 20, "checkpoint_root": str(ckpt_root)}
        _dump_json(step.r / "terminal.json", last)
    _executor_files(step, status, "marin.rl.skyrl.skyrl_step")
    return step.r


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S") + ",118"


def _torch_teardown(t: datetime, rank: int, pid: int) -> list[str]:
    """What ProcessGroupNCCL.cpp prints when its watchdog gives up, then libstdc++'s terminate and CPython's abort."""
    glog = f"[rank{rank}]:[E{t:%m%d} {t:%H:%M:%S}.081662161 ProcessGroupNCCL.cpp"
    watchdog = (
        f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog thread terminated with exception: "
        f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1843, OpType=ALLREDUCE, "
        "NumelIn=1259621, NumelOut=1259621, Timeout(ms)=600000) ran for 600041 milliseconds before timing out."
    )
    return [
        f"{glog}:684] [Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of "
        "CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        f"{glog}:698] [Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
        f"{glog}:1899] {watchdog}",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  {watchdog}",
        "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:635 (most recent call first):",
        "Fatal Python error: Aborted",
        "",
        f"Thread 0x00007f{pid:08x} (most recent call first):",
    ]


def _ray_actor_died(pid: int, actor_pid: int) -> list[str]:
    """ray python/ray/exceptions.py ActorDiedError with the raylet's worker-exit prose (names SIGSEGV as a maybe)."""
    return [
        lt.ray_prefix(pid, "Traceback (most recent call last):"),
        lt.ray_prefix(pid, '  File "/app/skyrl-train/skyrl_train/trainer.py", line 412, in train'),
        lt.ray_prefix(
            pid, '    status = ray.get(self.policy_model.async_run_ray_method("pass_through", "ppo_train", data))'
        ),
        lt.ray_prefix(pid, "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."),
        lt.ray_prefix(pid, "\tclass_name: FSDPPolicyWorker"),
        lt.ray_prefix(pid, f"\tpid: {actor_pid}"),
        lt.ray_prefix(
            pid,
            "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
            "Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root "
            "causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force "
            "is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors.",
        ),
    ]


def _vllm_engine_fatal(t: datetime, pid: int) -> list[str]:
    """vllm/v1/engine/core.py logs 'EngineCore encountered a fatal error.' with the traceback, every line behind
    `(EngineCore_0 pid=N) ERROR MM-DD HH:MM:SS [core.py:711]`; EngineDeadError (exceptions.py) follows elsewhere."""
    pre = f"{lt.CYAN}(EngineCore_0 pid={pid}){lt.RESET} ERROR {t:%m-%d %H:%M:%S} [core.py:711] "
    body = [
        "EngineCore encountered a fatal error.",
        "Traceback (most recent call last):",
        '  File "/app/.venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 702, in run_engine_core',
        "    engine_core.run_busy_loop()",
        '  File "/app/.venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 729, in run_busy_loop',
        "    self._process_engine_step()",
        '  File "/app/.venv/lib/python3.11/site-packages/vllm/v1/worker/gpu_model_runner.py", line 1571, in execute_model',
        "    sampled_token_ids = sampler_output.sampled_token_ids.tolist()",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    ]
    return [pre + line for line in body]


def _vllm_engine_dead(t: datetime, pid: int) -> list[str]:
    pre = f"{lt.CYAN}(AsyncVLLMInferenceEngine pid={pid}){lt.RESET} ERROR {t:%m-%d %H:%M:%S} [async_llm.py:538] "
    return [
        pre + "AsyncLLM output_handler failed.",
        pre + "Traceback (most recent call last):",
        pre
        + '  File "/app/.venv/lib/python3.11/site-packages/vllm/v1/engine/core_client.py", line 895, in get_output_async',
        pre + "    raise self._format_exception(outputs) from None",
        pre
        + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
    ]


def _absl_sigterm(t: datetime, cpu: int) -> list[str]:
    return [
        f"*** SIGTERM received at time={int(t.timestamp())} on cpu {cpu} ***",
        "PC: @     0x7f3a1c2e4ee1  (unknown)  pthread_cond_wait",
    ]


def _t(minutes: int) -> datetime:
    return _T0 + timedelta(minutes=minutes)


def write_v2_run(dest: Path, scenario: str) -> Path:
    if scenario == "launch-yaml-v1":
        return _write_launch_run(dest, scenario)
    if scenario == "generation-only":
        return _write_launch_run(dest, scenario, generation=True)
    if scenario == "fused-moe-export":
        return _write_launch_run(dest, scenario, moe=True)
    if scenario in ("protocol-v2", "export-expired"):
        training = _write_v2_training(dest, scenario, mode="checkpoint")
        return _write_v2_export(dest, scenario, training, expired=scenario == "export-expired")
    if scenario == "metrics-mode":
        return _write_v2_training(dest, scenario, mode="metrics").step.r
    if scenario == "killed-iris":
        kill = "Iris job /marin/math-rl-killed-iris reached JOB_STATE_KILLED (the launcher was interrupted)"
        notice = (
            "[iris] job /marin/math-rl-killed-iris: kill requested by marin (launcher interrupted); sending SIGTERM"
        )
        link = Link(1, 8, None, "sigterm", state="failed", iris_job_state="killed", failure=kill, notice=(notice,))
        extra = {0: {"finelog": _absl_sigterm(_t(30), 3) + _torch_teardown(_t(31), 0, 4164)[:3]}}
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
        first = _torch_teardown(_t(25), 1, 4165) + _ray_actor_died(4100, 4165)
        engine_pid = 4137 + 97
        second = _vllm_engine_fatal(_t(80), engine_pid) + _vllm_engine_dead(_t(80), engine_pid + 1)
        second += _torch_teardown(_t(81), 0, 4201)
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
        extra = {0: {"finelog": _torch_teardown(_t(25), 1, 4165) + _ray_actor_died(4100, 4165)}}
        return _v1_run(dest, scenario, [link], extra_logs=extra)
    if scenario == "megatron-checkpoint":
        link = Link(1, 20, None, "done")
        return _v1_run(dest, scenario, [link], status="SUCCESS", strategy="megatron", megatron_incomplete=True)
    raise ValueError(f"unknown v2 scenario {scenario!r}")
