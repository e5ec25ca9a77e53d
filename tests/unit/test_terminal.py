from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.models.controller_states import UnknownStateSource
from rlcleanup.models.vocab import TerminalState
from rlcleanup.parsing.attempt_logs import scan_attempt
from rlcleanup.steps.first_cause import find_first_error
from rlcleanup.steps.layout import discover
from rlcleanup.steps.terminal import TerminalVerdict, establish_terminal_state, step_budget
from rlcleanup.steps.terminal_readings import describe_controller, normalize_state, read_controller

P = "(skyrl_entrypoint pid=7) "


def mirror(step: int) -> str:
    return f'{P}WANDB_MIRROR kind=train step={step} metrics={{"reward/avg_raw_reward": {step / 10}, "trainer/global_step": {step}}}'


def tb(exc_line: str, prefix: str = "") -> list[str]:
    return [
        f"{prefix}Traceback (most recent call last):",
        f'{prefix}  File "/app/trainer.py", line 88, in train',
        f"{prefix}    self.step()",
        f"{prefix}{exc_line}",
    ]


@dataclass
class Att:
    attempt_id: str
    started_at: str
    finelog: list[str] = field(default_factory=list)
    workers: dict[str, list[str]] = field(default_factory=dict)
    response: dict[str, Any] = field(default_factory=dict)


def build(
    tmp: Path,
    attempts: list[Att],
    *,
    trainer: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
    marker: int | None = None,
    ckpt_steps: tuple[int, ...] = (),
    export_steps: tuple[int, ...] = (),
    executor_status: str | None = None,
    terminal_state: str | None = None,
) -> Path:
    run, temp = tmp / "run", tmp / "tmp"
    ckpt = temp / "checkpoints"
    run.mkdir(parents=True)
    ckpt.mkdir(parents=True)
    config = {
        "trainer": {"ckpt_path": str(ckpt), "train_batch_size": 4, **(trainer or {})},
        "data": data or {},
    }
    (run / "resolved-skyrl.json").write_text(json.dumps(config))
    if executor_status is not None:
        (run / ".executor_status").write_text(executor_status + "\n")
    if terminal_state is not None:
        (run / "terminal.json").write_text(
            json.dumps({"request": {}, "execution": {}, "response": {"state": terminal_state}})
        )
    if marker is not None:
        (ckpt / "latest_ckpt_global_step.txt").write_text(str(marker))
    for step in ckpt_steps:
        (ckpt / f"global_step_{step}").mkdir()
        (ckpt / f"global_step_{step}" / "trainer_state.pt").write_bytes(b"x")
    for step in export_steps:
        policy = run / "exports" / f"global_step_{step}" / "policy"
        policy.mkdir(parents=True)
        (policy / "config.json").write_text("{}")
    for att in attempts:
        adir = temp / "attempts"
        logs = adir / att.attempt_id / "logs"
        (logs / "ray_session_logs").mkdir(parents=True)
        record = {
            "request": {},
            "execution": {"started_at": att.started_at},
            "response": {"attempt_id": att.attempt_id, **att.response},
        }
        (adir / f"{att.attempt_id}.json").write_text(json.dumps(record))
        (logs / "finelog.log").write_text("\n".join(att.finelog) + "\n")
        for name, lines in att.workers.items():
            (logs / "ray_session_logs" / name).write_text("\n".join(lines) + "\n")
    return run


def verdict(run: Path, **kwargs: Any) -> TerminalVerdict:
    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(run))
    scans = [scan_attempt(storage, a) for a in layout.attempts]
    budget, how = step_budget(layout.skyrl)
    return establish_terminal_state(layout, scans, budget, budget_reason=how, **kwargs)


def said(v: TerminalVerdict, text: str) -> bool:
    return any(text in sentence for sentence in v.reasoning)


DONE = [f"{P}Reached max training steps (4)", f"{P}Saved final checkpoint.", f"{P}Training done!"]


# -- budget and controller vocabulary ---------------------------------------------------------------------------


