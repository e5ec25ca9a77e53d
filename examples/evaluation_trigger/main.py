"""A sample subscriber of rlcleanup's model events (docs/events-out.md): a Cloud Run function that starts an
evaluation of every model rlcleanup publishes.

It receives the `model-published` CloudEvent through a Pub/Sub push subscription on `model-events`, and "starts an
evaluation" by writing one evaluation request per event to EVALUATION_REQUESTS (a `gs://bucket/prefix` or a local
directory): `<event id>.json`, created only if absent. The event id is rlcleanup's dedupe key, so a redelivered or
re-announced event finds its request already there and changes nothing; an evaluation system watching that place
(a Cloud Storage notification, a poller) runs each request once.

It depends on the event contract only (docs/model-event.schema.json), not on rlcleanup. Deploy::

    gcloud functions deploy start-evaluation --gen2 --runtime python312 --source examples/evaluation_trigger \\
        --entry-point start_evaluation --trigger-topic model-events \\
        --set-env-vars EVALUATION_REQUESTS=gs://my-evals/requests

Other event types on the topic (`model-reclaimed`, `model-restored`) are acknowledged and ignored here. A message
that is not a model event at all raises: Pub/Sub redelivers it and, with a dead-letter policy on the subscription,
parks it after the last attempt instead of it being dropped unseen.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from pathlib import Path
from typing import Any

import functions_framework
from cloudevents.http import CloudEvent

PUBLISHED = "dev.rlcleanup.model.published"
log = logging.getLogger("evaluation_trigger")


def evaluation_request(event: dict[str, Any]) -> dict[str, Any]:
    """What the evaluation system is asked to do: which model (where, which bytes), and where it came from."""
    data = event["data"]
    return {
        "event_id": event["id"],
        "model": data["destination"],
        "manifest_digest": data["manifest_digest"],
        "model_identity": data.get("model_identity"),
        "base_model": data.get("base_model"),
        "run_id": data["run_id"],
        "step": data["step"],
        "provenance": data.get("provenance_uri"),
        "record": data.get("record_url"),
        "published_at": event["time"],
    }


def write_once(where: str, name: str, body: bytes) -> bool:
    """Create `where/name` unless it exists; True when this call created it."""
    if where.startswith("gs://"):
        from google.api_core.exceptions import PreconditionFailed
        from google.cloud import storage

        bucket, _, prefix = where.removeprefix("gs://").partition("/")
        blob = storage.Client().bucket(bucket).blob(f"{prefix.rstrip('/')}/{name}".lstrip("/"))
        try:
            blob.upload_from_string(body, content_type="application/json", if_generation_match=0)
        except PreconditionFailed:
            return False
        return True
    path = Path(where) / name
    try:
        with path.open("xb") as f:  # O_EXCL: two deliveries at once still create it once
            f.write(body)
    except FileExistsError:
        return False
    return True


def model_event(cloud_event: CloudEvent) -> dict[str, Any]:
    """The rlcleanup event inside a Pub/Sub push delivery (structured mode: the whole CloudEvent is the data)."""
    message = cloud_event.data["message"]
    event: dict[str, Any] = json.loads(base64.b64decode(message["data"]))
    if event.get("specversion") != "1.0" or not str(event.get("type", "")).startswith("dev.rlcleanup.model."):
        raise ValueError(f"not an rlcleanup model event: message {message.get('messageId')}")
    return event


@functions_framework.cloud_event
def start_evaluation(cloud_event: CloudEvent) -> None:
    event = model_event(cloud_event)
    if event["type"] != PUBLISHED:
        log.info("ignored %s %s", event["type"], event["id"])
        return
    where = os.environ["EVALUATION_REQUESTS"]
    body = json.dumps(evaluation_request(event), indent=1, sort_keys=True).encode()
    created = write_once(where, f"{event['id']}.json", body)
    # One line per delivery: `received` counts deliveries, `created` says whether this one started the evaluation.
    print(json.dumps({"received": event["id"], "type": event["type"], "created": created}), flush=True)
