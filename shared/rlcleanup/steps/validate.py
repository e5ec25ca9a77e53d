"""Step 4 (validate): export candidates and the resume point, as policy over the format registry.

The format registry (formats/checkpoints/) says which format a directory is and checks it from its listing and
headers (no tensor byte is read). This step adds what only the run can tell: the step agrees with terminal.json,
it is not past the last saved step (the marker), metrics cover it, and SkyRL's resume rules (marker, trainer
state, ckpt_interval). Every problem is "<code>: <detail>" with a code from models/vocab.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor

from rlcleanup.formats.checkpoints.base import (
    HEADER_WORKERS,
    JSON_CAP,
    CheckpointFormat,
    Findings,
    FormatKind,
    Listing,
    ReadOptions,
    UnknownFormatError,
    as_step,
    export_digest,
    list_dir,
    read_listed_json,
    size_label,
    step_ranges,
)
from rlcleanup.formats.checkpoints.registry import BUILTIN, FormatRegistry
from rlcleanup.formats.config import get
from rlcleanup.formats.model_manifest import MANIFEST_NAME, check_manifest, parse_manifest
from rlcleanup.formats.safetensors_header import DEFAULT_FIRST_BLOCK
from rlcleanup.formats.torch_pickle import pickled_global_step
from rlcleanup.formats.weight_files import has_weight_suffix
from rlcleanup.models.record import Candidate, ExportRequestState, ResumeSafety
from rlcleanup.models.vocab import CandidateProblem as CP
from rlcleanup.models.vocab import CandidateState
from rlcleanup.models.vocab import CheckpointProblem as KP
from rlcleanup.ports.storage import ObjectInfo, Storage
from rlcleanup.steps import deferred_export as deferred
from rlcleanup.steps.expiry import earliest_of
from rlcleanup.steps.layout import RunLayout
from rlcleanup.steps.receipts import checkpoint_against_receipt
from rlcleanup.steps.runtime_commits import commit_change
from rlcleanup.uris import basename

DEFAULT_CKPT_INTERVAL = 10  # SkyRL ppo_base_config default
DEFAULT_STRATEGY = "fsdp"  # SkyRL's trainer.strategy default, when the config names none
CONTRACT_EXPORT_FORMAT = "hf-safetensors"  # what run-layout.md says exports/global_step_<N>/policy/ holds
CHECKPOINT_ROLES = ("policy", "critic")


def coverage_gaps(metric_steps: Collection[int], lo: int, hi: int) -> list[tuple[int, int]]:
    """Inclusive ranges in [lo, hi] with no metric step; linear in len(metric_steps), not in hi - lo."""
    gaps: list[tuple[int, int]] = []
    cursor = lo
    for s in sorted({s for s in metric_steps if lo <= s <= hi}):
        if s > cursor:
            gaps.append((cursor, s - 1))
        cursor = s + 1
    if cursor <= hi:
        gaps.append((cursor, hi))
    return gaps


# What a publish writes at a destination itself (authority/publish.py, authority/hub_publish.py): the completion
# marker (its name anywhere, in any case), provenance and the logs folder. An export that ships one of them could
# forge a marker or provenance, or collide with ours: invalid, so never granted. (An export's own README.md is
# valid; a Hub hand-off, which writes the model card there, refuses it before any byte moves.)
MARKER_NAME = "_published.json"
RESERVED_TOP = frozenset({"provenance.json", "training_logs"})


def reserved_names(names: Collection[str]) -> list[str]:
    """The names in an export (relative to it) that a publish reserves for what it writes itself."""
    return sorted(
        name for name in names if basename(name).lower() == MARKER_NAME or name.split("/", 1)[0].lower() in RESERVED_TOP
    )


def _check_reserved_names(listing: Listing, f: Findings) -> None:
    reserved = reserved_names(listing.objects)
    if reserved:
        f.add(CP.reserved_name, f"the export ships files a publish writes itself: {reserved[:10]}")


def _check_step_against_run(layout: RunLayout, uri: str, step: int, f: Findings) -> None:
    model = get(layout.terminal or {}, "response.model")
    if isinstance(model, dict) and str(model.get("policy_export_uri", "")).rstrip("/") == uri.rstrip("/"):
        value = model.get("global_step")
        if value is not None and as_step(value) != step:
            f.add(CP.step_mismatch, f"terminal.json names this export at global_step={value!r} but the dir says {step}")


def _check_saved_and_metrics(
    layout: RunLayout, step: int, metric_steps: Collection[int] | None, step_budget: int | None, f: Findings
) -> None:
    marker = layout.marker_step
    if marker is None:
        f.warnings.append("no readable checkpoint marker: cannot tell whether this step was ever saved")
    elif step > marker:
        f.add(CP.beyond_last_saved_step, f"step {step} is past the last saved step {marker} (the marker)")
    if metric_steps is None:
        return
    hi = min(step, step_budget) if step_budget is not None else step
    lo = min(metric_steps) if metric_steps else 1
    gaps = coverage_gaps(metric_steps, lo, hi)
    if gaps:
        shown = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in gaps[:10])
        more = f" (+{len(gaps) - 10} more ranges)" if len(gaps) > 10 else ""
        f.add(CP.metric_coverage_gap, f"no metric row for steps {shown}{more} within [{lo}, {hi}]")


def validate_candidate(
    storage: Storage,
    layout: RunLayout,
    step: int,
    *,
    metric_steps: Collection[int] | None,
    step_budget: int | None,
    workers: int = HEADER_WORKERS,
    first_block: int = DEFAULT_FIRST_BLOCK,
    formats: FormatRegistry = BUILTIN,
) -> Candidate:
    """Validate `exports/global_step_<step>/policy/`; `valid` means no problem was found.

    One listing, then the detected format's checks. Files no registered export format recognises are checked as
    the contract's format (HF safetensors), which names what is missing, and the candidate's format is null.
    A step whose export is missing or broken is then read for a deferred export (steps/deferred_export.py): an
    export job's staging directory makes it partial, a checkpoint with an unfinished export request convertible.
    """
    warm = getattr(storage, "warm_reads", None)  # GCS: open the header round's connections during the listing
    if warm is not None:
        warm(workers)  # the header round reads at most `workers` objects at once
    listing = list_dir(storage, layout.export_uri(step))
    request = deferred.export_request(storage, layout, step)
    staged: list[Listing] = []
    if not listing.objects:
        staged = deferred.staging_listings(storage, layout, step)
        if staged:
            partial = deferred.partial_candidate(layout, step, request, staged)
            dies = earliest_of(o for listing in staged for o in listing.objects.values())
            return partial.model_copy(update={"expires_at": dies})
        if request is not None:
            return _owed_candidate(storage, layout, step, request, formats)
    detected = formats.detect(listing, FormatKind.export)
    fmt = detected or formats.get(CONTRACT_EXPORT_FORMAT)
    f = Findings()
    report = fmt.validate(storage, listing, step, f, ReadOptions(workers=workers, first_block=first_block))
    _check_reserved_names(listing, f)
    _check_step_against_run(layout, listing.uri, step, f)
    _check_saved_and_metrics(layout, step, metric_steps, step_budget, f)
    identity = check_model_manifest(storage, listing, f)
    f.close()
    counted = report.parameter_count
    candidate = Candidate(
        step=step,
        uri=listing.uri,
        format=detected.name if detected else None,
        kind=report.candidate_kind,
        state=CandidateState.invalid if f.problems else CandidateState.valid,
        base_model=report.base_model,
        valid=not f.problems,
        problems=f.problems,
        warnings=f.warnings,
        parameter_count=counted,
        estimated_parameter_count=report.estimated_parameter_count,
        size_label=size_label(counted) if counted is not None else None,
        total_bytes=sum(o.size for o in listing.objects.values()),
        shard_count=report.shard_count,
        expires_at=earliest_of(listing.objects.values()),
        digest=export_digest(fmt.digest_inputs(listing)),
        model_identity=identity,
    )
    if not candidate.valid and listing.objects:  # a broken export may be one an export job was still writing
        staged = deferred.staging_listings(storage, layout, step)
    if request is None and not staged:
        return candidate
    return deferred.with_request(candidate, request, staged)


def _owed_candidate(
    storage: Storage, layout: RunLayout, step: int, request: ExportRequestState, formats: FormatRegistry
) -> Candidate:
    """No export, a request: convertible when the checkpoint is committed and complete by its format, else invalid
    for what it lacks. Metric coverage is not judged here: it scores an export, and there is none yet."""
    f = Findings()
    f.add(*deferred.owed_problem(layout, step, request))
    owed_only = deferred.unfinished(request)
    _check_saved_and_metrics(layout, step, None, None, f)
    checkpoint = list_dir(storage, layout.checkpoint_uri(step))
    if not any(rel.startswith("policy/") for rel in checkpoint.objects):
        f.add(KP.missing_checkpoint_dir, f"{checkpoint.uri}/policy holds nothing: there is no checkpoint to convert")
    else:
        roles = _role_listings(checkpoint)
        fmt = _checkpoint_format(layout, roles, formats, f)
        if fmt is not None:
            for role_listing in roles.values():
                fmt.validate(storage, role_listing, step, f, ReadOptions())
    f.close()
    convertible = owed_only and len(f.problems) == 1
    return Candidate(
        step=step,
        uri=checkpoint.uri,
        state=CandidateState.convertible if convertible else CandidateState.invalid,
        valid=False,
        problems=f.problems,
        warnings=f.warnings,
        total_bytes=sum(o.size for o in checkpoint.objects.values()),
        expires_at=earliest_of(checkpoint.objects.values()),  # the checkpoint an owed export converts
        export_request=request,
    )


MANIFEST_SMALL_FILE = 8 * 1024 * 1024  # non-weight files up to this size are hashed against the manifest here


def check_model_manifest(storage: Storage, listing: Listing, f: Findings) -> str | None:
    """The export against its `.marinskyrl-model-manifest.json` (formats/model_manifest.py): sizes of every listed
    file, sha256 of the small non-weight ones; the manifest's identity, or None without a (well-formed) manifest."""
    info = listing.objects.get(MANIFEST_NAME)
    if info is None:
        return None
    raw, why = read_listed_json(storage, f"{listing.uri}/{MANIFEST_NAME}", info.size)
    manifest, invalid = parse_manifest(raw) if raw is not None else (None, why)
    if manifest is None:
        f.add(CP.manifest_invalid, f"{MANIFEST_NAME} is not a model manifest: {invalid}")
        return None
    digests: dict[str, str] = {}
    for entry in manifest.files:
        listed = listing.objects.get(entry.path)
        small = listed is not None and listed.size == entry.size and listed.size <= MANIFEST_SMALL_FILE
        if small and not has_weight_suffix(entry.path):
            data = storage.read_range(f"{listing.uri}/{entry.path}", 0, entry.size)
            digests[entry.path] = hashlib.sha256(data).hexdigest()
    check = check_manifest(manifest, listing.objects, digests)
    for code, detail in check.problems:
        f.add(code, detail)
    f.warnings.extend(check.warnings)
    return check.identity


