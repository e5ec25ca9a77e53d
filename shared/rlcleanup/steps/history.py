"""Learning across runs: a failed run's class and signature, the other runs that died the same way (before it and
after it, ties in one second ordered by run id), and what fixed them (docs/failures.md).

Everything here reads the record store through the `RunRecords` port, by its indexed lookups only
(`runs_where`: signature, experiment), each bounded: a run's history costs 2 + FIX_LOOKUPS queries however many
records the store holds. A run's resolved configuration is kept flattened beside its record (the auxiliary
document `run_configs/{run_id}`, written at wrap-up), so what changed between a failed run and the run that later
completed is a key-by-key diff (`formats/config_diff.py`) that needs no access to either run's bucket.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import Field

from rlcleanup.formats.config import get
from rlcleanup.formats.config_diff import diff_flat, flatten_config
from rlcleanup.models.documents import Document
from rlcleanup.models.failures import ConfigChange, KnownFix, SimilarRun
from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import TerminalState
from rlcleanup.ports.collections import RUN_CONFIGS, Documents
from rlcleanup.ports.records import RunRecords
from rlcleanup.steps.failure_rules import classify_failure
from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.signature import signature
from rlcleanup.uris import basename, parent

SIMILAR_LIMIT = 20  # runs listed per record on each side (before, after), newest first
TIE_WINDOW = timedelta(seconds=1)  # the "before" lookup reaches past this run's end: its own second is all read
FIX_LOOKUPS = 5  # of those, how many get a "what fixed it" lookup (one query each)
LATER_RUNS = 50  # an experiment's runs read to find the first completed one after a failure
MAX_CHANGES = 20  # changed keys kept per fix
MAX_CONFIG_CHARS = 512 * 1024
SCREENED = 1  # a kept configuration screened for credentials (authority/config_screen.py); others are not shown
LAYOUT_D_PARENT = "skyrl"  # users/<user>/skyrl/<job>: the directory above a Layout D run names no experiment  # a kept configuration stays well inside a Firestore document (1 MiB)


def experiment_of(layout: RunLayout) -> str | None:
    """The experiment a run belongs to across its runs. Layout A names it: `<experiment>/<version>`, one version
    per run (the id admission reads off the location, `steps/facts.location_run_id`). Elsewhere (Layout D's
    `users/<user>/skyrl/<job>`, one job per run; Layout C) SkyRL's `trainer.project_name/trainer.run_name`."""
    above = basename(parent(layout.run_uri))
    if layout.kind == "A" and above and above != LAYOUT_D_PARENT:
        return above
    project, name = get(layout.skyrl, "trainer.project_name"), get(layout.skyrl, "trainer.run_name")
    if isinstance(name, str) and name.strip():
        return f"{project}/{name}" if isinstance(project, str) and project.strip() else name
    return None


def failure_fields(
    record: CompletionRecord, layout: RunLayout, rewards: Mapping[int, float] | None = None
) -> dict[str, Any]:
    """The record's class, deciding evidence, signature and experiment (wrap-up)."""
    words: list[tuple[str, str | None]] = [(a.failure, None) for a in record.chain.attempts if a.failure]
    words += [(s.failure, s.uri) for s in record.chain.steps if s.failure]
    if record.controller_state:
        words.append((record.controller_state, None))
    failure_class, evidence = classify_failure(
        record.terminal_state, record.first_failure_cause, words, record.earliest_symptom, rewards
    )
    sig, basis = signature(record.first_failure_cause) if record.first_failure_cause else (None, None)
    return {
        "failure_class": failure_class.value if failure_class else None,
        "failure_evidence": evidence.model_dump(mode="json") if evidence else None,
        "signature": sig,
        "signature_basis": basis.model_dump(mode="json") if basis else None,
        "experiment": experiment_of(layout),
    }


def own_locations(flat: Mapping[str, str], roots: tuple[str | None, ...]) -> dict[str, str]:
    """Values with the run's own locations (its run root, its temp root, its version's path segment) replaced by
    a token: every run writes its checkpoints under its own root, and that is no change a person made."""
    version = basename(roots[0] or "")
    out = {}
    for key, value in flat.items():
        for root in (r.rstrip("/") for r in roots if r):
            value = value.replace(root, "<run root>")
        if version and "/" in value:
            value = value.replace(f"/{version}/", "/<version>/").replace(f'/{version}"', '/<version>"')
        out[key] = value
    return out


# Flattened configuration -> (what may be kept, the findings as `key: rule`): the secret rules of published text
# (authority/config_screen.screen_config, passed in by the wiring: policy layers below authority cannot import it).
ConfigScreen = Callable[[Mapping[str, str]], tuple[dict[str, str], list[str]]]


