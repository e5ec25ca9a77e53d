"""What is still open on a run, derived from the record (pure): wrap-up lists the work, every applied grant
re-derives it, so remaining work shrinks as grants are used and the record closes (`complete`) when no authority
work is left.

Two kinds of item: a person's judgement (diagnose a failure, confirm an indeterminate end, an unsafe resume,
expired checkpoints) is listed but never holds the record open; authority work (publish/hand off, register,
reclaim) is what `awaiting_authority` waits for, and each item closes when a grant for it was used.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from rlcleanup.models.record import AuthorityAction, Candidate, ResumeSafety
from rlcleanup.models.vocab import CandidateState, RecordStatus, TerminalState
from rlcleanup.steps.expiry import has_deadline

# Outcome states (AuthorityAction.state) that mean the action was carried out.
PUBLISHED = {"published", "handed_off"}
REGISTERED = {"registered", "not_applicable"}
RECLAIMED = {"reclaimed"}

PUBLISH_ITEM = "hand off / publish: needs an explicit publish or handoff grant (destination, visibility)"
REGISTER_ITEM = "register: needs a register grant for the selected artifact"
RECLAIM_ITEM = "reclaim: needs a separate reclaim grant, only after the destination is verified"
SELECTION_PREFIX = "selection unresolved:"
NEEDS_PERSON_PREFIX = "needs person: "  # a person item without a deadline that still makes the record needs_person
PREVIEW_PREFIX = "preview a publish:"  # the exact command for the person who chooses; a used publish closes it
DESTINATION_PLACEHOLDER, KEY_PLACEHOLDER = "<destination>", "<key id>"
AUTHORITY_ITEMS = (PUBLISH_ITEM, REGISTER_ITEM, RECLAIM_ITEM)
EXPORT_JOB_PREFIX = "export job "  # an export grant's submitted job (authority/export.py); re-derived from the grants


@dataclass(frozen=True)
class Remaining:
    items: list[str]

    @property
    def authority_open(self) -> int:
        return sum(1 for item in self.items if item in AUTHORITY_ITEMS)

    @property
    def status(self) -> RecordStatus:
        """A deadline a person must meet (steps/expiry.py), or a `needs person:` item (a Hub repo the run published
        itself with problems: authority/hub_audit.py) comes first: `needs_person`, which grants still act on
        (authority/ledger.py); then open authority work; else complete."""
        if has_deadline(self.items) or any(i.startswith(NEEDS_PERSON_PREFIX) for i in self.items):
            return RecordStatus.needs_person
        return RecordStatus.awaiting_authority if self.authority_open else RecordStatus.complete


def derive_remaining(
    *,
    terminal_state: TerminalState | None,
    selection_status: str | None,
    candidates: Iterable[Candidate],
    resume: ResumeSafety | None,
    registers: bool,
    actions: Iterable[AuthorityAction] = (),
    by_design: str | None = None,
    notes: Iterable[str] = (),
    run_id: str | None = None,
    suggested_step: int | None = None,
) -> Remaining:
    """Wrap-up's full list. `by_design`: why a run has no export candidates on purpose (generation-only,
    metrics mode); `notes`: further person items wrap-up found in the layout (e.g. expired checkpoints)."""
    candidates = list(candidates)
    valid = [c.step for c in candidates if c.valid]
    items: list[str] = []
    if terminal_state is TerminalState.failed:
        items.append("diagnose the first causal error before any relaunch")
    if terminal_state is TerminalState.indeterminate:
        items.append("terminal state is indeterminate: a person must confirm how the run ended")
    items.extend(notes)
    if selection_status != "selected":
        if valid:
            items.append(f"{SELECTION_PREFIX} choose among valid candidates {valid} (no declared policy applied)")
            if run_id is not None:
                items.append(publish_preview_item(run_id, suggested_step if suggested_step in valid else valid[-1]))
        elif by_design is not None:
            items.append(f'no export candidates by design: {by_design} (docs/run-layouts.md, "Marin steps")')
        else:
            items.append("no valid export candidate: nothing can be handed off")
    if resume is not None and not resume.safe and by_design is None:
        items.append("resume is unsafe from the latest checkpoint: " + "; ".join(resume.reasons[:3]))
    if valid:
        items.append(PUBLISH_ITEM)
        if registers:
            items.append(REGISTER_ITEM)
        items.append(RECLAIM_ITEM)
    owed = [c.step for c in candidates if c.state in (CandidateState.convertible, CandidateState.partial)]
    return still_open(items, actions, owed)


def publish_preview_command(run_id: str, step: int) -> str:
    """The `grant` dry run a person pastes (cli/authority.py `grant`): nothing is signed or copied by it."""
    return (
        f"rlcleanup grant {shlex.quote(run_id)} --action publish --step {step} "
        f"--destination {DESTINATION_PLACEHOLDER} --key {KEY_PLACEHOLDER} --dry-run"
    )


def publish_preview_item(run_id: str, step: int) -> str:
    """No approver or destination is known when wrap-up runs: the command names them as placeholders."""
    return (
        f"{PREVIEW_PREFIX} `{publish_preview_command(run_id, step)}` (fill in {DESTINATION_PLACEHOLDER}, a path under "
        f"your approver prefix, and {KEY_PLACEHOLDER}, your approver id; step {step} is the best by metric, a "
        "suggestion)"
    )


def still_open(items: Iterable[str], actions: Iterable[AuthorityAction], owed: Collection[int] = ()) -> Remaining:
    """The items no used grant has closed. A used publish/hand-off names its step: the person chose, so it also
    closes an unresolved selection."""
    done = {a.state for a in actions if a.refusal is None}
    closed: set[str] = set()
    if done & PUBLISHED:
        closed.add(PUBLISH_ITEM)
    if done & REGISTERED:
        closed.add(REGISTER_ITEM)
    if done & RECLAIMED:
        closed.add(RECLAIM_ITEM)
    published = bool(done & PUBLISHED)
    chose = (SELECTION_PREFIX, PREVIEW_PREFIX)
    kept = [i for i in items if i not in closed and not (published and i.startswith(chose)) and not is_export_job(i)]
    jobs = [a for a in actions if a.export_job is not None and a.refusal is None and a.step in owed]
    return Remaining(kept + [export_job_item(a) for a in jobs])


def export_job_item(action: AuthorityAction) -> str:
    """An export grant's job, while its step's export is still owed (`owed`: the convertible and partial steps):
    the sweep follows it (authority/export_follow.py), and once it ends with a valid export the item is gone with
    the owed one; a job that ended without one says so, and the owed item names the grant that retries it."""
    job = action.export_job
    assert job is not None
    submitted = f"{EXPORT_JOB_PREFIX}{job.job_id} submitted to {job.controller} for global_step_{action.step}"
    if job.ended_at is None:
        return f"{submitted} (grant {action.grant_id}): the sweep follows it and validates the new export when it ends"
    exit_text = f"exit {job.exit_code}" if job.exit_code is not None else "no exit code"
    return (
        f"{submitted} (grant {action.grant_id}) ended {job.state} ({exit_text}) without a valid export: the run's "
        "errors hold its message and log tail; the export is still owed"
    )


def is_export_job(item: str) -> bool:
    return item.startswith(EXPORT_JOB_PREFIX)
