"""The completion record: what anyone reads after a run ends (Firestore console, CLI, JSON)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, computed_field, field_validator, model_validator

from rlcleanup.errors import redact_credentials
from rlcleanup.models.export_jobs import ExportJob, PreservedCheckpoint
from rlcleanup.models.failures import FailureClass, FailureEvidence, SignatureBasis, SimilarRun
from rlcleanup.models.record_base import RunText as RunText
from rlcleanup.models.record_base import _Model, _without
from rlcleanup.models.record_base import utcnow as utcnow
from rlcleanup.models.record_evidence import (
    Deadline as Deadline,
)
from rlcleanup.models.record_evidence import (
    ExpiredEvidence as ExpiredEvidence,
)
from rlcleanup.models.record_evidence import (
    HubAudit as HubAudit,
)
from rlcleanup.models.record_evidence import (
    IncompleteEvidence as IncompleteEvidence,
)
from rlcleanup.models.record_evidence import (
    PreCancelCapture as PreCancelCapture,
)
from rlcleanup.models.record_evidence import (
    PreservedObject as PreservedObject,
)
from rlcleanup.models.storage_ledger import LedgerTotals, StorageLedger
from rlcleanup.models.vocab import (
    CandidateKind,
    CandidateState,
    ClassificationKind,
    RecordStatus,
    TerminalState,
    problem_code,
)


class Classification(_Model):
    kind: ClassificationKind
    evidence: list[RunText] = Field(default_factory=list, description="config keys (with values) that decided it")

    @field_validator("evidence")
    @classmethod
    def _no_credentials(cls, value: list[str]) -> list[str]:
        return [redact_credentials(line) for line in value]  # config values the run chose: shown, never a secret


class FailureCause(_Model):
    attempt_id: str | None
    source_uri: str
    line: int = Field(description="1-based line of the first traceback line in source_uri")
    error_type: RunText
    message: RunText
    traceback: RunText
    evidence_source: str = Field(
        default="driver_log",
        description="the evidence source that decided (steps/evidence_sources.py, most trusted first): "
        "failure_receipt | driver_log | rotated_pod_log | rank_log | termination_artifact | attempt_record",
    )


class Attempt(_Model):
    attempt_id: str
    job_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    state: str | None = None
    first_step: int | None = None
    last_step: int | None = None
    log_uris: list[str] = Field(
        default_factory=list,
        description="the attempt's logs in scan order, at most 20 (hundreds of ranks would outgrow a Firestore "
        "document); every one is listed in the manifest",
    )
    log_count: int = Field(default=0, description="how many logs the attempt has (all scanned, all preserved)")
    failure: RunText | None = None


class ChainCoverage(_Model):
    first_step: int | None = None
    last_step: int | None = None
    gaps: list[tuple[int, int]] = Field(
        default_factory=list, description="inclusive [a, b] step ranges with no metric row"
    )


class StepSummary(_Model):
    """One Marin executor step of the run (run-layout-v2.md §3): a 3-step run has a -training/-metrics step and
    its export step, each with its own state."""

    name: str
    uri: str
    role: str = Field(description="training | metrics | export | single")
    executor_status: str | None = None
    state: str | None = Field(default=None, description="terminal.json or the last attempt's response.state")
    attempt_ids: list[str] = Field(default_factory=list)
    failure: RunText | None = None


class ChainSummary(_Model):
    attempts: list[Attempt] = Field(default_factory=list)
    coverage: ChainCoverage = Field(default_factory=ChainCoverage)
    steps: list[StepSummary] = Field(default_factory=list)
    warnings: list[str] = Field(
        default_factory=list,
        description="what reading the run's layout found odd or had to decide by rule: a guessed root, other jobs' "
        ".out files kept as evidence, a tie between Slurm job names, unreadable hydra_args",
    )


class ResolvedConfigRef(_Model):
    uri: str
    sha256: str


class ExportRequestState(_Model):
    """A checkpoint's deferred HF export request (`hf_export_request.json`, run-layout-v3.md §2), as read."""

    uri: str
    status: str = Field(
        description="pending | in_progress | complete as the request says; `pending` for an unreadable request "
        "(upstream protects it as pending too)"
    )
    attempts: int | None = Field(default=None, description="export jobs submitted for it so far")
    last_exit_code: int | None = Field(default=None, description="the last export job's exit code")
    timeout_seconds: int | None = None
    hub_repo_id: str | None = Field(
        default=None, description="a Hub destination: the export job publishes there itself, outside any grant"
    )
    export_path: str | None = Field(default=None, description="the export root the request names")
    unreadable: str | None = Field(default=None, description="why the request could not be read, when it could not")
    # What the export job was asked to publish (authority/hub_audit.py reads the repo back against it).
    hub_private: bool | None = Field(default=None, description="hf_hub_private: whether the repo was to be private")
    hub_revision: str | None = Field(default=None, description="hf_hub_revision (upstream default main)")
    hub_upload_mode: str | None = Field(default=None, description="hf_upload_mode: latest | all")