class ConfigKey(Document):
    key: str
    value: str


class KeptConfig(Document):
    """run_configs/{run_id}: the run's configuration, flattened, screened and bounded."""

    run_id: str
    keys: list[ConfigKey] = Field(default_factory=list)
    truncated: bool = False
    screened: int | None = None  # SCREENED once screened for credentials; a document from before is never shown
    withheld: list[str] = Field(default_factory=list)  # the findings, `key: rule`


def _kept_configs(records: RunRecords) -> Documents[KeptConfig]:
    return RUN_CONFIGS.bind(records, KeptConfig)


def keep_config(records: RunRecords, record: CompletionRecord, config: Mapping[str, Any], screen: ConfigScreen) -> None:
    """Keep the run's resolved configuration flattened (`run_configs/{run_id}`), its own locations tokenised,
    screened (a value a secret rule flags or whose key names a credential is kept as its rule, never its value),
    bounded in size."""
    screened, withheld = screen(own_locations(flatten_config(config), (record.run_uri, record.temp_root)))
    flat = screened
    keys: list[ConfigKey] = []
    used = 0
    for key, value in flat.items():
        used += len(key) + len(value)
        if used > MAX_CONFIG_CHARS:
            break
        keys.append(ConfigKey(key=key, value=value))
    doc = KeptConfig(
        run_id=record.run_id,
        keys=keys,
        truncated=used > MAX_CONFIG_CHARS,
        screened=SCREENED,
        withheld=withheld[: MAX_CHANGES * 5],
    )
    _kept_configs(records).put(record.run_id, doc)


def kept_config(records: RunRecords, run_id: str) -> dict[str, str] | None:
    """The kept configuration; None when none was kept, or it was kept before configurations were screened (its
    values may hold credentials: never shown)."""
    try:
        doc = _kept_configs(records).get(run_id)
    except ValueError:  # not a kept configuration as this version writes one: nothing to compare, never shown
        return None
    if doc is None or doc.screened != SCREENED:
        return None
    return {k.key: k.value for k in doc.keys}


def known_fix(records: RunRecords, failed: CompletionRecord) -> KnownFix | None:
    """The first run of the failed run's experiment that completed after it, and the configuration keys it changed."""
    if failed.experiment is None or failed.ended_at is None:
        return None
    later = [
        r
        for r in records.runs_where("experiment", failed.experiment, limit=LATER_RUNS)
        if r.ended_at is not None and r.ended_at > failed.ended_at and r.terminal_state is TerminalState.completed
    ]
    if not later:
        return None
    fixed = min(later, key=lambda r: (r.ended_at, r.run_id))
    before, after = kept_config(records, failed.run_id), kept_config(records, fixed.run_id)
    if before is None or after is None:
        return KnownFix(completed_run_id=fixed.run_id, completed_at=fixed.ended_at, configs_compared=False)
    changed = diff_flat(before, after)
    changes = [ConfigChange(key=k, before=b, after=a) for k, b, a in changed[:MAX_CHANGES]]
    return KnownFix(
        completed_run_id=fixed.run_id,
        completed_at=fixed.ended_at,
        changes=changes,
        more_changes=max(0, len(changed) - MAX_CHANGES),
    )


def run_order(run: CompletionRecord) -> tuple[datetime, str]:
    """The order runs ended in: by `ended_at`, then, for runs that ended at the same instant (a sweep's ranks dying
    of one OOM in one second), by run id, so both runs of a tie agree which came first, on every store (the order is
    taken here, not from a store's sort)."""
    ended = run.ended_at or datetime.max.replace(tzinfo=UTC)
    return (ended if ended.tzinfo else ended.replace(tzinfo=UTC), run.run_id)


def similar_runs(records: RunRecords, record: CompletionRecord, limit: int = SIMILAR_LIMIT) -> list[SimilarRun]:
    """Every other run whose first cause has this run's signature, before and after it (at most `limit` of each:
    the nearest before it, the newest after it), newest first, each saying whether it came before or after this
    run; the newest FIX_LOOKUPS that failed get what fixed them."""
    if record.signature is None:
        return []
    own = run_order(record)
    # Up to the end of this run's second, so runs that ended with it are among "before" or "after" by the tie rule,
    # whatever a store's order for equal times; then the newest of all, for the runs that ended after it.
    until = own[0] + TIE_WINDOW if record.ended_at is not None else None
    found = {r.run_id: r for r in records.runs_where("signature", record.signature, ended_before=until, limit=limit)}
    found |= {r.run_id: r for r in records.runs_where("signature", record.signature, limit=limit)}
    found.pop(record.run_id, None)
    ordered = sorted(found.values(), key=run_order, reverse=True)
    before = [r for r in ordered if run_order(r) < own][:limit]
    after = [r for r in ordered if run_order(r) > own][-limit:]
    out = []
    fixes = 0
    for run in sorted([*after, *before], key=run_order, reverse=True):
        failed = run.terminal_state is not TerminalState.completed
        lookup = failed and fixes < FIX_LOOKUPS
        fixes += lookup
        out.append(
            SimilarRun(
                run_id=run.run_id,
                ended_at=run.ended_at,
                came="before" if run_order(run) < own else "after",
                same_second=_same_second(run, record),
                tied=run_order(run)[0] == own[0],
                failure_class=run.failure_class,
                terminal_state=run.terminal_state.value if run.terminal_state else None,
                status=run.status.value,
                experiment=run.experiment,
                fix=known_fix(records, run) if lookup else None,
            )
        )
    return out


