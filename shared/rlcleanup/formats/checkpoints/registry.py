"""The format registry: every checkpoint/export format by name, kind and trainer strategy. Fails closed.

Adding a format = its module + one line in BUILTIN below (+ its problem codes in models/vocab.py if new).
"""

from __future__ import annotations

from collections.abc import Iterable

from rlcleanup.formats.checkpoints.base import CheckpointFormat, FormatKind, Listing, UnknownFormatError
from rlcleanup.formats.checkpoints.fsdp import FsdpCheckpoint
from rlcleanup.formats.checkpoints.hf_safetensors import HfSafetensorsExport
from rlcleanup.formats.checkpoints.lora_adapter import LoraAdapterExport
from rlcleanup.formats.checkpoints.megatron import MegatronCheckpoint


class FormatRegistry:
    def __init__(self, formats: Iterable[CheckpointFormat] = ()) -> None:
        self._formats: dict[str, CheckpointFormat] = {}
        for fmt in formats:
            self.register(fmt)

    def register(self, fmt: CheckpointFormat) -> None:
        if fmt.name in self._formats:
            raise ValueError(f"format {fmt.name!r} is already registered")
        taken = {s for other in self._formats.values() for s in other.strategies}
        if clash := taken & set(fmt.strategies):
            raise ValueError(f"format {fmt.name!r}: strategies {sorted(clash)} already belong to another format")
        self._formats[fmt.name] = fmt

    def names(self, kind: FormatKind | None = None) -> list[str]:
        return sorted(n for n, f in self._formats.items() if kind is None or f.kind is kind)

    def get(self, name: str) -> CheckpointFormat:
        """By the name a record stores (Candidate.format); UnknownFormatError for any other."""
        fmt = self._formats.get(name)
        if fmt is None:
            raise UnknownFormatError(f"format name {name!r}", self.names())
        return fmt

    def detect(self, listing: Listing, kind: FormatKind) -> CheckpointFormat | None:
        """The first format of `kind` (registration order) whose files these are; None when none recognises them."""
        return next((f for f in self._formats.values() if f.kind is kind and f.detect(listing)), None)

    def for_strategy(self, strategy: str) -> CheckpointFormat:
        """The checkpoint format a `trainer.strategy` writes; UnknownFormatError for a strategy nobody handles."""
        wanted = strategy.strip().lower()
        for fmt in self._formats.values():
            if fmt.kind is FormatKind.checkpoint and wanted in fmt.strategies:
                return fmt
        known = [s for f in self._formats.values() for s in f.strategies]
        raise UnknownFormatError(f"trainer.strategy {strategy!r}", known)


# The adapter comes first: its `adapter_model.safetensors` would otherwise read as a one-file full model. It
# recognises only a directory without a full model's weights, so a full export is never taken for an adapter.
BUILTIN = FormatRegistry([LoraAdapterExport(), HfSafetensorsExport(), FsdpCheckpoint(), MegatronCheckpoint()])
