"""Rendezvous evidence on the emulator stack (issue 35 item 1): a run on GCS and one on S3 whose first cause is only
in the rendezvous (a rank's Ray log; a termination artifact's OOM kill). The evidence is preserved into the GCS
preserve bucket, hashed in the manifest and cited as the cause; a node's sync manifest naming a missing file shows
on the record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import sample_on_gcs, wait_record

from rlcleanup.adapters.s3_storage import S3Storage
from rlcleanup.models.record import CompletionRecord
from rlcleanup.samples.generator import VERSION, write_sample_run
from rlcleanup.samples.upload import upload_sample_run_to
from rlcleanup.stack import StackState
from rlcleanup.stack.emit import job_event, publish_event

pytestmark = pytest.mark.e2e


def _rendezvous_objects(gcs_client: Any, record: CompletionRecord) -> dict[str, dict[str, Any]]:
    assert record.manifest_uri is not None
    bucket, _, key = record.manifest_uri.removeprefix("gs://").partition("/")
    manifest = json.loads(gcs_client.bucket(bucket).blob(key).download_as_bytes())
    return {o["source"]: o for o in manifest["objects"] if o["kind"] == "rendezvous_evidence"}


def test_rank_cause_and_sync_manifest_on_gcs(stack: StackState, gcs_client, tmp_path: Path, uid: str) -> None:  # type: ignore[no-untyped-def]
    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "rendezvous-rank-cause", uid)
    publish_event(job_event(run_uri, "FAILED"), stack.project)
    record = wait_record(stack.project, run_id, timeout=180)
    cause = record.first_failure_cause
    assert cause is not None and cause.evidence_source == "rank_log", record.terminal_reasoning
    assert cause.source_uri.startswith(f"gs://{stack.buckets['runs']}/") and "/ray_session_logs/" in cause.source_uri
    preserved = _rendezvous_objects(gcs_client, record)
    cited = preserved[cause.source_uri]
    assert cited["crc32c"] and cited["md5"]  # hashed in the manifest
    bucket, _, key = str(cited["destination"]).removeprefix("gs://").partition("/")
    assert gcs_client.bucket(bucket).get_blob(key) is not None
    missing = [(i.status, i.path) for i in record.incomplete_evidence if i.status == "missing"]
    assert missing == [("missing", "flight_recorder/nccl_fr_rank_1")]


def test_termination_artifact_cause_on_s3(stack: StackState, s3_admin, gcs_client, tmp_path: Path, uid: str) -> None:  # type: ignore[no-untyped-def]
    write_sample_run(tmp_path, "termination-oom")
    name = f"s3-termination-oom-{uid}"
    root = f"s3://{stack.buckets['s3-runs']}/iris/{uid}"
    run_uri = upload_sample_run_to(S3Storage(), tmp_path, root, rename=name)
    publish_event(job_event(run_uri, "FAILED"), stack.project)
    record = wait_record(stack.project, f"{name}-{VERSION}", timeout=180)
    cause = record.first_failure_cause
    assert cause is not None and (cause.evidence_source, cause.error_type) == ("termination_artifact", "CgroupOOMKill")
    assert cause.source_uri.startswith(f"s3://{stack.buckets['s3-runs']}/") and "/term_artifacts/" in cause.source_uri
    cited = _rendezvous_objects(gcs_client, record)[cause.source_uri]
    assert str(cited["destination"]).startswith(f"gs://{stack.buckets['preserve']}/") and cited["size"] > 0
