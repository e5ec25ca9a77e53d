"""The stage table and the one barrier: a new stage is a topology entry, a row and a handler module (here: a handler
defined in the test), and the generic barrier serves it without any other edit. The table fails closed on every
mismatch with topology.yaml."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlcleanup.adapters.inprocess_bus import InProcessBus
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
from rlcleanup.errors import PermanentError
from rlcleanup.models.events import CandidateMessage, RunMessage
from rlcleanup.models.outcomes import MemberError, ValidationOutcome
from rlcleanup.models.plans import SelectionStarted, ValidationSet
from rlcleanup.models.record import CompletionRecord, ResumeSafety
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime.claims import once, stored
from rlcleanup.runtime.guard import UndeclaredPublish
from rlcleanup.runtime.handlers import dispatch
from rlcleanup.runtime.ports import Ports
from rlcleanup.runtime.stage_table import ROWS, StageRow, StageTable, UnknownEntryPoint, stage_table
from rlcleanup.runtime.stages.barrier import Gathered, advance, barrier_work, member_key, member_set_key
from rlcleanup.runtime.topology import Topology, load_topology, parse_topology

DUMMY_SET = "dummy-set"


def _raw() -> dict[str, Any]:
    text = resources.files("rlcleanup.runtime").joinpath("topology.yaml").read_text(encoding="utf-8")
    raw: dict[str, Any] = yaml.safe_load(text)
    return copy.deepcopy(raw)


def _with_dummy_stage(raw: dict[str, Any]) -> dict[str, Any]:
    """A planner that fans out members on its own topic, the members, and a barrier that sends the run on."""
    raw["project_topics"] += [
        {"name": "dummy-plans", "description": "dummy planner trigger"},
        {"name": "dummy-parts", "description": "dummy members"},
    ]
    raw["functions"] += [
        {
            "name": "dummy-planner",
            "entry_point": "dummy_planner",
            "trigger": "dummy-plans",
            "stage": "validate",
            "claim": "dummy-plan",
            "claim_label": "dummy plan",
            "publishes": ["dummy-parts", "dummy-planner-dlq"],
            "description": "plans the dummy members",
        },
        {
            "name": "dummy-member",
            "entry_point": "dummy_member",
            "trigger": "dummy-parts",
            "stage": "validate",
            "publishes": ["run-selection", "dummy-member-dlq"],
            "description": "one dummy member",
        },
    ]
    raw["fan_outs"].append(
        {
            "name": "dummy",
            "topic": "dummy-parts",
            "planned_by": ["dummy-planner"],
            "member": "dummy-member",
            "member_set": DUMMY_SET,
            "member_set_model": "ValidationSet",
            "member_key": "dummy:{target}",
            "outcome_model": "ValidationOutcome",
            "label": "dummy members",
            "set_stored_first": True,
        }
    )
    raw["barriers"].append(
        {
            "name": "dummy-done",
            "claim": "fanin:dummy",
            "label": "dummy fan-in",
            "waits_for": ["dummy"],
            "runs_in": ["dummy-member"],
            "publishes": ["run-selection"],
        }
    )
    return raw


def dummy_planner(p: Ports, msg: RunMessage, attributes: dict[str, str]) -> str:
    targets = ValidationSet(targets=["candidate:1", "candidate:2", "resume"], run_uri=msg.run_uri, preserve_root="/p")

    def plan() -> ValidationSet:
        p.claims.complete(msg.run_id, member_set_key(p, msg.scope, "dummy"), targets.model_dump(mode="json"))
        for target in targets.targets:
            member = CandidateMessage(run_id=msg.run_id, run_uri=msg.run_uri, preserve_root="/p", target=target)
            p.bus.publish("dummy-parts", member.model_dump_json().encode(), {})
        return targets

    once(p, msg.run_id, "dummy-plan", plan, model=ValidationSet)
    return "planned"


def dummy_member(p: Ports, msg: CandidateMessage, attributes: dict[str, str]) -> str:
    if msg.target == "candidate:2":

        def refuse() -> ValidationOutcome:
            raise PermanentError("corrupt_header", "the dummy refuses candidate 2")

        once(p, msg.run_id, member_key(p, msg.scope, "dummy", "candidate:2"), refuse, model=ValidationOutcome)
    safety = ResumeSafety(safe=True, from_step=1, reasons=[])
    once(
        p,
        msg.run_id,
        member_key(p, msg.scope, "dummy", msg.members[0]),
        lambda: ValidationOutcome(resume_safety=safety),
        model=ValidationOutcome,
    )
    return advance(p, msg.run_id, msg.scope, "dummy")


def failed_dummy(
    p: Ports, key: str, msg: CandidateMessage, error: PermanentError
) -> list[tuple[str, ValidationOutcome]]:
    return [(key, ValidationOutcome(ok=False, error=MemberError(code=error.code, message=str(error))))]


@barrier_work("dummy-done")
def dummy_done(p: Ports, run_id: str, scope: str, gathered: Gathered) -> SelectionStarted:
    outcomes = gathered.member_outcomes("dummy", ValidationOutcome)
    p.records.update(run_id, {"remaining_work": [f"dummy: {sum(o.ok for o in outcomes.values())} ok"]})
    message = RunMessage(run_id=run_id, run_uri="/runs/r", preserve_root="/p")
    p.bus.publish("run-selection", message.model_dump_json().encode(), {})
    return SelectionStarted()


DUMMY_TOPOLOGY = parse_topology(_with_dummy_stage(_raw()))
DUMMY_ROWS = (
    StageRow("dummy_planner", dummy_planner, RunMessage, ValidationSet),
    StageRow("dummy_member", dummy_member, CandidateMessage, failed_member=failed_dummy),
)


def _run_message() -> bytes:
    return RunMessage(run_id="r", run_uri="/runs/r", preserve_root="/p").model_dump_json().encode()


def _wired(tmp_path: Path, table: StageTable) -> tuple[Ports, InProcessBus]:
    bus = InProcessBus()
    db = tmp_path / "r.db"
    ports = Ports(storage=LocalStorage(), records=SqliteRunRecords(db), claims=SqliteIdempotencyStore(db), bus=bus)
    return ports, bus


def test_a_dummy_stage_runs_through_the_tables_alone(tmp_path: Path) -> None:
    """Rows + topology entries only: dispatch runs the new planner and members behind the publish guard, a member
    that fails for good is completed as failed by its row, and the one barrier fires once every member is in."""
    table = StageTable((*ROWS, *DUMMY_ROWS), DUMMY_TOPOLOGY)
    ports, bus = _wired(tmp_path, table)
    ports.records.create_if_absent(CompletionRecord(run_id="r", run_uri="/runs/r"))
    for name in ("dummy-planner", "dummy-member"):
        fn = table.topology.function(name)
        bus.subscribe(
            fn.trigger,
            lambda data, attrs, mid, fn=fn: dispatch(
                ports, fn.entry_point, fn.dead_letter_topic, data, attrs, message_id=mid, table=table
            ),
        )
    start = RunMessage(run_id="r", run_uri="/runs/r", preserve_root="/p")
    bus.publish("dummy-plans", start.model_dump_json().encode(), {})
    bus.drain()

    set_ = stored(ports, "r", DUMMY_SET, ValidationSet)
    assert set_ is not None and set_.member_ids == ["candidate:1", "candidate:2", "resume"]
    failed = stored(ports, "r", "dummy:candidate:2", ValidationOutcome)
    assert failed is not None and not failed.ok and failed.error is not None
    assert failed.error.code == "corrupt_header"
    assert [m.topic for m in bus.published].count("run-selection") == 1  # the barrier fired exactly once
    assert [m.topic for m in bus.published].count("dummy-member-dlq") == 1  # the refused member, parked
    record = ports.records.get("r")
    assert record is not None and record.remaining_work == ["dummy: 2 ok"]
    assert ("dummy members", "dummy:") in table.topology.progress()
    assert ("dummy fan-in", "fanin:dummy") in table.topology.progress()


def test_a_dummy_stage_publishes_only_what_its_topology_entry_declares(
    tmp_path: Path, undeclared_publishes: list[str]
) -> None:
    def strays(p: Ports, msg: RunMessage, attributes: dict[str, str]) -> str:
        p.bus.publish("record-ready", b"{}", {})
        return "published"

    rows = (*ROWS, replace(DUMMY_ROWS[0], handler=strays), DUMMY_ROWS[1])
    table = StageTable(rows, DUMMY_TOPOLOGY)
    ports, _ = _wired(tmp_path, table)
    with pytest.raises(UndeclaredPublish):
        dispatch(ports, "dummy_planner", "dummy-planner-dlq", _run_message(), {}, table=table)
    assert undeclared_publishes == ["dummy-planner -> record-ready"]
    undeclared_publishes.clear()  # refused on purpose: the suite's guard check must not fail this test


def test_a_permanent_error_in_a_pipeline_stage_fails_the_run(tmp_path: Path) -> None:
    def broken(p: Ports, msg: RunMessage, attributes: dict[str, str]) -> str:
        raise PermanentError("bad_input", "the dummy planner cannot plan this run")

    table = StageTable((*ROWS, replace(DUMMY_ROWS[0], handler=broken), DUMMY_ROWS[1]), DUMMY_TOPOLOGY)
    ports, _ = _wired(tmp_path, table)
    ports.records.create_if_absent(CompletionRecord(run_id="r", run_uri="/runs/r"))
    answer = dispatch(ports, "dummy_planner", "dummy-planner-dlq", _run_message(), {}, table=table)
    record = ports.records.get("r")
    assert answer.startswith("permanent error recorded: bad_input")
    assert record is not None and record.status is RecordStatus.failed
    assert [e.code for e in record.errors] == ["bad_input"]


def test_dispatch_hands_the_handler_its_rows_message_and_refuses_a_payload_that_is_not_one(tmp_path: Path) -> None:
    """Dispatch decodes every payload with its row's `message` (StageRow.payload): the handler gets the model, and a
    payload that does not match is refused as invalid_message before the handler runs, parked and never run."""
    seen: list[object] = []

    def planner(p: Ports, msg: RunMessage, attributes: dict[str, str]) -> str:
        seen.append(msg)
        return "seen"

    table = StageTable((*ROWS, replace(DUMMY_ROWS[0], handler=planner), DUMMY_ROWS[1]), DUMMY_TOPOLOGY)
    ports, bus = _wired(tmp_path, table)
    assert dispatch(ports, "dummy_planner", "dummy-planner-dlq", _run_message(), {}, table=table) == "seen"
    assert seen == [RunMessage(run_id="r", run_uri="/runs/r", preserve_root="/p")]

    for bad in (b"{}", b"[1]", b"not json", b'{"run_id": "r", "run_uri": 3, "preserve_root": "/p"}'):
        answer = dispatch(ports, "dummy_planner", "dummy-planner-dlq", bad, {}, table=table)
        assert answer == "permanent error recorded: invalid_message", bad
    assert len(seen) == 1  # the handler never saw the refused payloads
    assert [m.topic for m in bus.published] == ["dummy-planner-dlq"] * 4


@pytest.mark.parametrize(
    ("payload", "shape"),
    [
        ({"run_id": "r", "plan_page": 2}, "page"),
        ({"run_id": "r", "plan_page": 2, "part": {}, "dest_root": "/d"}, None),  # a part with a page number: no part
        (
            {"run_id": "r", "dest_root": "/d", "part": {"part_id": "a001-p0001", "attempt_id": "a", "uris": ["/l"]}},
            "part",
        ),
        ({"run_id": "r"}, None),  # neither: refused for what a part lacks
    ],
)
def test_a_parts_topic_payload_is_a_part_or_a_plans_continuation(payload: dict[str, Any], shape: str | None) -> None:
    """The parts topics carry two messages; the row's union (models/events.py `LogScanPartsMessage`) tells them
    apart by the rule the handler applied by hand before: a page number and no part is a continuation."""
    from rlcleanup.errors import InvalidMessage
    from rlcleanup.models.events import LogScanPartMessage, LogScanPlanPageMessage

    row = stage_table().row("scan_log_part")
    data = json.dumps(payload).encode()
    if shape is None:
        with pytest.raises(InvalidMessage):
            row.payload(data)
        return
    decoded = row.payload(data).root
    assert isinstance(decoded, LogScanPlanPageMessage if shape == "page" else LogScanPartMessage)


def test_no_stage_module_decodes_a_payload_by_hand() -> None:
    """The rows' messages are the one decoding path: a stage module that parses its payload itself would be a
    second one (and skip the row's model). Authority, notify and the sources parse foreign shapes (`bytes` rows)."""
    stages = resources.files("rlcleanup.runtime.stages")
    by_hand = [
        f"{f.name}: {line.strip()}"
        for f in stages.iterdir()
        if f.name.endswith(".py")
        for line in f.read_text(encoding="utf-8").splitlines()
        if "decode(" in line or "model_validate_json(" in line or "json.loads(" in line
    ]
    assert by_hand == []
    decoded = {row.entry_point for row in ROWS if row.message is not bytes}
    assert {"on_job_event", "scan_log_part", "capture_part", "validate_candidate", "select_candidate"} <= decoded


# ---------------------------------------------------------------- failing closed


def test_the_shipped_table_covers_every_function_once() -> None:
    table = stage_table()
    assert set(table.rows) == {fn.entry_point for fn in load_topology().functions}
    with pytest.raises(UnknownEntryPoint, match="no stage serves entry point 'nope'"):
        table.row("nope")


def test_a_function_without_a_row_or_a_row_without_a_function_is_refused() -> None:
    with pytest.raises(ValueError, match=r"functions without a row \['dummy_member', 'dummy_planner'\]"):
        StageTable(ROWS, DUMMY_TOPOLOGY)
    with pytest.raises(ValueError, match=r"rows without a function \['dummy_planner'\]"):
        StageTable((*ROWS, DUMMY_ROWS[0]), load_topology())


def test_a_member_row_needs_its_failure_outcome_and_only_members_have_one() -> None:
    with pytest.raises(ValueError, match="dummy_member must have failed_member iff it is a fan-out member"):
        StageTable((*ROWS, DUMMY_ROWS[0], replace(DUMMY_ROWS[1], failed_member=None)), DUMMY_TOPOLOGY)
    with pytest.raises(ValueError, match="dummy_planner must have failed_member iff"):
        StageTable((*ROWS, replace(DUMMY_ROWS[0], failed_member=failed_dummy), DUMMY_ROWS[1]), DUMMY_TOPOLOGY)


def test_a_result_model_goes_with_a_declared_claim() -> None:
    with pytest.raises(ValueError, match=r"dummy_planner stores a result model iff topology\.yaml names its claim"):
        StageTable((*ROWS, replace(DUMMY_ROWS[0], result=None), DUMMY_ROWS[1]), DUMMY_TOPOLOGY)


def test_a_row_whose_message_is_no_model_is_refused() -> None:
    """Dispatch decodes with the row's message: a row naming anything but a pydantic model (or `bytes`, a foreign
    shape) would hand its handler what it cannot decode, so the table refuses it when it is built."""
    rows = (*ROWS, replace(DUMMY_ROWS[0], message=dict), DUMMY_ROWS[1])
    with pytest.raises(ValueError, match="dummy_planner's message must be a pydantic model or bytes"):
        StageTable(rows, DUMMY_TOPOLOGY)


def test_a_barrier_without_its_work_is_refused() -> None:
    raw = _with_dummy_stage(_raw())
    raw["barriers"][-1]["name"] = "dummy-unworked"
    with pytest.raises(ValueError, match=r"barriers without @barrier_work \['dummy-unworked'\]"):
        StageTable((*ROWS, *DUMMY_ROWS), parse_topology(raw))


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda raw: raw["fan_outs"][-1].update(member_set_model="NoSuchPlan"), "'NoSuchPlan' is not a MemberSet"),
        (lambda raw: raw["fan_outs"][-1].update(outcome_model="RunMessage"), "'RunMessage' is not a MemberOutcome"),
        (lambda raw: raw["fan_outs"][-1].update(member_key="dummy:{a}:{b}"), "must end with one {placeholder}"),
        (lambda raw: raw["barriers"][-1].update(name="dummy"), "names used by both a fan-out and a barrier"),
    ],
)
def test_the_topology_refuses_a_contract_it_cannot_keep(change: Any, error: str) -> None:
    raw = _with_dummy_stage(_raw())
    change(raw)
    with pytest.raises(ValueError, match=error):
        parse_topology(raw)


def test_watch_progress_and_sweep_keys_come_from_the_topology() -> None:
    topology: Topology = load_topology()
    assert topology.progress() == [
        ("classify", "classify"),
        ("log-scan plan", "terminal-plan"),
        ("log-scan parts", "log-scan:"),
        ("terminal state", "terminal"),
        ("capture plan", "capture-plan"),
        ("capture parts", "capture-part:"),
        ("capture fan-in", "fanin:capture"),
        ("validation", "validate:"),
        ("validation fan-in", "fanin:validate"),
        ("selection", "select"),
    ]
    keys = topology.pipeline_keys("pass:")
    hops = [(hop.topic, hop.claims, hop.fan_ins, hop.members.name if hop.members else None) for hop in keys.hops]
    assert hops == [
        ("job-events", ("classify",), (), None),
        ("run-classified", ("terminal-plan", "capture-plan"), ("terminal", "fanin:capture"), None),
        ("candidate-validation", (), ("fanin:validate",), "validation"),
        ("run-selection", ("select",), (), None),
    ]
    assert [fan.name for fan in keys.hops[1].plans] == ["log-scan", "capture"]
    assert (keys.classify, keys.finish) == ("classify", "select")
