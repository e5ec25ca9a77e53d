"""Sample runs of what NovaSky SkyRL HEAD and the MarinSkyRL fork's trainer log today (run-layout-v3.md §5, §6),
written as a plain run directory (Layout C: config, checkpoints, `exports/` and `logs/<job>_<id>.out` in one place,
no controller record), so only the run's own artifacts and logs can settle it.

Followed upstream:
- NovaSky-AI/SkyRL @a956457 `skyrl/train/trainer.py` `RayPPOTrainer.train`: `global_step` starts at 1, checkpoints
  every `ckpt_interval` (`Saved trainer state to ...`, `Successfully saved checkpoint for global_step_N to: ...`),
  `latest_ckpt_global_step.txt`, HF exports every `hf_save_interval` (`Successfully saved model weights.`), then
  after the step that passes `trainer.max_training_steps`: `Reached max_training_steps=N, stopping early.`, the
  step decremented, a final save labelled N only if that step did not save (`Saved final checkpoint.`), `Training
  done!`. `skyrl/train/utils/tracking.py` `ConsoleLogger.log`: `Step N: ` then `pprint.pformat` of the payload with
  every float as a `'%.4f'` string. `skyrl/train/config/config.py`: `trainer.max_training_steps`, `trainer.logger`.
- the MarinSkyRL fork (`skyrl-train/skyrl_train/trainer.py`): `Reached max training steps (Y)` with Y the computed
  total, the final save labelled Y + 1; run-layout-v3.md §6 `Steps per epoch: X, total training steps: Y`.
- the Megatron strategy (`trainer.strategy: megatron`, samples/megatron.py for its files): rank 0 of the policy
  workers prints `Checkpoint successfully saved to <dir>/policy` and, for each export,
  `Successfully saved HF safetensors model to <dir>` then `Successfully saved HF config and tokenizer to <dir>`
  (`megatron_strategy.py` `save_checkpoint`, `save_hf_model`: `Strategy.print` prints on rank 0 only).
"""

from __future__ import annotations

import json
import pprint
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from rlcleanup.samples import configs
from rlcleanup.samples import logtext as lt
from rlcleanup.samples.chain import train_metrics
from rlcleanup.samples.curves import reward_curve
from rlcleanup.samples.hf_export import write_checkpoint_dir, write_hf_export, write_tokenizer_files
from rlcleanup.samples.megatron import write_distributed_hf_export, write_megatron_checkpoint

SCENARIOS_HEAD: dict[str, str] = {
    "novasky-head": "NovaSky SkyRL HEAD (skyrl.train.entrypoints.main_base): budget only in trainer.max_training_steps "
    "(20), console tracker 'Step N:' rows with '%.4f' string floats, 'Reached max_training_steps=20, stopping "
    "early.', final save labelled 20, declared cleanup.selection; no controller record",
    "novasky-head-lora": "the novasky-head run trained with LoRA: exports are policy/lora_adapter/ "
    "(adapter_model.safetensors + adapter_config.json); completed at 20",
    "novasky-head-megatron": "the novasky-head run on trainer.strategy megatron (2 nodes x 4 GPUs, TP 2): torch_dist "
    "checkpoints (__<rank>_<i>.distcp for 8 ranks, common.pt, metadata.json) and distributed HF exports "
    "(hf_export_config.distributed_save, save_every_n_ranks 4: ranks 0 and 4 write the shards, rank 0 the index); "
    "completed at 20",
    "budget-from-log": "MarinSkyRL fork run whose budget is stated only by its log ('Steps per epoch: 10, total "
    "training steps: 20', 'Reached max training steps (20)'), final save labelled 21, log cut before 'Training "
    "done!'; no controller record",
}

BUDGET = 20
INTERVAL = 5
STEPS_PER_EPOCH = 10
_T0 = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)
HEAD_MAIN_BASE = "skyrl.train.entrypoints.main_base"
_SLURM_JOB = 733101
MEGATRON_NODES, MEGATRON_GPUS_PER_NODE = 2, 4
MEGATRON_WORLD = MEGATRON_NODES * MEGATRON_GPUS_PER_NODE
MEGATRON_SAVE_EVERY_N_RANKS = MEGATRON_GPUS_PER_NODE  # one export writer per node, as upstream's docs advise
_MEGATRON_ACTOR = "MegatronPolicyWorkerBase"
SELECTION = {
    "metric": "reward/avg_raw_reward",
    "mode": "max",
    "trailing": 1,
    "eligible": {"every": INTERVAL, "min_step": INTERVAL},
}