def _same_second(a: CompletionRecord, b: CompletionRecord) -> bool:
    if a.ended_at is None or b.ended_at is None:
        return False
    return run_order(a)[0].replace(microsecond=0) == run_order(b)[0].replace(microsecond=0)


def record_history(records: RunRecords, run_id: str, config: Mapping[str, Any], screen: ConfigScreen) -> dict[str, Any]:
    """Wrap-up's history step: keep the configuration (screened), then the record's `similar_runs` (the record's
    signature and end are already stored)."""
    record = records.get(run_id)
    if record is None:
        return {}
    keep_config(records, record, config, screen)
    return {"similar_runs": [s.model_dump(mode="json") for s in similar_runs(records, record)]}


def _value(text: str | None) -> str:
    if text is None:
        return "(absent)"
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, str) else text


def when(run: SimilarRun) -> str:
    """Where a similar run stands against this one: before or after, and how a tie was ordered."""
    if run.came is None:
        return "before"  # a record written before `came` existed listed earlier runs only
    if run.tied:
        return f"{run.came}, at the same instant (a tie is ordered by run id)"
    return f"{run.came}, in the same second" if run.same_second else run.came


def fix_sentence(run: SimilarRun) -> str:
    """One line a person reads: whether the run ended before or after this one, what happened to it, and what
    fixed it."""
    head = f"{when(run)}: run {run.run_id} failed the same way"
    if run.terminal_state == TerminalState.completed.value:
        return f"{when(run)}: run {run.run_id} hit the same error and still completed"
    fix = run.fix
    if fix is None:
        return f"{head}; no later run of its experiment has completed: nothing known about a fix"
    if not fix.configs_compared:
        return f"{head}; the next run that completed ({fix.completed_run_id}) has no kept configuration to compare"
    if not fix.changes:
        return f"{head}; the next run that completed ({fix.completed_run_id}) changed nothing in its configuration"
    shown = ", ".join(f"`{c.key}` {_value(c.before)} → {_value(c.after)}" for c in fix.changes[:3])
    more = len(fix.changes) - 3 + fix.more_changes
    tail = f" (and {more} more keys)" if more > 0 else ""
    return f"{head}; the next run that completed ({fix.completed_run_id}) changed {shown}{tail}"


def history_lines(record: CompletionRecord, found: list[SimilarRun] | None = None) -> list[str]:
    """The failure section's lines for `show`, the report and `similar`: class, signature, earlier runs."""
    runs = record.similar_runs if found is None else found
    if record.failure_class is None:
        return ["the run did not fail: no failure class, no signature"]
    ev = record.failure_evidence
    lines = [f"class: {record.failure_class.value}" + (f" (rule {ev.rule}, from the {ev.evidence})" if ev else "")]
    if ev is not None and (ev.rank is not None or ev.host or ev.evidence_uri):
        where = ", ".join(
            part
            for part in (
                f"rank {ev.rank}" if ev.rank is not None else "",
                f"host {ev.host}" if ev.host else "",
                ev.evidence_uri or "",
            )
            if part
        )
        lines.append(f"decided by: {where}")
    if record.signature is None:
        lines.append("signature: none (no first cause to fingerprint): other runs cannot be matched")
        return lines
    lines.append(f"signature: {record.signature}")
    if not runs:
        lines.append("other runs with this signature: none; nothing known")
        return lines
    before = sum(1 for run in runs if run.came != "after")
    # Listed newest first, so the last one listed ended first.
    first = "this run came first" if before == 0 else f"run {runs[-1].run_id} came first"
    lines.append(
        f"other runs with this signature: {len(runs)} ({before} before this run, {len(runs) - before} after; {first})"
    )
    lines.extend(fix_sentence(run) for run in runs)
    return lines
