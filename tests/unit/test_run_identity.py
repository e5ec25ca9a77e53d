"""A run's identity comes from where it lives (issue 38 item 1; issue 37 items 5 and 6; docs/authority.md §8 P3).

Two roots never share a record: a second root whose readable id is another root's gets that id plus 8 hex of its
location's hash; a declared id another root holds never blocks the run (its location's id, the conflict an error on
both records: issue 45 item 9), a requested one (`--run-id`) is refused.
A refused message never creates, binds or writes on a record; the pre-cancel capture goes through the same
admission as a job event.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_cli_operator_day import COMPLETED, _invoke, _json, _xdg  # noqa: F401 - fixture

from rlcleanup.models.events import JobEvent
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.settings import load_settings


def _undeclared(root: Path) -> Path:
    """The run with the run id taken out of its terminal.json and attempt records: its id is its location's."""
    base = root.parents[2]
    for path in base.rglob("*.json"):
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(doc, dict):
            for part in ("response", "result", ""):
                inner = doc.get(part) if part else doc
                if isinstance(inner, dict):
                    inner.pop("run_id", None)
            path.write_text(json.dumps(doc))
    return root


def test_two_roots_with_one_name_are_two_records(tmp_path: Path, _xdg: Path) -> None:  # noqa: F811
    first = _undeclared(write_sample_run(tmp_path / "big-ci", "completed-resumed"))
    second = _undeclared(write_sample_run(tmp_path / "big-large", "completed-resumed"))
    a = _json("run", str(first))
    b = _json("run", str(second))
    assert a["run_id"] == COMPLETED and a["run_uri"] == str(first)
    assert b["run_id"].startswith(COMPLETED + "-") and len(b["run_id"]) == len(COMPLETED) + 9
    assert b["run_uri"] == str(second) and b["errors"] == []
    assert _json("show", COMPLETED) == a | {"updated_at": _json("show", COMPLETED)["updated_at"]}
    assert _json("show", COMPLETED)["errors"] == []  # nothing written on the first run's record
    # Each root keeps its id: running either again prints its own stored record, never the other's.
    for root, record in ((second, b), (first, a)):
        code, out, err = _invoke("run", str(root), "--json")
        assert code == 0 and json.loads(out)["run_id"] == record["run_id"] and "already had a record" in err
    third = _undeclared(write_sample_run(tmp_path / "big-medium", "completed-resumed"))
    c = _json("run", str(third))
    assert len({a["run_id"], b["run_id"], c["run_id"]}) == 3


def test_a_declared_id_held_by_another_root_is_an_error_on_both_records_and_never_blocks_the_run(
    tmp_path: Path,
    _xdg: Path,  # noqa: F811
) -> None:
    """Issue 45 item 9: the second root is processed under the id its location spells (hashed: the readable one is
    held), the conflict is an error on both records; a person's own --run-id for a held id is still refused."""
    first = write_sample_run(tmp_path / "team-a", "completed-resumed")  # both declare the same run id
    second = write_sample_run(tmp_path / "team-b", "completed-resumed")
    a = _json("run", str(first))
    b = _json("run", str(second))
    assert b["run_id"].startswith(COMPLETED + "-") and len(b["run_id"]) == len(COMPLETED) + 9
    assert b["run_uri"] == str(second) and b["preserved_locations"]
    held = _json("show", COMPLETED)
    assert held["run_uri"] == str(first) and a["errors"] == []  # never merged: the first root keeps its record
    for record in (held, b):
        [conflict] = [e for e in record["errors"] if e["code"] == "run_id_conflict"]
        assert str(first) in conflict["message"] and str(second) in conflict["message"]
    code, out, err = _invoke("run", str(second), "--json")  # the root keeps the id it was admitted under
    assert code == 0 and json.loads(out)["run_id"] == b["run_id"]
    code, _, err = _invoke("run", str(second), "--run-id", "another")
    assert code == 3 and f"already recorded as '{b['run_id']}'" in err

    third = write_sample_run(tmp_path / "team-c", "completed-resumed")
    chosen = _json("run", str(third), "--run-id", "math-rl-team-c")
    assert chosen["run_id"] == "math-rl-team-c" and chosen["run_uri"] == str(third) and chosen["errors"] == []
    fourth = write_sample_run(tmp_path / "team-d", "completed-resumed")
    code, _, err = _invoke("run", str(fourth), "--run-id", "math-rl-team-c")  # an id another root holds
    assert code == 3 and "run_id_conflict" in err


