"""The console queries docs/firestore-console.md documents, as data: one list that the docs, Terraform's
composite indexes (infra/modules/rlcleanup/firestore.tf) and the emulator test are all checked against.

Each is a filter on one field of `runs/{run_id}` (equality, or array-contains on a code array), newest run
first by `ended_at`. A filter on one field ordered by another needs a composite index in Firestore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rlcleanup.ports.collections import RUNS

ORDER_FIELD = "ended_at"


@dataclass(frozen=True)
class ConsoleQuery:
    question: str
    field: str
    op: Literal["==", "array-contains"]
    value: str

    def console_text(self) -> str:
        """How it is typed in the console's query builder (Firestore → Data → Query), as the docs list it."""
        return f'`{self.field} {self.op} "{self.value}"`, order by `{ORDER_FIELD}` descending'

    def index_fields(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """The composite index it needs: (field path, ASCENDING | CONTAINS), then ended_at DESCENDING."""
        mode = "CONTAINS" if self.op == "array-contains" else "ASCENDING"
        return (self.field, mode), (ORDER_FIELD, "DESCENDING")

    def query(self, client: Any, limit: int = 50) -> Any:
        """The same query with the plain Firestore client."""
        from google.cloud import firestore
        from google.cloud.firestore_v1.base_query import FieldFilter

        op = "array_contains" if self.op == "array-contains" else "=="
        runs = client.collection(RUNS).where(filter=FieldFilter(self.field, op, self.value))
        return runs.order_by(ORDER_FIELD, direction=firestore.Query.DESCENDING).limit(limit)


CONSOLE_QUERIES = (
    ConsoleQuery(
        "which runs wait for a grant (hand-off, registration, reclaim)?", "status", "==", "awaiting_authority"
    ),
    ConsoleQuery("which runs could rlcleanup not finish?", "status", "==", "failed"),
    ConsoleQuery("which runs wait for a person to classify them?", "classification.kind", "==", "unknown"),
    ConsoleQuery("which agentic runs were routed away?", "classification.kind", "==", "agentic"),
    ConsoleQuery("which runs have an export with a missing shard?", "problem_codes", "array-contains", "missing_shard"),
    ConsoleQuery("which runs hit a write-once conflict?", "error_codes", "array-contains", "write_once_conflict"),
    # Learning across runs (docs/failures.md). "This week": add `ended_at >= <Monday>` to the first; the same
    # index serves it. The next two are also the lookups `runs_where` makes (steps/history.py), with a run's own
    # signature or experiment in place of the example value.
    ConsoleQuery(
        "every infrastructure failure (this week: add ended_at >= Monday)", "failure_class", "==", "infrastructure"
    ),
    ConsoleQuery(
        "which runs failed the same way as this one (its signature)?", "signature", "==", "sig1:0123456789abcdef"
    ),
    ConsoleQuery("which runs belong to this experiment?", "experiment", "==", "math-rl-qwen"),
)