class Candidate(_Model):
    step: int
    uri: str
    kind: CandidateKind = Field(
        default=CandidateKind.full, description="full: a whole model; adapter: a LoRA adapter of `base_model`"
    )
    state: CandidateState = Field(
        default=CandidateState.invalid,
        description="valid | invalid | convertible (a committed checkpoint whose export is requested, not made) | "
        "partial (an export job's unfinished output); only `valid` can be selected or granted",
    )
    base_model: str | None = Field(default=None, description="an adapter's base model (base_model_name_or_path)")
    export_request: ExportRequestState | None = Field(
        default=None, description="the checkpoint's deferred HF export request at this step, when it has one"
    )
    format: str | None = Field(
        default=None,
        description="the export format that validated it (formats/checkpoints registry, e.g. hf-safetensors); "
        "null when no registered format recognises its files",
    )
    valid: bool
    problems: list[RunText] = Field(
        default_factory=list, description="'code: detail' strings; code from the vocabulary"
    )
    warnings: list[RunText] = Field(default_factory=list)
    expires_at: datetime | None = Field(
        default=None,
        description="when the first of its files dies: creation + N days under a `tmp/ttl=<N>d/` root; null when "
        "it lies on durable storage",
    )
    parameter_count: int | None = None
    estimated_parameter_count: int | None = None
    size_label: str | None = None
    total_bytes: int | None = None
    shard_count: int = 0
    digest: str | None = Field(default=None, description="sha256 over the export's object names, sizes and checksums")
    model_identity: str | None = Field(
        default=None,
        description="the identity (sha256:<hex>) of the export's .marinskyrl-model-manifest.json when the manifest is "
        "well formed and its identity hashes its file list; null without a manifest",
    )

    @field_validator("problems")
    @classmethod
    def _declared_codes(cls, problems: list[str]) -> list[str]:
        for text in problems:
            problem_code(text)  # UnknownProblemCode: an undeclared code never reaches a record
        return problems

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: Any) -> Any:
        data = _without(data, ("problem_codes",))
        if isinstance(data, dict) and "state" not in data and "valid" in data:  # a record written before `state`
            data = {**data, "state": CandidateState.valid if data["valid"] else CandidateState.invalid}
        return data

    @model_validator(mode="after")
    def _state_agrees(self) -> Candidate:
        if self.valid != (self.state is CandidateState.valid):
            raise ValueError(f"candidate {self.step}: valid={self.valid} contradicts state={self.state.value}")
        return self

    # mypy cannot type a decorated @property (python/mypy#1362); pydantic.fields.computed_field documents this ignore
    @computed_field(description="the codes of `problems`, sorted, once each: `array-contains` works on them")  # type: ignore[prop-decorator]
    @property
    def problem_codes(self) -> list[str]:
        return sorted({problem_code(p) for p in self.problems})


class ResumeSafety(_Model):
    safe: bool
    from_step: int | None = None
    reasons: list[RunText] = Field(default_factory=list)


