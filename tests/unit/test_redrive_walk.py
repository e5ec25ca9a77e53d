"""The sweep's re-drive walks the topology's hops (issue 46 item 1), reading each stored plan as its model: the
first hop not done is the one re-driven, a fan-out a barrier planned one message per member without an outcome,
or, when every member is in and only its fan-in is missing, one member again (it re-tries the fan-in)."""

from __future__ import annotations

from pathlib import Path

from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore
from rlcleanup.models.plans import ValidationSet
from rlcleanup.models.record import CompletionRecord
from rlcleanup.runtime.topology import load_topology
from rlcleanup.sources.sweep import plan_redrive

KEYS = load_topology().pipeline_keys("pass:")
RECORD = CompletionRecord(run_id="r", run_uri="/runs/r", controller_state="iris:SUCCEEDED")


def _claims(tmp_path: Path, done: dict[str, dict[str, object]]) -> SqliteIdempotencyStore:
    claims = SqliteIdempotencyStore(tmp_path / "r.db")
    for key, result in done.items():
        claims.complete("r", key, result)
    return claims


def _through_capture() -> dict[str, dict[str, object]]:
    plan = {"parts": [], "dest_root": "/p/r", "preserve_root": "/p"}
    targets = ValidationSet(targets=["candidate:1", "resume"], run_uri="/runs/r", preserve_root="/p")
    log_plan = {"parts": [], "dest_root": "/p/r", "run": {"run_id": "r", "run_uri": "/runs/r", "preserve_root": "/p"}}
    return {
        "classify": {"kind": "standard"},
        "terminal-plan": log_plan,
        "terminal": {},
        "capture-plan": plan,
        "fanin:capture": targets.model_dump(mode="json"),
        "fanout:validate": targets.model_dump(mode="json"),
    }


def test_an_unclassified_run_is_redriven_by_its_event(tmp_path: Path) -> None:
    plan = plan_redrive(_claims(tmp_path, {}), RECORD, "/p", KEYS)
    assert [topic for topic, _ in plan.republish] == ["job-events"] and plan.missing == []


def test_a_classified_run_goes_on_with_the_events_verdict(tmp_path: Path) -> None:
    plan = plan_redrive(_claims(tmp_path, {"classify": {"kind": "standard"}}), RECORD, "/p", KEYS)
    [(topic, payload)] = plan.republish
    assert topic == "run-classified"
    assert payload == {
        "run_id": "r",
        "run_uri": "/runs/r",
        "preserve_root": "/p",
        "event_state": "SUCCEEDED",
        "event_source": "iris",
    }


def test_members_without_an_outcome_are_sent_again_one_each(tmp_path: Path) -> None:
    done = _through_capture() | {"validate:resume": {"ok": True}}
    plan = plan_redrive(_claims(tmp_path, done), RECORD, None, KEYS)
    assert plan.republish == [
        ("candidate-validation", {"run_id": "r", "run_uri": "/runs/r", "preserve_root": "/p", "target": "candidate:1"})
    ]


def test_every_member_in_but_no_fan_in_sends_one_member_again(tmp_path: Path) -> None:
    done = _through_capture() | {"validate:candidate:1": {"ok": True}, "validate:resume": {"ok": True}}
    plan = plan_redrive(_claims(tmp_path, done), RECORD, None, KEYS)
    assert [(topic, payload["target"]) for topic, payload in plan.republish] == [("candidate-validation", "resume")]


def test_after_the_fan_in_selection_is_redriven_without_the_event(tmp_path: Path) -> None:
    members = {"validate:candidate:1": {"ok": True}, "validate:resume": {"ok": True}}
    done = _through_capture() | members | {"fanin:validate": {}}
    plan = plan_redrive(_claims(tmp_path, done), RECORD, None, KEYS)
    assert plan.republish == [("run-selection", {"run_id": "r", "run_uri": "/runs/r", "preserve_root": "/p"})]
    done["select"] = {"status": "complete"}
    assert plan_redrive(_claims(tmp_path, done), RECORD, None, KEYS).missing[0].startswith("nothing")
