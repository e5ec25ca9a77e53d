"""The large-copy job on the emulator stack (issue 36 item 2): capture parts over the job threshold are copied by the
job's tasks (here the same entry point as child processes, RLCLEANUP_LARGE_COPY_JOB=local, as the stack deploys
every function) instead of inside capture-part, against the same emulators, and the run reaches the same complete
record. The stack restarts capture-part with the threshold lowered to one byte (every part goes to the job) and
puts it back afterwards, so no other test's runs take this path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import sample_on_gcs, wait_record

from rlcleanup.adapters.firestore_records import firestore_stores
from rlcleanup.stack import StackState, restart_function
from rlcleanup.stack.emit import job_event, publish_event

pytestmark = pytest.mark.e2e
JOB_CLAIMS = "large-copy/"  # runtime/stages/large_copy.JOB_CLAIMS


@pytest.fixture
def every_part_to_the_job(stack: StackState) -> Iterator[None]:
    restart_function(stack, "capture-part", extra_env={"RLCLEANUP_COPY_JOB_THRESHOLD_BYTES": "1"})
    try:
        yield
    finally:
        restart_function(stack, "capture-part", extra_env={"RLCLEANUP_COPY_JOB_THRESHOLD_BYTES": str(50 << 30)})


def test_capture_parts_over_the_threshold_are_copied_by_the_job_on_the_stack(  # type: ignore[no-untyped-def]
    stack: StackState, gcs_client, tmp_path: Path, uid: str, every_part_to_the_job: None
) -> None:
    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "completed-resumed", uid)
    publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
    record = wait_record(stack.project, run_id, timeout=240)
    assert record.status.value == "awaiting_authority" and not record.errors, record.errors
    assert record.preserved_object_count > 0

    _, claims = firestore_stores(project=stack.project)
    jobbed: dict[str, Any] = claims.results(run_id, JOB_CLAIMS)
    starts = [k for k in jobbed if k.endswith("/job-start")]
    assert starts, sorted(jobbed)  # parts were handed to the job, not copied inline
    assert all("local pid" in jobbed[k]["execution"] for k in starts)
    parts = claims.results(run_id, "capture-part:")
    handed = {k.removeprefix(JOB_CLAIMS).removesuffix("/job-start") for k in starts}
    assert handed <= set(parts), (sorted(parts), starts)  # each under the inline path's own claim key, done there
    assert all(int(parts[k]["bytes"]) > 1 for k in handed)
    # every preserved object is in the preserve bucket, as the inline path leaves it
    bucket = gcs_client.bucket(stack.buckets["preserve"])
    assert record.manifest_uri is not None
    _, _, key = record.manifest_uri.removeprefix("gs://").partition("/")
    assert bucket.get_blob(key) is not None