# Candidates one invocation validates together (the plan batches its messages by this). Measured with
# bench/bench_validate_many.py at +25 ms one way (16 exports of 30 shards): one at a time 1.85 s; 4 together
# 0.81 s; 8 together 0.54 s; 16 together 0.50 s. Past 8 the client's CPU under one GIL, not round trips, sets
# the time (a round of 8 x 32 responses), so a batch of 8 keeps one invocation at about two round trips.
CANDIDATES_PER_BATCH = 8

Validator = Callable[..., Candidate]


def validate_many(
    storage: Storage,
    layout: RunLayout,
    steps: Sequence[int],
    *,
    metric_steps: Collection[int] | None,
    step_budget: int | None,
    validate: Validator = validate_candidate,
) -> dict[int, Candidate | Exception]:
    """Validate several candidates at once: their listings overlap, then their header rounds, each candidate with
    its own bounded header pool. Each step maps to its Candidate, or to the exception its validation raised (a
    failure stays that candidate's: the caller decides what it means)."""
    if not steps:
        return {}

    def one(step: int) -> Candidate | Exception:
        try:
            return validate(storage, layout, step, metric_steps=metric_steps, step_budget=step_budget)
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(max_workers=len(steps), thread_name_prefix="candidates") as pool:
        return dict(zip(steps, pool.map(one, steps), strict=True))


