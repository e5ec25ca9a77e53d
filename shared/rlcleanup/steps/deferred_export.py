"""Deferred HF exports (run-layout-v3.md §2): what a step with an export request, or an unfinished export, is.

Training writes `checkpoints/global_step_<N>/hf_export_request.json` (formats/export_request.py) and a separate job
converts the checkpoint into `exports/global_step_<N>/policy/` later. At a run's end a step is then one of:

- an export (validated by its format as before). An export with problems is *partial* when something says it
  was still being written: its request is not `complete` (the job that writes it never reported success), or an
  export job's staging directory lies beside it;
- nothing in `policy/` but an export job's staging directory: SkyRL's `_atomic_local_export_dir`
  (NovaSky-AI/SkyRL `skyrl/backends/skyrl_train/distributed/fsdp_strategy.py`@a956457) stages the export in
  `<parent>/.tmp-hf-export-*` and renames it to `policy/` only when complete; a job killed after one shard leaves
  the staging directory behind: a *partial* candidate, never a valid one;
- nothing at all but a request that is not `complete`: the export is owed. If the checkpoint is committed (at or
  below the marker) and complete by its format, it is *convertible*; otherwise it is invalid for what it lacks.

No convertible or partial candidate is ever `valid`: selection never picks it and a grant refuses it.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from rlcleanup.formats.checkpoints.base import Findings, Listing, list_dir
from rlcleanup.formats.export_request import COMPLETE, describe, read_request
from rlcleanup.models.record import Candidate, ExportRequestState
from rlcleanup.models.vocab import CandidateProblem as CP
from rlcleanup.models.vocab import CandidateState, problem
from rlcleanup.ports.storage import Storage, child_names
from rlcleanup.steps.layout_model import RunLayout
from rlcleanup.uris import basename, parent

STAGING_PREFIX = ".tmp-hf-export-"  # fsdp_strategy._atomic_local_export_dir's tempfile.mkdtemp prefix
EXPORT_TOOL = "cloud/iris/export_hf_checkpoint.py --request <checkpoint dir>"
KEY_PLACEHOLDER = "<key id>"
DURABLE_PLACEHOLDER = "<durable URI>"  # a prefix no lifecycle rule expires, outside the run's roots


def export_grant_command(run_id: str, step: int) -> str:
    """The export grant's dry run a person pastes (authority/export.py; docs/authority.md §9)."""
    return f"rlcleanup grant {shlex.quote(run_id)} --action export --step {step} --key {KEY_PLACEHOLDER} --dry-run"


def preserve_grant_command(run_id: str, step: int) -> str:
    """The preserve grant's dry run a person pastes before an export that cannot finish in time
    (authority/preserve.py; docs/authority.md §9): the destination is theirs to choose, durable storage."""
    return (
        f"rlcleanup grant {shlex.quote(run_id)} --action preserve --step {step} --to {DURABLE_PLACEHOLDER} "
        f"--key {KEY_PLACEHOLDER} --dry-run"
    )


def export_request(storage: Storage, layout: RunLayout, step: int) -> ExportRequestState | None:
    """The checkpoint's export request, read fresh; only for a step discovery saw one at (no blind reads)."""
    if step not in layout.export_request_steps:
        return None
    return read_request(storage, layout.checkpoint_uri(step))


def staging_listings(storage: Storage, layout: RunLayout, step: int) -> list[Listing]:
    """The non-empty `.tmp-hf-export-*` directories beside the step's `policy/` (one children listing, then one
    listing each)."""
    step_dir = parent(layout.export_uri(step))
    found = [
        list_dir(storage, uri) for uri in child_names(storage, step_dir) if basename(uri).startswith(STAGING_PREFIX)
    ]
    return [listing for listing in found if listing.objects]


def unfinished(request: ExportRequestState | None) -> bool:
    return request is not None and request.status != COMPLETE


def with_request(candidate: Candidate, request: ExportRequestState | None, staging: Iterable[Listing]) -> Candidate:
    """An export candidate with what its request and any staging directory say: an export with problems that
    was still being written is partial; a Hub destination is named (the export job publishes there itself)."""
    staged = list(staging)
    update: dict[str, object] = {"export_request": request}
    warnings = list(candidate.warnings)
    if request is not None and request.hub_repo_id:
        warnings.append(_hub_note(request))
    if not candidate.valid and (unfinished(request) or staged):
        why = describe(request) if unfinished(request) and request is not None else f"{len(staged)} staging dir(s)"
        problems = [*candidate.problems, _partial_problem(candidate.uri, why, staged)]
        update |= {"state": CandidateState.partial, "problems": problems, "digest": None}
    elif candidate.valid and unfinished(request) and request is not None:
        warnings.append(f"the export is here but its {describe(request)}: the job never reported success")
    update["warnings"] = warnings
    return candidate.model_copy(update=update)


