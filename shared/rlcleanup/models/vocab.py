"""The fixed vocabularies of the v1 contract (run-layout.md). Values are the wire spelling.

Problem codes are declared here and nowhere else: every producer writes them through `problem()`, the record
refuses a candidate problem whose code is not declared, and an undeclared code is a defect (UnknownProblemCode),
never a new word on a record. Adding one = a member below + the producer that emits it.
"""

from __future__ import annotations

from enum import StrEnum


class ClassificationKind(StrEnum):
    standard = "standard"
    agentic = "agentic"
    unknown = "unknown"


class TerminalState(StrEnum):
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"
    indeterminate = "indeterminate"


class CandidateProblem(StrEnum):
    missing_shard = "missing_shard"
    unindexed_shard = "unindexed_shard"
    tensor_not_in_shard = "tensor_not_in_shard"
    truncated_shard = "truncated_shard"
    corrupt_header = "corrupt_header"
    index_total_size_mismatch = "index_total_size_mismatch"
    missing_config = "missing_config"
    missing_tokenizer = "missing_tokenizer"
    step_mismatch = "step_mismatch"
    beyond_last_saved_step = "beyond_last_saved_step"
    metric_coverage_gap = "metric_coverage_gap"
    # Added codes (same style, never reuse a meaning above).
    missing_index = "missing_index"
    no_weights = "no_weights"
    unsafe_path = "unsafe_path"
    unknown_format = "unknown_format"  # no registered export format recognises the files
    internal_error = (
        "internal_error"  # validating it failed (a defect, or input it could not read): invalid until looked at
    )
    # The tensor names would not load into the architecture config.json declares (transformers' loader rules).
    tensor_layout_mismatch = "tensor_layout_mismatch"
    # Deferred HF export (run-layout-v3.md §2): a checkpoint with an export request and no finished export.
    export_not_converted = "export_not_converted"  # the export is owed: the request is pending / in progress
    partial_export = "partial_export"  # an export job stopped mid-write (`.tmp-hf-export-*`, or an unfinished dir)
    export_not_found = "export_not_found"  # the request says complete, but no export is where the run keeps them
    # A PEFT LoRA adapter export (run-layout-v3.md §5; formats/checkpoints/lora_adapter.py).
    missing_adapter_config = "missing_adapter_config"  # adapter_config.json absent or unreadable
    missing_base_model_reference = "missing_base_model_reference"  # no base_model_name_or_path to apply it to
    invalid_adapter_config = "invalid_adapter_config"  # r / lora_alpha / target_modules / peft_type unusable
    missing_adapter_weights = "missing_adapter_weights"  # adapter_model.safetensors absent or holding no tensor
    adapter_tensor_mismatch = "adapter_tensor_mismatch"  # tensors PEFT would not load as this config's LoRA
    # A VLM export (config.json vision_config) and its processor config (run-layout-v3.md §5).
    missing_processor = "missing_processor"  # neither preprocessor_config.json nor processor_config.json
    invalid_processor_config = "invalid_processor_config"  # present but not readable JSON
    # The export against its `.marinskyrl-model-manifest.json` (run-layout-v3.md §3; formats/model_manifest.py).
    manifest_invalid = "manifest_invalid"  # present but not a manifest upstream would accept
    manifest_identity_mismatch = "manifest_identity_mismatch"  # its identity does not hash its own file list
    manifest_file_missing = "manifest_file_missing"  # a file it lists is not in the export
    manifest_size_mismatch = "manifest_size_mismatch"  # a listed file's size differs from the manifest's
    manifest_sha256_mismatch = "manifest_sha256_mismatch"  # a file read here hashes to another sha256

    # A file named like what a publish writes itself (`_PUBLISHED.json`, `provenance.json`, `training_logs/`,
    # steps/validate.RESERVED_NAMES): shipped, it would forge a completion marker or provenance.
    reserved_name = "reserved_name"


class CandidateKind(StrEnum):
    """What a candidate's weights are: a whole model, or a LoRA adapter applied to a base model it names."""

    full = "full"
    adapter = "adapter"


class CandidateState(StrEnum):
    """Where a candidate stands. Only `valid` can be selected or granted: the others are not (yet) an export."""

    valid = "valid"  # an export with no problem
    invalid = "invalid"  # an export (or a checkpoint) with problems
    convertible = "convertible"  # a committed checkpoint whose HF export is requested but not made
    partial = "partial"  # an export job's unfinished output