def candidate_digest(storage: Storage, candidate: Candidate, formats: FormatRegistry = BUILTIN) -> str:
    """The candidate's digest as its files are now, by its own format's digest inputs (a grant binds to it).
    A record naming a format nobody registered raises UnknownFormatError: never digested by a guess."""
    return candidate_pins(storage, candidate, formats)[0]


def candidate_pins(
    storage: Storage, candidate: Candidate, formats: FormatRegistry = BUILTIN
) -> tuple[str, dict[str, ObjectInfo]]:
    """(digest, the objects it covers by name) from ONE listing: a grant's copies use exactly these versions, so
    nothing written between the digest check and the copy is copied (authority/pinning.py)."""
    fmt = formats.get(candidate.format or CONTRACT_EXPORT_FORMAT)
    inputs = dict(fmt.digest_inputs(list_dir(storage, candidate.uri)))
    return export_digest(inputs.items()), inputs


# ---------------------------------------------------------------- resume safety


def _checkpoint_format(
    layout: RunLayout, roles: dict[str, Listing], formats: FormatRegistry, f: Findings
) -> CheckpointFormat | None:
    """The format trainer.strategy declares; without one, the one the files show (SkyRL's default otherwise)."""
    declared = get(layout.skyrl, "trainer.strategy")
    try:
        if declared is not None:
            return formats.for_strategy(str(declared))
        seen = (formats.detect(listing, FormatKind.checkpoint) for listing in roles.values())
        return next((fmt for fmt in seen if fmt is not None), None) or formats.for_strategy(DEFAULT_STRATEGY)
    except UnknownFormatError as exc:
        f.add(KP.unknown_format, f"{exc}: the checkpoint cannot be checked, so it is not known to be resumable")
        return None