# ---- "Which checkpoint?": every valid candidate's metric, by the selection policy's computation (issue 38 #8)
class CandidateMetric(_Model):
    """One valid candidate's score as the policy computes it (steps/select.py `score_at`), or why it has none."""

    step: int
    value: float | None = Field(default=None, description="the smoothed score; None when the metric is missing")
    window: list[int] | None = Field(default=None, description="[first_step, last_step] of the rows the score used")
    window_steps: int = Field(default=0, description="steps the window spans (last - first + 1)")
    rows: int = Field(default=0, description="steps of the window that had a metric row (coverage)")
    missing: str | None = Field(default=None, description="why there is no score (too few rows, none preserved)")


class CandidateMetrics(_Model):
    """What a person needs to choose a checkpoint: the metric per valid candidate, with its window and coverage."""

    metric: str
    basis: str = Field(description="`declared` (cleanup.selection) | `reference` (no valid policy declared)")
    computation: str = Field(description="how the score is computed, e.g. 'trailing-5 EMA (alpha 0.3333), max'")
    candidates: list[CandidateMetric] = Field(default_factory=list)
    best: int | None = Field(
        default=None, description="best step by this metric: a suggestion for a person, never a selection"
    )


class Selection(_Model):
    status: str = Field(description="selected | unresolved")
    policy: dict[str, object] | None = None
    step: int | None = None
    runner_up: int | None = None
    metric_window: list[int] | None = Field(default=None, description="[first_step, last_step] the score used")
    chain_coverage: ChainCoverage | None = None
    candidates_considered: list[int] = Field(default_factory=list)
    scores: dict[str, float] = Field(default_factory=dict, description="step -> smoothed score")
    reason: RunText | None = None
    candidate_metrics: CandidateMetrics | None = None


class RunError(_Model):
    step: str
    code: str
    message: RunText
    at: datetime = Field(default_factory=utcnow)

    @field_validator("message")
    @classmethod
    def _no_credentials(cls, value: str) -> str:
        return redact_credentials(value)  # an upstream error may echo a header or a signed URL


class AuthorityAction(_Model):
    """One grant's outcome, summarized; manifests and reclaim plans live in storage at `uri`."""

    action: str
    grant_id: str
    state: str = Field(
        description="pending | applying | uploading | published | handed_off | registered | reclaimed | cleared | refused | expired | not_applicable | withheld"
    )
    destination: str | None = None
    step: int | None = None
    digest: str | None = Field(
        default=None, description="the digest the grant signed: it binds the grant to those bytes"
    )
    verified_objects: int = 0
    refusal: str | None = None
    detail: RunText | None = None
    uri: str | None = None
    reclaimed_bytes: int = 0
    progress: dict[str, int] | None = Field(
        default=None,
        description="a Hub upload's progress: files_done, files_total, bytes_done, bytes_total, skipped (already there)",
    )
    export_job: ExportJob | None = Field(default=None, description="the job an export grant submitted")
    preserved: PreservedCheckpoint | None = Field(
        default=None, description="the durable copy a preserve grant made of a checkpoint"
    )

    @field_validator("detail")
    @classmethod
    def _no_credentials(cls, value: str | None) -> str | None:
        return None if value is None else redact_credentials(value)


class SupersededGrant(_Model):
    """An earlier grant that no longer applies to this record: the candidate it named has other bytes now (another
    digest) or is gone. Its effects (a chosen step, a closed publish/register/reclaim item, reclaimed bytes) are
    not this record's; the grant itself is kept as it ended (`rlcleanup grants`)."""

    grant_id: str
    action: str
    step: int | None = None
    digest: str | None = Field(default=None, description="the digest the grant signed")
    now_digest: str | None = Field(default=None, description="the candidate's digest now; null when it is gone")
    gone: bool = Field(default=False, description="no valid candidate at the grant's step (or with its digest) now")
    state: str = Field(description="what the grant did when it was used (published, reclaimed, ...)")
    destination: str | None = None
    reason: str = Field(description="why it no longer applies, one line")


# ---------------------------------------------------------------- Hub audit (authority/hub_audit.py)


