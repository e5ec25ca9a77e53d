"""Where grants live: `runs/{run_id}/grants/{grant_id}`, one document per grant with its state.

Only an authentic grant is filed under its own id. A forged message could name a real grant's id, so refused
unauthenticated messages are filed under a hash of their bytes instead and can never overwrite a real grant.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from rlcleanup.authority.grants import GrantState, Refusal, Verdict
from rlcleanup.ports.records import RunRecords


def grants_collection(run_id: str) -> str:
    return f"runs/{run_id}/grants"


def doc_id(verdict: Verdict, data: bytes) -> str:
    if verdict.authentic and verdict.grant is not None:
        return verdict.grant.grant_id
    return "unverified-" + hashlib.sha256(data).hexdigest()[:24]


def file_grant(
    records: RunRecords,
    run_id: str,
    gid: str,
    verdict: Verdict,
    state: GrantState,
    now: datetime,
    *,
    refusal: Refusal | None = None,
    detail: str = "",
) -> bool:
    """Create the grant's document; False when it already exists (the caller then decides: replay or resume)."""
    doc: dict[str, Any] = {
        "grant": verdict.raw,  # as sent: the signature can be re-verified later (pending grants are)
        "signature": verdict.signature,
        "state": state.value,
        "refusal": refusal.value if refusal else None,
        "detail": detail,
        "received_at": now.isoformat(),
        "updated_at": now.isoformat(),
    }
    return records.put_doc(grants_collection(run_id), gid, doc, only_if_absent=True)


def set_state(
    records: RunRecords,
    run_id: str,
    gid: str,
    state: GrantState,
    now: datetime,
    *,
    refusal: Refusal | None = None,
    detail: str = "",
    outcome: dict[str, Any] | None = None,
) -> None:
    doc = records.get_doc(grants_collection(run_id), gid) or {}
    doc.update(
        {
            "state": state.value,
            "refusal": refusal.value if refusal else None,
            "detail": detail,
            "updated_at": now.isoformat(),
        }
    )
    if outcome is not None:
        doc["outcome"] = outcome
    records.put_doc(grants_collection(run_id), gid, doc)


def get_grant_doc(records: RunRecords, run_id: str, gid: str) -> dict[str, Any] | None:
    return records.get_doc(grants_collection(run_id), gid)


def list_grants(records: RunRecords, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return records.list_docs(grants_collection(run_id))


def pending(records: RunRecords, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(gid, doc) for gid, doc in list_grants(records, run_id) if doc.get("state") == GrantState.pending.value]
