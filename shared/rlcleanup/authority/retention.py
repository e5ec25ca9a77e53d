"""Retention as a plan with reasons: what a reclaim must keep, and why, for every object the run holds.

The kept set is the union of (issue 40 item 2):
- the resume point: the latest committed checkpoint (the record's resume step, else its last saved step) and the
  `max_ckpts_to_keep` newest committed checkpoints the run declared (`trainer.max_ckpts_to_keep` of the resolved
  configuration the record names, read back and held to its recorded sha256; unreadable: every checkpoint is kept);
- the declared selection and its runner-up (their checkpoints and exports);
- every published or handed-off candidate until a reclaim has verified its destination;
- checkpoints whose export is owed (`hf_export_request.json` not `complete`), and that export's own directory;
- all preserved evidence (the record's preserved locations).

A "best" never evicts the resume point: a protection other than "published, destination verified now" refuses an
object even inside the granted export (export_path == ckpt_path puts the export in the resume checkpoint's
directory). A valid candidate that selection left out (no metric in its window) is listed with that reason, never
dropped silently. Reasons are data for the preview and the plan; nothing here reads a location from a run file.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import CandidateState
from rlcleanup.ports.storage import ObjectInfo, Storage
from rlcleanup.uris import strip_file_scheme

_STEP_DIR = re.compile(r"/global_step_(\d+)(?=/)")
STAGING = re.compile(r"/\.(?:tmp|old)-hf-export-[^/]*/")  # an export job's staging (MarinSkyRL export_hf_checkpoint)
# Ray object spill: Ray writes spilled objects under `<directory_path or uri>/ray_spilled_objects/`
# (ray-project/ray python/ray/_private/ray_constants.py DEFAULT_OBJECT_PREFIX; the default directory is the
# session's temp dir, /tmp/ray/session_*/); MarinSkyRL's configs name a spill dir (`ray.spill_dir`), which may be
# a prefix under the run's roots (run-layout-v3.md).
RAY_SPILL = re.compile(r"/(?:ray_spilled_objects|ray_spill|ray-spill|spill)/")
_PUBLISHED = {"published", "handed_off"}


@dataclass(frozen=True)
class Protection:
    reason: str
    blocks_reclaim: bool  # True: never removed by a reclaim, even inside the granted export


@dataclass
class RetentionPlan:
    resume_step: int | None
    max_ckpts_to_keep: int | None
    resume_steps: list[int]
    selection: int | None
    runner_up: int | None
    owed_steps: list[int]
    published_steps: list[int]
    excluded: dict[int, str] = field(default_factory=dict)  # valid candidates selection did not consider: why
    evidence: list[str] = field(default_factory=list)

    def reasons(self) -> list[str]:
        """The plan in words, for the preview: what is kept and why, and what was left out of selection."""
        out = []
        if self.resume_steps:
            declared = f", max_ckpts_to_keep={self.max_ckpts_to_keep}" if self.max_ckpts_to_keep else ""
            out.append(
                f"resume point: checkpoint steps {self.resume_steps} (latest committed {self.resume_step}{declared})"
            )
        elif self.resume_step is None:
            out.append("resume point unknown: every checkpoint is kept")
        if self.selection is not None:
            out.append(f"declared selection: step {self.selection}")
        if self.runner_up is not None:
            out.append(f"runner-up: step {self.runner_up}")
        if self.published_steps:
            out.append(
                f"published or handed off (kept until a reclaim verifies the destination): {self.published_steps}"
            )
        if self.owed_steps:
            out.append(f"export owed (hf_export_request.json not complete): steps {self.owed_steps}")
        out += [f"excluded from selection, listed: step {s}: {why}" for s, why in sorted(self.excluded.items())]
        out.append(f"preserved evidence, never deleted: {len(self.evidence)} location(s)")
        return out


def declared_max_ckpts(storage: Storage, record: CompletionRecord) -> int | None:
    """`trainer.max_ckpts_to_keep` from the resolved configuration the record names, only if its bytes still hash
    to the recorded sha256 (a config edited since classification declares nothing)."""
    ref = record.resolved_config
    if ref is None:
        return None
    try:
        data = storage.read_bytes(ref.uri, max_bytes=16 * 1024 * 1024)
    except Exception:  # gone, unreadable, too large: the safe reading is "not declared" (keep every checkpoint)
        return None
    if hashlib.sha256(data).hexdigest() != ref.sha256:
        return None
    try:
        config = json.loads(data)
    except ValueError:
        return None
    trainer = config.get("trainer") if isinstance(config, dict) else None
    value = trainer.get("max_ckpts_to_keep") if isinstance(trainer, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def make_retention(record: CompletionRecord, checkpoint_steps: Iterable[int], max_ckpts: int | None) -> RetentionPlan:
    resume = record.resume_safety.from_step if record.resume_safety else None
    resume = resume if resume is not None else record.last_saved_step
    committed = sorted({s for s in checkpoint_steps if resume is None or s <= resume}, reverse=True)
    if resume is None:
        resume_steps = sorted(set(checkpoint_steps))  # unknown resume point: keep them all
    else:
        keep = max(1, max_ckpts) if max_ckpts else len(committed) or 1
        resume_steps = sorted({resume, *committed[:keep]})
    selection = record.selection
    considered = set(selection.candidates_considered) if selection else set()
    excluded = {
        c.step: "no metric in its window: not scored, kept as a candidate"
        for c in record.candidates
        if c.valid and selection is not None and selection.status == "selected" and c.step not in considered
    }
    published = sorted({a.step for a in record.authority_actions if a.state in _PUBLISHED and a.step is not None})
    owed = sorted(
        c.step
        for c in record.candidates
        if (c.export_request is not None and c.export_request.status != "complete")
        or c.state in {CandidateState.convertible, CandidateState.partial}
    )
    return RetentionPlan(
        resume_step=resume,
        max_ckpts_to_keep=max_ckpts,
        resume_steps=resume_steps,
        selection=selection.step if selection else None,
        runner_up=selection.runner_up if selection else None,
        owed_steps=owed,
        published_steps=published,
        excluded=excluded,
        evidence=[p.rstrip("/") for p in record.preserved_locations],
    )


def _export_dirs(record: CompletionRecord) -> dict[str, int]:
    """Each candidate's export step directory (`.../global_step_<N>`) → N."""
    out: dict[str, int] = {}
    for c in record.candidates:
        uri = strip_file_scheme(c.uri).rstrip("/")
        if uri.endswith("/policy"):
            uri = uri[: -len("/policy")]
        out[uri] = c.step
    return out


