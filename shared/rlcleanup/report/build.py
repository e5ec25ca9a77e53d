"""Record -> Document: the verdict first, then the evidence in the order a person checks it."""

from __future__ import annotations

import json
import string
from datetime import datetime

from rlcleanup.models.record import Attempt, CompletionRecord
from rlcleanup.report.candidates import candidates_section
from rlcleanup.report.compute import compute_facts
from rlcleanup.report.document import BAD, GOOD, WARN, Block, Bullets, Code, Document, Figure, Para, Section, Table
from rlcleanup.report.failures import failure_section
from rlcleanup.report.fold import headline
from rlcleanup.report.inputs import ReportInputs
from rlcleanup.report.reasons import terminal_reasons
from rlcleanup.report.storage import storage_section
from rlcleanup.report.verdict import authority_lines, build_verdict, selection_state, summarise_steps


def _v(value: object) -> str:
    return "—" if value is None or value == "" else str(value)


def _when(value: datetime | None) -> str:
    """RFC 3339 to the second (`2026-11-30T08:00:00Z`), as the Firestore console shows the same field."""
    if value is None:
        return "—"
    text = value.isoformat(timespec="seconds")
    return text.removesuffix("+00:00") + "Z" if text.endswith("+00:00") else text


def _person(r: CompletionRecord) -> Section:
    blocks: list[Block] = [Bullets(r.remaining_work, WARN)] if r.remaining_work else [Para("Nothing.", GOOD)]
    if r.superseded_grants:  # used on an earlier record: the bytes they named are not this run's now
        blocks.append(Para("Earlier grants that no longer apply:", WARN))
        blocks.append(
            Bullets([f"{g.action} grant {g.grant_id[:16]} ({g.state}): {g.reason}" for g in r.superseded_grants], WARN)
        )
    return Section("What needs a person", "person", blocks)


def _terminal(r: CompletionRecord) -> Section:
    facts = Table(
        ["terminal state", "controller", "step budget", "last trained step", "last saved step", "record status"],
        [
            [
                _v(r.terminal_state.value if r.terminal_state else None),
                _v(r.controller_state),
                _v(r.step_budget),
                _v(r.last_trained_step),
                _v(r.last_saved_step),
                r.status.value,
            ]
        ],
    )
    blocks: list[Block] = [facts]
    reasons = terminal_reasons(r)  # as `show` words them; the first cause has its own section below
    if reasons:  # one line each, the full finding folded behind it
        blocks.append(Bullets([headline(x, r.run_uri) for x in reasons], details=reasons))
    return Section("Terminal state", "terminal", blocks)


def _cause(r: CompletionRecord) -> Section | None:
    c = r.first_failure_cause
    if c is None:
        return None
    return Section(
        "First failure cause",
        "cause",
        [
            Para(f"{c.error_type}: {c.message}", BAD),
            Para(f"attempt {_v(c.attempt_id)}, at {_relative(c.source_uri, r)}:{c.line}"),
            Code(c.traceback, summary=f"traceback ({len(c.traceback.splitlines())} lines)"),
        ],
    )


def _relative(uri: str, r: CompletionRecord) -> str:
    """A path under the run root (or beside it: the temp root shares its prefix) printed from the common prefix."""
    base = r.run_uri.rsplit("/durable/", 1)[0] + "/" if "/durable/" in r.run_uri else r.run_uri.rstrip("/") + "/"
    return uri[len(base) :] if uri.startswith(base) else uri


def _attempt_failure(r: CompletionRecord, a: Attempt) -> str:
    """The attempt's own reason; the first cause's attempt points at its section instead of repeating the text."""
    c = r.first_failure_cause
    if c is not None and c.attempt_id == a.attempt_id:
        return f"first cause: {c.error_type} (see First failure cause)"
    return _v(a.failure)


