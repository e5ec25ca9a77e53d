"""Issue 38 item 7 on the emulator stack: the notify function (its own functions-framework process, on
record-ready from the Pub/Sub emulator, records in the Firestore emulator) posts to the stand-in webhook
(tests/servers/webhook_standin.py) exactly one message per run state; a redelivered or repeated record-ready posts
nothing, a new state posts once more. The stand-in's URL reaches the function as a deployment's would: an
environment variable read at cold start (the stack restarts notify with it, and without it afterwards, so no
other test's runs post anywhere)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import function_log, sample_on_gcs, served_functions, wait_log, wait_record

from rlcleanup.adapters.firestore_records import firestore_stores
from rlcleanup.report.verdict import build_verdict
from rlcleanup.stack import StackState, restart_function
from rlcleanup.stack.emit import job_event, publish_event
from rlcleanup.textsafe import neutralise
from servers.notify_support import messages, webhook_standin
from servers.webhook_standin import SLACK_PATH

pytestmark = pytest.mark.e2e


@pytest.fixture
def webhook(stack: StackState, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with webhook_standin(tmp_path_factory.mktemp("webhook")) as base:
        restart_function(stack, "notify", extra_env={"RLCLEANUP_NOTIFY_WEBHOOK_URL": base + SLACK_PATH})
        try:
            yield base
        finally:
            restart_function(stack, "notify", extra_env={"RLCLEANUP_NOTIFY_WEBHOOK_URL": ""})


def _posted(base: str, run_id: str) -> list[str]:
    return [m["body"]["text"] for m in messages(base) if f"run {run_id} " in m["body"]["text"]]


def _wait_posted(base: str, run_id: str, count: int, timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(found := _posted(base, run_id)) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def test_the_stack_posts_one_message_per_run_state(
    stack: StackState, webhook: str, gcs_client, tmp_path: Path, uid: str
) -> None:  # type: ignore[no-untyped-def]
    from google.cloud import pubsub_v1

    run_uri, run_id = sample_on_gcs(stack, gcs_client, tmp_path, "completed-resumed", uid)
    publish_event(job_event(run_uri, "SUCCEEDED"), stack.project)
    record = wait_record(stack.project, run_id)
    [text] = _wait_posted(webhook, run_id, 1)
    assert text.splitlines()[1] == neutralise(build_verdict(record).line, keep_newlines=False)
    assert "command: rlcleanup grant" in text

    [notify] = [fn for fn in served_functions(stack) if fn.name == "notify"]
    log = function_log(stack, notify)
    told_before = log.read_text(errors="replace").count("already told")
    publisher = pubsub_v1.PublisherClient()
    topic = publisher.topic_path(stack.project, "record-ready")
    ready = json.dumps({"run_id": run_id, "status": record.status.value}).encode()
    for _ in range(2):  # the same state again (a redelivery, a re-render): nothing posted
        publisher.publish(topic, ready, run_id=run_id).result(timeout=30)
    wait_log(log, "already told", told_before + 2)
    assert len(_posted(webhook, run_id)) == 1

    records, _ = firestore_stores(project=stack.project)
    records.update(run_id, {"remaining_work": record.remaining_work[1:]})  # a new state: one more message
    publisher.publish(topic, ready, run_id=run_id).result(timeout=30)
    publisher.publish(topic, ready, run_id=run_id).result(timeout=30)
    wait_log(log, "already told", told_before + 3)
    posted = _wait_posted(webhook, run_id, 2)
    assert len(posted) == 2 and posted[0] != posted[1]
