"""A large synthetic run (Layout A, the conventions of samples.generator) for scale tests and benches.

`write_large_run(dest)` writes a 70B-shaped standard run: `ranks` policy workers logging over `attempts` chained
attempts (attempt 1 dies of a CUDA OOM on one rank, buried deep in its worker .err and followed by teardown
noise everywhere; the middle ones are preempted; the last completes), `exports` HF exports of llama-70B shape
(80 layers, H 8192, V 128256, intermediate 28672, bf16, 30 shards with real safetensors headers; the tensor data
is a sparse hole, so ~141 GB per export costs no disk) and the last two FSDP checkpoints (one rank file per
worker, sparse too). Big logs are written by repeating pre-rendered chatter blocks, restamped per block.

`model="llama-tiny"` keeps the 80-layer tensor list (same tensor names, so shard headers about as long as the
70B ones) with tiny dimensions: ~1.1M parameters, 2.2 MB per export, so the whole run, uploaded byte for byte, fits
an in-memory GCS emulator (fake-gcs-server cannot hold 141 GB exports). The `ci` scale uses it end to end.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rlcleanup.samples import configs
from rlcleanup.samples import logtext as lt
from rlcleanup.samples.chain import Link, LinkLogs, RunCtx, hexid, render_link
from rlcleanup.samples.curves import reward_curve
from rlcleanup.samples.generator import _PREEMPT, _RUNTIME, _T0, VERSION, _command, _dump_json, _iso
from rlcleanup.samples.large_exports import (
    MODELS,
    export_template,
    write_70b_export,
    write_fsdp_checkpoint,
)

INTERVAL = 5  # ckpt_interval == hf_save_interval: the budget is exports x 5
RANKS_PER_NODE = 8
_TS, _RK, _PID, _ND = "\x01T\x01", "\x01R\x01", "\x01P\x01", "\x01N\x01"  # filled in per file / per block
_BLOCK_TARGET = 32 * 1024
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
_NODE_FILES: tuple[str, ...] = ("raylet.out", "raylet.err", "log_monitor.log", "log_monitor.err")
_NODE_FILES += ("dashboard_agent.log", "runtime_env_agent.log")
MiB = 1024 * 1024


@dataclass(frozen=True)
class LargeSpec:
    ranks: int = 500
    attempts: int = 3
    exports: int = 40
    log_bytes_total: int = 1024 * MiB
    shards: int = 30
    name: str = "math-rl-llama70b"
    model: str = "llama-70b"


SCALES: dict[str, LargeSpec] = {
    "medium": LargeSpec(ranks=50, attempts=3, exports=4, log_bytes_total=30 * MiB),  # CI-sized, local files
    # The end-to-end stack test: small enough for an in-memory GCS emulator, big enough to split every stage
    # (3 attempts x 64 ranks: several capture parts; 20 exports x 30 shards: 21 validations).
    "ci": LargeSpec(ranks=64, attempts=3, exports=20, log_bytes_total=16 * MiB, model="llama-tiny"),
    "large": LargeSpec(),  # the figures: 500 ranks x 3 attempts, >= 1 GiB of logs, >= 10,000 objects
}


def planned_objects(spec: LargeSpec) -> int:
    """How many files write_large_run writes for `spec` (checked against the real tree by the tests)."""
    nodes = math.ceil(spec.ranks / RANKS_PER_NODE)
    per_attempt = 1 + 1 + 3 * spec.ranks + len(_NODE_FILES) * nodes + 2  # record, finelog, ranks, nodes, head
    per_export = spec.shards + 2 + 4  # shards, index, config.json, tokenizer files
    per_ckpt = 3 * spec.ranks + 4 + 4  # rank files, data/trainer_state/fsdp_config/hf config, tokenizer files
    run_files = 5  # resolved-skyrl.json, .executor_status, .executor_info, terminal.json, .artifact.json
    kept = min(2, spec.exports)  # max_ckpts_to_keep
    return spec.attempts * per_attempt + spec.exports * per_export + kept * per_ckpt + 1 + run_files  # + marker


# ---------------------------------------------------------------- chatter blocks


def _loguru_tpl(ms: int, where: str, msg: str) -> str:
    return f"{lt.GREEN}{_TS}.{ms:03d}{lt.RESET} | {lt.BOLD}INFO    {lt.RESET} | {lt.CYAN}{where}{lt.RESET} - {msg}"


def _block(kind: str, seed: str) -> str:
    """~32 KiB of one log kind's chatter; _TS (to the second) is restamped per block, _RK/_PID per file."""
    rng = random.Random(f"large:{kind}:{seed}")
    lines: list[str] = []
    size, ms = 0, 0
    while size < _BLOCK_TARGET:
        ms = min(999, ms + rng.randint(0, 3))
        j, x = rng.randint(1, 16), rng.uniform(0.5, 3.0)
        if kind == "err":
            choice = rng.random()
            if choice < 0.55:
                msg = f"rank {_RK}: micro_batch {j}/16 forward {x:.3f}s backward {2 * x:.3f}s tokens={rng.randint(8000, 32000)}"
                line = _loguru_tpl(ms, "skyrl_train.workers.worker:training_step:655", msg)
            elif choice < 0.9:
                line = f"gpu-node-{_ND}:{_PID}:{_PID} [{j % 8}] NCCL INFO Channel {j:02d}/0 : {_RK}[{j % 8}] -> peer via P2P/CUMEM/read"
            else:
                line = (
                    f"{lt.SITE}/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:{rng.randint(100, 600)}: "
                    "UserWarning: reduce_scatter output is not contiguous; a copy is made"
                )
        elif kind == "out":
            line = f"[rank {_RK}] throughput {rng.uniform(900, 1400):.1f} tokens/s/gpu mfu={rng.uniform(0.3, 0.45):.3f} allgather {x:.3f}s"
        elif kind == "core":
            line = f"[{_TS},{ms:03d} I {_PID} {_PID}] task_receiver.cc:{rng.randint(80, 300)}: Actor task ppo_train received, queue length {j}"
        elif kind == "node":
            line = f"[{_TS},{ms:03d} I 3120 3120] (raylet) node_manager.cc:{rng.randint(500, 3000)}: Worker {_PID} heartbeat ok; object store used {rng.randint(1, 900)} MiB"
        else:  # driver: Ray re-prints worker output on the driver, prefixed
            line = lt.ray_prefix(
                4164 + j,
                f"INFO {rng.randint(1, 12):02d}-30 08:{j:02d}:00 [metrics.py:455] Avg generation throughput: {x * 900:.1f} tokens/s, Running: {j} reqs",
                "AsyncVLLMInferenceEngine",
            )
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


