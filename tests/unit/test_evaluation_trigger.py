"""The sample subscriber (examples/evaluation_trigger) in-process: one evaluation request per model-published event
id, whatever the number of deliveries; other model events acknowledged and ignored; anything else refused loudly.
The events are the real ones rlcleanup builds (models/model_events.py), delivered in the Pub/Sub push shape."""

from __future__ import annotations

import base64
import importlib.util
import json
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest
from cloudevents.http import CloudEvent

from rlcleanup.models.model_events import GrantRef, ModelEvent, ModelEventData, ModelEventType, event_id

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "evaluation_trigger" / "main.py"


def _sample() -> ModuleType:
    spec = importlib.util.spec_from_file_location("evaluation_trigger_main", SAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _event(kind: ModelEventType) -> ModelEvent:
    digest = "ab" * 32
    return ModelEvent(
        type=kind,
        source="//rlcleanup/projects/p",
        id=event_id(kind, "g-1", "gs://models/m", digest),
        time=datetime(2026, 12, 7, tzinfo=UTC),
        subject="runs/r/steps/40",
        data=ModelEventData(
            run_id="r", run_uri="gs://runs/r", step=40, destination="gs://models/m", manifest_digest=digest,
            model_identity="sha256:" + "cd" * 32, base_model="Qwen/Qwen2.5-0.5B", kind="full",
            provenance_uri="gs://models/m/provenance.json", grant=GrantRef(grant_id="g-1", action="publish"),
            record_url=None,
        ),
    )  # fmt: skip


def _push(data: bytes, attributes: dict[str, str], message_id: str = "1") -> CloudEvent:
    """A Pub/Sub push delivery as functions-framework hands it to a CloudEvent function."""
    message = {"data": base64.b64encode(data).decode(), "attributes": attributes, "messageId": message_id}
    source = "//pubsub.googleapis.com/projects/p/topics/model-events"
    return CloudEvent({"type": "google.cloud.pubsub.topic.v1.messagePublished", "source": source}, {"message": message})


def test_one_request_per_event_id_whatever_the_deliveries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("EVALUATION_REQUESTS", str(tmp_path))
    sample = _sample()
    event = _event(ModelEventType.published)
    for delivery in ("1", "2"):  # a redelivery (or a re-announcement): same id, another message
        sample.start_evaluation(_push(event.message(), event.pubsub_attributes(), delivery))
    [written] = list(tmp_path.iterdir())
    assert written.name == f"{event.id}.json"
    request = json.loads(written.read_text())
    assert (request["model"], request["step"], request["manifest_digest"]) == ("gs://models/m", 40, "ab" * 32)
    assert request["event_id"] == event.id and request["run_id"] == "r"
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["created"] for line in lines] == [True, False]

    reclaimed = _event(ModelEventType.reclaimed)
    sample.start_evaluation(_push(reclaimed.message(), reclaimed.pubsub_attributes()))
    assert len(list(tmp_path.iterdir())) == 1  # acknowledged, no evaluation for a reclaim

    with pytest.raises(ValueError, match="not an rlcleanup model event"):
        sample.start_evaluation(_push(json.dumps({"run_id": "r"}).encode(), {}))