def test_step_budget_rules() -> None:
    assert step_budget({"trainer": {"max_steps": 10}}) == (
        10,
        "trainer.max_steps = 10 (row count unknown, so the epoch total was not checked)",
    )
    rows = {"trainer": {"train_batch_size": 4, "epochs": 2}, "data": {"num_train_rows": 10}}
    assert step_budget(rows) == (6, "ceil(10 rows / train_batch_size 4) * epochs 2 = 6")
    capped = {"trainer": {"train_batch_size": 4, "epochs": 2, "max_steps": 5}, "data": {"train_rows": 10}}
    assert step_budget(capped)[0] == 5
    loose = {"trainer": {"train_batch_size": 4, "epochs": 2, "max_steps": 50}, "data": {"train_rows": 10}}
    assert step_budget(loose)[0] == 6
    value, how = step_budget({"trainer": {"train_batch_size": 4, "epochs": 1, "max_steps": -1}})
    assert value is None and how.startswith("unknown") and "data.num_train_rows" in how


@pytest.mark.parametrize(
    ("raw", "source", "expected"),
    [
        (4, "iris", "succeeded"),
        ("5", "iris", "failed"),
        ("KILLED", "iris", "cancelled"),
        (7, "iris", "failed"),
        ("UNSCHEDULABLE", "iris", "failed"),
        ("JOB_STATE_SUCCEEDED", "iris", "succeeded"),
        ("killed", "iris", "cancelled"),
        (11, "iris", "failed"),  # TaskState COSCHED_FAILED
        ("STOPPED", "ray", "cancelled"),
        ("FAILED_NO_RESOURCE", "skypilot", "failed"),
        ("CANCELLED", "skypilot", "cancelled"),
        ("Complete", "k8s", "succeeded"),
        ("Failed", "k8s", "failed"),
        ("SUCCESS", "marin", "succeeded"),
        ("DEP_FAILED", "marin", "failed"),
        ("RUNNING", "marin", "running"),
        (3, "iris", "running"),
        ("submitted", "protocol", "pending"),
        ("weird", "iris", "unknown"),
        ("CANCELLED", "iris", "unknown"),  # not an Iris spelling: no verdict, never a guess
        ("5", "ray", "unknown"),  # bare numbers mean something only from Iris
    ],
)
def test_normalize_state(raw: str | int, source: str, expected: str) -> None:
    assert normalize_state(raw, source)[0] == expected


# -- terminal-state rules --------------------------------------------------------------------------------------


def test_completed_marker_equals_budget(tmp_path: Path) -> None:
    att = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(s) for s in range(1, 5)] + DONE)
    run = build(
        tmp_path,
        [att],
        trainer={"max_steps": 4},
        marker=4,
        ckpt_steps=(4,),
        export_steps=(4,),
        executor_status="SUCCESS",
    )
    v = verdict(run)
    assert v.terminal_state == TerminalState.completed
    assert (v.step_budget, v.last_trained_step, v.last_saved_step) == (4, 4, 4)
    assert v.controller_state == "succeeded (.executor_status: SUCCESS)"
    assert said(v, "reads 4, equal to the budget 4")
    assert said(v, "An export exists at the marker")
    assert v.first_failure_cause is None
    assert [(a.attempt_id, a.first_step, a.last_step, a.state) for a in v.attempts] == [
        ("a00000000001", 1, 4, "succeeded")
    ]
    assert v.coverage.gaps == []


def test_completed_marker_budget_plus_one(tmp_path: Path) -> None:
    att = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(s) for s in range(1, 5)] + DONE)
    run = build(
        tmp_path,
        [att],
        trainer={"max_steps": 4},
        marker=5,
        ckpt_steps=(5,),
        export_steps=(5,),
        executor_status="SUCCESS",
    )
    v = verdict(run)
    assert v.terminal_state == TerminalState.completed
    assert (v.last_trained_step, v.last_saved_step) == (4, 5)
    assert said(v, "reads 5, the budget 4 + 1")


def test_marker_beyond_budget_plus_one_cannot_show_completion(tmp_path: Path) -> None:
    att = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(s) for s in range(1, 5)])
    run = build(tmp_path, [att], trainer={"max_steps": 4}, marker=9, executor_status="SUCCESS")
    v = verdict(run)
    assert v.terminal_state == TerminalState.indeterminate
    assert said(v, "beyond budget + 1")


