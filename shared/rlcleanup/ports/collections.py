"""Every collection of auxiliary documents in the record store, named here and nowhere else, and the typed
repository a module reads and writes one through.

A collection is either top level (`Collection`: `run_ids/{id}`) or filed under one run (`RunCollection`:
`runs/{run_id}/grants/{gid}`); a run's own collections go with it when the run is forgotten
(`RunRecords.forget_run`), and so do the top-level documents keyed by its id (`RUN_KEYED`) or naming it
(`RUN_NAMED`). The module that owns a collection's documents binds it once to their pydantic model
(`Documents`, as authority/ledger.py's `GrantFile` binds one grant), so no module spells a path or reads a dict:
`tests/unit/test_collections.py` fails on a collection name spelled anywhere else.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from rlcleanup.ports.records import RunRecords

M = TypeVar("M", bound=BaseModel)

RUNS = "runs"  # runs/{run_id}: the records themselves (the adapters' layout); run collections live under it


@dataclass(frozen=True)
class Documents(Generic[M]):
    """One collection bound to its path and its documents' model: reads validate, writes dump JSON-mode."""

    records: RunRecords
    path: str
    model: type[M]

    id_field: str | None = None  # a model field that is the document's id: never stored in it, filled on read

    def _read(self, doc_id: str, doc: dict[str, Any]) -> M:
        return self.model.model_validate({**doc, self.id_field: doc_id} if self.id_field else doc)

    def get(self, doc_id: str) -> M | None:
        doc = self.records.get_doc(self.path, doc_id)
        return None if doc is None else self._read(doc_id, doc)

    def put(self, doc_id: str, doc: M, *, only_if_absent: bool = False) -> bool:
        """Write the document (False when only_if_absent and it exists)."""
        stored = doc.model_dump(mode="json", exclude={self.id_field} if self.id_field else None)
        return self.records.put_doc(self.path, doc_id, stored, only_if_absent=only_if_absent)

    def list(self, prefix: str = "") -> list[tuple[str, M]]:
        """(id, document) for every document whose id starts with prefix, in id order."""
        return [(doc_id, self._read(doc_id, doc)) for doc_id, doc in self.records.list_docs(self.path, prefix)]

    def list_checked(self) -> builtins.list[tuple[str, M | None, dict[str, Any]]]:
        """(id, document or None when it is not one, as stored) for a reader that must report a damaged or forged
        document instead of stopping at it (authority/quarantine.py's restore)."""
        out: builtins.list[tuple[str, M | None, dict[str, Any]]] = []
        for doc_id, doc in self.records.list_docs(self.path):
            try:
                out.append((doc_id, self.model.model_validate(doc), doc))
            except ValidationError:
                out.append((doc_id, None, doc))
        return out


@dataclass(frozen=True)
class Collection:
    """A top-level collection: `<name>/{doc_id}`."""

    name: str

    def bind(self, records: RunRecords, model: type[M], *, id_field: str | None = None) -> Documents[M]:
        """`id_field`: the model's field that is the document id (an approver's `approver_id`)."""
        return Documents(records, self.name, model, id_field)


@dataclass(frozen=True)
class RunCollection:
    """A collection filed under one run: `runs/{run_id}/<name>/{doc_id}` (forgetting the run removes it)."""

    name: str

    def path(self, run_id: str) -> str:
        return f"{RUNS}/{run_id}/{self.name}"

    def bind(self, records: RunRecords, run_id: str, model: type[M]) -> Documents[M]:
        return Documents(records, self.path(run_id), model)


def run_prefix(run_id: str) -> str:
    """Where every collection filed under the run lives (a run's documents all start with it)."""
    return f"{RUNS}/{run_id}/"


# ---------------------------------------------------------------- filed under a run (runs/{run_id}/...)
GRANTS = RunCollection("grants")  # {grant id}: one grant and its state (authority/ledger.py)
QUARANTINE = RunCollection("quarantine")  # {entry id}: what reclaim set aside, and until when (authority/quarantine.py)
CAUSES = RunCollection("causes")  # {signature id}: a person's note on a reproducing failure (authority/precancel.py)
PREVIEWS = RunCollection("previews")  # {key}: a preview a grant's approver saw (authority/previewed.py)
RECLAIM_PLANS = RunCollection("reclaim_plans")  # {grant id}: the plan a reclaim grant follows (authority/reclaim.py)
HISTORY = RunCollection("history")  # {n}: earlier records `run --rerun` kept (cli/maintenance.py)


def reclaim_results(grant_id: str) -> RunCollection:
    """{time}: each pass of one reclaim plan, under the plan's document."""
    return RunCollection(f"{RECLAIM_PLANS.name}/{grant_id}/results")


# ---------------------------------------------------------------- top level, keyed by a run's id
RUN_IDS = Collection("run_ids")  # {id}: where the run holding this id lives (runtime/admission.py)
RUN_ID_CONFLICTS = Collection("run_id_conflicts")  # {located id}: the id a run declared and was not given
RUN_CONFIGS = Collection("run_configs")  # {run id}: the configuration the run was classified from (steps/history.py)
LOST_RUNS = Collection("lost_runs")  # {run id}: a run the record store lost, and its re-drive (runtime/recovery.py)
RUN_KEYED = (RUN_IDS, RUN_ID_CONFLICTS, RUN_CONFIGS)  # forgetting a run removes its document in each

# ---------------------------------------------------------------- top level, naming a run in a field
RUN_LOCATIONS = Collection("run_locations")  # {sha256 of a location}: {"run_id", "run_uri"} (runtime/admission.py)
RUN_NAMED = ((RUN_LOCATIONS, "run_id"),)  # forgetting a run removes the documents whose field names it

# ---------------------------------------------------------------- top level, kept when a run is forgotten
ENDED_GRANTS = Collection("ended_grants")  # {grant id}: every grant that ended: a grant is used once, forgotten or not
APPROVERS = Collection("approvers")  # {approver id}: who may sign grants (authority/grants.py)
REVOKED_KEYS = Collection("revoked_keys")  # {key fingerprint}: keys that no longer sign (authority/grants.py)
MODEL_REGISTRY = Collection("model_registry")  # {row id}: checkpoints registered by a grant (authority/register.py)
SOURCE_SEEN = Collection("source_seen")  # {hint key}: hints a source already gave (sources/sweep.py)
POISON_MESSAGES = Collection("poison_messages")  # {message hash}: undecodable deliveries (runtime/handlers.py)
DELIVERY_ATTEMPTS = Collection("delivery_attempts")  # {delivery}: attempts before dead-lettering (runtime/failures.py)
# {entry point:last:message hash}: a message's last transient error, named by the dead-letter recorder
DELIVERY_LAST_ERRORS = Collection("delivery_last_errors")
NOTIFY_ATTEMPTS = Collection("notify_attempts")  # {run state, channel}: notification attempts (runtime/notify_handler)
