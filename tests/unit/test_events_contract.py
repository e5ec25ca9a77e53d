"""The documented event contract stays the code's: the published JSON Schema is the model's, and docs/events.md
names every job-state source and every spelling its table routes on."""

from __future__ import annotations

import json
from pathlib import Path

from rlcleanup.models import controller_states
from rlcleanup.stack.emit import job_event_schema

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "events.md").read_text()


def test_published_schema_is_the_models() -> None:
    published = (REPO / "docs" / "job-event.schema.json").read_text()
    assert published == job_event_schema(), (
        "docs/job-event.schema.json drifted from models/events.py: regenerate it with "
        "`.venv/bin/python -m rlcleanup.stack.emit > docs/job-event.schema.json`"
    )
    schema = json.loads(published)
    assert set(schema["required"]) == {"source", "job_id", "run_uri", "state", "observed_at"}
    assert all(prop.get("description") for prop in schema["properties"].values())


def test_events_doc_names_every_source_and_spelling() -> None:
    for name, table in controller_states.SOURCES.items():
        assert f"`{name}`" in DOC, f"docs/events.md does not describe source {name}"
        for spelling in table.states:
            assert spelling.lower() in DOC.lower(), f"docs/events.md lacks {name} state {spelling}"
