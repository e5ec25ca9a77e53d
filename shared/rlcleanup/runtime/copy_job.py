"""The large-copy job (`python -m rlcleanup.runtime.copy_job`, kind `large-copy`): capture parts too large for
one function invocation, copied server-side by the tasks of one execution (runtime/stages/large_copy.py says
how the part is split, filed and handed back). On GCP the Cloud Run job `<prefix>-large-copy`
(infra/modules/rlcleanup/copy_job.tf), locally child processes (adapters/local_jobs.py), one per task.

Started with the overrides RLCLEANUP_COPY_RUN_ID and RLCLEANUP_COPY_TICKET (the claim key of the part's ticket,
which capture-part filed before starting the job: the job copies only what a ticket on the run names).
Resumable as the Hub upload job is: a failure that may pass exits 75 and Cloud Run runs the task again; the last
attempt (CLOUD_RUN_TASK_ATTEMPT reaching --max-retries) files the slice's objects as not copied instead.

Exit status: 0 slice filed (and the part, when it was the last), 2 usage, 75 failed, to be retried.
"""

from __future__ import annotations

import argparse
import sys

from rlcleanup.errors import TransientError
from rlcleanup.runtime.hub_job import EX_TEMPFAIL, job_arguments, job_ports
from rlcleanup.runtime.stages.large_copy import COPY_RUN_VAR, COPY_TICKET_VAR, run_task
from rlcleanup.settings import CopyJobSettings, platform, read


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlcleanup.runtime.copy_job", description=__doc__.split("\n")[0])
    job_arguments(parser)
    args = parser.parse_args(argv)
    job = read(CopyJobSettings)
    if not job.run_id or not job.ticket:
        print(f"{COPY_RUN_VAR} and {COPY_TICKET_VAR} must be set (job overrides)", file=sys.stderr)
        return 2
    p = job_ports(args)
    task = platform()
    last = (task.task_attempt or 0) >= args.max_retries
    try:
        print(run_task(p, job.run_id, job.ticket, task.task_index, task.task_count, last_attempt=last))
    except TransientError as exc:
        print(f"task {task.task_index} attempt {task.task_attempt or 0} failed, to be retried: {exc}", file=sys.stderr)
        return EX_TEMPFAIL
    return 0


if __name__ == "__main__":
    sys.exit(main())
