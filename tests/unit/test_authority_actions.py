"""authority/actions.py: every action has a handler, and one failure rule holds for all of them (a defect refuses
the grant with its cause and leaves nothing staged; a transient error propagates so the claim is released)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from authority_support import files_under, make_world
from google.api_core import exceptions as api_exceptions

from rlcleanup.authority import actions
from rlcleanup.authority import publish as publish_mod
from rlcleanup.authority.actions import ACTIONS, GrantTask, carry_out
from rlcleanup.authority.grants import Action
from rlcleanup.authority.outcome import Outcome
from rlcleanup.authority.staging import STAGING
from rlcleanup.errors import TransientError


def test_every_action_has_a_handler() -> None:
    assert set(ACTIONS) == set(Action)


def test_an_action_without_a_handler_is_refused_not_defaulted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = make_world(tmp_path)
    monkeypatch.delitem(actions.ACTIONS, Action.publish)
    applied = carry_out(w.stack.ports, GrantTask(w.grant(), "g-1", w.record, None))
    assert isinstance(applied, Outcome)
    assert (applied.state, applied.refusal and applied.refusal.value) == ("refused", "apply_failed")
    assert "no handler for action" in applied.detail
    assert files_under(w.dest_root) == []


def _scan_fails_with(error: Exception, staged: list[Path], w: Any) -> Any:
    def scan(*args: Any, **kwargs: Any) -> Any:
        staged.extend(files_under(Path(w.record.preserved_locations[0]) / STAGING))
        raise error

    return scan


def test_a_defect_after_staging_refuses_with_its_cause_and_empties_the_staging_area(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = make_world(tmp_path)
    grant = w.grant()
    staged: list[Path] = []
    monkeypatch.setattr(publish_mod, "scan_objects", _scan_fails_with(RuntimeError("injected defect"), staged, w))
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert staged, "the defect was injected before anything was staged: the test would prove nothing"
    assert action["refusal"] == "apply_failed" and action["detail"] == "RuntimeError: injected defect", action
    assert files_under(Path(w.record.preserved_locations[0]) / STAGING) == []
    assert files_under(w.dest_root) == []


@pytest.mark.parametrize(
    "error",
    [
        TransientError("store busy"),
        # a client library's own outage error is transient by error_kind, not by class: it used to refuse the grant
        api_exceptions.ServiceUnavailable("503 backend unavailable"),
        api_exceptions.TooManyRequests("429 rate limited"),
    ],
    ids=type,
)
def test_a_transient_error_propagates_for_a_redelivery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    w = make_world(tmp_path)
    staged: list[Path] = []
    monkeypatch.setattr(publish_mod, "scan_objects", _scan_fails_with(error, staged, w))
    with pytest.raises(type(error)):
        carry_out(w.stack.ports, GrantTask(w.grant(), "g-2", w.record, None))
    assert staged and files_under(w.dest_root) == []
