"""What layout discovery finds (steps/layout.py): the run's roots, its Marin steps and its attempts, located once so
later steps never guess paths themselves."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rlcleanup.errors import PermanentError
from rlcleanup.formats.config import sha256_hex
from rlcleanup.formats.launch import RunConfig
from rlcleanup.ports.storage import ObjectInfo
from rlcleanup.steps.marin import ExecutorLock, StepRole
from rlcleanup.uris import basename, join, parent


class LayoutError(PermanentError, ValueError):
    """The run cannot be read at all (no config, unreadable root): recorded on the run."""

    def __init__(self, message: str) -> None:
        super().__init__("unreadable_run", message)


@dataclass
class EvidenceRoot:
    """A rendezvous directory (`kind` "rendezvous") or a durable Ray-log root ("ray_log_root") of the run."""

    uri: str
    kind: str
    attempt_id: str | None
    found_in: str


@dataclass
class AttemptFiles:
    attempt_id: str
    record_uri: str | None = None
    record: dict[str, Any] = field(default_factory=dict)  # {request, execution, response}
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # Where the attempt's logs are. Discovery lists no log file of a Marin attempt: it names the attempt's `logs/`
    # prefix, and whoever reads the logs lists it (the log-scan plan, paged; a pre-cancel capture, fresh). A Slurm
    # attempt *is* one `.out` file, so discovery knows its one log (log_objects) and it has no prefix.
    log_prefix: str | None = None
    log_objects: list[ObjectInfo] = field(default_factory=list)
    # Prefixes of the attempt's other log sources (its rendezvous rank logs and termination artifacts), set from
    # steps/evidence_sources.py: the log scan lists them with the attempt's own logs.
    evidence_prefixes: list[str] = field(default_factory=list)
    created_at: datetime | None = None  # the record object's own time (upstream records carry no timestamp)
    order_key: datetime | None = None
    order_source: str | None = None  # which field ordered this attempt in the chain

    @property
    def response(self) -> dict[str, Any]:
        """`response` (protocol v1/v2), or `result` of a launch.yaml run's manifest (run-layout-v2.md §0)."""
        value = self.record.get("response")
        if not isinstance(value, dict):
            value = self.record.get("result")
        return value if isinstance(value, dict) else {}


@dataclass
class StepState:
    """One Marin executor step of the run and what its controller files say (run-layout-v2.md §3, §4)."""

    role: StepRole
    uri: str
    executor_status: str | None = None
    lock: ExecutorLock | None = None
    terminal: dict[str, Any] | None = None
    has_artifact_json: bool = False
    attempts: list[AttemptFiles] = field(default_factory=list)

    @property
    def name(self) -> str:
        return basename(parent(self.uri))


@dataclass
class RunLayout:
    run_uri: str
    kind: str  # "A" | "C"
    config_uri: str
    config_bytes: bytes
    config: dict[str, Any]  # the whole resolved config as written
    skyrl: dict[str, Any]  # the SkyRL part (== config for resolved-skyrl.json)
    temp_root: str | None
    checkpoints_root: str
    exports_root: str
    attempts: list[AttemptFiles]  # in chain order (started_at, then id)
    executor_status: str | None = None
    terminal: dict[str, Any] | None = None
    terminal_uri: str | None = None
    has_artifact_json: bool = False
    marker_step: int | None = None
    marker_uri: str | None = None
    # The marker's step when its save never finished (a Megatron async save without metadata.json), and then the
    # latest earlier step whose save did (layout_files.committed_steps): what `last_saved_step` reads.
    unfinished_save: int | None = None
    committed_before: int | None = None
    checkpoint_steps: list[int] = field(default_factory=list)
    export_steps: list[int] = field(default_factory=list)
    export_request_steps: list[int] = field(default_factory=list)  # checkpoints with hf_export_request.json
    problems: list[str] = field(default_factory=list)  # non-fatal oddities found while discovering
    run_config: RunConfig | None = None
    config_root: str | None = None  # the step whose resolved config this is (a -training step for a 3-step run)
    attempts_root: str | None = None
    steps: list[StepState] = field(default_factory=list)  # Marin steps of the run, training first
    extra_roots: list[tuple[str, str]] = field(default_factory=list)  # (label, root) also captured
    lock: ExecutorLock | None = None
    # Rendezvous and Ray-log roots named by the run's own files and accepted as this run's
    # (steps/layout_rendezvous.py); steps/evidence_sources.py turns them into sources.
    evidence_roots: list[EvidenceRoot] = field(default_factory=list)

    @property
    def last_saved_step(self) -> int | None:
        """The latest committed checkpoint: the marker's, unless the save it names never finished."""
        return self.committed_before if self.unfinished_save is not None else self.marker_step

    @property
    def export_step(self) -> StepState | None:
        return next((s for s in self.steps if s.role is StepRole.export), None)

    @property
    def training_step(self) -> StepState | None:
        return next((s for s in self.steps if s.role is not StepRole.export), None)

    @property
    def config_sha256(self) -> str:
        return sha256_hex(self.config_bytes)

    @property
    def candidate_steps(self) -> list[int]:
        """Every step that is an export candidate: an export dir, or a checkpoint whose export was requested."""
        return sorted({*self.export_steps, *self.export_request_steps})

    def export_uri(self, step: int) -> str:
        return join(self.exports_root, f"global_step_{step}", "policy")

    def checkpoint_uri(self, step: int) -> str:
        return join(self.checkpoints_root, f"global_step_{step}")