def test_forget_frees_the_id_the_conflict_names(tmp_path: Path, _xdg: Path) -> None:  # noqa: F811
    """The conflict's fix, `forget`, really frees the id: the record goes and so does the id's binding to the first
    root, so a root declaring it later is admitted under it, and the forgotten root meets it as another's."""
    first = write_sample_run(tmp_path / "old", "completed-resumed")
    second = write_sample_run(tmp_path / "new", "completed-resumed")
    _json("run", str(first))
    located = _json("run", str(second))
    assert located["run_id"] != COMPLETED and "rlcleanup forget" in located["errors"][0]["message"]
    code, _, err = _invoke("forget", COMPLETED, "--yes")
    assert code == 0, err
    third = write_sample_run(tmp_path / "newer", "completed-resumed")
    taken = _json("run", str(third))
    assert (taken["run_id"], taken["run_uri"]) == (COMPLETED, str(third))
    assert "run_id_conflict" not in {e["code"] for e in taken["errors"]}  # (the old preserved files differ: kept)
    again = _json("run", str(first))  # the first root now meets the id as another's: its location's id
    assert again["run_id"] not in (COMPLETED, located["run_id"]) and again["run_uri"] == str(first)
    assert [e["code"] for e in again["errors"]] == ["run_id_conflict"]


