"""Plain-text rendering of a completion record: the verdict first, then the evidence."""

from __future__ import annotations

from rlcleanup.models.record import CompletionRecord
from rlcleanup.report.fold import clip, headline, shorten_paths
from rlcleanup.report.reasons import terminal_reasons
from rlcleanup.report.storage import ledger_lines
from rlcleanup.report.verdict import authority_lines, build_verdict, selection_state
from rlcleanup.report.which import which_lines
from rlcleanup.steps.history import history_lines


def verdict_line(r: CompletionRecord) -> str:
    """The same verdict the report, `watch` and `run` print (report/verdict.py): one function for every surface."""
    return build_verdict(r).line


def problem_codes(problems: list[str]) -> list[str]:
    """Problems are "code: detail"; the code is the contract's vocabulary word."""
    return sorted({p.split(":", 1)[0].strip() for p in problems if p})


def _short(uri: str | None, root: str) -> str:
    """Paths under the run root print relative to it: the root is on the `run` line already."""
    if not uri:
        return "?"
    prefix = root.rstrip("/") + "/"
    return uri[len(prefix) :] if uri.startswith(prefix) else uri


def _short_text(text: str, r: CompletionRecord) -> str:
    return shorten_paths(text, r.run_uri)


def _steps(first: int | None, last: int | None) -> str:
    return f"steps {first}..{last}" if first is not None and last is not None else "no steps logged"


def failure_section(r: CompletionRecord) -> list[str]:
    """Learning across runs (steps/history.py): the failure class, the signature, the other runs (before, after) and their fixes;
    nothing for a run that did not fail."""
    if r.failure_class is None:
        return []
    first, *rest = (_short_text(line, r) for line in history_lines(r))  # paths as the rest of the summary shows them
    return [f"failure        {first}", *(f"               {line}" for line in rest)]


def summary(r: CompletionRecord) -> str:  # noqa: C901 -- one optional line per record field the summary shows
    lines = [verdict_line(r), ""]
    add = lines.append
    add(f"run            {r.run_uri}")
    add(f"status         {r.status.value}")
    if r.classification:
        add(f"classification {r.classification.kind.value}: {'; '.join(r.classification.evidence[:3])}")
    if r.terminal_state:
        add(
            f"terminal state {r.terminal_state.value} (budget {r.step_budget}, last trained {r.last_trained_step}, "
            f"last saved {r.last_saved_step})"
        )
        for reason in terminal_reasons(r):  # one line each; `show --json` and the report have them in full
            add(f"  - {headline(reason, r.run_uri)}")
    if r.first_failure_cause:
        c = r.first_failure_cause
        add("first cause    " + clip(f"{c.error_type}: {c.message}", 300))
        add(f"               attempt {c.attempt_id} at {_short_text(c.source_uri, r)}:{c.line}")
    lines.extend(failure_section(r))
    if r.chain.attempts:
        cov = r.chain.coverage
        add(
            f"chain          {len(r.chain.attempts)} attempt(s), metrics {_steps(cov.first_step, cov.last_step)}, "
            f"gaps {cov.gaps or 'none'}"
        )
        for a in r.chain.attempts:
            # A preemption is a chain event (the next link resumed), not an error of the run.
            event = f" ({clip(a.failure, 120)})" if a.failure else ""
            if r.first_failure_cause and r.first_failure_cause.attempt_id == a.attempt_id:
                event = f" (first cause: {r.first_failure_cause.error_type}, above)"  # said once, on its own line
            add(f"  - {a.attempt_id} {a.state or '?'} {_steps(a.first_step, a.last_step)}{event}")
    if r.source_revision:
        add("revision       " + ", ".join(f"{k}={v}" for k, v in sorted(r.source_revision.items())))
    if r.resolved_config:
        add(f"config         {_short(r.resolved_config.uri, r.run_uri)} (sha256 {r.resolved_config.sha256[:12]}…)")
    if r.manifest_uri:
        add(f"preserved      {r.preserved_object_count} evidence objects, {r.preserved_bytes} bytes")
        add(f"manifest       {r.manifest_uri} (every file there, hashed)")
    lines += ledger_lines(r)  # the storage ledger (report/storage.py), when one was measured
    for cand in r.candidates:
        state = "valid" if cand.valid else cand.state.value.upper()
        mark = state if cand.valid else f"{state} ({', '.join(problem_codes(cand.problems)) or 'no problem code'})"
        size = f"{cand.size_label or cand.parameter_count} params" if cand.parameter_count else "size unknown"
        if cand.kind.value == "adapter":  # counted from the adapter's own tensors, not the model it adapts
            size += f" (LoRA adapter of {cand.base_model or 'an unnamed base model'})"
        add(f"candidate {cand.step:<5}{mark:8} {size}, {cand.shard_count} shard(s)")
        for problem in cand.problems:
            add(f"    ✗ {_short_text(problem, r)}")
        for warning in cand.warnings:
            add(f"    ! {warning}")
    if r.resume_safety:
        add(f"resume         {'safe' if r.resume_safety.safe else 'unsafe'}: {'; '.join(r.resume_safety.reasons)}")
    chosen = selection_state(r)
    if r.selection and chosen:
        s = r.selection
        add(
            f"selection      {chosen.text}"
            + (
                f" (runner-up {s.runner_up}, window {s.metric_window})"
                if chosen.state == "selected"
                else f": {s.reason}"
                if chosen.state != "chosen"
                else f" (no declared policy: {s.reason})"
            )
        )
    lines.extend(which_lines(r))  # every valid candidate's metric and coverage (report/which.py)
    for done in authority_lines(r):
        add(f"authority      {done}")
    if r.report_uri:
        add(f"report         {r.report_uri}")
    if r.registration:
        add(f"registration   {r.registration}")
    if r.not_applicable_evidence:
        add(f"not applicable {', '.join(r.not_applicable_evidence)}")
    for item in r.remaining_work:
        add(f"TODO           {item}")
    for gone in r.superseded_grants:  # used before a rerun or an earlier pass: its effects are not this record's
        did = f"{gone.state}" + (f" to {gone.destination}" if gone.destination else "")
        add(f"NO LONGER      {gone.action} grant {gone.grant_id[:16]} ({did}) no longer applies: {gone.reason}")
    for err in r.errors:
        add(f"ERROR          [{err.step}] {err.code}: {err.message}")
    return "\n".join(lines)
