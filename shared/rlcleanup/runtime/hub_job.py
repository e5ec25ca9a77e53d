"""The Hub upload as a Cloud Run job (`python -m rlcleanup.runtime.hub_job`, infra/modules/rlcleanup/hub.tf), for
exports too large for one function invocation.

Started with the overrides RLCLEANUP_HUB_RUN_ID and RLCLEANUP_HUB_GRANT_ID. It never trusts them alone: the grant
is read from the run's ledger and its signature and scope re-verified, exactly as apply-grant does. Progress
("n of m files uploaded") goes onto the grant's ledger entry while it runs; the outcome is filed as apply-grant
files it, and the record synced. A retried task resumes: files already on the Hub with the same sha256 are skipped.
"""

from __future__ import annotations

import json
import os
import sys

from rlcleanup.authority import ledger
from rlcleanup.authority.grants import GrantState, Refusal, verify
from rlcleanup.authority.hub_publish import publish_to_hub
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.errors import PermanentError
from rlcleanup.runtime.authority_handlers import file_outcome, sync_record
from rlcleanup.runtime.ports import Ports


def run_job(p: Ports, run_id: str, gid: str) -> Outcome:
    doc = ledger.get_grant_doc(p.records, run_id, gid)
    if doc is None:
        raise PermanentError("bad_input", f"no grant {gid!r} is filed on run {run_id!r}")
    if doc.get("state") == GrantState.used.value:  # a finished job started again: nothing to redo
        return Outcome(state=str((doc.get("outcome") or {}).get("state", "used")), detail="already applied")
    message = json.dumps({"grant": doc.get("grant"), "signature": doc.get("signature")}).encode()
    verdict = verify(
        p.records, message, p.clock.now(), expected_run=run_id, deployment_prefixes=p.allowed_destination_prefixes
    )
    record = p.records.get(run_id)
    if verdict.grant is None or verdict.refusal is not None or record is None:
        outcome = refuse(verdict.refusal or Refusal.record_not_eligible, verdict.detail or "no completion record")
    else:

        def progress(line: str) -> None:
            ledger.set_state(p.records, run_id, gid, GrantState.applying, p.clock.now(), detail=line)

        outcome = publish_to_hub(p.storage, record, verdict.grant, progress=progress)
    file_outcome(p, run_id, gid, outcome)
    sync_record(p, run_id)
    return outcome


def main() -> int:
    from rlcleanup.runtime.ports import cloud_ports
    from rlcleanup.settings import load_settings

    run_id, gid = os.environ.get("RLCLEANUP_HUB_RUN_ID"), os.environ.get("RLCLEANUP_HUB_GRANT_ID")
    if not run_id or not gid:
        print("RLCLEANUP_HUB_RUN_ID and RLCLEANUP_HUB_GRANT_ID must be set (job overrides)", file=sys.stderr)
        return 2
    outcome = run_job(cloud_ports(load_settings()), run_id, gid)
    print(json.dumps(outcome.as_doc()))
    return 0 if outcome.refusal is None else 1


if __name__ == "__main__":
    sys.exit(main())