class CheckpointProblem(StrEnum):
    marker_missing = "marker_missing"
    marker_step_mismatch = "marker_step_mismatch"
    missing_rank_shard = "missing_rank_shard"
    missing_trainer_state = "missing_trainer_state"
    inconsistent_checkpoint_folder = "inconsistent_checkpoint_folder"
    # Added: no checkpoint dir at the marker's step, or none at all.
    missing_checkpoint_dir = "missing_checkpoint_dir"
    unknown_format = "unknown_format"  # trainer.strategy names no registered checkpoint format
    # Megatron torch_dist completeness (run-layout-v2.md §5; Megatron-LM dist_checkpointing): each names the file
    # a complete save writes and this one lacks.
    missing_common_state = "missing_common_state"  # common.pt (rank 0's non-sharded state) absent or empty
    missing_distcp_shard = "missing_distcp_shard"  # no `__<rank>_<i>.distcp`, a rank gap, or an empty shard
    missing_distcp_metadata = "missing_distcp_metadata"  # torch DCP's `.metadata` (written by the coordinator)
    missing_dist_checkpoint_config = "missing_dist_checkpoint_config"  # metadata.json, written LAST: unfinished
    # Protocol v2: the checkpoint differs from its training receipt's inventory (a file missing or resized, or
    # sha256(trainer_state.pt) not the receipt's): not the checkpoint training completed.
    receipt_mismatch = "receipt_mismatch"
    # The chain's attempts ran different runtime commits on one checkpoint root (run-layout-v3.md §7).
    runtime_commit_changed = "runtime_commit_changed"


class HubAuditProblem(StrEnum):
    """What reading back a Hub repo the run's own export job published to found (authority/hub_audit.py)."""

    hub_repo_invalid = "hub_repo_invalid"  # the repo id the run names is not one huggingface_hub accepts
    hub_repo_not_found = "hub_repo_not_found"  # the Hub has no such repo (or hides it from the audit's token)
    hub_visibility_mismatch = "hub_visibility_mismatch"  # public where private was requested, or the reverse
    hub_file_missing = "hub_file_missing"  # a file the export's model manifest lists is not on the Hub
    hub_sha256_mismatch = "hub_sha256_mismatch"  # the Hub's sha256 (LFS oid, or the bytes read) differs
    hub_secret_found = "hub_secret_found"  # a secret rule matched a published text file
    hub_layout_unloadable = "hub_layout_unloadable"  # config/tokenizer/weights would not load with from_pretrained
    hub_unreachable = "hub_unreachable"  # the Hub did not answer after the retries: nothing was checked
    hub_file_unreadable = "hub_file_unreadable"  # a file the repo lists was refused when read (a 404), every retry
    hub_audit_failed = "hub_audit_failed"  # the audit itself failed (a defect, in the function's log): not a pass


PROBLEM_CODES: frozenset[str] = frozenset(c.value for c in (*CandidateProblem, *CheckpointProblem, *HubAuditProblem))


class UnknownProblemCode(ValueError):
    """A problem code nobody declared: a defect in the producer, never written to a record."""

    def __init__(self, code: str) -> None:
        self.code = code
        super().__init__(f"undeclared problem code {code!r} (models/vocab.py declares {len(PROBLEM_CODES)})")


def problem(code: str, detail: str) -> str:
    """The record's "<code>: <detail>" form, for a declared code only."""
    if code not in PROBLEM_CODES:
        raise UnknownProblemCode(code)
    return f"{code}: {detail}"


def problem_code(text: str) -> str:
    """The code of a "<code>: <detail>" problem; UnknownProblemCode when it is not declared."""
    code = text.split(":", 1)[0].strip()
    if code not in PROBLEM_CODES:
        raise UnknownProblemCode(code)
    return code


class RecordStatus(StrEnum):
    """Where the record is in its life; `complete` means no automated work is left."""

    in_progress = "in_progress"
    routed = "routed"  # agentic: handed to the agentic cleanup path
    needs_person = "needs_person"  # classification unknown: a person decides
    awaiting_authority = "awaiting_authority"
    complete = "complete"
    failed = "failed"  # rlcleanup itself could not finish; errors[] says why
    stalled = "stalled"  # the sweep found work that can no longer finish by itself; remaining_work says what


class Visibility(StrEnum):
    """Who can read a destination; ordered narrowest first (a grant allows its level and narrower)."""

    private = "private"
    internal = "internal"
    public = "public"

    @property
    def rank(self) -> int:
        return ["private", "internal", "public"].index(self.value)