@pytest.fixture
def local_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run buckets given as local directories (settings.in_run_buckets reads bucket names; the local readable
    roots are issue 37 item 14's): the admission checks compare these tests' paths on a '/' boundary."""
    from rlcleanup.runtime import admission

    def inside(uri: str, buckets: tuple[str, ...] | None) -> bool:
        return buckets is None or any(uri == b or uri.startswith(b.rstrip("/") + "/") for b in buckets)

    monkeypatch.setattr(admission, "in_run_buckets", inside)


def _stack(tmp_path: Path, **settings: Any) -> EmbeddedStack:
    return EmbeddedStack.create(
        tmp_path / "records.db",
        str(tmp_path / "preserved"),
        settings=load_settings().model_copy(update=settings),
    )


def _event(run_uri: str, *, run_id: str | None = None, intent: str | None = None) -> JobEvent:
    fields: dict[str, Any] = {"source": "iris", "job_id": "/marin/x", "run_uri": run_uri, "state": "FAILED"}
    if intent:
        fields |= {"intent": intent, "state": "RUNNING"}
    return JobEvent(**fields, run_id=run_id, observed_at=datetime.now(UTC))


def _located(stack: EmbeddedStack, uri: str) -> Any:
    [record] = [r for r in stack.ports.records.list_runs(1000) if r.run_uri == uri]
    return record


def _documents(stack: EmbeddedStack) -> dict[str, Any]:
    records = stack.ports.records
    return {
        "runs": sorted((r.run_id, r.run_uri, len(r.errors), r.status.value) for r in records.list_runs(1000)),
        "ids": records.list_docs("run_ids"),
        "locations": records.list_docs("run_locations"),
    }


@pytest.mark.parametrize(
    "hostile",
    [
        "outside",  # a URI outside the run buckets naming the victim's id
        "no-config",  # inside the buckets, no run there, naming the victim's id
        "sibling",  # a directory whose name only starts like the run bucket's
        "declares",  # a real run elsewhere in the buckets whose records declare the victim's id
    ],
)
def test_a_refused_message_never_squats_a_run_identity(tmp_path: Path, hostile: str, local_buckets: None) -> None:
    """Issue 37 item 5: whatever a refused job event names, it creates no record and binds no id; the real run,
    arriving after it, is admitted under its own id and preserved; one arriving before keeps its record as it was."""
    buckets = tmp_path / "runs"
    victim = write_sample_run(buckets / "real", "completed-resumed")
    uri = {
        "outside": str(tmp_path / "elsewhere" / "durable" / "x" / "y"),
        "no-config": str(buckets / "junk" / "durable" / "math-rl-completed-resumed" / "2026.11.30"),
        "sibling": str(write_sample_run(tmp_path / "runs-evil", "completed-resumed")),
        "declares": str(write_sample_run(buckets / "impostor", "completed-resumed")),
    }[hostile]
    Path(uri).mkdir(parents=True, exist_ok=True)
    for order in ("before", "after"):
        where = tmp_path / order
        stack = _stack(where, run_buckets=(str(buckets),))
        if order == "after":
            stack.emit(manual_event(str(victim)))
            kept = _documents(stack)
        stack.emit(_event(uri, run_id=COMPLETED))
        if order == "after" and hostile == "declares":
            # A real run elsewhere declaring the victim's id: processed under its own location's id, never merged;
            # the conflict is on both records (issue 45 item 9).
            victim_record, impostor = stack.ports.records.get(COMPLETED), _located(stack, uri)
            assert victim_record is not None and victim_record.run_uri == str(victim)
            assert victim_record.candidates and [e.code for e in victim_record.errors] == ["run_id_conflict"]
            assert impostor.run_id != COMPLETED and [e.code for e in impostor.errors] == ["run_id_conflict"]
            continue
        if order == "after":
            runs = _documents(stack)["runs"]  # no error written on the victim's record
            assert [r for r in runs if r[0] == COMPLETED] == [r for r in kept["runs"] if r[0] == COMPLETED]
            assert all(r[1] == uri for r in runs if r[0] != COMPLETED)  # at most a broken run's own record
            continue
        assert stack.ports.records.get(COMPLETED) is None or hostile == "declares"  # a broken run: its own id
        stack.emit(manual_event(str(victim)))
        record = stack.ports.records.get(COMPLETED)
        if hostile == "declares":  # the impostor ran first and holds the declared id: the victim is still preserved
            assert record is not None and record.run_uri == uri
            preserved = _located(stack, str(victim))
            assert preserved.run_id != COMPLETED and preserved.preserved_locations
            assert [e.code for e in preserved.errors] == ["run_id_conflict"] and str(victim) in preserved.errors[
                0
            ].message
            continue
        assert record is not None and record.run_uri == str(victim) and record.errors == []
        assert record.preserved_locations
    shutil.rmtree(buckets)


def test_pre_cancel_goes_through_admission(tmp_path: Path, local_buckets: None) -> None:
    """Issue 37 item 6: a pre-cancel event from another directory that declares a finished run's id changes
    nothing of that run; one outside the run buckets, or whose config names a temp root outside them, is refused
    before anything is copied; an admitted live run is captured under its own id."""
    buckets = tmp_path / "runs"
    finished = write_sample_run(buckets / "real", "completed-resumed")
    stack = _stack(tmp_path, run_buckets=(str(buckets),))
    stack.emit(manual_event(str(finished)))
    before = _documents(stack)
    preserved = Path(tmp_path / "preserved")
    files_before = sorted(p for p in preserved.rglob("*"))

    other = write_sample_run(buckets / "other-dir", "completed-resumed")  # declares the finished run's id
    outside = write_sample_run(tmp_path / "outside", "completed-resumed")
    for uri in (str(other), str(outside), str(tmp_path / "outside" / "nothing"), str(buckets) + "-evil/x"):
        stack.emit(_event(uri, run_id=COMPLETED, intent="pre_cancel"))
        assert _documents(stack) == before, uri
        assert stack.ports.records.get(COMPLETED).pre_cancel is None  # type: ignore[union-attr]
        assert sorted(p for p in preserved.rglob("*")) == files_before, uri

    live = write_sample_run(buckets / "live", "completed-resumed")
    _undeclared(live)
    config = next(p for p in live.iterdir() if p.name.startswith("resolved") or p.suffix in (".yaml", ".json"))
    stack.emit(_event(str(live), intent="pre_cancel"))
    captured = [r for r in stack.ports.records.list_runs(1000) if r.run_uri == str(live)]
    assert len(captured) == 1 and captured[0].pre_cancel is not None and captured[0].run_id != COMPLETED
    assert config.exists()
