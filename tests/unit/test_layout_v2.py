"""run-layout-v2 rules, one at a time, on layouts written from the addendum and the upstream sources."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_terminal import Att, build, mirror, tb, verdict  # the v1 run builder, reused

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.formats.hydra_overrides import compose_overrides
from rlcleanup.formats.launch import ConfigShape, EntrypointKind, lookup_entrypoint, read_run_config
from rlcleanup.formats.protocol import (
    ManifestShape,
    check_export_receipt,
    check_training_receipt,
    manifest_shape,
    training_receipt_uri,
)
from rlcleanup.models.vocab import ClassificationKind, TerminalState
from rlcleanup.parsing.attempt_logs import scan_attempt
from rlcleanup.parsing.log_scanner import scan_lines
from rlcleanup.parsing.metrics import clean_line
from rlcleanup.parsing.teardown import TEARDOWN, teardown_for
from rlcleanup.steps.classify import classify
from rlcleanup.steps.layout import discover, parse_executor_status
from rlcleanup.steps.marin import StepRole, temp_root_for
from rlcleanup.steps.precedence import Inputs, Source, decide, failure_says_killed
from rlcleanup.steps.settle import settle_terminal_state
from rlcleanup.steps.terminal import establish_terminal_state, step_budget
from rlcleanup.steps.terminal_readings import normalize_state

# -- Hydra overrides ------------------------------------------------------------------------------------------


def test_hydra_overrides_compose_with_hydras_grammar() -> None:
    out = compose_overrides(
        [
            "trainer.max_steps=100",
            "++trainer.max_ckpts_to_keep=2",
            "++terminal_bench_config.trials_dir='gs://b/r/attempts/trace_jobs'",
            "data.train_data=['gs://d/a.parquet','gs://d/b.parquet']",
            "trainer.resume_mode=null",
            "+generator.sampling_params.temperature=0.7",
            "trainer.placement.colocate_all=false",
            "trainer.max_steps=120",  # the last one wins, as in Hydra
            "~trainer.placement",
            "trainer.ckpt_interval=1,2",  # a sweep: not one value
            "data.val_data=[",  # does not parse
        ]
    )
    assert out.config == {
        "trainer": {"max_steps": 120, "max_ckpts_to_keep": 2, "resume_mode": None},
        "terminal_bench_config": {"trials_dir": "gs://b/r/attempts/trace_jobs"},
        "data": {"train_data": ["gs://d/a.parquet", "gs://d/b.parquet"]},
        "generator": {"sampling_params": {"temperature": 0.7}},
    }
    assert out.deleted == ["trainer.placement"]
    assert [p.split(" ", 3)[2] for p in out.problems] == ["'trainer.ckpt_interval=1,2'", "'data.val_data=['"]


def test_resolved_skyrl_json_budget_lives_in_hydra_args() -> None:
    cfg = read_run_config({"entrypoint": "skyrl_train.entrypoints.main_base", "hydra_args": ["trainer.max_steps=7"]})
    assert cfg.shape is ConfigShape.hydra_args
    assert cfg.skyrl == {"trainer": {"max_steps": 7}}
    assert cfg.entry is not None and cfg.entry.kind is EntrypointKind.standard


# -- launch.yaml and the entrypoint table -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind", "trains"),
    [
        ("skyrl_train.entrypoints.main_base", EntrypointKind.standard, True),
        ("skyrl_train.entrypoints.fully_async", EntrypointKind.standard, True),
        ("skyrl_train.entrypoints.mini_swe", EntrypointKind.agentic, True),
        ("skyrl_train.entrypoints.terminal_bench", EntrypointKind.agentic, True),
        ("terminal_bench_generate", EntrypointKind.agentic, False),
        ("skyrl_train.entrypoints.main_generate", EntrypointKind.generation, False),
        ("generate", EntrypointKind.generation, False),
        ("standard", EntrypointKind.standard, True),
        ("skyrl_train.entrypoints.checkpoint_export", EntrypointKind.checkpoint_export, False),
        # NovaSky SkyRL HEAD's package (issue 34, run-layout-v3.md §5)
        ("skyrl.train.entrypoints.main_base", EntrypointKind.standard, True),
        ("python -m skyrl.train.entrypoints.main_base", EntrypointKind.standard, True),
        ("skyrl.train.entrypoints.main_generate", EntrypointKind.generation, False),
    ],
)
def test_entrypoint_table(value: str, kind: EntrypointKind, trains: bool) -> None:
    entry = lookup_entrypoint(value)
    assert entry is not None and (entry.kind, entry.trains) == (kind, trains)


def _launch(entrypoint: str, data_kind: str = "parquet", **skyrl: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "run": {"id": "r-v", "attempt_id": "0123456789ab", "mode": "train"},
        "runtime": {"launcher_commit": "c" * 40, "profile": "fsdp", "entrypoint": entrypoint, "training_type": None},
        "iris": {"cluster": "c", "job_name": "r-v-0123456789ab", "max_retries": 3},
        "artifacts": {"checkpoint_root": "/t/checkpoints", "export_root": "/r/exports", "attempts_root": "/t/attempts"},
        "inputs": {"model": {"uri": "gs://m"}, "data_kind": data_kind, "train_data": [{"kind": "directory"}]},
        "skyrl": {"trainer": {"max_steps": 5, "strategy": "fsdp2"}, **skyrl},
    }


def _classify_doc(tmp_path: Path, doc: dict[str, Any], name: str = "resolved-launch.yaml") -> Any:
    import yaml

    root = tmp_path / "b" / "run" / "v1"
    root.mkdir(parents=True)
    (root / name).write_text(yaml.safe_dump(doc))
    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(root))
    return layout, classify(storage, layout)


def test_real_launch_yaml_shape_classifies_from_runtime_and_inputs(tmp_path: Path) -> None:
    layout, c = _classify_doc(tmp_path, _launch("skyrl_train.entrypoints.main_base"))
    assert c.kind is ClassificationKind.standard
    assert c.evidence[:2] == [
        "entrypoint=skyrl_train.entrypoints.main_base",
        "inputs.data_kind=parquet (single-turn RLVR rows)",
    ]
    # Roots come from artifacts.* (run-layout-v2.md §1).
    assert (layout.checkpoints_root, layout.exports_root, layout.attempts_root) == (
        "/t/checkpoints",
        "/r/exports",
        "/t/attempts",
    )
    assert layout.run_config.shape is ConfigShape.launch_v1


def test_launch_yaml_agentic_and_generation_entrypoints(tmp_path: Path) -> None:
    _, agentic = _classify_doc(tmp_path / "a", _launch("skyrl_train.entrypoints.terminal_bench", data_kind="tasks"))
    assert agentic.kind is ClassificationKind.agentic
    _, gen = _classify_doc(tmp_path / "g", _launch("skyrl_train.entrypoints.main_generate"))
    assert gen.kind is ClassificationKind.standard
    assert "generation-only" in gen.evidence[0]


# -- Marin steps and the temp area --------------------------------------------------------------------------------


def test_temp_root_rule() -> None:
    assert temp_root_for("gs://marin-us-central2/math/2026.11.30") == [
        "gs://marin-us-central2/tmp/ttl=14d/skyrl/math/2026.11.30"
    ]
    assert temp_root_for("s3://marin-us-east-02a/math/v1", 7) == ["s3://marin-us-east-02a/tmp/ttl=7d/skyrl/math/v1"]


def test_temp_area_checkpoints_found_without_any_named_root(tmp_path: Path) -> None:
    bucket = tmp_path / "marin-x"
    r, t = bucket / "math" / "v1", bucket / "tmp" / "ttl=14d" / "skyrl" / "math" / "v1"
    r.mkdir(parents=True)
    (r / "resolved-skyrl.json").write_text(
        json.dumps({"entrypoint": "skyrl_train.entrypoints.main_base", "hydra_args": []})
    )
    (t / "checkpoints" / "global_step_5").mkdir(parents=True)
    (t / "checkpoints" / "global_step_5" / "trainer_state.pt").write_bytes(b"s")
    (t / "checkpoints" / "latest_ckpt_global_step.txt").write_text("5")
    (t / "attempts").mkdir()
    (t / "attempts" / "0123456789ab.json").write_text(json.dumps({"response": {"state": "failed"}}))
    layout = discover(LocalStorage(checksums=False), str(r))
    assert layout.checkpoints_root == str(t / "checkpoints")
    assert (layout.marker_step, layout.checkpoint_steps) == (5, [5])
    assert [a.attempt_id for a in layout.attempts] == ["0123456789ab"]
    assert any("Marin's temp area" in p for p in layout.problems)


def test_export_step_without_config_joins_its_training_step(tmp_path: Path) -> None:
    bucket = tmp_path / "b"
    train, export = bucket / "math-training" / "v1", bucket / "math" / "v1"
    train.mkdir(parents=True)
    (train / "resolved-skyrl.json").write_text(json.dumps({"entrypoint": "x", "hydra_args": ["trainer.max_steps=3"]}))
    (train / ".executor_status").write_text("SUCCESS\n")
    (export / "attempts").mkdir(parents=True)
    (export / "attempts" / "aaaaaaaaaaaa.json").write_text(
        json.dumps(
            {"request": {"training_manifest_uri": str(train / "terminal.json")}, "response": {"state": "failed"}}
        )
    )
    (export / ".executor_status").write_text("FAILED\n")
    layout = discover(LocalStorage(checksums=False), str(export))
    assert layout.config_root == str(train) and layout.skyrl == {"trainer": {"max_steps": 3}}
    assert [(s.role, s.executor_status) for s in layout.steps] == [
        (StepRole.training, "SUCCESS"),
        (StepRole.export, "FAILED"),
    ]
    assert layout.exports_root == str(export / "exports")
    assert ("training-run", str(train)) in layout.extra_roots


def test_layout_c_chain_is_the_training_jobs_out_files_only(tmp_path: Path) -> None:
    run = tmp_path / "RUN"
    (run / "logs").mkdir(parents=True)
    (run / "resolved_config.yaml").write_text("trainer:\n  max_steps: 4\n")
    (run / "latest_ckpt_global_step.txt").write_text("4")
    for name in ("skyrl_math_100.out", "skyrl_math_101.out", "eval_math_102.out", "skyrl_math_100_rayhead.out"):
        (run / "logs" / name).write_text("x\n")
    layout = discover(LocalStorage(checksums=False), str(run))
    assert [a.attempt_id for a in layout.attempts] == ["100", "101"]
    assert "eval_math_102.out" in layout.problems[0]


# -- protocol v2 receipts ---------------------------------------------------------------------------------------


def _v2_training(tmp_path: Path, mode: str = "checkpoint") -> dict[str, Any]:
    r, t = tmp_path / "r", tmp_path / "t"
    ckpt = t / "checkpoints" / "global_step_4"
    (ckpt / "policy").mkdir(parents=True)
    for name, data in (
        ("trainer_state.pt", b"state"),
        ("data.pt", b"data"),
        ("policy/model_world_size_1_rank_0.pt", b"w"),
    ):
        (ckpt / name).write_bytes(data)
    (t / "checkpoints" / "latest_ckpt_global_step.txt").write_text("4")
    receipt_uri = training_receipt_uri(str(r / "terminal.json"), "0123456789ab")
    fp = "f" * 64
    receipt: dict[str, Any] = {"schema_version": 1, "run_id": "run-v", "attempt_id": "0123456789ab"}
    receipt |= {"request_fingerprint": fp, "completion_mode": mode, "global_step": 4}
    if mode == "checkpoint":
        receipt["checkpoint"] = {
            "checkpoint_path": str(ckpt),
            "global_step": 4,
            "trainer_state_sha256": hashlib.sha256(b"state").hexdigest(),
            "files": [
                {"path": p, "size": len(d)}
                for p, d in (
                    ("trainer_state.pt", b"state"),
                    ("data.pt", b"data"),
                    ("policy/model_world_size_1_rank_0.pt", b"w"),
                )
            ],
        }
    Path(receipt_uri).parent.mkdir(parents=True)
    Path(receipt_uri).write_text(json.dumps(receipt))
    completion = [
        f"++trainer.completion.{k}={v}"
        for k, v in (("mode", mode), ("run_id", "run-v"), ("attempt_id", "0123456789ab"), ("request_fingerprint", fp))
    ]
    resolved = {
        "entrypoint": "skyrl_train.entrypoints.main_base",
        "hydra_args": [*completion, f"++trainer.completion.receipt_uri='{receipt_uri}'"],
    }
    return {"receipt_uri": receipt_uri, "resolved": resolved, "ckpt": ckpt, "root": str(t / "checkpoints")}


def _check(v: dict[str, Any], **kw: Any) -> Any:
    args: dict[str, Any] = {
        "receipt_uri": v["receipt_uri"],
        "run_id": "run-v",
        "attempt_id": "0123456789ab",
        "completion_mode": "checkpoint",
        "resolved_config": v["resolved"],
        "checkpoint_root": v["root"],
        "marker_step": 4,
    }
    return check_training_receipt(LocalStorage(checksums=False), **(args | kw))


def test_training_receipt_valid_and_each_tamper_named(tmp_path: Path) -> None:
    v = _v2_training(tmp_path)
    assert _check(v).valid
    assert _check(v, attempt_id="ffffffffffff").reasons == [
        "attempt_id '0123456789ab' differs from the request's 'ffffffffffff'"
    ]
    assert _check(v, marker_step=3).reasons == ["commit marker reads 3, receipt global_step 4"]
    bad = dict(v["resolved"], hydra_args=[a for a in v["resolved"]["hydra_args"] if "request_fingerprint" not in a])
    assert _check(v, resolved_config=bad).reasons == [
        "resolved config trainer.completion differs from the receipt in request_fingerprint"
    ]
    (v["ckpt"] / "trainer_state.pt").write_bytes(b"STATE")  # same size, other bytes
    assert _check(v).reasons == ["sha256(trainer_state.pt) differs from the receipt"]
    (v["ckpt"] / "data.pt").unlink()
    assert "1 checkpoint file(s) missing: data.pt" in _check(v).reasons


def test_metrics_receipt_has_no_checkpoint(tmp_path: Path) -> None:
    v = _v2_training(tmp_path, mode="metrics")
    assert _check(v, completion_mode="metrics", marker_step=None).valid


def test_export_receipt(tmp_path: Path) -> None:
    export = tmp_path / "exports" / "global_step_4" / "policy"
    export.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (export / name).write_text("{}")
    receipt = tmp_path / "exports" / "receipts" / ("a" * 64 + ".json")
    receipt.parent.mkdir(parents=True)
    receipt.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "request_fingerprint": "a" * 64,
                "attempt_id": "x",
                "export_path": str(export),
                "global_step": 4,
            }
        )
    )
    storage = LocalStorage(checksums=False)
    kw: dict[str, Any] = {
        "receipt_uri": str(receipt),
        "request_fingerprint": "a" * 64,
        "export_path": str(export),
        "global_step": 4,
    }
    assert check_export_receipt(storage, **kw).valid
    assert check_export_receipt(storage, **(kw | {"global_step": 5})).reasons == ["global_step 4 differs from 5"]
    (export / "tokenizer.json").write_text("")
    assert check_export_receipt(storage, **kw).reasons == ["no nonempty tokenizer file"]


@pytest.mark.parametrize(
    ("manifest", "shape"),
    [
        ({"request": {}, "execution": {}, "response": {"model": None}}, ManifestShape.v1),
        ({"schema_version": 2, "request": {}, "response": {"training": None}}, ManifestShape.v2),
        ({"config": {}, "result": {"runtime_profile": "fsdp", "model": None}}, ManifestShape.launch),
    ],
)
def test_all_three_manifest_shapes(manifest: dict[str, Any], shape: ManifestShape) -> None:
    assert manifest_shape(manifest) is shape


# -- teardown vocabulary and line prefixes -----------------------------------------------------------------------


def test_every_teardown_wording_names_its_upstream_source() -> None:
    assert all(w.source and w.reason for w in TEARDOWN)
    assert len({w.name for w in TEARDOWN}) == len(TEARDOWN)


def test_dist_backend_terminate_is_teardown_unless_its_what_carries_a_cuda_or_nccl_error() -> None:
    teardown = scan_lines(
        [
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: "
            "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9) ran for 600041 milliseconds",
        ],
        "u",
    ).errors
    assert [(e.error_type, e.causal) for e in teardown] == [("c10::DistBackendError", False)]
    causal = scan_lines(
        [
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            "  what():  NCCL error in: ProcessGroupNCCL.cpp:2056, unhandled cuda error, NCCL version 2.21.5",
        ],
        "u",
    ).errors
    assert [(e.error_type, e.causal, e.line) for e in causal] == [("c10::DistBackendError", True, 1)]
    assert causal[0].message.startswith("NCCL error in: ProcessGroupNCCL.cpp:2056")


def test_signal_names_in_ray_prose_are_not_signals() -> None:
    line = (
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. "
        "(1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. "
        "(3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors."
    )
    (err,) = scan_lines([line], "u").errors
    assert (err.causal, err.noise) == (False, "actor_died")
    (real,) = scan_lines(["*** SIGSEGV received at time=1700000000 on cpu 3 ***"], "u").errors
    assert (real.error_type, real.causal) == ("SegmentationFault", True)


def test_vllm_engine_fatal_is_the_cause_and_engine_dead_the_consequence() -> None:
    pre = "\x1b[36m(EngineCore_0 pid=51)\x1b[0m ERROR 11-30 10:12:01 [core.py:711] "
    dead = "(APIServer pid=52) ERROR 11-30 10:12:02 [async_llm.py:538] "
    lines = [
        "2026-11-30 10:00:00,001 INFO start",
        pre + "EngineCore encountered a fatal error.",
        pre + "Traceback (most recent call last):",
        pre + '  File "core.py", line 702, in run_engine_core',
        pre + "    engine_core.run_busy_loop()",
        pre + "RuntimeError: CUDA error: an illegal memory access was encountered",
        dead + "Traceback (most recent call last):",
        dead + '  File "core_client.py", line 895, in get_output_async',
        dead
        + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
    ]
    errors = scan_lines(lines, "u").errors
    assert [(e.error_type, e.causal, e.line) for e in errors] == [
        ("RuntimeError", True, 3),
        ("vllm.v1.engine.exceptions.EngineDeadError", False, 7),
    ]
    # The year comes from the file's last full stamp; vLLM prints none.
    assert errors[0].timestamp == datetime(2026, 11, 30, 10, 12, 1, tzinfo=UTC)


def test_prefixes_peel_in_any_order_so_the_timestamp_after_a_ray_prefix_is_read() -> None:
    cleaned = clean_line("\x1b[36m(skyrl_entrypoint pid=7)\x1b[0m 2026-11-30 08:01:02.345 | ERROR | x - boom")
    assert cleaned.timestamp == datetime(2026, 11, 30, 8, 1, 2, 345000, tzinfo=UTC)
    assert clean_line("[rank3]: Traceback (most recent call last):").text == "Traceback (most recent call last):"
    assert clean_line("(Worker_TP2 pid=1) (Worker_TP5 pid=2) INFO 11-30 08:00:00 [x.py:1] hi").text == "hi"


def test_fatal_python_aborted_is_teardown_but_a_segfault_is_not() -> None:
    assert [(e.noise, e.causal) for e in scan_lines(["Fatal Python error: Aborted"], "u").errors] == [
        ("python_aborted", False)
    ]
    assert [e.causal for e in scan_lines(["Fatal Python error: Segmentation fault"], "u").errors] == [True]


# -- the precedence rule of §6 ----------------------------------------------------------------------------------


def _inputs(**kw: Any) -> Inputs:
    base: dict[str, Any] = {
        "sources": [],
        "budget": 20,
        "budget_reached": False,
        "reached_valid": False,
        "needs_done_line": False,
        "training_done": False,
        "early_stop": False,
        "last_step": 12,
        "success_record": False,
        "success_artifact_valid": False,
        "pre_cancel": False,
        "controller_absent": False,
        "running_fresh_lock": False,
        "running_stale": False,
        "causal_error": False,
        "unrecovered_error": False,
    }
    return Inputs(**(base | kw))


SUCCESS = Source("terminal.json response.state", "succeeded", "succeeded")
MARIN_FAILED = Source("step .executor_status", "FAILED", "failed")
KILLED = Source("iris event", "JOB_STATE_KILLED", "cancelled", killed=True)


@pytest.mark.parametrize(
    ("kw", "state", "rule"),
    [
        (
            {"budget_reached": True, "reached_valid": True, "sources": [MARIN_FAILED, KILLED]},
            TerminalState.completed,
            "(1)",
        ),
        ({"sources": [MARIN_FAILED, KILLED], "causal_error": True}, TerminalState.cancelled, "(2)"),
        ({"sources": [MARIN_FAILED], "pre_cancel": True}, TerminalState.cancelled, "(2)"),
        (
            {"sources": [SUCCESS], "success_record": True, "success_artifact_valid": True},
            TerminalState.indeterminate,
            "(3)",
        ),
        (
            {"sources": [SUCCESS], "success_record": True, "success_artifact_valid": True, "early_stop": True},
            TerminalState.completed,
            "(3)",
        ),
        ({"sources": [MARIN_FAILED]}, TerminalState.failed, "(4)"),
        ({"controller_absent": True}, TerminalState.indeterminate, "(5)"),
        (
            {"sources": [Source("s .executor_status", "RUNNING", "running")], "running_stale": True},
            TerminalState.indeterminate,
            "(6)",
        ),
        ({}, TerminalState.indeterminate, "(6)"),
    ],
)
def test_precedence_rules(kw: dict[str, Any], state: TerminalState, rule: str) -> None:
    decision = decide(_inputs(**kw))
    assert (decision.state, decision.rule) == (state, rule)
    assert decision.reasons[0].startswith("Sources read: ")
    assert decision.reasons[-1].startswith(f"Rule {rule} of the terminal-state rules in docs/run-layouts.md decided")


def test_success_below_budget_is_named() -> None:
    decision = decide(_inputs(sources=[SUCCESS], success_record=True, success_artifact_valid=True))
    assert "success_below_budget" in decision.reasons[-1]


def test_running_with_a_fresh_lock_has_not_ended(tmp_path: Path) -> None:
    att = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(1)])
    run = build(tmp_path, [att], trainer={"max_steps": 4}, marker=1, executor_status="RUNNING")
    now = datetime(2025, 3, 1, 1, 0, 0, tzinfo=UTC)
    (run / ".executor_status.lock").write_text(
        json.dumps({"worker_id": "w1", "timestamp": (now - timedelta(seconds=10)).isoformat()})
    )
    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(run))
    scans = [scan_attempt(storage, a) for a in layout.attempts]
    budget, _ = step_budget(layout.skyrl)
    fresh = establish_terminal_state(layout, scans, budget, now=now)
    assert (fresh.terminal_state, fresh.decided_by) == (TerminalState.indeterminate, "(6)")
    assert any("fresh .executor_status.lock" in r for r in fresh.reasoning)
    stale = establish_terminal_state(layout, scans, budget, now=now + timedelta(minutes=5))
    assert any("RUNNING without a fresh .executor_status.lock" in r for r in stale.reasoning)


# -- §6 rule (2) across every attempt of every step -------------------------------------------------------------


def _reason(v: Any, start: str) -> str:
    return next(r for r in v.reasoning if r.startswith(start))


def test_a_kill_in_an_earlier_attempt_is_cancelled_though_the_last_attempt_failed(tmp_path: Path) -> None:
    killed = Att(
        "a00000000001",
        "2025-03-01T00:00:00Z",
        finelog=[mirror(1), "*** SIGTERM received at time=1740787200 on cpu 3 ***"],
        response={"state": "failed", "iris_job_state": "failed", "failure": "Iris job reached JOB_STATE_KILLED"},
    )
    retried = Att(
        "a00000000002",
        "2025-03-02T00:00:00Z",
        finelog=[mirror(2), *tb("RuntimeError: resume_path does not exist")],
        response={"state": "failed", "iris_job_state": "JOB_STATE_FAILED"},
    )
    run = build(tmp_path, [killed, retried], trainer={"max_steps": 9}, marker=1, executor_status="FAILED")
    v = verdict(run)
    assert (v.terminal_state, v.decided_by) == (TerminalState.cancelled, "(2)")
    sources = _reason(v, "Sources read: ")
    # Every source is listed: the step's status and both attempts' state, iris_job_state and failure string.
    for expected in (
        ".executor_status: FAILED -> failed",
        "attempt a00000000001 response.state: failed -> failed (superseded by a later attempt)",
        "attempt a00000000001 response.failure: Iris job reached JOB_STATE_KILLED -> cancelled (KILLED) (superseded",
        "attempt a00000000002 response.iris_job_state: JOB_STATE_FAILED -> failed",
    ):
        assert expected in sources
    decided = v.reasoning[-1] if v.reasoning[-1].startswith("Rule") else _reason(v, "Rule (2)")
    assert "attempt a00000000001 response.failure" in decided and "read as the kill's echo" in decided
    # The error of the retried attempt is still the cause a reader needs.
    assert v.first_failure_cause is not None and v.first_failure_cause.error_type == "RuntimeError"


def test_a_retried_failure_is_not_the_runs_failure(tmp_path: Path) -> None:
    first = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(1)], response={"state": "failed"})
    second = Att(
        "a00000000002", "2025-03-02T00:00:00Z", finelog=[mirror(2), mirror(3)], response={"state": "submitted"}
    )
    v = verdict(build(tmp_path, [first, second], trainer={"max_steps": 9}, marker=3, executor_status="RUNNING"))
    # Only a superseded attempt failed; the step still reads RUNNING with no lock: rule (6), not rule (4).
    assert (v.terminal_state, v.decided_by) == (TerminalState.indeterminate, "(6)")
    assert "superseded by a later attempt" in _reason(v, "Sources read: ")


def _three_step(tmp_path: Path, *, export_state: str, export_failure: str | None, training_killed: bool) -> Path:
    bucket = tmp_path / "b"
    train, export = bucket / "math-training" / "v1", bucket / "math" / "v1"
    (train / "attempts").mkdir(parents=True)
    (train / "resolved-skyrl.json").write_text(json.dumps({"entrypoint": "x", "hydra_args": ["trainer.max_steps=30"]}))
    (train / ".executor_status").write_text("SUCCESS\n")
    (train / "terminal.json").write_text(json.dumps({"schema_version": 2, "response": {"state": "succeeded"}}))
    attempts = [("aaaaaaaaaaa1", "2025-03-01T00:00:00Z", "failed", "JOB_STATE_KILLED" if training_killed else "FAILED")]
    attempts.append(("aaaaaaaaaaa2", "2025-03-02T00:00:00Z", "succeeded", "JOB_STATE_SUCCEEDED"))
    for aid, started, state, iris in attempts:
        record = {"execution": {"started_at": started}, "response": {"state": state, "iris_job_state": iris}}
        (train / "attempts" / f"{aid}.json").write_text(json.dumps(record))
    (export / "attempts").mkdir(parents=True)
    (export / ".executor_status").write_text("FAILED\n" if export_state == "failed" else "SUCCESS\n")
    response: dict[str, Any] = {"state": export_state, "failure": export_failure}
    request = {"training_manifest_uri": str(train / "terminal.json")}
    (export / "attempts" / "eeeeeeeeeee1.json").write_text(json.dumps({"request": request, "response": response}))
    return export


def test_a_kill_in_the_training_step_cancels_the_chain_whose_export_failed(tmp_path: Path) -> None:
    export = _three_step(tmp_path, export_state="failed", export_failure="checkpoint missing", training_killed=True)
    layout = discover(LocalStorage(checksums=False), str(export))
    v = establish_terminal_state(layout, [], 30)
    assert (v.terminal_state, v.decided_by) == (TerminalState.cancelled, "(2)")
    sources = _reason(v, "Sources read: ")
    assert "math-training attempt aaaaaaaaaaa1 response.iris_job_state: JOB_STATE_KILLED -> cancelled (KILLED)" in (
        sources
    )
    assert "math attempt eeeeeeeeeee1 response.state: failed -> failed" in sources


def test_pre_cancel_before_the_export_steps_failure_is_cancelled(tmp_path: Path) -> None:
    # The training step succeeded; a pre-cancel came, then the export step failed: the chain's last word is not a
    # success, so rule (2) decides, though an earlier step reads SUCCESS.
    export = _three_step(
        tmp_path, export_state="failed", export_failure="Checkpoint global_step_30 is missing", training_killed=False
    )
    layout = discover(LocalStorage(checksums=False), str(export))
    failed = establish_terminal_state(layout, [], 30)
    assert (failed.terminal_state, failed.decided_by) == (TerminalState.failed, "(4)")
    v = establish_terminal_state(layout, [], 30, pre_cancel=True)
    assert (v.terminal_state, v.decided_by) == (TerminalState.cancelled, "(2)")
    assert "a pre-cancel request, then no success from the chain's last step" in v.reasoning[-1]
    assert v.reasoning[-1].endswith(
        "math .executor_status: FAILED -> failed, math attempt eeeeeeeeeee1 response.state: failed -> failed is read "
        "as the cancel's echo."
    )


def test_pre_cancel_then_a_success_is_not_cancelled() -> None:
    superseded_fail = Source("attempt a1 response.state", "failed", "failed", superseded=True)
    final_ok = Source("attempt a2 response.state", "succeeded", "succeeded")
    earlier_step_ok = Source("x-training .executor_status", "SUCCESS", "succeeded", final=False)
    final_fail = Source("x .executor_status", "FAILED", "failed")
    ok = decide(_inputs(sources=[superseded_fail, final_ok], pre_cancel=True, budget=None))
    assert ok.rule != "(2)"
    assert decide(_inputs(sources=[earlier_step_ok, final_fail], pre_cancel=True)).rule == "(2)"
    # KILLED counts even in a superseded attempt; a superseded failure alone never decides rule (4).
    gone = Source("attempt a1 response.iris_job_state", "6", "cancelled", killed=True, superseded=True)
    assert decide(_inputs(sources=[gone, final_ok])).rule == "(2)"
    assert decide(_inputs(sources=[superseded_fail])).rule == "(6)"


@pytest.mark.parametrize(
    ("failure", "killed"),
    [
        ("Iris job reached killed", True),  # v1: the lowercase name (MarinSkyRL tests/test_artifact_protocol.py)
        ("Iris job reached 6", True),  # v2: JobState .value
        ("Iris job reached JOB_STATE_KILLED", True),
        ("Iris job reached worker_failed", False),
        ("Iris job reached submitted", False),
        ("task 3 TASK_STATE_KILLED by the scheduler", True),
        ("Worker killed by the OOM killer (exit 137)", False),  # prose: a failure, not a kill
    ],
)
def test_failure_strings_that_say_killed(failure: str, killed: bool) -> None:
    assert failure_says_killed(failure) is killed


# -- Layout C: which <JobName> is the training job ---------------------------------------------------------------


def _slurm_run(tmp_path: Path, names: list[str], config: str = "trainer:\n  max_steps: 4\n") -> Path:
    run = tmp_path / "RUN"
    (run / "logs").mkdir(parents=True)
    (run / "resolved_config.yaml").write_text(config)
    (run / "latest_ckpt_global_step.txt").write_text("4")
    for name in names:
        (run / "logs" / name).write_text("x\n")
    return run


def test_layout_c_config_job_name_wins_over_the_most_frequent(tmp_path: Path) -> None:
    names = ["evalrun_7.out", "evalrun_8.out", "grpo_5.out"]
    run = _slurm_run(tmp_path, names, "slurm:\n  job_name: grpo\ntrainer:\n  max_steps: 4\n")
    layout = discover(LocalStorage(checksums=False), str(run))
    assert [a.attempt_id for a in layout.attempts] == ["5"]
    assert "the training job is 'grpo' (config slurm.job_name)" in layout.problems[0]


def test_layout_c_job_name_tie_takes_the_lowest_first_job_id_and_warns(tmp_path: Path) -> None:
    # One training link, then an eval job against its checkpoint: 1 .out each. Alphabetical order would pick the eval.
    run = _slurm_run(tmp_path, ["skyrl_math_300.out", "aeval_math_301.out"])
    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(run))
    assert [a.attempt_id for a in layout.attempts] == ["300"]
    assert layout.problems[0] == (
        "slurm job-name tie: a tie of 1 .out file(s) each between 'skyrl_math' (first job id 300), 'aeval_math' "
        "(first job id 301): the lowest first job id wins (the training job is submitted before its eval/export jobs)"
    )
    # The warning reaches the record (chain.warnings), beside the evidence-only note.
    fields, _ = settle_terminal_state(storage, layout, [], str(tmp_path / "dest"))
    assert fields["chain"]["warnings"][0].startswith("slurm job-name tie: ")
    assert "aeval_math_301.out" in fields["chain"]["warnings"][1]


def test_layout_c_interleaved_tie_and_a_config_name_with_no_out_file(tmp_path: Path) -> None:
    names = ["train_10.out", "eval_11.out", "train_12.out", "eval_13.out"]
    run = _slurm_run(tmp_path, names, "job_name: grpo-old\ntrainer:\n  max_steps: 4\n")
    layout = discover(LocalStorage(checksums=False), str(run))
    assert [a.attempt_id for a in layout.attempts] == ["10", "12"]
    assert layout.problems[0].startswith(
        "config job_name='grpo-old' names no .out file in logs/; slurm job-name tie: a tie of 2 .out file(s) each "
        "between 'train' (first job id 10), 'eval' (first job id 11)"
    )
    # No tie, a stale config name: the most frequent wins, and the record says why the config's name was not used.
    run2 = _slurm_run(tmp_path / "b", ["train_10.out", "train_12.out", "eval_11.out"], "job_name: gone\n")
    layout2 = discover(LocalStorage(checksums=False), str(run2))
    assert [a.attempt_id for a in layout2.attempts] == ["10", "12"]
    assert layout2.problems[0] == (
        "config job_name='gone' names no .out file in logs/; the training job was taken as 'train', the most "
        "frequent <JobName> (2 of 3 .out files)"
    )


def test_upstream_teardown_wordings_beyond_the_addendum() -> None:
    # pytorch ProcessGroupNCCL.cpp heartbeat monitor; torch elastic's ChildFailedError summary; vLLM's newer
    # multiproc_executor.py wording ("... terminating worker queues"). Each is a consequence, never the cause.
    lines = [
        "[rank0]:[E1130 10:00:00.000000 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 0] Heartbeat "
        "monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=2",
        "(Worker_TP0 pid=7) ERROR 11-30 10:00:01 [multiproc_executor.py:793] Parent process exited, terminating "
        "worker queues",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    ]
    errors = scan_lines(lines, "u").errors
    assert [(e.noise, e.causal) for e in errors] == [("nccl_watchdog", False), ("elastic_child_failed", False)]
    # vLLM logs it at INFO (no error line of its own); inside an error message it is still teardown.
    wording = teardown_for(lines[1], error_seen=False)
    assert wording is not None and wording.name == "vllm_parent_exited"
    # torchrun's own traceback after the worker's: the worker's error stays the cause.
    torchrun = [
        *tb("torch.OutOfMemoryError: CUDA out of memory.", prefix="[rank1]: "),
        "E1130 10:00:05.000000 123 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1)",
        "Traceback (most recent call last):",
        '  File "/usr/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "Root Cause (first observed failure):",
    ]
    real = scan_lines(torchrun, "u").errors
    assert len(real) > 1 and (real[0].error_type, real[0].causal) == ("torch.OutOfMemoryError", True)
    assert [e.noise for e in real[1:]] == ["elastic_child_failed"] * (len(real) - 1)


# -- §4 .executor_status tokens and §6 Iris spellings -------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "token", "verdict"),
    [
        ("RUNNING\n", "RUNNING", "running"),
        ("SUCCESS\n", "SUCCESS", "succeeded"),
        ("FAILED\n", "FAILED", "failed"),
        ("DEP_FAILED\n", "DEP_FAILED", "failed"),
        # legacy JSON lines: the last one wins
        ('{"status": "WAITING"}\n', "WAITING", "pending"),
        ('{"status": "WAITING"}\n{"status": "RUNNING"}\n{"status": "UNKNOWN"}\n', "UNKNOWN", "unknown"),
        ('{"status": "RUNNING"}\n{"status": "CANCELLED"}\n', "CANCELLED", "cancelled"),
        ('{"status": "RUNNING"}\nnot json\n{"status": "SUCCESS"}\n', "SUCCESS", "succeeded"),
    ],
)
def test_every_executor_status_token(body: str, token: str, verdict: str) -> None:
    assert parse_executor_status(body) == token
    assert normalize_state(token, "marin")[0] == verdict


@pytest.mark.parametrize("spelling", [6, "6", "KILLED", "killed", "JOB_STATE_KILLED", "TASK_STATE_KILLED", "Killed"])
def test_every_iris_spelling_of_killed_cancels_through_an_attempt_record(tmp_path: Path, spelling: Any) -> None:
    att = Att(
        "a00000000001",
        "2025-03-01T00:00:00Z",
        finelog=[mirror(1)],
        response={"state": "failed", "iris_job_state": spelling},
    )
    v = verdict(build(tmp_path, [att], trainer={"max_steps": 9}, marker=1, executor_status="FAILED"))
    assert (v.terminal_state, v.decided_by) == (TerminalState.cancelled, "(2)")


def test_a_legacy_cancelled_status_line_is_a_stop(tmp_path: Path) -> None:
    att = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(1)])
    run = build(tmp_path, [att], trainer={"max_steps": 9}, marker=1)
    (run / ".executor_status").write_text('{"status": "RUNNING"}\n{"status": "CANCELLED"}\n')
    v = verdict(run)
    assert (v.terminal_state, v.decided_by) == (TerminalState.cancelled, "(2)")
    assert ".executor_status: CANCELLED -> cancelled" in _reason(v, "Sources read: ")