def _chain(inputs: ReportInputs, with_figure: bool) -> Section:
    r = inputs.record
    cov = r.chain.coverage
    rows = [
        [
            a.attempt_id,
            _v(a.job_id),
            _v(a.state),
            f"{_v(a.first_step)}..{_v(a.last_step)}",
            _when(a.started_at),
            _when(a.ended_at),
            _attempt_failure(r, a),
        ]
        for a in r.chain.attempts
    ]
    gaps = ", ".join(f"{a}..{b}" for a, b in cov.gaps)
    blocks: list[Block] = []
    if with_figure:
        blocks.append(
            Figure(
                f"Attempts over the step axis; checkpoints (blue), exports (purple, invalid: black X), coverage gaps "
                f"in red; {inputs.metric_name} below, metric window shaded, the selected (else the best) step starred "
                "and dashed."
            )
        )
    blocks.append(Table(["attempt", "job", "state", "steps", "started", "ended", "failure"], rows, root=r.run_uri))
    blocks.append(
        Para(
            f"Metric rows cover steps {_v(cov.first_step)}..{_v(cov.last_step)}; gaps: {gaps}"
            if cov.gaps
            else f"Metric rows cover steps {_v(cov.first_step)}..{_v(cov.last_step)} with no gap.",
            BAD if cov.gaps else GOOD,
        )
    )
    if inputs.checkpoint_steps:
        blocks.append(Para("Checkpoints preserved (listed): steps " + ", ".join(map(str, inputs.checkpoint_steps))))
    if inputs.notes:
        blocks.append(Bullets(inputs.notes, WARN))
    return Section("Chain", "chain", blocks)


def _authority(r: CompletionRecord) -> Section | None:
    """What the used grants did: where the model went, what was registered and reclaimed."""
    done = authority_lines(r)
    return Section("Authority: what was done", "authority", [Bullets(done, GOOD)]) if done else None


def _selection(r: CompletionRecord) -> Section | None:
    s, state = r.selection, selection_state(r)
    if s is None or state is None:
        return None
    head = state.text
    if state.state == "selected":
        head = f"selected: step {s.step} (runner-up {_v(s.runner_up)}, metric window {s.metric_window})"
    blocks: list[Block] = [Para(head, GOOD if state.state in {"selected", "chosen"} else WARN)]
    if s.reason:
        blocks.append(Para(s.reason))
    blocks.append(Para("Policy: " + (json.dumps(s.policy, sort_keys=True) if s.policy else "none declared")))
    if s.candidates_considered:  # their scores are in the candidates table, best first
        blocks.append(Para("Candidates considered: " + summarise_steps(s.candidates_considered)))
    return Section("Selection", "selection", blocks)


def _resume(r: CompletionRecord) -> Section | None:
    rs = r.resume_safety
    if rs is None:
        return None
    head = f"safe from step {rs.from_step}" if rs.safe else "UNSAFE"
    return Section(
        "Resume safety",
        "resume",
        [
            Para(head, GOOD if rs.safe else BAD),
            Bullets([headline(x, r.run_uri) for x in rs.reasons], details=rs.reasons),
        ],
    )


def _preserved(r: CompletionRecord) -> Section:
    rows = [["location", loc] for loc in r.preserved_locations]
    rows += [["manifest (every file there, this report included)", _v(r.manifest_uri)]]
    rows += [["stitched metrics", _v(r.metrics_uri)]]
    rows += [["evidence objects", f"{r.preserved_object_count} ({r.preserved_bytes} bytes)"]]
    return Section("Preserved evidence", "preserved", [Table(["what", "where"], rows)])


def _config(r: CompletionRecord) -> Section:
    rows = []
    if r.classification:
        rows.append(["classification", f"{r.classification.kind.value}: " + "; ".join(r.classification.evidence)])
    rows.append(["base model", _v(r.base_model)])
    if r.resolved_config:
        rows.append(["resolved config", f"{r.resolved_config.uri} (sha256 {r.resolved_config.sha256})"])
    rows += [[f"revision: {k}", v] for k, v in sorted(r.source_revision.items())]
    rows.append(["registration", _v(r.registration)])
    if r.not_applicable_evidence:
        rows.append(["not applicable", ", ".join(r.not_applicable_evidence)])
    blocks: list[Block] = [Table(["what", "value"], rows)]
    if r.launch_command:
        blocks += [Para("Launch command:"), Code(r.launch_command)]
    return Section("Configuration and revision", "config", blocks)


