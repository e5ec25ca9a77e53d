"""The Hub upload as a job (`python -m rlcleanup.runtime.hub_job`), for hand-offs too large for one function
invocation: apply-grant starts it through the job-launcher port (ports/jobs.py) — on GCP the Cloud Run job
`<prefix>-hub-upload` (infra/modules/rlcleanup/hub.tf), locally a child process (adapters/local_jobs.py).

Started with the overrides RLCLEANUP_HUB_RUN_ID and RLCLEANUP_HUB_GRANT_ID. It never trusts them alone: the grant
is read from the run's ledger and its signature and scope re-verified, exactly as apply-grant does. Progress
(files and bytes done, of the total) goes onto the grant's ledger entry and the run's record after every commit;
the outcome is filed as apply-grant files it (`ledger.file_outcome`), and the record synced.

Resumable: a failed attempt that may succeed later (the Hub or storage unavailable, an interrupted upload) is
noted on the grant (`attempts`) and the process exits 75; Cloud Run runs the task again (max_retries), and the
new attempt skips every file the Hub already holds with the same size and sha256. The last attempt (Cloud Run's
CLOUD_RUN_TASK_ATTEMPT reaching --max-retries, or the last of --retry-here's own tries) files the failure as
`apply_failed` instead, so a grant never stays `applying` after its job has given up.

Exit status: 0 applied (or already filed), 1 refused (filed), 2 usage, 75 failed, to be retried.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from rlcleanup.authority import ledger
from rlcleanup.authority.actions import HUB_JOB_GRANT_VAR, HUB_JOB_RUN_VAR
from rlcleanup.authority.artifact import pin
from rlcleanup.authority.grants import Grant, GrantState, Refusal, verify
from rlcleanup.authority.hub_publish import UploadProgress, publish_to_hub
from rlcleanup.authority.ledger import GrantDoc
from rlcleanup.authority.outcome import Outcome, refuse
from rlcleanup.errors import PermanentError, TransientError
from rlcleanup.runtime.authority_handlers import announce_grant
from rlcleanup.runtime.evidence import refresh_report
from rlcleanup.runtime.ports import Ports
from rlcleanup.settings import HubSettings, platform, read

RUN_VAR, GRANT_VAR = HUB_JOB_RUN_VAR, HUB_JOB_GRANT_VAR
EX_TEMPFAIL = 75
_FINAL = {GrantState.used.value, GrantState.refused.value, GrantState.expired.value}


def execution_name() -> str:
    """Which execution is uploading (Cloud Run sets CLOUD_RUN_EXECUTION in a job's container)."""
    return platform().execution or f"local pid {os.getpid()}"


def run_job(p: Ports, run_id: str, gid: str, *, last_attempt: bool = True, batch_files: int | None = None) -> Outcome:
    """One attempt. Raises TransientError (after noting it on the grant) when a later attempt may succeed and
    this is not the last one."""
    doc = ledger.get_grant_doc(p.records, run_id, gid)
    if doc is None:
        raise PermanentError("bad_input", f"no grant {gid!r} is filed on run {run_id!r}")
    if doc.state in _FINAL:  # a finished job started again: nothing to redo but the announcement
        _announce_again(p, gid, doc)  # the attempt that filed it may have died before announcing
        return Outcome(state=str(doc.result.get("state", doc.state.value)), detail="already applied")
    message = doc.message()
    verdict = verify(
        p.records,
        message,
        p.clock.now(),
        expected_run=run_id,
        deployment_prefixes=p.allowed_destination_prefixes,
        limits=p.settings.grant_limits,
    )
    record = p.records.get(run_id)
    execution = execution_name()
    if verdict.grant is None or verdict.refusal is not None or record is None:
        outcome = refuse(verdict.refusal or Refusal.record_not_eligible, verdict.detail or "no completion record")
    else:

        def progress(up: UploadProgress) -> None:
            ledger.set_progress(p.records, run_id, gid, up.as_doc(), f"{up.line()} [{execution}]", p.clock.now())
            ledger.sync_record(p.records, run_id)

        try:
            pinned = pin(p.storage, record, verdict.grant)  # the digest check, again: days may have passed
            if isinstance(pinned, Outcome):
                outcome = pinned
            else:
                hub = p.model_hub()
                outcome = publish_to_hub(
                    p.storage, record, verdict.grant, hub, pinned, progress=progress, batch_files=batch_files
                )
        except TransientError as exc:
            cause = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
            if not last_attempt:
                ledger.note_attempt(p.records, run_id, gid, execution, cause, p.clock.now())
                ledger.sync_record(p.records, run_id)
                raise
            outcome = refuse(Refusal.apply_failed, f"the upload job's last attempt failed: {cause}")
        except Exception as exc:  # permanent (auth, a defect): recorded, never left `applying`
            outcome = refuse(Refusal.apply_failed, f"{type(exc).__name__}: {str(exc)[:500]}")
        if outcome.destination is None:
            outcome.destination = verdict.grant.destination
    ledger.file_outcome(p.records, run_id, gid, outcome, p.clock.now())
    ledger.sync_record(p.records, run_id)
    if verdict.grant is not None:  # a verified hand-off is announced downstream (model-published), as apply-grant does
        announce_grant(p, verdict.grant, gid)
    refresh_report(p, run_id)  # the report says where the model went (runtime/evidence.py)
    return outcome


def _announce_again(p: Ports, gid: str, doc: GrantDoc) -> None:
    """Re-announce a hand-off this job already filed (same event id): at least once, never a lost announcement."""
    try:
        grant = Grant.model_validate(doc.grant)
    except ValueError:
        return  # not a grant this job could have carried out: nothing it announced
    announce_grant(p, grant, gid)


def local_ports(db: str, preserve_root: str | None) -> Ports:
    """The embedded stack's stores, opened again by this process (the launcher passed where they are)."""
    from rlcleanup.adapters.inprocess_bus import InProcessBus
    from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
    from rlcleanup.adapters.storage_router import RoutingStorage
    from rlcleanup.settings import load_settings

    return Ports(
        storage=RoutingStorage(),
        records=SqliteRunRecords(db),
        claims=SqliteIdempotencyStore(db),
        bus=InProcessBus(),  # the embedded default: its model-published announcement reaches nobody outside
        settings=load_settings().model_copy(update={"preserve_root": preserve_root}),
    )


def job_arguments(parser: argparse.ArgumentParser) -> None:
    """What every job kind's entry point takes (the local launcher passes the first two; Terraform the last)."""
    parser.add_argument("--sqlite", help="the embedded stack's record store (default: Firestore from the settings)")
    parser.add_argument("--preserve-root")
    parser.add_argument("--max-retries", type=int, default=0, help="as the Cloud Run job's max_retries")


def job_ports(args: argparse.Namespace) -> Ports:
    """The embedded stack's stores when the launcher named them, else the deployment's (Firestore, Pub/Sub)."""
    if args.sqlite:
        return local_ports(args.sqlite, args.preserve_root)
    from rlcleanup.runtime.ports import cloud_ports
    from rlcleanup.settings import load_settings

    return cloud_ports(load_settings())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlcleanup.runtime.hub_job", description=__doc__.split("\n")[0])
    job_arguments(parser)
    parser.add_argument("--retry-here", action="store_true", help="retry in this process (no Cloud Run to do it)")
    parser.add_argument("--batch-files", type=int, help="files per commit (default hub_publish.BATCH_FILES)")
    args = parser.parse_args(argv)
    job = read(HubSettings, secret=True)  # RLCLEANUP_HUB_RUN_ID / RLCLEANUP_HUB_GRANT_ID: the job's overrides
    run_id, gid = job.run_id, job.grant_id
    if not run_id or not gid:
        print(f"{RUN_VAR} and {GRANT_VAR} must be set (job overrides)", file=sys.stderr)
        return 2
    p = job_ports(args)
    attempt = platform().task_attempt or 0
    while True:
        try:
            outcome = run_job(p, run_id, gid, last_attempt=attempt >= args.max_retries, batch_files=args.batch_files)
            break
        except TransientError as exc:
            print(f"attempt {attempt} failed, to be retried: {exc}", file=sys.stderr)
            if not args.retry_here:
                return EX_TEMPFAIL
            attempt += 1
            time.sleep(min(2.0**attempt, 30.0))
    print(json.dumps(outcome.as_doc()))
    return 0 if outcome.refusal is None else 1


if __name__ == "__main__":
    sys.exit(main())