def test_already_complete_resume_tail(tmp_path: Path) -> None:
    a1 = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(s) for s in range(1, 5)])
    a2 = Att(
        "a00000000002",
        "2025-03-02T00:00:00Z",
        finelog=[f"{P}Resumed at global_step 4 >= max training steps (4); run is already COMPLETE"],
    )
    # The config gives no budget: only the trainer's own statement can show completion.
    run = build(tmp_path, [a1, a2], trainer={"epochs": 1}, marker=4, executor_status="SUCCESS")
    v = verdict(run)
    assert v.terminal_state == TerminalState.completed
    assert said(v, "already complete")
    assert v.last_trained_step == 4


def test_vanished_controller_settled_from_artifacts(tmp_path: Path) -> None:
    att = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(s) for s in range(1, 5)] + DONE)
    run = build(tmp_path / "a", [att], trainer={"max_steps": 4}, marker=4, executor_status="RUNNING")
    v = verdict(run, controller_absent=True, event_state="RUNNING", event_source="iris")
    assert v.terminal_state == TerminalState.completed
    assert said(v, "vanished") and said(v, "stale")

    # Budget reached by the marker but no "Training done!": indeterminate.
    att2 = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(s) for s in range(1, 5)])
    run2 = build(tmp_path / "b", [att2], trainer={"max_steps": 4}, marker=4, executor_status="RUNNING")
    v2 = verdict(run2, controller_absent=True)
    assert v2.terminal_state == TerminalState.indeterminate
    assert said(v2, "'Training done!'")

    # Short of the budget with a causal error and no verdict: still indeterminate, the error is reported.
    att3 = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(1), *tb("ValueError: bad batch")])
    run3 = build(tmp_path / "c", [att3], trainer={"max_steps": 4}, marker=1)
    v3 = verdict(run3, controller_absent=True)
    assert v3.terminal_state == TerminalState.indeterminate
    assert v3.controller is None
    assert v3.first_failure_cause is not None and v3.first_failure_cause.error_type == "ValueError"


def test_preempted_then_resumed_with_overlapping_step(tmp_path: Path) -> None:
    a1 = Att(
        "a00000000001",
        "2025-03-01T00:00:00Z",
        finelog=[
            f"{P}No checkpoint found, starting training from scratch",
            *[mirror(s) for s in (1, 2, 3)],
            f"{P}Successfully saved checkpoint for global_step_2 to: /t/checkpoints/global_step_2",
            "Worker rank 0 received signal 15",
            *tb("KeyboardInterrupt"),
        ],
        response={"state": "failed", "iris_job_id": "/u/job-1"},
    )
    a2 = Att(
        "a00000000002",
        "2025-03-01T06:00:00Z",
        finelog=[
            f"{P}Successfully loaded complete checkpoint state from global_step_2",
            *[mirror(s) for s in range(3, 7)],
            f"{P}Reached max training steps (6)",
            f"{P}Training done!",
        ],
        response={"state": "succeeded", "iris_job_id": "/u/job-2"},
    )
    run = build(tmp_path, [a1, a2], trainer={"max_steps": 6}, marker=6, ckpt_steps=(6,), executor_status="SUCCESS")
    v = verdict(run)
    assert v.terminal_state == TerminalState.completed
    assert v.first_failure_cause is None
    assert [(a.job_id, a.first_step, a.last_step, a.state) for a in v.attempts] == [
        ("/u/job-1", 1, 3, "failed"),
        ("/u/job-2", 3, 6, "succeeded"),
    ]
    assert [(o.step, o.kept_attempt, o.later_attempt) for o in v.stitched.overlaps] == [
        (3, "a00000000001", "a00000000002")
    ]
    assert (v.coverage.first_step, v.coverage.last_step, v.coverage.gaps) == (1, 6, [])