@dataclass(frozen=True)
class _Shape:
    fork: bool  # the MarinSkyRL fork's wording (else NovaSky HEAD's)
    lora: bool = False
    megatron: bool = False
    name: str = "math-rl-head"


_SHAPES = {
    "novasky-head": _Shape(fork=False),
    "novasky-head-lora": _Shape(fork=False, lora=True, name="math-rl-head-lora"),
    "novasky-head-megatron": _Shape(fork=False, megatron=True, name="math-rl-head-megatron"),
    "budget-from-log": _Shape(fork=True, name="math-rl-fork-budget-log"),
}


def stringify_floats(value: Any) -> Any:
    """NovaSky `ConsoleLogger.stringify_floats`: every float becomes `f"{x:.4f}"`, containers recursively."""
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, dict):
        return {k: stringify_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [stringify_floats(v) for v in value]
    return value


class _Log:
    def __init__(self, pid: int) -> None:
        self.t = _T0
        self.pid = pid
        self.lines: list[str] = []

    def info(self, where: str, msg: str) -> None:
        self.lines.append(lt.ray_prefix(self.pid, lt.loguru(self.t, "INFO", where, msg)))

    def raw(self, text: str) -> None:
        self.lines.append(lt.ray_prefix(self.pid, text))

    def worker(self, actor: str, text: str) -> None:
        """A policy worker's plain `print` (rank 0), re-printed by Ray under that actor's prefix."""
        self.lines.append(lt.ray_prefix(self.pid + 1, text, actor=actor))


def _config(shape: _Shape, root: Path) -> dict[str, Any]:
    cfg = configs.standard_config(
        budget=BUDGET, ckpt_path=str(root), export_path=str(root / "exports"), temp_root=str(root), run_name=shape.name
    )
    del cfg["trials_dir"], cfg["generator"]["trajectory_retention"]
    trainer = cfg["trainer"]
    del trainer["max_steps"]  # neither shape states a cap under the fork's old key
    trainer["logger"] = "console"
    if shape.fork:
        # The budget is stated only by the trainer's log: no cap and no row count, so the config gives none.
        cfg["entrypoint"] = configs.MAIN_BASE
    else:
        cfg["entrypoint"] = HEAD_MAIN_BASE
        trainer["max_training_steps"] = BUDGET
        trainer["strategy"] = "fsdp"
        cfg["cleanup"] = {"selection": SELECTION}
    if shape.megatron:
        trainer["strategy"] = "megatron"
        del trainer["policy"]["fsdp_config"]
        trainer["policy"]["megatron_config"] = {
            "tensor_model_parallel_size": 2,
            "pipeline_model_parallel_size": 1,
            "context_parallel_size": 1,
            "hf_export_config": {"distributed_save": True, "save_every_n_ranks": MEGATRON_SAVE_EVERY_N_RANKS},
        }
        trainer["placement"] |= {"policy_num_nodes": MEGATRON_NODES, "policy_num_gpus_per_node": MEGATRON_GPUS_PER_NODE}
    if shape.lora:
        trainer["policy"]["model"]["lora"] = {"rank": 32, "alpha": 64, "target_modules": "all-linear"}
    return cfg


def _write_lora_adapter(dest: Path) -> None:
    """PEFT's adapter files (`adapter_config.json` + `adapter_model.safetensors`), tiny and zero-filled."""
    dest.mkdir(parents=True, exist_ok=True)
    adapter = {"peft_type": "LORA", "base_model_name_or_path": configs.BASE_MODEL, "r": 32, "lora_alpha": 64}
    adapter |= {"target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "task_type": "CAUSAL_LM"}
    (dest / "adapter_config.json").write_text(json.dumps(adapter, indent=2) + "\n")
    header: dict[str, Any] = {}
    offset = 0
    for layer in range(2):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            base = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
            for part, shape in (("lora_A", [32, 64]), ("lora_B", [64, 32])):
                size = 2 * shape[0] * shape[1]
                header[f"{base}.{part}.weight"] = {
                    "dtype": "BF16",
                    "shape": shape,
                    "data_offsets": [offset, offset + size],
                }
                offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    (dest / "adapter_model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(offset))
    write_tokenizer_files(dest)


def _step_metrics(step: int) -> dict[str, Any]:
    metrics = train_metrics(step, reward_curve(step, 0, "peak"), 0)
    return metrics | {"trainer/epoch": (step - 1) // STEPS_PER_EPOCH}


def _render(shape: _Shape, root: Path, log: _Log) -> tuple[list[int], set[int]]:
    """The training loop's log lines; returns the checkpoint steps and the export steps written."""
    where = "skyrl_train.trainer:train" if shape.fork else "skyrl.train.trainer:train"
    saved: list[int] = []
    exports: set[int] = set()
    log.info(f"{where}:1120", "No checkpoint found, starting training from scratch")
    if shape.fork:
        log.info(f"{where}:145", f"Steps per epoch: {STEPS_PER_EPOCH}, total training steps: {BUDGET}")
    log.raw("Training Batches Processed:   0%|          | 0/20 [00:00<?, ?it/s]")
    for step in range(1, BUDGET + 1):
        log.t += timedelta(minutes=3)
        metrics = _step_metrics(step)
        if shape.fork:
            log.raw(lt.wandb_mirror("train", step, metrics))
        else:
            # ConsoleLogger.log: the header line, then pprint's lines, each re-printed by Ray with its prefix.
            log.info("skyrl.train.utils.tracking:log:189", f"Step {step}: ")
            for line in pprint.pformat(stringify_floats(metrics)).splitlines():
                log.raw(line)
        if step % INTERVAL == 0:
            ckpt = root / f"global_step_{step}"
            if shape.megatron:
                log.worker(_MEGATRON_ACTOR, f"Checkpoint successfully saved to {ckpt}/policy")
            log.info(f"{where}:1694", f"Saved trainer state to {ckpt}/trainer_state.pt")
            log.info(f"{where}:1701", f"Successfully saved checkpoint for global_step_{step} to: {ckpt}")
            saved.append(step)
            exports.add(step)
            if shape.megatron:
                export = root / "exports" / f"global_step_{step}" / "policy"
                log.worker(_MEGATRON_ACTOR, f"Successfully saved HF safetensors model to {export}")
                log.worker(_MEGATRON_ACTOR, f"Successfully saved HF config and tokenizer to {export}")
            log.info(f"{where}:1848", "Successfully saved model weights.")
    if shape.fork:
        log.info(f"{where}:639", f"Reached max training steps ({BUDGET})")
        final = BUDGET + 1  # the fork labels the final save one past the last step (run-layout-v2.md §5)
        ckpt = root / f"global_step_{final}"
        log.info(f"{where}:1012", f"Saved trainer state to {ckpt}/trainer_state.pt")
        log.info(f"{where}:1031", f"Successfully saved checkpoint for global_step_{final} to: {ckpt}")
        log.info(f"{where}:660", "Saved final checkpoint.")
        saved.append(final)
        # The log is cut here: the job was torn down before 'Training done!' reached it.
    else:
        log.info(f"{where}:551", f"Reached max_training_steps={BUDGET}, stopping early.")
        log.info(f"{where}:601", "Training done!")  # the last step saved in the loop: no 'Saved final checkpoint.'
    return saved, exports


def write_head_run(dest: Path, scenario: str) -> Path:
    """Write `scenario` under `dest` (Layout C: `dest/rl_ckpts/<name>`) and return the run root."""
    shape = _SHAPES[scenario]
    root = dest / "rl_ckpts" / shape.name
    root.mkdir(parents=True, exist_ok=True)
    cfg = _config(shape, root)
    (root / "resolved_config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    log = _Log(pid=5120)
    saved, exports = _render(shape, root, log)
    for step in saved[-2:]:  # max_ckpts_to_keep 2
        if shape.megatron:
            write_megatron_checkpoint(root / f"global_step_{step}", step, ranks=MEGATRON_WORLD, hf_tokenizer=True)
        else:
            write_checkpoint_dir(root / f"global_step_{step}", step)
    (root / "latest_ckpt_global_step.txt").write_text(str(saved[-1]))
    for step in sorted(exports):
        policy = root / "exports" / f"global_step_{step}" / "policy"
        if shape.lora:
            _write_lora_adapter(policy / "lora_adapter")
        elif shape.megatron:
            write_distributed_hf_export(
                policy, world_size=MEGATRON_WORLD, save_every_n_ranks=MEGATRON_SAVE_EVERY_N_RANKS
            )
        else:
            write_hf_export(policy)
    job = "skyrl_math_grpo"
    head = [
        f"SLURM_JOB_ID={_SLURM_JOB} SLURM_JOB_NAME={job} SLURM_NNODES=1 nodes=nid004012",
        f"+ python -m {cfg['entrypoint']} +config={root / 'resolved_config.yaml'} trainer.resume_mode=latest",
    ]
    tail = [] if shape.fork else [f"[slurm] job {_SLURM_JOB} step 0 exited with code 0"]
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{job}_{_SLURM_JOB}.out").write_text("\n".join(head + log.lines + tail) + "\n")
    return root