def _errors(r: CompletionRecord) -> Section:
    if not r.errors:
        return Section("rlcleanup errors", "errors", [Para("None.", GOOD)])
    rows = [[e.step, e.code, e.message, e.at.isoformat(timespec="seconds")] for e in r.errors]
    return Section("rlcleanup errors", "errors", [Table(["step", "code", "message", "at"], rows)])


def build_document(inputs: ReportInputs, *, with_figure: bool = True, every_row: bool = False) -> Document:
    """`every_row`: every candidate on its own row (`report --all`), no identical rows folded into ranges."""
    r = inputs.record
    sections = [
        _person(r),
        _authority(r),
        _chain(inputs, with_figure),
        _terminal(r),
        _cause(r),
        failure_section(r),
        candidates_section(r, every_row=every_row),  # report/candidates.py: one table, scores, best first
        _selection(r),
        _resume(r),
        _preserved(r),
        storage_section(r),  # report/storage.py
        _config(r),
        _errors(r),
    ]
    return Document(
        verdict=build_verdict(r),
        sections=[s for s in sections if s is not None],
        title=f"rlcleanup report: {r.run_id}",
        facts=banner_facts(
            r, record_console=inputs.record_console, compute=compute_facts(r, inputs.gpus, inputs.gpu_prices)
        ),
    )


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours < 48 else f"{hours / 24:.1f} days"


# Policy opens no connection, so not even urllib is imported here (lint-imports): a path is percent-encoded by hand.
_URL_SAFE = frozenset(string.ascii_letters + string.digits + "/-_.~=")


def _quote_path(text: str) -> str:
    return "".join(chr(b) if chr(b) in _URL_SAFE else f"%{b:02X}" for b in text.encode())


def storage_link(run_uri: str) -> str:
    """Where a person opens the run's files: a gs:// run in the Cloud Console's storage browser, any other run
    (a local path, s3://) as its own location."""
    if run_uri.startswith("gs://"):
        return "https://console.cloud.google.com/storage/browser/" + _quote_path(run_uri.removeprefix("gs://"))
    return run_uri


def banner_facts(
    r: CompletionRecord, *, record_console: str | None = None, compute: list[str] | None = None
) -> list[str]:
    """What the banner says under the verdict (issue 47): the first cause with its message (the verdict names only
    its type), when the run ended and how long it ran, from its first attempt's start, its GPU-hours and compute
    cost where the resolved configuration and a declared price give them, else "unknown" (`compute`:
    report/compute.py `compute_facts`; nothing is estimated), what its storage costs where the ledger measured it,
    and links to its files and (Firestore) its record."""
    facts: list[str] = []
    cause = r.first_failure_cause
    if cause is not None:
        message = " ".join(cause.message.split())
        facts.append(f"cause: {cause.error_type}: {message[:297] + '…' if len(message) > 300 else message}")
    if r.ended_at is not None:
        facts.append(f"ended {r.ended_at:%Y-%m-%d %H:%M} UTC")
        starts = [a.started_at for a in r.chain.attempts if a.started_at is not None]
        if starts and min(starts) < r.ended_at:
            facts.append(f"ran {_duration((r.ended_at - min(starts)).total_seconds())}")
    facts += compute or []
    ledger = r.storage_ledger
    if ledger is not None:
        facts.append(f"storage {ledger.bytes} bytes, ${ledger.monthly_usd:.2f}/month at list prices")
    facts.append(f"files: {storage_link(r.run_uri)}")
    if record_console:
        facts.append(f"record: {record_console}")
    return facts