def _failed_chain(tmp: Path) -> Path:
    a1 = Att(
        "a00000000001",
        "2025-03-01T00:00:00Z",
        finelog=[
            "2025-03-01T01:00:00Z " + mirror(1),
            "2025-03-01T01:00:09Z [rank1]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout",
            "2025-03-01T01:00:10Z Traceback (most recent call last):",
            '  File "/app/x.py", line 1, in f',
            "AssertionError: loss is nan",
            *tb("torch.distributed.DistBackendError: NCCL communicator was aborted on rank 1."),
        ],
        workers={
            "worker-3.err": [
                "2025-03-01T01:00:01Z starting",  # 1
                "2025-03-01T01:00:02Z " + mirror(2),  # 2
                *tb("ValueError: reward tensor has shape (4,), expected (8,)", "2025-03-01T01:00:03Z "),  # 3-6
            ]
        },
    )
    a2 = Att(
        "a00000000002",
        "2025-03-01T02:00:00Z",
        finelog=[
            f"{P}Successfully loaded complete checkpoint state from global_step_1",
            *tb("ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task."),
        ],
    )
    a3 = Att(
        "a00000000003",
        "2025-03-01T03:00:00Z",
        finelog=[*tb("ray.exceptions.ActorDiedError: The actor died because its worker process has died")],
    )
    return build(tmp, [a1, a2, a3], trainer={"max_steps": 4}, marker=1, executor_status="FAILED")


def test_failed_in_link_one_of_three_with_noise_after(tmp_path: Path) -> None:
    v = verdict(_failed_chain(tmp_path), event_state="5", event_source="iris")
    assert v.terminal_state == TerminalState.failed
    assert v.controller_state == "failed (iris event: FAILED)"
    cause = v.first_failure_cause
    assert cause is not None
    # The worker traceback (01:00:03) precedes the causal-looking finelog traceback (01:00:10) by timestamp.
    assert (cause.attempt_id, cause.error_type, cause.line) == ("a00000000001", "ValueError", 3)
    assert cause.source_uri.endswith("ray_session_logs/worker-3.err")
    assert cause.message == "reward tensor has shape (4,), expected (8,)"
    assert cause.traceback.splitlines()[-1].startswith("ValueError: reward tensor")
    assert said(v, "First causal error: ValueError")


def test_all_teardown_gives_no_cause_and_quotes_the_earliest_symptom_in_file_order(tmp_path: Path) -> None:
    att = Att(
        "a00000000001",
        "2025-03-01T00:00:00Z",
        finelog=["Worker rank 2 received signal 15"],
        workers={"worker-0.err": tb("KeyboardInterrupt")},
    )
    run = build(tmp_path / "a", [att], trainer={"max_steps": 4}, marker=None)
    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(run))
    scans = [scan_attempt(storage, a) for a in layout.attempts]
    first = find_first_error(scans)
    assert first is not None and not first.causal  # every error is teardown: only a symptom, never the cause
    symptom = first.cause()
    assert (symptom.error_type, symptom.line) == ("signal", 1)
    assert symptom.source_uri.endswith("finelog.log")

    v = verdict(run, event_state="FAILED", event_source="ray")
    assert v.terminal_state == TerminalState.failed
    assert v.first_failure_cause is None
    assert v.first_failure_reason == "no_causal_error_found"
    assert v.earliest_symptom is not None and v.earliest_symptom.error_type == "signal"
    assert said(v, "No causal error was found (no_causal_error_found)")


def test_controller_failed_but_budget_reached_is_completed(tmp_path: Path) -> None:
    a1 = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(s) for s in range(1, 5)] + DONE)
    # A redundant tail attempt that errors after the budget was already reached.
    a2 = Att("a00000000002", "2025-03-02T00:00:00Z", finelog=tb("RuntimeError: CUDA error: device-side assert"))
    run = build(tmp_path, [a1, a2], trainer={"max_steps": 4}, marker=4, executor_status="FAILED")
    v = verdict(run, event_state=5, event_source="iris")
    assert v.terminal_state == TerminalState.completed
    assert said(v, "the controller's verdict is overridden")
    assert said(v, "did not stop the chain from completing the budget")
    assert v.first_failure_cause is None


