"""Resolved SkyRL configurations for the sample runs: standard, agentic, unknown, and the launch.yaml envelope."""

from __future__ import annotations

import copy
from typing import Any

BASE_MODEL = "marin-community/tiny-llama-2l-h64"
DATA_ROOT = "gs://marin-us-central2/datasets/math-rl/v3"
MAIN_BASE = "skyrl_train.entrypoints.main_base"


def _trainer(
    budget: int, ckpt_path: str, export_path: str, interval: int, hf_interval: int, run_name: str
) -> dict[str, Any]:
    return {
        "strategy": "fsdp2",
        "epochs": 20,
        "max_steps": budget,
        "train_batch_size": 64,
        "policy_mini_batch_size": 64,
        "micro_train_batch_size_per_gpu": 2,
        "micro_forward_batch_size_per_gpu": 4,
        "eval_batch_size": 64,
        "eval_interval": 10,
        "eval_before_train": False,
        "max_prompt_length": 512,
        "ckpt_interval": interval,
        "hf_save_interval": hf_interval,
        "max_ckpts_to_keep": 2,
        "resume_mode": "latest",
        "resume_path": None,
        "ckpt_path": ckpt_path,
        "export_path": export_path,
        "project_name": "math-rl",
        "run_name": run_name,
        "logger": "wandb",
        "seed": 42,
        "algorithm": {
            "advantage_estimator": "grpo",
            "use_kl_loss": False,
            "eps_clip_low": 0.2,
            "eps_clip_high": 0.2,
        },
        "policy": {
            "model": {"path": BASE_MODEL},
            "optimizer_config": {"lr": 3.0e-6, "max_grad_norm": 0.5, "weight_decay": 0.01},
            "fsdp_config": {"cpu_offload": False, "reshard_after_forward": True},
        },
        "placement": {"colocate_all": False, "policy_num_nodes": 1, "policy_num_gpus_per_node": 2},
    }


def _generator(trajectories: str) -> dict[str, Any]:
    return {
        "backend": "vllm",
        "num_inference_engines": 2,
        "inference_engine_tensor_parallel_size": 2,
        "n_samples_per_prompt": 8,
        "async_engine": True,
        "batched": False,
        "weight_sync_backend": "nccl",
        "run_engines_locally": True,
        "gpu_memory_utilization": 0.8,
        "sampling_params": {"max_generate_length": 3584, "temperature": 0.7, "top_p": 1.0},
        "engine_init_kwargs": {"max_model_len": 4096},
        # Marin injects this into every run; it does not make a run agentic.
        "trajectory_retention": {"enabled": True, "output_path": trajectories},
    }


def standard_config(
    *,
    budget: int,
    ckpt_path: str,
    export_path: str,
    temp_root: str,
    run_name: str,
    interval: int = 5,
    hf_interval: int = 5,
) -> dict[str, Any]:
    return {
        "entrypoint": MAIN_BASE,
        "data": {
            "kind": "parquet",
            "train_data": [f"{DATA_ROOT}/train-0000{i}-of-00004.parquet" for i in range(4)],
            "val_data": [f"{DATA_ROOT}/aime24.parquet"],
        },
        "environment": {"env_class": "gsm8k", "skyrl_gym": {"max_env_workers": 32}},
        "generator": _generator(f"{temp_root}/attempts/trajectories"),
        "trainer": _trainer(budget, ckpt_path, export_path, interval, hf_interval, run_name),
        # Marin-injected, present in every run.
        "trials_dir": f"{temp_root}/attempts/trace_jobs",
        "extra_env": {"HF_HUB_OFFLINE": "1", "NCCL_SOCKET_IFNAME": "eth0", "WANDB_MODE": "online"},
    }


def agentic_config(*, budget: int, ckpt_path: str, export_path: str, temp_root: str, run_name: str) -> dict[str, Any]:
    cfg = standard_config(
        budget=budget, ckpt_path=ckpt_path, export_path=export_path, temp_root=temp_root, run_name=run_name
    )
    del cfg["environment"]
    cfg["entrypoint"] = "terminal_bench"
    cfg["config_groups"] = {"terminal_bench_config": "terminal_bench"}
    cfg["data"] = {"train_dataset": "open-thoughts/tasktrove-dq", "split": "train", "max_tasks": 512}
    cfg["terminal_bench"] = {
        "harbor": {
            "agent_name": "terminus-2",
            "dataset": "terminal-bench-core",
            "dataset_version": "0.1.1",
            "environment_type": "daytona",
            "n_concurrent_trials": 16,
            "timeout_multiplier": 1.5,
        },
        "context_budget": {"max_turns": 40, "max_tokens": 32768},
    }
    cfg["sandbox"] = {
        "provider": "daytona",
        "daytona_api_url": "https://app.daytona.io/api",
        "daytona_target": "us",
        "daytona_snapshot": "tbench-base-2026-11",
        "n_concurrent_trials": 16,
    }
    cfg["generator"]["n_samples_per_prompt"] = 4
    cfg["trainer"]["project_name"] = "tbench-rl"
    return cfg


def unknown_config(*, budget: int, ckpt_path: str, export_path: str, temp_root: str, run_name: str) -> dict[str, Any]:
    """Neither standard nor agentic signals: no entrypoint, no environment, no data kind."""
    cfg = standard_config(
        budget=budget, ckpt_path=ckpt_path, export_path=export_path, temp_root=temp_root, run_name=run_name
    )
    for key in ("entrypoint", "environment", "data"):
        del cfg[key]
    cfg["trainer"]["project_name"] = "scratch"
    return cfg


SELECTION_BLOCK: dict[str, Any] = {
    "selection": {
        "metric": "reward/avg_raw_reward",
        "mode": "max",
        "smoothing": {"kind": "ema", "alpha": 0.3333, "seed": "first"},
        "trailing": 5,
        "eligible": {"every": 5, "min_step": 10},
    },
    "registration": {"registry": "marin-models", "model_name": "math-rl-qwen"},
}


def launch_yaml(
    skyrl: dict[str, Any], *, name: str, version: str, run_root: str, temp_root: str, runtime: dict[str, str]
) -> dict[str, Any]:
    """The newer single resolved `launch.yaml` (SkyRLLaunchConfig) with the SkyRL config nested under `skyrl`."""
    return {
        "run": {"name": name, "version": version, "run_id": f"{name}-{version}", "output_path": run_root},
        "runtime": dict(runtime),
        "iris": {
            "cluster": "marin-us-central2",
            "user": "marin",
            "priority": "batch",
            "resources": {"gpu": "H100", "gpu_count": 4, "cpu": 32, "memory": "512Gi"},
            "max_retries_preemption": 5,
        },
        "ingress": {"enabled": False},
        "ray": {"head_port": 6379, "num_nodes": 1, "log_sync": f"{temp_root}/attempts"},
        "artifacts": {
            "checkpoint_root": f"{temp_root}/checkpoints",
            "export_root": f"{run_root}/exports",
            "attempts_root": f"{temp_root}/attempts",
            "terminal_manifest": f"{run_root}/terminal.json",
        },
        "inputs": {"base_model": BASE_MODEL, "train_data": copy.deepcopy(skyrl["data"]["train_data"])},
        "skyrl": skyrl,
    }
