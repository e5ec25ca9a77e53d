"""Issue 49 part 2 in the embedded default: a verified publish announces exactly one `model-published` CloudEvent
on the model-events topic, a redelivered grant application announces it again under the same id (the dedupe key),
a reclaim announces `model-reclaimed`, a refused grant announces nothing, and the published schema is the model's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from authority_support import World, make_world

from rlcleanup.errors import TransientError
from rlcleanup.models.model_events import ModelEvent, ModelEventType, event_id
from rlcleanup.runtime.topology import load_topology

REPO = Path(__file__).resolve().parents[2]
TOPIC = load_topology().route("apply-grant", "announce")


def _announced(w: World) -> list[tuple[ModelEvent, dict[str, str]]]:
    return [(ModelEvent.model_validate_json(m.data), m.attributes) for m in w.stack.bus.published if m.topic == TOPIC]


def test_a_verified_publish_announces_one_model_published_event_and_a_redelivery_the_same_id(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    refused = w.grant(digest="0" * 64)  # not the candidate's digest: refused before any byte moves
    w.deliver(w.message(refused))
    assert w.grant_doc(refused.grant_id)["state"] == "refused"
    assert _announced(w) == [], "a refused grant announced a model"

    grant = w.grant()
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["state"] == "published"
    announced = _announced(w)
    assert len(announced) == 1, announced
    event, attributes = announced[0]
    candidate = w.candidate(grant.step)
    data = event.data
    assert event.type is ModelEventType.published and event.specversion == "1.0"
    assert event.subject == f"runs/{w.run_id}/steps/{grant.step}"
    assert (data.run_id, data.step, data.destination) == (w.run_id, grant.step, grant.destination)
    assert data.manifest_digest == grant.digest == candidate.digest
    assert data.model_identity == candidate.model_identity
    assert data.grant.grant_id == grant.grant_id and data.grant.granted_by == "alice"
    assert data.provenance_uri is not None and data.provenance_uri.endswith("provenance.json")
    assert Path(data.provenance_uri).is_file()  # the provenance the event names is there to read
    assert data.verified_objects > 0
    assert event.id == event_id(ModelEventType.published, grant.grant_id, grant.destination, grant.digest)
    # The Pub/Sub binding: structured mode, with the context attributes as `ce-` attributes to filter on.
    assert attributes["Content-Type"].startswith("application/cloudevents+json")
    assert (attributes["ce-id"], attributes["ce-type"]) == (event.id, "dev.rlcleanup.model.published")
    assert attributes["ce-subject"] == event.subject and attributes["ce-specversion"] == "1.0"

    w.deliver(w.message(grant))  # Pub/Sub redelivers the same grant after it was carried out
    again = _announced(w)
    assert len(again) == 2 and again[1][0].id == event.id and again[1][0].data == data
    assert w.action(grant.grant_id)["state"] == "published"


def test_a_worker_dying_after_filing_still_announces_once_under_one_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker dies after the outcome is filed but before the announcement: the redelivery (refused as a replay,
    never applied twice) announces it, so the event is sent at least once, and every copy carries one id."""
    w = make_world(tmp_path)
    publish = w.stack.bus.publish
    died: list[str] = []

    def dies_before_announcing(topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
        if topic == TOPIC and not died:
            died.append(topic)
            raise TransientError("worker lost between filing and announcing")
        return publish(topic, data, attributes)

    monkeypatch.setattr(w.stack.bus, "publish", dies_before_announcing)
    grant = w.grant()
    w.deliver(w.message(grant))
    assert died, "the announcement never failed: the test would prove nothing"
    announced = _announced(w)
    assert len(announced) == 1, announced
    assert announced[0][0].id == event_id(ModelEventType.published, grant.grant_id, grant.destination, grant.digest)
    assert w.action(grant.grant_id)["state"] == "published"


def test_a_reclaim_announces_model_reclaimed_and_a_restore_model_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "RLCLEANUP_DB"):
        monkeypatch.delenv(var, raising=False)  # the CLI below uses this world's SQLite store
    w = make_world(tmp_path)
    w.deliver(w.message(w.grant()))  # a reclaim needs the verified publish it keeps the model at
    grant = w.grant("reclaim")
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["state"] == "reclaimed", action
    announced = _announced(w)
    assert [e.type for e, _ in announced] == [ModelEventType.published, ModelEventType.reclaimed]
    assert announced[0][0].id != announced[1][0].id
    event = announced[1][0]
    assert event.data.grant.action == "reclaim" and event.data.reclaimed_bytes == action["reclaimed_bytes"]
    assert event.data.manifest_digest == grant.digest
    _restore_events_after(w, grant.grant_id, grant.digest)


def _restore_events_after(w: World, grant_id: str, digest: str | None) -> None:
    """`rlcleanup restore` puts the reclaimed export back and shows one model-restored event for the reclaim grant
    (the embedded default has no bus anyone outside hears, and says so); the same event published on a bus is a
    model-restored CloudEvent on the model-events topic."""
    from typer.testing import CliRunner

    from rlcleanup.cli.main import app
    from rlcleanup.runtime.authority_handlers import publish_announcement

    result = CliRunner().invoke(app, ["restore", w.run_id, "--db", str(w.tmp / "records.db"), "--json"])
    assert result.exit_code == 0, result.stdout
    out = json.loads(result.stdout)
    assert out["restored"] and out["announced"] is None and "no event bus" in out["not_announced"]
    [shown] = [ModelEvent.model_validate(e) for e in out["events"]]
    assert shown.type is ModelEventType.restored and shown.data.grant.grant_id == grant_id
    assert shown.data.restored_objects == sorted(out["restored"]) and shown.data.manifest_digest == digest
    publish_announcement(w.stack.bus, shown)
    assert _announced(w)[-1][0] == shown
