"""A Megatron (torch_dist) checkpoint role dir: `metadata.json` and `.distcp` shards.

Only presence is checked today (issue 14 adds the full torch_dist completeness rules: common.pt, every
`__<rank>_<i>.distcp`, `.metadata`, metadata.json written last).
"""

from __future__ import annotations

from collections.abc import Iterable

from rlcleanup.formats.checkpoints.base import Findings, FormatKind, FormatReport, Listing, ReadOptions
from rlcleanup.models.vocab import CheckpointProblem as KP
from rlcleanup.ports.storage import ObjectInfo, Storage


class MegatronCheckpoint:
    name = "megatron"
    kind = FormatKind.checkpoint
    strategies: tuple[str, ...] = ("megatron",)

    def detect(self, listing: Listing) -> bool:
        return any(name.endswith(".distcp") for name in listing.objects)

    def digest_inputs(self, listing: Listing) -> Iterable[tuple[str, ObjectInfo]]:
        return listing.objects.items()

    def validate(
        self, storage: Storage, listing: Listing, step: int, f: Findings, options: ReadOptions
    ) -> FormatReport:
        role = listing.uri.rstrip("/").rsplit("/", 1)[-1]
        names = set(listing.objects)
        shards = sum(1 for n in names if n.endswith(".distcp"))
        if "metadata.json" not in names or not shards:
            f.add(KP.missing_rank_shard, f"{role}/ lacks metadata.json or any .distcp shard (Megatron checkpoint)")
        return FormatReport(shard_count=shards)