def _partial_problem(uri: str, why: str, staged: list[Listing]) -> str:
    where = "; ".join(f"{basename(s.uri)} holds {_weights(s)}" for s in staged)
    return problem(CP.partial_export, f"{uri}: an export job stopped mid-write ({why}){'; ' + where if where else ''}")


def _weights(listing: Listing) -> str:
    shards = sum(1 for name in listing.objects if name.endswith(".safetensors"))
    config = "with config.json" if "config.json" in listing.top else "no config.json"
    return f"{len(listing.objects)} object(s) ({shards} .safetensors, {config})"


def partial_candidate(
    layout: RunLayout, step: int, request: ExportRequestState | None, staged: list[Listing]
) -> Candidate:
    """Nothing in `policy/`, an export job's staging directory beside it: partial, never valid."""
    newest = max(staged, key=lambda s: max((o.updated for o in s.objects.values() if o.updated), default=None) or 0)
    why = describe(request) if request is not None else "no export request"
    f = Findings()
    f.add(
        CP.partial_export,
        f"no export in {layout.export_uri(step)}; {basename(newest.uri)} holds {_weights(newest)} "
        f"({why}): the export job died before it renamed the staging directory into place",
    )
    f.close()
    warnings = [_hub_note(request)] if request is not None and request.hub_repo_id else []
    return Candidate(
        step=step,
        uri=newest.uri,
        state=CandidateState.partial,
        valid=False,
        problems=f.problems,
        warnings=warnings,
        total_bytes=sum(o.size for o in newest.objects.values()),
        shard_count=sum(1 for name in newest.objects if name.endswith(".safetensors")),
        export_request=request,
    )


def owed_problem(layout: RunLayout, step: int, request: ExportRequestState) -> tuple[str, str]:
    """(code, detail) for a step with a request and no export in `policy/`."""
    if request.status == COMPLETE:
        other = f" (the request names export_path {request.export_path})" if request.export_path else ""
        return (
            CP.export_not_found,
            f"the export request says complete but {layout.export_uri(step)} holds nothing{other}",
        )
    return CP.export_not_converted, f"no export yet: the checkpoint's {describe(request)}"


def owed_exports(candidates: Iterable[Candidate]) -> list[str]:
    """Remaining-work items: which exports are owed and why (one line per state, naming the steps)."""
    items: list[str] = []
    convertible = [c for c in candidates if c.state is CandidateState.convertible]
    partial = [c for c in candidates if c.state is CandidateState.partial]
    if convertible:
        owed = "; ".join(
            f"global_step_{c.step} ({describe(c.export_request)})" for c in convertible if c.export_request
        )
        items.append(
            f"export owed: {owed}: committed checkpoints whose HF export was requested but never made; "
            f"convert each ({EXPORT_TOOL}) before it can be handed off"
        )
    if partial:
        steps = "; ".join(
            f"global_step_{c.step} ({describe(c.export_request) if c.export_request else 'no export request'})"
            for c in partial
        )
        items.append(
            f"export owed: {steps}: the export job stopped mid-write (partial export, never valid); rerun the export "
            "from the checkpoint and discard the partial output"
        )
    hubs = sorted(
        {
            c.export_request.hub_repo_id
            for c in (*convertible, *partial)
            if c.export_request and c.export_request.hub_repo_id
        }
    )
    if hubs:
        items.append(
            f"an owed export's request names Hub repo(s) {hubs}: the export job publishes there itself, "
            "outside any grant"
        )
    return items


def owed_export_commands(candidates: Iterable[Candidate], run_id: str) -> list[str]:
    """For each convertible step, the export grant's command (listed after the deadlines: a notice shows those
    first, and a deadline item names the command too)."""
    return [
        f"export owed: run global_step_{c.step}'s export under a grant: `{export_grant_command(run_id, c.step)}`"
        for c in candidates
        if c.state is CandidateState.convertible
    ]


def _hub_note(request: ExportRequestState) -> str:
    return (
        f"the export request names Hub repo {request.hub_repo_id}: the export job publishes there itself, outside any "
        "grant"
    )