def test_controller_success_but_budget_not_reached(tmp_path: Path) -> None:
    att = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(1), mirror(2)])
    run = build(tmp_path / "a", [att], trainer={"max_steps": 4}, marker=2, executor_status="SUCCESS")
    v = verdict(run)
    assert v.terminal_state == TerminalState.indeterminate
    assert said(v, "reads 2 (the budget is 4)") and said(
        v, "Budget: the durable outputs do not show the budget 4 reached"
    )
    assert said(v, "controller reported success but the durable outputs do not show the budget 4 reached")

    att2 = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(1), *tb("ValueError: x")])
    v2 = verdict(build(tmp_path / "b", [att2], trainer={"max_steps": 4}), event_state="SUCCEEDED", event_source="ray")
    assert v2.terminal_state == TerminalState.failed
    assert said(v2, "No readable commit marker")
    assert v2.first_failure_cause is not None and v2.first_failure_cause.error_type == "ValueError"


def test_cancelled_and_killed_after_a_causal_error(tmp_path: Path) -> None:
    att = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(1), "Worker rank 0 received signal 15"])
    v = verdict(build(tmp_path / "a", [att], trainer={"max_steps": 4}, marker=1), event_state=6, event_source="iris")
    assert v.terminal_state == TerminalState.cancelled
    assert v.controller_state == "cancelled (iris event: KILLED)"
    assert v.first_failure_cause is None

    att2 = Att(
        "a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(1), *tb("torch.OutOfMemoryError: CUDA out of memory")]
    )
    v2 = verdict(
        build(tmp_path / "b", [att2], trainer={"max_steps": 4}, marker=1),
        event_state="CANCELLED",
        event_source="skypilot",
    )
    # run-layout-v2.md §6 rule (2): a stop wins over the error before it; the error is still reported.
    assert v2.terminal_state == TerminalState.cancelled
    assert said(v2, "Rule (2) of the terminal-state rules in docs/run-layouts.md decided")
    assert v2.first_failure_cause is not None and v2.first_failure_cause.error_type == "torch.OutOfMemoryError"

    # A causal error a later attempt trained past does not turn a later kill into a failure.
    b1 = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(1), *tb("ValueError: flaky")])
    b2 = Att("a00000000002", "2025-03-02T00:00:00Z", finelog=[mirror(2), mirror(3)])
    v3 = verdict(
        build(tmp_path / "c", [b1, b2], trainer={"max_steps": 9}, marker=3), event_state="STOPPED", event_source="ray"
    )
    assert v3.terminal_state == TerminalState.cancelled


def test_unknown_budget_needs_trainer_strings(tmp_path: Path) -> None:
    att = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(s) for s in range(1, 5)])
    v = verdict(
        build(tmp_path / "a", [att], trainer={"epochs": 1}, marker=4), event_state="SUCCEEDED", event_source="ray"
    )
    assert v.step_budget is None
    assert v.terminal_state == TerminalState.indeterminate
    assert said(v, "so the marker alone cannot show completion")

    att2 = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(s) for s in range(1, 5)] + DONE)
    v2 = verdict(
        build(tmp_path / "b", [att2], trainer={"epochs": 1}, marker=4), event_state="SUCCEEDED", event_source="ray"
    )
    assert v2.terminal_state == TerminalState.completed
    assert v2.step_budget == 4
    # steps/budget.py rule (a): the trainer's own line states the budget, and the sentence says the config gave none.
    assert said(v2, "The step budget is 4: the trainer logged 'Reached max training steps (4)' at ")
    assert said(v2, "; the config gives none (unknown: ")


def test_trainer_max_disagreeing_with_config_budget_is_used(tmp_path: Path) -> None:
    att = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(s) for s in range(1, 5)] + DONE)
    run = build(
        tmp_path, [att], trainer={"epochs": 1}, data={"num_train_rows": 40}, marker=4, executor_status="SUCCESS"
    )
    v = verdict(run)  # config says ceil(40/4)*1 = 10, the trainer says 4
    assert v.terminal_state == TerminalState.completed
    assert v.step_budget == 4
    assert said(v, "disagrees with the configured budget 10")


def test_stale_running_status_with_terminal_record_uses_the_record(tmp_path: Path) -> None:
    att = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(1), *tb("ValueError: bad")])
    run = build(tmp_path, [att], trainer={"max_steps": 4}, marker=1, executor_status="RUNNING", terminal_state="failed")
    v = verdict(run)
    assert v.terminal_state == TerminalState.failed
    assert v.controller is not None and v.controller.where == "terminal.json response.state"


