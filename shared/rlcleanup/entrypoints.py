"""Cloud Run function entry points (functions-framework, CloudEvent signature). No logic lives here.

Inside the package so that it ships in the wheel: `rlcleanup stack up` serves this file (functions-framework
`--source`) from wherever rlcleanup is installed; the Cloud Run bundle's functions/main.py re-exports these names.

Every function of runtime/topology.yaml gets its entry point here, by name. Each decodes the Pub/Sub message, then
hands it to `rlcleanup.runtime.handlers.dispatch`, which guards idempotency, runs the step and publishes the next
messages. A transient error answers HTTP 500 (Pub/Sub redelivers; one ERROR line logged); bad input is recorded and
dead-lettered (HTTP 200).

Importing this module is every cold start's first cost, so it imports only functions-framework, the deployment
settings (validated here: a bad variable stops the instance before it takes a delivery) and the entry points' names
(read from topology.yaml without building the checked topology). The pipeline itself (`runtime/functions.py`: the
topology, the stage table, the client libraries) is imported by the first delivery; torch, transformers, botocore
and huggingface_hub only by the step that uses them (`tests/unit/test_import_weight.py` keeps it so).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

import functions_framework
import yaml

from rlcleanup.settings import load_settings

if TYPE_CHECKING:
    from cloudevents.http import CloudEvent

load_settings()  # cold start: a bad value stops the instance here (SettingsError names the variable)


def _entry(entry_point: str) -> Callable[[CloudEvent], None]:
    def entry(cloud_event: CloudEvent) -> None:
        from rlcleanup.runtime.functions import serve_cloud_event  # the pipeline: imported by the first delivery

        serve_cloud_event(entry_point, cloud_event)

    # Name it before registering: functions-framework looks the target up by name in its registry.
    entry.__name__ = entry.__qualname__ = entry_point
    registered: Callable[[CloudEvent], None] = functions_framework.cloud_event(entry)
    return registered


def entry_point_names() -> list[str]:
    """Every function's entry point as topology.yaml names it (its raw text: the checked topology, runtime/
    topology.py, is built by the first delivery; tests/unit/test_topology.py holds the two equal)."""
    text = resources.files("rlcleanup.runtime").joinpath("topology.yaml").read_text()
    # libyaml's parser (PyYAML's C extension, in its manylinux wheels): the pure-Python SafeLoader spent ~20 ms of
    # every cold start on this file. The same safe subset of YAML either way; the fallback only if the wheel lacks it.
    raw: dict[str, Any] = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return [str(fn["entry_point"]) for fn in raw["functions"]]


def register_entry_points(names: list[str]) -> dict[str, Callable[[CloudEvent], None]]:
    """One registered entry point per name; a functions source binds them at its top level (as below)."""
    return {name: _entry(name) for name in names}


# One per function of topology.yaml (each has its stage table row: runtime/stage_table.py), named as its entry point
# at the top level of this module, where functions-framework looks a target up.
ENTRY_POINTS: dict[str, Callable[[CloudEvent], None]] = register_entry_points(entry_point_names())
globals().update(ENTRY_POINTS)
__all__ = sorted(ENTRY_POINTS)
