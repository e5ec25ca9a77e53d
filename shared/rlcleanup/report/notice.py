"""What a person is told about a run (pure): the verdict line (report/verdict.py, the one verdict), what is needed,
by when, and the exact command, as one bounded message whose every line is neutralised.

A run is worth a message when it waits on a person: an item of remaining work (an unresolved selection, an owed
export before its checkpoint expires, a failure to diagnose, a grant to give) or a pre-cancel capture that saw a
reproducing failure nobody explained. A run with nothing left is told only when the deployment asks for completion
lines. The message's state digest covers the verdict, the needs, the deadlines and how urgent the first deadline is
(open / due soon / passed): the same state is one message, a new one (a deadline now close, a grant that closed an
item) is one more.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime, timedelta

from rlcleanup.models.notifications import MAX_NOTICE_CHARS, Notice
from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.report.verdict import build_verdict
from rlcleanup.steps.remaining import PUBLISH_ITEM, RECLAIM_ITEM, REGISTER_ITEM, SELECTION_PREFIX
from rlcleanup.textsafe import neutralise

NOTIFY_STEP = "notify"  # the step a notification failure is recorded under (never part of the state it reports)
LINE_CHARS = 500
NEEDS_SHOWN = 5
QUIET = {RecordStatus.in_progress, RecordStatus.routed}


def one_line(text: str, limit: int = LINE_CHARS) -> str:
    """`text` neutralised onto one line and cut at `limit` characters with an ellipsis (never mid-escape)."""
    line = neutralise(" ".join(text.split()), keep_newlines=False)
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def urgency(record: CompletionRecord, now: datetime, warning: timedelta) -> str:
    """How close the first deadline is: `none`, `open`, `due_soon` (within `warning`) or `passed`."""
    if not record.deadlines:
        return "none"
    first = min(d.at for d in record.deadlines)
    if first <= now:
        return "passed"
    return "due_soon" if first - now <= warning else "open"


def _unexplained(record: CompletionRecord) -> list[str]:
    return list(record.pre_cancel.unexplained_reproducing) if record.pre_cancel else []


def _command(record: CompletionRecord, signature_id: Callable[[str], str]) -> str:
    """The command for the first need (a dry run where a grant is needed: it signs nothing); `show` for a need
    only a person's judgement meets (a failure to diagnose, a deadline)."""
    run = record.run_id
    unexplained = _unexplained(record)
    if unexplained:
        return f'rlcleanup cause {run} {signature_id(unexplained[0])} --note "<why it fails>"'
    valid = [c.step for c in record.candidates if c.valid]
    selected = record.selection.step if record.selection and record.selection.status == "selected" else None
    step = selected if selected is not None else (valid[-1] if valid else None)
    first = record.remaining_work[0] if record.remaining_work else ""
    if step is not None and (first == PUBLISH_ITEM or first.startswith(SELECTION_PREFIX)):
        return f"rlcleanup grant {run} --action publish --step {step} --destination <DEST> --key <KEY> --dry-run"
    if first == REGISTER_ITEM:
        return f"rlcleanup grant {run} --action register --key <KEY> --dry-run"
    if first == RECLAIM_ITEM:
        return f"rlcleanup grant {run} --action reclaim --key <KEY> --dry-run"
    return f"rlcleanup show {run}"


def _needs(record: CompletionRecord) -> list[str]:
    needs = [f"explain reproducing failure {sig} before the cancel proceeds" for sig in _unexplained(record)]
    return needs + list(record.remaining_work)


def state_digest(record: CompletionRecord, verdict: str, how_urgent: str) -> str:
    state = {
        "verdict": verdict,
        "needs": _needs(record),
        "deadlines": sorted(f"{d.at.isoformat()} {d.item}" for d in record.deadlines),
        "urgency": how_urgent,
    }
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]


def build_notice(
    record: CompletionRecord,
    now: datetime,
    *,
    warning: timedelta,
    on_complete: bool = False,
    signature_id: Callable[[str], str] = lambda signature: "<SIGNATURE_ID>",
) -> Notice | None:
    """The message for the record's state, or None when nobody needs to be told. `signature_id`: the id
    `rlcleanup cause` takes for a reproducing failure (authority/precancel.py's, handed in by the wiring)."""
    if record.status in QUIET and not _unexplained(record):  # a live run's pre-cancel capture still speaks
        return None
    needs = _needs(record)
    if not needs and not on_complete:
        return None
    # A notification failure recorded on the run is not part of the state it reports (else recording it would
    # make a new state, and a new message about the failure to send one).
    reported = record.model_copy(update={"errors": [e for e in record.errors if e.step != NOTIFY_STEP]})
    verdict = build_verdict(reported).line
    how_urgent = urgency(record, now, warning)
    run = one_line(record.run_id, 120)
    if not needs:
        subject = f"rlcleanup: run {run} finished, nothing needs a person"
        lines = [subject, one_line(verdict), *_context(reported)]
    else:
        subject = f"rlcleanup: run {run} needs a person" + {
            "due_soon": " (deadline soon)",
            "passed": " (deadline passed)",
        }.get(how_urgent, "")
        shown = [one_line(n, 300) for n in needs[:NEEDS_SHOWN]]
        more = f" (+{len(needs) - NEEDS_SHOWN} more)" if len(needs) > NEEDS_SHOWN else ""
        lines = [subject, one_line(verdict), "needed: " + "; ".join(shown) + more, _by(record, now, how_urgent)]
        lines += _context(reported)
        lines.append("command: " + one_line(_command(record, signature_id), 300))
    text = "\n".join(lines)
    if len(text) > MAX_NOTICE_CHARS:
        text = text[: MAX_NOTICE_CHARS - 1] + "…"
    return Notice(
        run_id=record.run_id, digest=state_digest(reported, verdict, how_urgent), subject=subject[:200], text=text
    )


_URL_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/-_.~")


def _percent_encoded(path: str) -> str:
    """RFC 3986 percent-encoding of a path (what urllib.parse.quote(path, safe="/") gives; policy imports no
    urllib, pyproject's import contracts)."""
    return "".join(c if c in _URL_SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in path)


def report_link(uri: str) -> str:
    """Where a person opens the report: a gs:// object as its authenticated browser URL (storage.cloud.google.com
    serves it to whoever may read the bucket), anything else (a local path, s3://) as its location."""
    if uri.startswith("gs://"):
        return "https://storage.cloud.google.com/" + _percent_encoded(uri.removeprefix("gs://"))
    return uri


def _context(record: CompletionRecord) -> list[str]:
    """Where the run is, where its report is, and the first error's own text (issue 47: a message that names a
    failure says which)."""
    lines = ["run: " + one_line(record.run_uri, 300)]
    if record.report_uri:
        lines.append("report: " + one_line(report_link(record.report_uri), 400))
    if record.errors:
        first = record.errors[0]
        more = f" (+{len(record.errors) - 1} more)" if len(record.errors) > 1 else ""
        lines.append("error: " + one_line(f"{first.step}: {first.code}: {first.message}", 400) + more)
    return lines


def _by(record: CompletionRecord, now: datetime, how_urgent: str) -> str:
    if not record.deadlines:
        return "by: no deadline"
    first = min(d.at for d in record.deadlines)
    if how_urgent == "passed":
        return f"by: {first.isoformat(timespec='minutes')} (passed)"
    hours = (first - now).total_seconds() / 3600
    left = f"{hours:.0f} h" if hours < 72 else f"{hours / 24:.0f} days"
    return f"by: {first.isoformat(timespec='minutes')} (in {left})"
