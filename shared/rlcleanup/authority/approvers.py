"""The approvers a deployment trusts: list them, and revoke one (P37 in docs/authority.md §8).

Revoking keeps the approver's document (its used grants name it in `granted_by` and stay on their records) and
marks it with who revoked it, when and why; the key itself is filed in `revoked_keys/` by its fingerprint, so
re-adding the same key under any id is refused. Verification (`grants.verify`) refuses every grant of a revoked
approver or key as `approver_revoked`: new ones on arrival, pending ones when record-ready retries them, and an
upload job's grant when the job re-verifies it.
"""

from __future__ import annotations

from datetime import datetime

from rlcleanup.authority.grants import Approver, RevokedKey, approvers, get_approver, key_fingerprint, revoked_keys
from rlcleanup.ports.records import RunRecords


class UnknownApprover(LookupError):
    pass


def list_approvers(records: RunRecords) -> list[Approver]:
    """Every registered approver, revoked ones included (their revocation is part of the record), by id."""
    return sorted((approver for _, approver in approvers(records).list()), key=lambda a: a.approver_id)


def revoke_approver(records: RunRecords, approver_id: str, *, by: str, reason: str, now: datetime) -> Approver:
    """Revoke an approver and its key. Revoking again keeps the first revocation (who and when stay true)."""
    approver = get_approver(records, approver_id)
    if approver is None:
        raise UnknownApprover(approver_id)
    if approver.revoked_at is not None:
        return approver
    revoked = approver.model_copy(update={"revoked_at": now, "revoked_by": by, "revoked_reason": reason})
    # The key first: a crash between the two writes still leaves every grant it signed refused.
    key = RevokedKey(approver_id=approver_id, revoked_at=now.isoformat(), revoked_by=by, reason=reason)
    revoked_keys(records).put(key_fingerprint(approver.public_key), key)
    approvers(records).put(approver_id, revoked)
    return revoked
