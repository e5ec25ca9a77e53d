"""Issue 45 item 9: a run-id conflict never blocks preservation (docs/authority.md §8 P10).

A squatter declares another run's id and ends first; the real run then ends. It is processed under the id its
own location spells (hashed, since the readable one is held), with no `--run-id` (on the event path nobody is
there to pass one); the conflict is a `run_id_conflict` error on both records, each record needs a person, and the
person is told (the notification of record-ready, on the stand-in webhook)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.settings import NotifySettings, unconfigured
from servers.notify_support import control, messages, webhook_standin
from servers.webhook_standin import SLACK_PATH

DECLARED = "math-rl-completed-resumed-2026.11.30"  # both runs' records declare it


def _conflicts(record: CompletionRecord) -> list[str]:
    return [e.message for e in record.errors if e.code == "run_id_conflict"]


def _check_both(squatter: CompletionRecord, real: CompletionRecord, squatter_uri: Path, real_uri: Path) -> None:
    assert (squatter.run_id, squatter.run_uri) == (DECLARED, str(squatter_uri))
    assert real.run_id.startswith(DECLARED + "-") and len(real.run_id) == len(DECLARED) + 9  # its location's hash
    assert real.run_uri == str(real_uri) and real.preserved_locations and real.candidates  # preserved, processed
    for record in (squatter, real):
        [message] = _conflicts(record)
        assert str(squatter_uri) in message and str(real_uri) in message and real.run_id in message
        assert record.status is RecordStatus.needs_person
        assert any(i.startswith("needs person: run id") for i in record.remaining_work)


def test_the_real_run_is_preserved_under_its_location_id_through_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolated_cli_env(tmp_path, monkeypatch)
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)
    squatter = write_sample_run(tmp_path / "squatter", "completed-resumed")
    real = write_sample_run(tmp_path / "real", "completed-resumed")
    code, out, err = invoke("run", str(squatter), "--json")
    assert code == 0, err
    code, out, err = invoke("run", str(real), "--json")  # no --run-id
    assert code == 0, (out, err)
    real_record = CompletionRecord.model_validate(json.loads(out))
    code, out, err = invoke("show", DECLARED, "--json")
    assert code == 0, err
    _check_both(CompletionRecord.model_validate(json.loads(out)), real_record, squatter, real)
    # Again: the location keeps its id, and the conflict is not recorded twice.
    code, out, err = invoke("run", str(real), "--json")
    assert code == 0 and json.loads(out)["run_id"] == real_record.run_id
    assert len(_conflicts(CompletionRecord.model_validate(json.loads(out)))) == 1
    # A person's own --run-id naming the held id is still refused: the person is there to choose another.
    other = write_sample_run(tmp_path / "third", "completed-resumed")
    code, _, err = invoke("run", str(other), "--run-id", DECLARED)
    assert code == 3 and "run_id_conflict" in err


def test_on_the_event_path_both_records_need_a_person_and_a_person_is_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)
    with webhook_standin(tmp_path / "webhook") as webhook:
        control(webhook, 200, 0, reset=True)
        settings = unconfigured().model_copy(
            update={"notify": NotifySettings.model_validate({"webhook_url": webhook + SLACK_PATH})}
        )
        stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"), settings=settings)
        squatter = write_sample_run(tmp_path / "squatter", "completed-resumed")
        real = write_sample_run(tmp_path / "real", "completed-resumed")
        stack.emit(manual_event(str(squatter)))
        before = datetime.now(UTC)
        stack.emit(manual_event(str(real)))
        records = {r.run_uri: r for r in stack.ports.records.list_runs()}
        _check_both(records[str(squatter)], records[str(real)], squatter, real)
        assert records[str(squatter)].updated_at >= before
        posted = [m["body"]["text"] for m in messages(webhook)]
        for run_id in (DECLARED, records[str(real)].run_id):
            told = [t for t in posted if f"run {run_id} needs a person" in t]
            assert told and "run id" in told[-1] and "declared by two runs" in told[-1], posted