def _repeat(template: str, nbytes: float, start: datetime, end: datetime) -> str:
    """`template` repeated to about nbytes, each copy stamped at an even step between start and end."""
    n = max(1, round(nbytes / max(1, len(template.encode()))))
    span = (end - start) / n
    return "".join(template.replace(_TS, f"{start + span * k:%Y-%m-%d %H:%M:%S}") for k in range(n))


# ---------------------------------------------------------------- the chain


def _links(budget: int, attempts: int) -> list[Link]:
    """Attempt 1: OOM; the middle ones: preempted; the last: done. Each resumes from the last save."""
    failure = "Iris job failed: task 0 exited with code 1"
    links: list[Link] = []
    resume: int | None = None
    for i in range(attempts):
        first = (resume or 0) + 1
        if i == attempts - 1:
            links.append(Link(first, budget, resume, "done", stream=i))
            break
        last = min(budget - 1, max(first, (i + 1) * budget // attempts + 2))
        if i == 0:
            links.append(Link(first, last, resume, "oom", "failed", "FAILED", failure, stream=i))
        else:
            links.append(Link(first, last, resume, "sigterm", "failed", "WORKER_FAILED", "preempted", i, (_PREEMPT,)))
        resume = (last // INTERVAL) * INTERVAL or None
    return links


def _last_stamp(lines: list[str]) -> datetime:
    for line in reversed(lines):
        match = _STAMP.search(line)
        if match:
            return datetime.fromisoformat(match.group(0) + "+00:00")
    raise ValueError("no timestamp in the driver log")


@dataclass
class _AttemptLogs:
    dir: Path
    logs: LinkLogs
    link: Link
    pid: int
    key: str


def _write_rank_logs(a: _AttemptLogs, spec: LargeSpec, budget: float, blocks: dict[str, str]) -> None:
    ranks, link, logs = spec.ranks, a.link, a.logs
    per_rank = budget / (ranks * spec.attempts)
    stop = _last_stamp(logs.driver)  # the last driver stamp before the ending
    oom_at = stop + timedelta(minutes=2)  # render_link starts the teardown 2 min after the last step begins
    watchdog_at = oom_at + timedelta(minutes=10)
    victim = ranks * 5 // 8  # deep in the listing, not rank 0 or 1
    ray = a.dir / "ray_session_logs"
    ray.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        pid, wid = a.pid + 64 + r, hexid(a.key, "rank", r)
        fill = {_RK: str(r), _PID: str(pid), _ND: str(r // RANKS_PER_NODE)}
        err, out, core = (_fill(blocks[k], fill) for k in ("err", "out", "core"))
        head = [":job_id:01000000", ":actor_name:FSDPPolicyWorker"]
        ready = lt.loguru(logs.started, "INFO", "skyrl_train.workers.fsdp:init_model:151", f"rank {r}: model ready")
        tail: list[str] = []
        end = stop
        if link.ending == "oom" and r == victim:
            end = oom_at - timedelta(seconds=30)
            where = "skyrl_train.workers.worker:ppo_train:733"
            tail = [
                lt.loguru(oom_at, "ERROR", where, "ppo_train raised during forward; aborting actor"),
                *lt.oom_traceback(rank=r % RANKS_PER_NODE, pid=pid),
                lt.pg_not_destroyed(r, oom_at + timedelta(seconds=1), pid),
            ]
        elif link.ending == "oom":
            end = oom_at
            tail = [lt.nccl_watchdog(r, watchdog_at, pid, 1843), f"Worker rank {r} received signal 15"]
            tail.append(lt.sigterm_notice(watchdog_at + timedelta(seconds=2), cpu=r % 64))
        elif link.ending == "sigterm":
            tail = [lt.sigterm_notice(stop + timedelta(minutes=1), cpu=r % 64)]
        body_err = _repeat(err, per_rank * 0.75, logs.started, end)
        _write(ray / f"worker-{wid}-01000000-{pid}.err", "\n".join([*head, ready]) + "\n" + body_err, tail)
        body_out = _repeat(out, per_rank * 0.17, logs.started, end)
        _write(
            ray / f"worker-{wid}-01000000-{pid}.out",
            f"{head[0]}\n{head[1]}\nFSDP2 rank {r}: world_size={ranks}\n" + body_out,
            [],
        )
        _write(ray / f"python-core-worker-{wid}_{pid}.log", _repeat(core, per_rank * 0.08, logs.started, end), [])


def _fill(template: str, values: dict[str, str]) -> str:
    for token, value in values.items():
        template = template.replace(token, value)
    return template


def _write(path: Path, body: str, tail: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        fh.write(body)
        if tail:
            fh.write("\n".join(tail) + "\n")


def _write_node_logs(a: _AttemptLogs, spec: LargeSpec, budget: float, block: str) -> None:
    nodes = math.ceil(spec.ranks / RANKS_PER_NODE)
    per_file = budget / (nodes * spec.attempts * len(_NODE_FILES))
    for n in range(nodes):
        node = a.dir / "ray_session_logs" / f"node-10.0.{n // 250}.{10 + n % 250}"
        text = _repeat(
            _fill(block, {_PID: str(a.pid + 64 + n * RANKS_PER_NODE)}), per_file, a.logs.started, a.logs.ended
        )
        for name in _NODE_FILES:
            _write(node / name, text if name.endswith((".out", ".log")) else "", [])
    head = a.dir / "ray_session_logs" / "head"
    _write(
        head / "gcs_server.out",
        f"[{a.logs.started:%Y-%m-%d %H:%M:%S},001 I 3001 3001] (gcs_server) gcs_server.cc:301: GCS started\n",
        [],
    )
    _write(
        head / "monitor.log", f"{a.logs.started:%Y-%m-%d %H:%M:%S},002\tINFO monitor.py:690 -- Monitor: started\n", []
    )


def _pad_driver(driver: list[str], nbytes: float, block: str) -> list[str]:
    """Interleave re-printed worker chatter before each step, so metric rows sit between large gaps."""
    starts = {i for i, line in enumerate(driver) if "Started: 'step'" in line} or {len(driver)}
    per_step = max(1, round(nbytes / len(starts) / max(1, len(block))))
    out: list[str] = []
    chunk = (block * per_step).rstrip("\n").split("\n")
    for i, line in enumerate(driver):
        if i in starts:
            out += chunk
        out.append(line)
    return out


# ---------------------------------------------------------------- the run


def write_large_run(
    dest: Path,
    *,
    ranks: int = 500,
    attempts: int = 3,
    exports: int = 40,
    log_bytes_total: int = 1024 * MiB,
    shards: int = 30,
    name: str = "math-rl-llama70b",
    model: str = "llama-70b",
) -> Path:
    """Write the large run under `dest` (durable root dest/durable/<name>/<version>) and return that root."""
    spec = LargeSpec(ranks, attempts, exports, log_bytes_total, shards, name, model)
    if ranks < 2 or attempts < 2 or exports < 1 or shards < 1:
        raise ValueError("need ranks >= 2, attempts >= 2, exports >= 1, shards >= 1")
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose from {', '.join(MODELS)}")
    shape = MODELS[model]
    r = dest / "durable" / name / VERSION
    t = dest / "tmp" / "ttl=14d" / "skyrl" / name / VERSION
    run_id, ckpt_root, budget = f"{name}-{VERSION}", t / "checkpoints", exports * INTERVAL
    ctx = RunCtx(
        budget=budget,
        interval=INTERVAL,
        hf_interval=INTERVAL,
        ckpt_dir=lambda s: str(ckpt_root / f"global_step_{s}"),
        export_dir=lambda s: str(r / "exports" / f"global_step_{s}" / "policy"),
        reward=lambda s, stream: reward_curve(s, stream),
    )
    links = _links(budget, attempts)
    chain, start = [], _T0
    for i, link in enumerate(links):
        chain.append(render_link(ctx, link, start, pid=4100 + 1000 * i, run_key=f"large/{i}"))
        start = chain[-1].ended + timedelta(minutes=7)

    template = export_template(shards, shape)
    for step in sorted(ctx.exports):
        write_70b_export(r / "exports" / f"global_step_{step}" / "policy", template, shape)
    for step in ctx.kept:
        write_fsdp_checkpoint(ckpt_root / f"global_step_{step}", step, ranks, shape)
    marker = ctx.kept[-1]
    (ckpt_root / "latest_ckpt_global_step.txt").write_text(str(marker))

    cfg = configs.standard_config(
        budget=budget, ckpt_path=str(ckpt_root), export_path=str(r / "exports"), temp_root=str(t), run_name=run_id
    )
    base = "llama-3.1-70b" if model == "llama-70b" else model
    cfg["trainer"]["policy"]["model"]["path"] = f"marin-community/{base}-math-sft"
    cfg["trainer"]["placement"] |= {
        "policy_num_nodes": math.ceil(ranks / RANKS_PER_NODE),
        "policy_num_gpus_per_node": RANKS_PER_NODE,
    }
    config_uri = r / "resolved-skyrl.json"
    _dump_json(config_uri, cfg)
    _write_attempts(spec, r, t, run_id, config_uri, cfg, links, chain, marker)
    return r


def _write_attempts(
    spec: LargeSpec,
    r: Path,
    t: Path,
    run_id: str,
    config_uri: Path,
    cfg: dict[str, Any],
    links: list[Link],
    chain: list[LinkLogs],
    marker: int,
) -> None:
    ckpt_root, final_export = t / "checkpoints", str(r / "exports" / f"global_step_{marker}" / "policy")
    blocks = {k: _block(k, spec.name) for k in ("err", "out", "core", "node", "driver")}
    rank_budget, node_budget = spec.log_bytes_total * 0.90, spec.log_bytes_total * 0.04
    driver_budget = spec.log_bytes_total * 0.06 / spec.attempts
    request_base: dict[str, Any] = {"run_id": run_id, "name": spec.name, "version": VERSION, "output_path": str(r)}
    request_base |= {"resolved_config_uri": str(config_uri), "checkpoint_root": str(ckpt_root)}
    request_base["command"] = _command(cfg, config_uri)
    responses, attempt_ids = [], []
    for i, (link, logs) in enumerate(zip(links, chain, strict=True)):
        aid = hexid("large", run_id, "attempt", i, n=12)
        attempt_ids.append(aid)
        job_id = f"/marin/{run_id.replace('.', '-')}-{aid}"
        ok = link.state == "succeeded"
        model = None
        if ok:
            model = {"policy_export_uri": final_export, "global_step": marker, "tokenizer_uri": final_export}
            model |= {"tokenizer_revision": None, "checkpoint_root": str(ckpt_root)}
            model |= {"terminal_manifest_uri": str(r / "terminal.json"), "iris_job_id": job_id}
        response: dict[str, Any] = {"run_id": run_id, "attempt_id": aid, "state": link.state, "iris_job_id": job_id}
        response |= {
            "iris_job_state": link.iris_job_state,
            "runtime": dict(_RUNTIME),
            "model": model,
            "failure": link.failure,
        }
        responses.append(response)
        exit_code = 0 if ok else (143 if link.ending == "sigterm" else 1)
        execution = {"started_at": _iso(logs.started), "ended_at": _iso(logs.ended), "exit_code": exit_code}
        _dump_json(
            t / "attempts" / f"{aid}.json",
            {"request": request_base | {"attempt_id": aid}, "execution": execution, "response": response},
        )
        banner = [
            f"[rl-iris] run_id={run_id} attempt_id={aid} iris_job_id={job_id}",
            f"[rl-iris] Durable resumable ckpt_path: {ckpt_root}",
            f"[rl-iris] Durable export_path: {r / 'exports'}",
        ]
        trailer = [f"[rl-iris] attempt {aid} finished: iris_job_state={link.iris_job_state} exit_code={exit_code}"]
        log_dir = t / "attempts" / aid / "logs"
        _write(
            log_dir / "finelog.log", "", [*banner, *_pad_driver(logs.driver, driver_budget, blocks["driver"]), *trailer]
        )
        a = _AttemptLogs(log_dir, logs, link, 4100 + 1000 * i, f"large/{i}")
        _write_rank_logs(a, spec, rank_budget, blocks)
        _write_node_logs(a, spec, node_budget, blocks["node"])

    (r / ".executor_status").write_text("SUCCESS\n")
    info = {"executor_version": "step_runner", "name": spec.name, "version": VERSION, "output_path": str(r)}
    info |= {"fn": "marin.rl.skyrl.skyrl_step", "fingerprint": hexid("large", "fingerprint", n=16)}
    _dump_json(r / ".executor_info", info | {"scheduled_at": _iso(_T0 - timedelta(minutes=4))})
    summary = {"started_at": _iso(chain[0].started), "ended_at": _iso(chain[-1].ended), "attempt_ids": attempt_ids}
    _dump_json(r / "terminal.json", {"request": request_base, "execution": summary, "response": responses[-1]})
    artifact: dict[str, Any] = {
        "name": spec.name,
        "version": VERSION,
        "fingerprint": info["fingerprint"],
        "result_type": "marin.rl.skyrl.SkyRLModel",
    }
    artifact |= {"output_path": str(r), "deps": [], "config": {"resolved_config_uri": str(config_uri)}}
    artifact |= {"result": responses[-1]["model"], "provenance": dict(_RUNTIME) | {"created_at": _iso(chain[-1].ended)}}
    _dump_json(r / ".artifact.json", artifact)


def spec_for(scale: str, **overrides: int | None) -> LargeSpec:
    """A preset from SCALES with the given non-None fields replaced."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose from {', '.join(SCALES)}")
    chosen: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
    return replace(SCALES[scale], **chosen)


def write_spec(dest: Path, spec: LargeSpec) -> Path:
    return write_large_run(dest, **asdict(spec))