def resume_not_applicable(layout: RunLayout) -> str | None:
    """Runs that keep no checkpoint by design (run-layout-v2.md §1, §3): not resumable, and that is no fault."""
    entry = layout.run_config.entry if layout.run_config is not None else None
    if entry is not None and not entry.trains:
        return f"{entry.module} trains nothing (generation-only), so it keeps no checkpoint"
    mode = layout.run_config.completion_mode if layout.run_config is not None else None
    if mode == "metrics":
        return "completion_mode=metrics keeps no checkpoint (ckpt_interval=-1), so the run is not resumable"
    return None


def _role_listings(checkpoint: Listing) -> dict[str, Listing]:
    """A checkpoint's role dirs (policy always, critic when present), each as its own listing."""
    return {
        role: Listing(
            f"{checkpoint.uri}/{role}", {rel: checkpoint.objects[f"{role}/{rel}"] for rel in checkpoint.under(role)}
        )
        for role in CHECKPOINT_ROLES
        if role == "policy" or checkpoint.under(role)
    }


def check_resume_safety(storage: Storage, layout: RunLayout, formats: FormatRegistry = BUILTIN) -> ResumeSafety:
    """Is the checkpoint the marker names complete enough for SkyRL to resume from it?"""
    not_applicable = resume_not_applicable(layout)
    if not_applicable is not None:
        return ResumeSafety(safe=False, reasons=[f"not applicable: {not_applicable}"])
    f = Findings()
    marker = layout.marker_step
    dirs = layout.checkpoint_steps
    if marker is None:
        exists = layout.marker_uri is not None and storage.stat(layout.marker_uri) is not None
        why = "is not an integer" if exists else "is absent"
        seen = f"; checkpoint dirs present: {step_ranges(dirs)}" if dirs else ""
        f.add(KP.marker_missing, f"{layout.marker_uri or 'latest_ckpt_global_step.txt'} {why}{seen}")
        f.close()
        return ResumeSafety(safe=False, reasons=f.problems)

    checkpoint = list_dir(storage, layout.checkpoint_uri(marker))
    root, objects = checkpoint.uri, checkpoint.objects
    if not objects:
        seen = f" (checkpoint dirs present: {step_ranges(dirs)})" if dirs else " (no checkpoint dir at all)"
        f.add(KP.missing_checkpoint_dir, f"the marker names step {marker} but {basename(root)} holds nothing{seen}")
    else:
        if "trainer_state.pt" not in objects:
            f.add(KP.missing_trainer_state, f"{basename(root)}/trainer_state.pt is absent")
        else:
            saved = pickled_global_step(storage.read_bytes(f"{root}/trainer_state.pt", JSON_CAP))
            if saved is not None and saved != marker:
                f.add(KP.marker_step_mismatch, f"the marker says {marker} but trainer_state.pt has global_step={saved}")
        if "data.pt" not in objects:
            f.add(KP.missing_trainer_state, f"{basename(root)}/data.pt (dataloader state) is absent")
        roles = _role_listings(checkpoint)
        fmt = _checkpoint_format(layout, roles, formats, f)
        if fmt is not None:
            for listing in roles.values():
                fmt.validate(storage, listing, marker, f, ReadOptions())
        # Protocol v2: the receipt pins the checkpoint training completed (its inventory and trainer-state digest).
        for why in checkpoint_against_receipt(storage, layout, marker):
            f.add(KP.receipt_mismatch, why)

    changed = commit_change(layout.attempts)
    if changed is not None:
        f.add(KP.runtime_commit_changed, changed)
    interval = as_step(get(layout.skyrl, "trainer.ckpt_interval"))
    if interval is None or interval <= 0:
        interval = DEFAULT_CKPT_INTERVAL
        f.warnings.append(f"trainer.ckpt_interval unknown; assumed the SkyRL default {interval}")
    ahead = [s for s in dirs if s - marker > interval]
    if ahead:
        f.add(
            KP.inconsistent_checkpoint_folder,
            f"global_step_{max(ahead)} is more than ckpt_interval={interval} past the marker {marker}: "
            "SkyRL refuses to resume (Inconsistent checkpoint folder)",
        )
    f.close()
    if f.problems:
        return ResumeSafety(safe=False, reasons=f.problems + f.warnings)
    partial = [s for s in dirs if s > marker]
    note = (
        f"; step dirs {step_ranges(partial)} above it are within ckpt_interval (an unfinished save)" if partial else ""
    )
    return ResumeSafety(
        safe=True,
        from_step=marker,
        reasons=[f"global_step_{marker} is complete and matches the marker{note}", *f.warnings],
    )
