"""Pydantic models for every event, record and grant rlcleanup handles."""

from rlcleanup.models.record import (
    Attempt,
    Candidate,
    ChainCoverage,
    ChainSummary,
    Classification,
    CompletionRecord,
    FailureCause,
    PreservedObject,
    ResolvedConfigRef,
    ResumeSafety,
    RunError,
    Selection,
)
from rlcleanup.models.vocab import (
    CandidateProblem,
    CheckpointProblem,
    ClassificationKind,
    RecordStatus,
    TerminalState,
)

__all__ = [
    "Attempt",
    "Candidate",
    "CandidateProblem",
    "ChainCoverage",
    "ChainSummary",
    "CheckpointProblem",
    "Classification",
    "ClassificationKind",
    "CompletionRecord",
    "FailureCause",
    "PreservedObject",
    "RecordStatus",
    "ResolvedConfigRef",
    "ResumeSafety",
    "RunError",
    "Selection",
    "TerminalState",
]
