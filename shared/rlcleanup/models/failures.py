"""What a run's failure teaches across runs: its class, its signature, the earlier runs that died the same way and
what fixed them (docs/failures.md). Fields of the completion record (`models/record.py`), in one block there."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from rlcleanup.errors import screened_value
from rlcleanup.models.record_base import _Model  # record fields: the record's own base


class FailureClass(StrEnum):
    """Who has to act: the platform (infrastructure), the experiment's author (configuration), the training itself
    (training), or nobody can tell from the evidence (unknown)."""

    infrastructure = "infrastructure"
    configuration = "configuration"
    training = "training"
    unknown = "unknown"


class FailureEvidence(_Model):
    """The rule that decided the failure class and the evidence it read (steps/failure_rules.py)."""

    rule: str = Field(description="the rule of the failure table that matched; `no_rule` when none did")
    evidence: str = Field(description="what the rule read: cause | controller | symptom | metrics | none")
    rank: int | None = Field(default=None, description="the rank whose evidence decided, when its file names one")
    host: str | None = Field(default=None, description="the host whose evidence decided, when its file names one")
    evidence_uri: str | None = Field(default=None, description="the file that holds the deciding evidence")
    quoted: str | None = Field(default=None, description="the words that matched, at most 300 characters")


class SignatureBasis(_Model):
    """What the signature hashes, normalised (steps/signature.py): shown so a person can see why two runs match."""

    error_type: str
    message: str = Field(description="the message with numbers, addresses, paths, URIs, ranks and hosts removed")
    frames: list[str] = Field(default_factory=list, description="innermost frames of our code, `file:function`")
    collective: str | None = Field(default=None, description="the failing collective (allreduce, allgather, ...)")


class ConfigChange(_Model):
    """One resolved-configuration key that differs between a failed attempt and the run that later completed."""

    key: str = Field(description="the dotted Hydra key, e.g. trainer.micro_train_batch_size_per_gpu")
    before: str | None = Field(description="its value in the failed run (JSON text); null when the key was absent")
    after: str | None = Field(description="its value in the completed run (JSON text); null when it was removed")

    @model_validator(mode="after")
    def _no_credentials(self) -> ConfigChange:
        """A kept value is evidence: a credential is never shown, whatever wrote the change (a record from before
        configurations were screened at wrap-up included): the key's name or a credential pattern withholds it."""
        self.before = screened_value(self.key, self.before)
        self.after = screened_value(self.key, self.after)
        return self


class KnownFix(_Model):
    """For an earlier run that failed the same way: the first later run of its experiment that completed, and what
    its configuration changed (`changes` empty: the same configuration completed, e.g. a transient fault)."""

    completed_run_id: str
    completed_at: datetime | None = None
    changes: list[ConfigChange] = Field(default_factory=list, description="at most 20, sorted by key")
    more_changes: int = Field(default=0, description="how many further keys differ beyond those listed")
    configs_compared: bool = Field(
        default=True, description="false when either run's resolved configuration was not kept: nothing to diff"
    )


class SimilarRun(_Model):
    """Another run whose first cause has the same signature, ended before or after this one."""

    run_id: str
    ended_at: datetime | None = None
    came: Literal["before", "after"] | None = Field(
        default=None,
        description="whether it ended before or after this run: by ended_at, a tie (the same instant) by run id; "
        "None on records written before the field (they listed earlier runs only)",
    )
    same_second: bool = Field(default=False, description="it ended in the same second as this run")
    tied: bool = Field(default=False, description="it ended at the same instant as this run: ordered by run id")
    failure_class: FailureClass | None = None
    terminal_state: str | None = None
    status: str | None = None
    experiment: str | None = None
    fix: KnownFix | None = Field(default=None, description="what fixed it, when its experiment later completed")
