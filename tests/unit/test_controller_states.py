"""One table of controller state spellings: routing, verdicts and the controller adapters all read it, and an
unknown source or state fails closed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from rlcleanup.adapters.controllers.iris import state_name as iris_state_name
from rlcleanup.errors import InvalidMessage
from rlcleanup.models.controller_states import IRIS, SOURCES, UnknownStateSource, Verdict, source
from rlcleanup.models.events import JobEvent
from rlcleanup.runtime.embedded import manual_event
from rlcleanup.steps.terminal_readings import normalize_state


def _event(**kw: Any) -> JobEvent:
    fields = {"source": "iris", "job_id": "j", "run_uri": "gs://b/r/v1", "state": "RUNNING"}
    return JobEvent.model_validate(fields | {"observed_at": datetime.now(UTC)} | kw)


@pytest.mark.parametrize(("name", "table"), [(n, t) for n, t in SOURCES.items()])
def test_routing_and_verdicts_derive_from_the_same_table(name: str, table: Any) -> None:
    for spelling, verdict in table.states.items():
        assert normalize_state(spelling, name)[0] is verdict
        assert normalize_state(spelling.lower(), name)[0] is verdict
        event = _event(source=name, state=spelling)
        assert event.is_terminal is verdict.terminal, (name, spelling)


def test_iris_task_states_9_to_12_are_known_everywhere() -> None:
    expected = {9: "ASSIGNED", 10: "PREEMPTED", 11: "COSCHED_FAILED", 12: "MISSING"}
    for number, name in expected.items():
        assert IRIS.numbers[number] == name
        assert iris_state_name(number) == name  # the pre-cancel controller adapter
        assert _event(state=number).state == name  # the event
        assert normalize_state(number, "iris")[1] == name  # the verdict
    assert normalize_state(11, "iris")[0] is Verdict.failed
    assert not _event(state=10).is_terminal  # a preempted task is rescheduled


def test_unknown_source_is_rejected_with_the_known_ones_named() -> None:
    with pytest.raises(ValidationError, match="unknown job-state source 'nomad'; known sources: gcs, iris, k8s"):
        _event(source="nomad", state="FAILED")
    with pytest.raises(UnknownStateSource):
        source("nomad")
    with pytest.raises(UnknownStateSource):
        normalize_state("FAILED", "nomad")
    with pytest.raises(ValidationError) as info:
        _event(source="nomad", state="FAILED")
    error = InvalidMessage.from_validation(info.value)  # what decoding the message raises
    assert error.code == "invalid_message" and "nomad" in str(error)


@pytest.mark.parametrize(
    ("src", "state"), [("iris", "EXPLODED"), ("ray", "5"), ("skypilot", "FAILED_TYPO"), ("k8s", "")]
)
def test_unknown_state_of_a_known_source_is_not_terminal_and_has_no_verdict(src: str, state: str) -> None:
    if not state:
        with pytest.raises(ValidationError):  # an empty state is no state at all
            _event(source=src, state=state)
        return
    event = _event(source=src, state=state)
    assert event.verdict is Verdict.unknown and not event.is_terminal


def test_absent_controller_is_terminal_for_every_source() -> None:
    for name in SOURCES:
        event = _event(source=name, state="GONE")
        assert event.is_terminal and event.controller_absent


def test_manual_run_with_a_state_pairs_it_and_without_one_gives_no_verdict() -> None:
    """`rlcleanup run --state SUCCEEDED` is routed with that verdict; a bare manual run is ended, no verdict."""
    given = manual_event("/runs/x/v1", "SUCCEEDED")
    assert given.is_terminal and given.controller_state == "SUCCEEDED"
    bare = manual_event("/runs/x/v1")
    assert bare.is_terminal and bare.controller_state is None
