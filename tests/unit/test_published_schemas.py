"""The published JSON Schemas (docs/*.schema.json) stay the models': each is what its module generates now, names
the fields every event must carry, and describes every field a subscriber reads."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from rlcleanup.models.model_events import model_event_schema
from rlcleanup.stack.emit import job_event_schema

REPO = Path(__file__).resolve().parents[2]

# doc, its generator, the models it is drawn from, the module that prints it, its required fields, the definition
# whose properties a subscriber reads (None: the top level)
SCHEMAS = [
    pytest.param(
        "job-event.schema.json",
        job_event_schema,
        "models/events.py",
        "rlcleanup.stack.emit",
        {"source", "job_id", "run_uri", "state", "observed_at"},
        None,
        id="job-event",
    ),
    pytest.param(
        "model-event.schema.json",
        model_event_schema,
        "models/model_events.py",
        "rlcleanup.models.model_events",
        {"specversion", "type", "source", "id", "time", "subject", "datacontenttype", "data"},
        "ModelEventData",
        id="model-event",
    ),
]


@pytest.mark.parametrize(("doc", "generate", "models", "module", "required", "described"), SCHEMAS)
def test_published_schema_is_the_models(
    doc: str, generate: Callable[[], str], models: str, module: str, required: set[str], described: str | None
) -> None:
    published = (REPO / "docs" / doc).read_text()
    assert published == generate(), (
        f"docs/{doc} drifted from {models}: regenerate it with `.venv/bin/python -m {module} > docs/{doc}`"
    )
    schema = json.loads(published)
    assert set(schema["required"]) == required
    properties = (schema["$defs"][described] if described else schema)["properties"]
    assert properties and all(prop.get("description") for prop in properties.values())
