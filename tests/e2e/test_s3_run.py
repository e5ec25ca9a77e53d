"""A sample run stored on S3 (the stack's SeaweedFS, as a CoreWeave run sits in s3://…/iris/…) through the whole
event-driven flow: classify, terminal state, capture into the GCS preserve bucket, header-only validation of its
exports over ranged GETs, the completion record in Firestore."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_helpers import wait_record

from rlcleanup.adapters.s3_storage import S3Storage
from rlcleanup.samples.generator import VERSION, write_sample_run
from rlcleanup.samples.upload import upload_sample_run_to
from rlcleanup.stack import StackState
from rlcleanup.stack.emit import job_event, publish_event

pytestmark = pytest.mark.e2e


def test_completed_resumed_run_on_s3(stack: StackState, s3_admin, gcs_client, tmp_path: Path, uid: str) -> None:  # type: ignore[no-untyped-def]
    write_sample_run(tmp_path, "completed-resumed")
    name = f"s3-completed-resumed-{uid}"
    root = f"s3://{stack.buckets['s3-runs']}/iris/{uid}"
    run_uri = upload_sample_run_to(S3Storage(), tmp_path, root, rename=name)
    assert run_uri.startswith(f"s3://{stack.buckets['s3-runs']}/iris/{uid}/")
    publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
    record = wait_record(stack.project, f"{name}-{VERSION}", timeout=180)

    assert record.status.value == "awaiting_authority", record.errors
    assert record.run_uri == run_uri
    assert record.terminal_state is not None and record.terminal_state.value == "completed"
    assert (record.step_budget, record.last_trained_step, record.last_saved_step) == (20, 20, 20)
    assert [a.state for a in record.chain.attempts] == ["failed", "succeeded"]
    assert [(c.step, c.valid, c.problems) for c in record.candidates] == [(s, True, []) for s in (5, 10, 15, 20)]
    assert all(c.uri.startswith("s3://") and c.parameter_count for c in record.candidates)
    assert record.resume_safety is not None and record.resume_safety.safe

    # Evidence went from S3 to the GCS preserve bucket, streamed through the functions, and is really there.
    assert record.manifest_uri and record.manifest_uri.startswith(f"gs://{stack.buckets['preserve']}/")
    bucket, _, key = record.manifest_uri.removeprefix("gs://").partition("/")
    manifest = json.loads(gcs_client.bucket(bucket).blob(key).download_as_bytes())
    assert manifest["captured_object_count"] == record.preserved_object_count > 20
    sources = {o["source"] for o in manifest["objects"] if o.get("source") != "derived"}
    assert sources and all(s.startswith(f"s3://{stack.buckets['s3-runs']}/") for s in sources)
    for obj in manifest["objects"][:10]:
        b, _, k = obj["destination"].removeprefix("gs://").partition("/")
        blob = gcs_client.bucket(b).get_blob(k)
        assert blob is not None and blob.size == obj["size"], obj["destination"]