def test_first_causal_error_prefers_file_order_without_timestamps(tmp_path: Path) -> None:
    att = Att(
        "a00000000001",
        "2025-03-01T00:00:00Z",
        finelog=["starting", *tb("AssertionError: loss is nan")],
        workers={"worker-0.err": ["2025-03-01T00:00:01Z x", *tb("ValueError: earlier but finelog has no stamps")]},
    )
    storage = LocalStorage(checksums=False)
    layout = discover(storage, str(build(tmp_path, [att], trainer={"max_steps": 4})))
    first = find_first_error([scan_attempt(storage, a) for a in layout.attempts])
    assert first is not None and first.causal
    cause = first.cause()
    assert (cause.error_type, cause.line) == ("AssertionError", 2)
    assert cause.source_uri.endswith("/logs/finelog.log")


# -- one reading of the controller -------------------------------------------------------------------------------


def _reason(v: TerminalVerdict, start: str) -> str:
    return next(sentence for sentence in v.reasoning if sentence.startswith(start))


def test_a_failed_attempt_record_decides_rule_4_as_a_source(tmp_path: Path) -> None:
    """§6 rule (4)'s "failed attempt" is the attempt record's state, read as one of the controller sources: with no
    event and no `.executor_status`, the last attempt's record saying failed makes the run failed."""
    att = Att("a00000000001", "2025-03-01T00:00:00Z", finelog=[mirror(1)], response={"state": "failed"})
    v = verdict(build(tmp_path, [att], trainer={"max_steps": 9}, marker=1))
    assert (v.terminal_state, v.decided_by) == (TerminalState.failed, "(4)")
    decided = _reason(v, "Rule (4) of the terminal-state rules in docs/run-layouts.md decided: ")
    assert decided.endswith(" attempt a00000000001 response.state: failed -> failed.")  # after the step's name
    assert v.controller_state == "failed (attempt a00000000001 response.state: failed)"


def test_one_reading_feeds_the_rule_and_the_quoted_controller_state(tmp_path: Path) -> None:
    first = Att("a00000000001", "2025-03-01T00:00:00Z", response={"state": "failed", "iris_job_state": 5})
    second = Att("a00000000002", "2025-03-02T00:00:00Z", response={"state": "succeeded", "iris_job_state": 4})
    run = build(tmp_path, [first, second], trainer={"max_steps": 9}, executor_status="RUNNING")
    layout = discover(LocalStorage(checksums=False), str(run))
    readings = read_controller(layout, 5, "iris", controller_absent=False)
    assert [describe_controller(s) for s in readings.sources if not s.superseded] == [
        "failed (iris event: FAILED)",
        "running (.executor_status: RUNNING)",
        "succeeded (attempt a00000000002 response.state: succeeded)",
        "succeeded (attempt a00000000002 response.iris_job_state: SUCCEEDED)",
    ]
    # The superseded attempt is read once, for the rule ("KILLED anywhere"), and is never quoted as the controller.
    superseded = [s for s in readings.sources if s.superseded]
    assert [s.raw for s in superseded] == ["failed", "5"]
    assert not any(s in readings.headline for s in superseded)
    assert readings.controller is readings.sources[0]
    assert [describe_controller(s) for s in readings.disagreeing()] == [
        "succeeded (attempt a00000000002 response.state: succeeded)",
        "succeeded (attempt a00000000002 response.iris_job_state: SUCCEEDED)",
    ]

    v = verdict(run, event_state=5, event_source="iris")
    assert v.controller == readings.controller
    assert said(v, "Controller state: failed (iris event: FAILED).")
    assert said(v, "Sources read: iris event: 5 -> failed; ")  # the rule reads the same list, spelled as given


def test_an_event_without_its_source_is_refused(tmp_path: Path) -> None:
    layout = discover(LocalStorage(checksums=False), str(build(tmp_path, [], trainer={"max_steps": 9})))
    with pytest.raises(UnknownStateSource):
        read_controller(layout, "FAILED", None, controller_absent=False)
    assert read_controller(layout, "FAILED", None, controller_absent=True).sources == []  # a vanished controller
