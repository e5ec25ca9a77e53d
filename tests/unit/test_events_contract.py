"""The documented event contract stays the code's: docs/events.md names every job-state source and every spelling
its table routes on (the published JSON Schema is held to the model by test_published_schemas.py)."""

from __future__ import annotations

from pathlib import Path

from rlcleanup.models import controller_states

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "events.md").read_text()


def test_events_doc_names_every_source_and_spelling() -> None:
    for name, table in controller_states.SOURCES.items():
        assert f"`{name}`" in DOC, f"docs/events.md does not describe source {name}"
        for spelling in table.states:
            assert spelling.lower() in DOC.lower(), f"docs/events.md lacks {name} state {spelling}"
