"""The sweep over an `s3://` run root on the stack's real S3 server (SeaweedFS): child listing page by page
through the storage registry, and a run on S3 whose event was never sent found and finished (embedded handlers,
SQLite records: the storage is what is under test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcleanup.adapters.s3_storage import S3Storage
from rlcleanup.models.events import JobEvent
from rlcleanup.models.vocab import RecordStatus
from rlcleanup.runtime.embedded import EmbeddedStack
from rlcleanup.samples.generator import VERSION, write_sample_run
from rlcleanup.samples.upload import upload_sample_run_to

pytestmark = pytest.mark.integration


@pytest.fixture
def bucket(s3_admin, uid: str) -> str:  # type: ignore[no-untyped-def]
    name = f"sweep-s3-{uid}"
    s3_admin.create_bucket(Bucket=name)
    return name


def test_child_pages_of_an_s3_prefix(s3_admin, bucket: str) -> None:  # type: ignore[no-untyped-def]
    for key in ("r/a/v1/x", "r/b/v1/x", "r/c.json", "r/d/", "r/e/v2/y", "r/f"):  # r/d/: a folder placeholder
        s3_admin.put_object(Bucket=bucket, Key=key, Body=b"" if key.endswith("/") else b"1")
    storage = S3Storage()
    pages, token = [], None
    while True:
        page = storage.list_children(f"s3://{bucket}/r", token, 2)
        pages.append(([p.rsplit("/", 1)[-1] for p in page.prefixes], [o.uri.rsplit("/", 1)[-1] for o in page.objects]))
        token = page.next_token
        if token is None:
            break
    # Names in S3's order, prefixes and objects mixed, two per page; the placeholder r/d/ is a child prefix (as
    # on GCS), never an object.
    assert pages == [(["a", "b"], []), (["d"], ["c.json"]), (["e"], ["f"])]
    whole = storage.list_children(f"s3://{bucket}/r/")
    assert whole.next_token is None and len(whole.prefixes) == 4 and whole.objects[0].updated is not None
    assert storage.list_children(f"s3://{bucket}/nothing-here").prefixes == []


def test_sweep_finds_a_run_on_s3_whose_event_was_never_sent(  # type: ignore[no-untyped-def]
    s3_admin, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_sample_run(tmp_path / "sample", "completed-resumed")
    run_uri = upload_sample_run_to(S3Storage(), tmp_path / "sample", f"s3://{bucket}/marin")
    root = run_uri.rsplit("/", 2)[0]  # s3://<bucket>/marin/durable: runs at <name>/<version> below it
    for name in ("busy-a", "busy-b", "busy-c"):  # still running (a fresh lock): listed, left alone
        prefix = f"{root.removeprefix(f's3://{bucket}/')}/{name}/v1"
        s3_admin.put_object(Bucket=bucket, Key=f"{prefix}/.executor_status", Body=b"RUNNING\n")
        s3_admin.put_object(Bucket=bucket, Key=f"{prefix}/.executor_status.lock", Body=b'{"worker_id": "w"}')
    monkeypatch.setenv("RLCLEANUP_SWEEP_ROOTS", root)
    monkeypatch.setenv("RLCLEANUP_SWEEP_PAGE_SIZE", "2")  # four runs: continuation pages on S3
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))
    stack.bus.publish("sweep", b"{}", {})
    stack.bus.drain()

    assert not [m for m in stack.bus.published if m.topic.endswith("-dlq")]
    pages = [m for m in stack.bus.published if m.topic == "sweep" and b'"page"' in m.data]
    assert len(pages) >= 3  # the root, its name level in two pages (page size 2), then each name's versions
    events = [JobEvent.model_validate_json(m.data) for m in stack.bus.published if m.topic == "job-events"]
    assert [(e.source, e.state, e.run_uri) for e in events] == [("sweep", "SUCCESS", run_uri)]
    record = stack.ports.records.get(f"math-rl-completed-resumed-{VERSION}")
    assert record is not None and record.status in (RecordStatus.awaiting_authority, RecordStatus.complete)
    assert record.terminal_state is not None and record.terminal_state.value == "completed"
    assert record.run_uri == run_uri and all(c.uri.startswith(f"s3://{bucket}/") for c in record.candidates)