# The run URI of a placeholder record: one filed for an error whose message named the run id but not its place.
# It binds no identity: the first run that really claims the id takes the record over.
UNKNOWN_RUN_URI = "unknown"


# Derived fields of the record and the stored fields each is computed from (a partial update writes them too).
RECORD_DERIVED = ("problem_codes", "error_codes")
DERIVED_FROM = {"candidates": "problem_codes", "errors": "error_codes"}


class DeclaredRegistration(_Model):
    """What the resolved configuration declares under `cleanup.registration`, read once at wrap-up."""

    registry: str
    model_name: str | None = None


class CompletionRecord(_Model):
    run_id: str
    run_uri: str
    status: RecordStatus = RecordStatus.in_progress
    classification: Classification | None = None
    terminal_state: TerminalState | None = None
    terminal_reasoning: list[RunText] = Field(default_factory=list)
    controller_state: str | None = None
    step_budget: int | None = None
    last_trained_step: int | None = None
    last_saved_step: int | None = None
    first_failure_cause: FailureCause | None = None
    first_failure_reason: str | None = Field(
        default=None, description="`no_causal_error_found` when every logged error is teardown"
    )
    earliest_symptom: FailureCause | None = Field(
        default=None, description="the earliest teardown error, quoted when no causal error exists (never the cause)"
    )
    chain: ChainSummary = Field(default_factory=ChainSummary)
    source_revision: dict[str, RunText] = Field(default_factory=dict)
    base_model: RunText | None = None
    temp_root: str | None = Field(
        default=None,
        description="the run's temp root (checkpoints, attempts) when it lies outside run_uri; with run_uri, what "
        "a reclaim inventories. Set at classification from the roots checked against the run buckets.",
    )
    resolved_config: ResolvedConfigRef | None = None
    launch_command: RunText | None = None
    preserved_locations: list[str] = Field(default_factory=list)
    manifest_uri: str | None = None
    metrics_uri: str | None = None
    preserved_object_count: int = 0
    preserved_bytes: int = 0
    evidence_expires_at: datetime | None = Field(
        default=None,
        description="when the first of the run's evidence objects on temp storage (`tmp/ttl=<N>d/`) dies: creation "
        "+ N days (console filter: runs whose evidence expires this week)",
    )
    evidence_expiry: dict[str, datetime] = Field(
        default_factory=dict,
        description="per evidence class (log, checkpoint_metadata, rendezvous_evidence, ...), its earliest expiry",
    )
    evidence_deadline: datetime | None = Field(
        default=None,
        description="the earliest deadline of a needs-person item: evidence that will die unpreserved, or an owed "
        "export whose checkpoint expires within 72 h; null when nothing is due",
    )
    deadlines: list[Deadline] = Field(
        default_factory=list, description="every needs-person item with a deadline; `evidence_deadline` is the first"
    )
    evidence_expired: list[ExpiredEvidence] = Field(
        default_factory=list,
        description="evidence on temp storage that was already gone when rlcleanup first looked: what, since when",
    )
    incomplete_evidence: list[IncompleteEvidence] = Field(
        default_factory=list,
        description="rendezvous debug artifacts a node's sync-manifest.json lists as copied but that are missing, "
        "or says it skipped (with its reason): evidence known to be incomplete",
    )
    candidates: list[Candidate] = Field(default_factory=list)
    resume_safety: ResumeSafety | None = None
    selection: Selection | None = None
    registration: RunText | None = None
    declared_registration: DeclaredRegistration | None = Field(
        default=None,
        description="the classified configuration's cleanup.registration (wrap-up); a register grant acts on this, "
        "never on the run's files as they are later",
    )
    authority_actions: list[AuthorityAction] = Field(
        default_factory=list, description="the grants that apply to this record (see superseded_grants)"
    )
    superseded_grants: list[SupersededGrant] = Field(
        default_factory=list,
        description="earlier grants (e.g. before a --rerun or a later pass) whose candidate now has another digest "
        "or is gone: they no longer apply, and their effects are not this record's",
    )
    reclaimed_bytes: int = 0
    # --- storage ledger (issue 40): what the run holds, by class; latest in full, earlier ones as totals
    storage_ledger: StorageLedger | None = Field(
        default=None, description="the run's storage by class, where, expiry and monthly list-price cost"
    )
    storage_bytes: int = Field(default=0, description="the latest ledger's total bytes (console filter)")
    storage_monthly_usd: float = Field(default=0.0, description="the latest ledger's monthly cost at list prices")
    incomplete_uploads: int = Field(
        default=0, description="S3 multipart uploads under the run's roots never completed, at the latest ledger"
    )
    incomplete_upload_bytes: int = Field(default=0, description="the bytes their parts hold (billed, never listed)")
    storage_ledger_note: str | None = Field(
        default=None, description="why the run's storage was not measured when its record completed, and the fix"
    )
    storage_ledger_history: list[LedgerTotals] = Field(
        default_factory=list, description="totals of every ledger measured before the latest (before/after reclaims)"
    )
    # --- end storage ledger
    pre_cancel: PreCancelCapture | None = None
    hub_audits: list[HubAudit] = Field(
        default_factory=list,
        description="Hub repos the run's own export job published to, read back (authority/hub_audit.py)",
    )
    not_applicable_evidence: list[str] = Field(default_factory=list)
    remaining_work: list[RunText] = Field(default_factory=list)
    report_uri: str | None = Field(
        default=None,
        description="the newest report.html rendered from this record: derived/report.html when the pipeline "
        "finished, then derived/report-<sha12>.html after every later change (a grant applied, a deadline): "
        "evidence is write-once, so earlier reports stay beside it; `rlcleanup report` renders the record as it is",
    )
    errors: list[RunError] = Field(default_factory=list)
    # --- learning across runs (issue 39; models/failures.py, steps/history.py, docs/failures.md)
    failure_class: FailureClass | None = Field(
        default=None,
        description="infrastructure | configuration | training | unknown; null for a run that did not fail "
        "(console filter: every infrastructure failure this week)",
    )
    failure_evidence: FailureEvidence | None = Field(
        default=None, description="the rule, rank, host and evidence file that decided failure_class"
    )
    signature: str | None = Field(
        default=None,
        description="fingerprint of the first cause (sig1:<16 hex>): the same failure on another day, rank or run "
        "has the same one (console filter: runs that failed the same way)",
    )
    signature_basis: SignatureBasis | None = Field(default=None, description="what the signature hashes")
    experiment: str | None = Field(
        default=None, description="the experiment the run belongs to, across its runs (steps/history.py)"
    )
    similar_runs: list[SimilarRun] = Field(
        default_factory=list,
        description="other runs with the same signature, before or after this one (at most 20 each side), newest "
        "first, with what fixed them",
    )
    # --- end of learning across runs
    ended_at: datetime | None = Field(
        default=None,
        description="when the run ended: its last attempt's end (attempt record, else its last log timestamp); "
        "when no attempt tells, when rlcleanup saw it had ended. Unlike updated_at it does not move.",
    )
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: Any) -> Any:
        return _without(data, RECORD_DERIVED)

    @field_validator("launch_command")
    @classmethod
    def _no_credentials(cls, value: str | None) -> str | None:
        return None if value is None else redact_credentials(value)  # also a record kept before it was screened

    # mypy cannot type a decorated @property (python/mypy#1362); pydantic.fields.computed_field documents this ignore
    @computed_field(description="every candidate's problem codes, sorted, once each (array-contains queries)")  # type: ignore[prop-decorator]
    @property
    def problem_codes(self) -> list[str]:
        return sorted({code for c in self.candidates for code in c.problem_codes})

    # mypy cannot type a decorated @property (python/mypy#1362); pydantic.fields.computed_field documents this ignore
    @computed_field(description="the codes of `errors`, sorted, once each (array-contains queries)")  # type: ignore[prop-decorator]
    @property
    def error_codes(self) -> list[str]:
        return sorted({e.code for e in self.errors})
