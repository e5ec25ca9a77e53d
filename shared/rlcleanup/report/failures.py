"""The report's "Seen before?" section: the failure class, the signature and the other runs that failed the same
way (before or after this one) with what fixed them (steps/history.py, docs/failures.md). A block of its own, rendered by both formats."""

from __future__ import annotations

from rlcleanup.models.record import CompletionRecord
from rlcleanup.report.document import BAD, WARN, Block, Bullets, Code, Para, Section, Table
from rlcleanup.steps.history import fix_sentence


def failure_section(r: CompletionRecord) -> Section | None:
    """None for a run that did not fail."""
    if r.failure_class is None:
        return None
    ev = r.failure_evidence
    decided = ""
    if ev is not None:
        where = [f"rank {ev.rank}" if ev.rank is not None else "", f"host {ev.host}" if ev.host else ""]
        at = ", ".join(w for w in where if w)
        decided = f" — rule `{ev.rule}`, from the {ev.evidence}" + (f" ({at})" if at else "")
    blocks: list[Block] = [Para(f"Failure class: {r.failure_class.value}{decided}", BAD)]
    if ev is not None and ev.evidence_uri:
        blocks.append(Para(f"evidence: {ev.evidence_uri}"))
    if r.signature is None:
        blocks.append(Para("No first cause to fingerprint: other runs cannot be matched.", WARN))
        return Section("Seen before?", "failures", blocks)
    basis = r.signature_basis
    rows = [["signature", r.signature]]
    if basis is not None:
        rows += [["exception", basis.error_type]]
        rows += [["our frames", ", ".join(basis.frames) or "none"], ["collective", basis.collective or "none"]]
    blocks.append(Table(["what", "value"], rows))
    if basis is not None:  # the cause section already says the message: its normalised form is a detail, folded
        blocks.append(Code(basis.message, summary="the message as the signature reads it (normalised)"))
    if not r.similar_runs:
        blocks.append(
            Para(
                "No other run had failed the same way at wrap-up: nothing known (`rlcleanup similar` asks again).", WARN
            )
        )
    else:
        blocks.append(Bullets([fix_sentence(run) for run in r.similar_runs]))
    return Section("Seen before?", "failures", blocks)
