"""Render one chain link (one attempt / Slurm job) of a SkyRL run into driver and Ray-worker log lines."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rlcleanup.samples import logtext as lt

STEP_TIME = timedelta(minutes=3)
EVAL_INTERVAL = 10


@dataclass(frozen=True)
class Link:
    first_step: int  # first step this link trains
    last_step: int  # last step it logs a metric row for (< first_step: none)
    resume_from: int | None  # checkpoint it loads; None = from scratch
    ending: str  # done | done_plus_one | sigterm | oom | teardown | already_complete
    state: str = "succeeded"  # attempt response.state
    iris_job_state: str = "SUCCEEDED"
    failure: str | None = None
    stream: int = 0  # noise stream: a re-logged step gets different values in a later link
    notice: tuple[str, ...] = ()  # controller lines printed before a SIGTERM (preemption, Slurm time limit)
    silent: bool = False  # trains and saves but logs no metric rows (its metrics sink was not up)


@dataclass
class RunCtx:
    budget: int
    interval: int
    hf_interval: int
    ckpt_dir: Callable[[int], str]
    export_dir: Callable[[int], str]
    reward: Callable[[int, int], float]
    legacy: bool = False
    keep: int = 2
    kept: list[int] = field(default_factory=list)  # checkpoints on disk, mutated link by link
    exports: set[int] = field(default_factory=set)


@dataclass
class LinkLogs:
    driver: list[str]
    workers: dict[str, list[str]]
    started: datetime
    ended: datetime


def hexid(*parts: object, n: int = 56) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:n]


def train_metrics(step: int, reward: float, stream: int) -> dict[str, Any]:
    rng = random.Random(f"metrics:{stream}:{step}")
    tokens = 700 + 9 * step + rng.uniform(-40, 40)
    return {
        "async/staleness_max": 0,
        "async/staleness_mean": 0.0,
        "generate/avg_num_tokens": round(tokens, 2),
        "generate/max_num_tokens": 3584 if rng.random() < 0.3 else int(tokens * 3.1),
        "loss/avg_final_rewards": round(reward - 0.5 * rng.random() * 0.01, 4),
        "policy/policy_entropy": round(0.62 - 0.006 * step + rng.uniform(-0.02, 0.02), 4),
        "policy/policy_loss": round(rng.uniform(-0.05, 0.05), 5),
        "policy/policy_lr": 3e-06,
        "policy/ppo_clip_ratio": round(rng.uniform(0.001, 0.02), 5),
        "policy/raw_grad_norm": round(rng.uniform(0.08, 0.4), 4),
        "reward/avg_pass_at_8": round(min(1.0, reward + 0.12 + rng.uniform(0, 0.05)), 4),
        "reward/avg_raw_reward": reward,
        "timing/generate": round(120 + rng.uniform(-15, 25), 3),
        "timing/policy_train": round(38 + rng.uniform(-3, 3), 3),
        "timing/step": round(171 + rng.uniform(-12, 12), 3),
        "trainer/epoch": 0,
        "trainer/global_step": step,
    }


class _Render:
    def __init__(self, ctx: RunCtx, link: Link, start: datetime, pid: int, run_key: str) -> None:
        self.ctx, self.link, self.t, self.pid, self.key = ctx, link, start, pid, run_key
        self.driver: list[str] = []
        self.rank_err: dict[int, list[str]] = {0: [], 1: []}
        self.engine: list[str] = []

    def log(self, msg: str, where: str = "skyrl_train.trainer:train:402", level: str = "INFO") -> None:
        self.driver.append(lt.ray_prefix(self.pid, lt.loguru(self.t, level, where, msg)))

    def raw(self, text: str) -> None:
        self.driver.append(lt.ray_prefix(self.pid, text))

    def save(self, step: int) -> None:
        ctx = self.ctx
        self.t += timedelta(seconds=41)
        self.log(
            f"Saved trainer state to {ctx.ckpt_dir(step)}/trainer_state.pt", "skyrl_train.trainer:save_checkpoints:1012"
        )
        self.log(
            f"Successfully saved checkpoint for global_step_{step} to: {ctx.ckpt_dir(step)}",
            "skyrl_train.trainer:save_checkpoints:1031",
        )
        ctx.kept.append(step)
        while len(ctx.kept) > ctx.keep:
            old = ctx.kept.pop(0)
            self.log(
                f"Cleaned up old checkpoint: global_step_{old} at {ctx.ckpt_dir(old)}",
                "skyrl_train.utils.io:cleanup:88",
            )

    def export(self, step: int) -> None:
        self.t += timedelta(seconds=12)
        self.log(f"Saved HF model to {self.ctx.export_dir(step)}", "skyrl_train.trainer:save_models:1080")
        self.ctx.exports.add(step)

    def metric_rows(self, s: int) -> None:
        ctx, link = self.ctx, self.link
        reward = ctx.reward(s, link.stream)
        metrics = train_metrics(s, reward, link.stream)
        if ctx.legacy:
            self.driver += [lt.ray_prefix(self.pid, line) for line in lt.legacy_dict(metrics)]
        else:
            self.raw(lt.wandb_mirror("train", s, metrics))
        if s % EVAL_INTERVAL == 0:
            ev = {"eval/all/avg_score": round(reward * 0.9, 4), "eval/all/pass_at_8": round(min(1.0, reward + 0.1), 4)}
            ev["trainer/global_step"] = s
            if ctx.legacy:
                self.driver += [lt.ray_prefix(self.pid, line) for line in lt.legacy_dict(ev)]
            else:
                self.raw(lt.wandb_mirror("eval", s, ev))

    def step(self, s: int) -> None:
        ctx, link = self.ctx, self.link
        self.log("Started: 'step'", "skyrl_train.utils.utils:__enter__:61")
        self.t += STEP_TIME
        self.log("Finished: 'generate', time cost: 121.34s", "skyrl_train.utils.utils:__exit__:66")
        if not link.silent:
            self.metric_rows(s)
        if s % ctx.interval == 0:
            self.save(s)
        if ctx.hf_interval > 0 and s % ctx.hf_interval == 0:
            self.export(s)
        for rank in (0, 1):
            self.rank_err[rank].append(
                lt.loguru(
                    self.t, "INFO", "skyrl_train.workers.worker:ppo_train:702", f"ppo_train step {s} rank {rank} done"
                )
            )

    def teardown(self, oom: bool) -> None:
        """The cascade after a dead worker: NCCL watchdogs, RayActorError, signal notices."""
        t0 = self.t
        if oom:
            where = "skyrl_train.workers.worker:ppo_train:733"
            self.rank_err[1] += [
                lt.loguru(self.t, "ERROR", where, "ppo_train raised during forward; aborting actor"),
                *lt.oom_traceback(rank=1, pid=self.pid + 65),
                lt.pg_not_destroyed(1, self.t + timedelta(seconds=1), self.pid + 65),
                f"[{self.t:%Y-%m-%d %H:%M:%S},811 E {self.pid + 65} {self.pid + 65}] core_worker.cc:1025: "
                "Actor task failed; the worker process will exit (exit_type=SYSTEM_ERROR)",
            ]
        self.t += timedelta(minutes=10)
        self.rank_err[0] += [lt.nccl_watchdog(0, self.t, self.pid + 64, 1843), lt.nccl_abort(0, self.t, self.pid + 64)]
        self.rank_err[1] += [lt.nccl_watchdog(1, self.t, self.pid + 65, 1843)]
        self.engine += [lt.nccl_watchdog(3, self.t, self.pid + 97, 211), lt.nccl_abort(3, self.t, self.pid + 97)]
        self.driver.append(
            lt.ray_prefix(self.pid + 64, lt.nccl_watchdog(0, self.t, self.pid + 64, 1843), "FSDPPolicyWorker")
        )
        self.t += timedelta(seconds=2)
        self.driver += lt.actor_died_traceback(self.pid, self.pid + 65, hexid(self.key, "actor", n=32))
        for rank in (0, 1):
            self.rank_err[rank] += [f"Worker rank {rank} received signal 15", lt.sigterm_notice(self.t, cpu=3 + rank)]
            self.driver.append(f"Worker rank {rank} received signal 15")
        self.engine.append("Worker rank 3 received signal 15")
        self.t = max(self.t, t0) + timedelta(seconds=5)

    def run(self) -> None:
        ctx, link = self.ctx, self.link
        self.log(
            "Initializing inference engines and policy workers (fsdp2, world_size=2)",
            "skyrl_train.entrypoints.main_base:run:212",
        )
        if link.resume_from is None:
            self.log("No checkpoint found, starting training from scratch", "skyrl_train.trainer:load_checkpoints:1120")
        else:
            self.log(
                f"Loading checkpoint from {ctx.ckpt_dir(link.resume_from)}", "skyrl_train.trainer:load_checkpoints:1127"
            )
            self.log(
                f"Successfully loaded complete checkpoint state from global_step_{link.resume_from}",
                "skyrl_train.trainer:load_checkpoints:1166",
            )
        if link.ending == "already_complete":
            g = link.resume_from or 0
            self.log(f"Resumed at global_step {g} >= max training steps ({ctx.budget}); run is already COMPLETE")
            self.log("Training already complete on resume — exiting cleanly.")
            return
        for s in range(link.first_step, link.last_step + 1):
            self.step(s)
        if link.ending in ("done", "done_plus_one"):
            self.log(f"Reached max training steps ({ctx.budget})")
            final = ctx.budget + 1 if link.ending == "done_plus_one" else ctx.budget
            if final not in ctx.kept:
                self.save(final)
            self.log("Saved final checkpoint.")
            if final not in ctx.exports:
                self.export(final)
            self.log("Saved final model.")
            self.log("Training done!")
            self.driver += list(link.notice)
        elif link.ending == "sigterm":
            self.t += timedelta(minutes=1)
            self.driver += list(link.notice)
            self.raw(lt.sigterm_notice(self.t))
            for rank in (0, 1):
                self.rank_err[rank].append(lt.sigterm_notice(self.t, cpu=3 + rank))
                self.driver.append(f"Worker rank {rank} received signal 15")
        elif link.ending in ("oom", "teardown"):
            self.log("Started: 'step'", "skyrl_train.utils.utils:__enter__:61")
            self.t += timedelta(minutes=2)
            self.teardown(oom=link.ending == "oom")


def render_link(ctx: RunCtx, link: Link, start: datetime, pid: int, run_key: str) -> LinkLogs:
    r = _Render(ctx, link, start, pid, run_key)
    preamble = [":job_id:01000000", ":actor_name:FSDPPolicyWorker"]
    warn = (
        f"{lt.SITE}/torch/distributed/fsdp/_fully_shard/_fully_shard.py:187: FutureWarning: "
        "fully_shard(reshard_after_forward=...) is deprecated; use the FSDP2 policy API"
    )
    for rank in (0, 1):
        r.rank_err[rank] += [
            *preamble,
            warn,
            lt.loguru(start, "INFO", "skyrl_train.workers.fsdp:init_model:151", f"rank {rank}: model ready"),
        ]
    r.engine += [
        ":job_id:01000000",
        ":actor_name:AsyncVLLMInferenceEngine",
        "INFO vLLM engine ready (tp=2, max_model_len=4096)",
    ]
    r.run()
    end = r.t + timedelta(minutes=1)
    workers: dict[str, list[str]] = {}
    for rank in (0, 1):
        wid = hexid(run_key, "rank", rank)
        workers[f"worker-{wid}-01000000-{pid + 64 + rank}.err"] = r.rank_err[rank]
        workers[f"worker-{wid}-01000000-{pid + 64 + rank}.out"] = [
            preamble[0],
            preamble[1],
            f"FSDP2 rank {rank}: world_size=2",
        ]
    workers[f"worker-{hexid(run_key, 'engine')}-01000000-{pid + 97}.out"] = r.engine
    return LinkLogs(driver=r.driver, workers=workers, started=start, ended=end)