def protection(uri: str, plan: RetentionPlan, record: CompletionRecord, verified_step: int | None) -> Protection:
    """Why `uri` is kept (the strongest reason), given the step whose destination this reclaim verified."""
    path = strip_file_scheme(uri)
    if any(path == e or path.startswith(e + "/") for e in plan.evidence):
        return Protection("preserved evidence: never deleted", True)
    exports = _export_dirs(record)
    export_step = next((s for d, s in exports.items() if path.startswith(d + "/")), None)
    found = _STEP_DIR.findall(path)
    step = int(found[-1]) if found else None
    in_checkpoint = step is not None and export_step is None
    # export_path == ckpt_path: the export lies in a checkpoint directory, so it is that checkpoint too
    collided = export_step is not None and _checkpoint_like(path, export_step, exports)
    if (in_checkpoint or collided) and step in plan.resume_steps:
        return Protection(f"resume point: checkpoint step {step} (latest committed {plan.resume_step})", True)
    if step is not None and step in plan.owed_steps and (in_checkpoint or export_step == step or collided):
        return Protection(f"export owed: step {step}'s hf_export_request.json is not complete", True)
    if STAGING.search(path):
        return Protection("an export job's staging (.tmp-/.old-hf-export-*): kept while its export is owed", False)
    if RAY_SPILL.search(path):
        return Protection(
            "Ray object spill (ray_spilled_objects): no resume state; outside the granted artifact", False
        )
    if export_step is not None and export_step == verified_step:
        return Protection(f"published copy verified now (step {export_step})", False)
    if export_step is not None and export_step in plan.published_steps:
        return Protection(f"published (step {export_step}): kept until a reclaim verifies its destination", False)
    if step is not None and step == plan.selection:
        return Protection(f"declared selection (step {step})", False)
    if step is not None and step == plan.runner_up:
        return Protection(f"runner-up (step {step})", False)
    if step is not None and step in plan.excluded:
        return Protection(f"step {step} excluded from selection ({plan.excluded[step]})", False)
    if in_checkpoint:
        return Protection(f"checkpoint step {step}: outside the granted artifact", False)
    return Protection("outside the granted artifact", False)


def _checkpoint_like(path: str, export_step: int, exports: dict[str, int]) -> bool:
    """The export directory is also a checkpoint's: it holds training state beside the weights (SkyRL writes
    `trainer_state.pt` / FSDP shards into `global_step_<N>/`)."""
    export_dir = next(d for d, s in exports.items() if s == export_step and path.startswith(d + "/"))
    return "/ckpts/" in export_dir + "/" or "/checkpoints/" in export_dir + "/"


def checkpoint_steps(objects: Iterable[ObjectInfo], record: CompletionRecord) -> list[int]:
    """The checkpoint steps the run holds now: `global_step_<N>` directories that are not an export's."""
    exports = _export_dirs(record)
    steps: set[int] = set()
    for info in objects:
        path = strip_file_scheme(info.uri)
        if any(path.startswith(d + "/") for d in exports) and not any(
            _checkpoint_like(path, s, exports) for d, s in exports.items() if path.startswith(d + "/")
        ):
            continue
        found = _STEP_DIR.findall(path)
        if found:
            steps.add(int(found[-1]))
    return sorted(steps)
