"""The deferred HF export request reader (formats/export_request.py) over every schema version and state upstream
writes (MarinSkyRL skyrl-train `hf_export.py`@0bc9286, `hf_export_schema.py`@332ebde and its newest version;
`cloud/iris/export_hf_checkpoint.py`@05cb3a6 for the lifecycle)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.formats.export_request import describe, parse_request, read_request

_COMMON: dict[str, Any] = {
    "schema_version": 1,
    "step": 40,
    "checkpoint_path": "gs://b/tmp/ttl=14d/skyrl/users/a/job/checkpoints/global_step_40",
    "export_path": "gs://b/users/a/skyrl/job/exports",
    "model_path": "Qwen/Qwen3-8B",
    "num_nodes": 2,
    "gpus_per_node": 8,
    "hf_hub_repo_id": None,
    "hf_hub_private": False,
    "hf_hub_revision": "main",
    "hf_upload_mode": "latest",
}
# The three schema versions: v1 `strategy` + `timeout_seconds`; v2 `checkpoint_base_path`, no `strategy`; v3
# `timeout` (renamed) and the model source fields.
VARIANTS: dict[str, dict[str, Any]] = {
    "v1": _COMMON | {"strategy": "megatron", "timeout_seconds": None},
    "v2": _COMMON
    | {"checkpoint_base_path": "gs://b/tmp/ttl=14d/skyrl/users/a/job/checkpoints", "timeout_seconds": None},
    "v3": _COMMON
    | {
        "checkpoint_base_path": "gs://b/tmp/ttl=14d/skyrl/users/a/job/checkpoints",
        "model_source_uri": None,
        "model_source_identity": None,
        "timeout": None,
    },
}
TIMEOUT_KEY = {"v1": "timeout_seconds", "v2": "timeout_seconds", "v3": "timeout"}
# (status, attempts, last_exit_code, timeout) for each point of the lifecycle `submit_export` writes:
LIFECYCLE = {
    "written by training": ("pending", 0, None, None),
    "export job running": ("in_progress", 1, None, 7200),
    "failed twice": ("pending", 2, 1, 7200),
    "timed out": ("pending", 1, 124, 7200),
    "succeeded": ("complete", 1, 0, 7200),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("point", sorted(LIFECYCLE))
def test_every_version_and_state_is_read(variant: str, point: str) -> None:
    status, attempts, exit_code, timeout = LIFECYCLE[point]
    payload = VARIANTS[variant] | {"status": status, "attempts": attempts, "last_exit_code": exit_code}
    payload[TIMEOUT_KEY[variant]] = timeout
    request = parse_request("u/hf_export_request.json", payload)
    assert (request.status, request.attempts, request.last_exit_code, request.timeout_seconds) == (
        status,
        attempts,
        exit_code,
        timeout,
    )
    assert request.unreadable is None and request.export_path == "gs://b/users/a/skyrl/job/exports"


def test_a_failed_export_reads_pending_with_its_attempts_and_exit_code() -> None:
    request = parse_request("u", VARIANTS["v3"] | {"status": "pending", "attempts": 2, "last_exit_code": 1})
    assert describe(request) == "request pending (2 attempts, last exit code 1)"


def test_the_v3_defaults_apply_when_keys_are_left_out() -> None:
    """v3's dataclass defaults schema_version 1 and status pending: a request without them reads pending."""
    payload = {k: v for k, v in VARIANTS["v3"].items() if k not in ("schema_version",)}
    assert parse_request("u", payload).status == "pending"


def test_a_hub_destination_is_named() -> None:
    request = parse_request("u", VARIANTS["v2"] | {"status": "pending", "hf_hub_repo_id": "org/model"})
    assert request.hub_repo_id == "org/model"


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (VARIANTS["v3"] | {"schema_version": 2, "status": "complete"}, "schema_version 2, expected 1"),
        (VARIANTS["v3"] | {"status": "done"}, "status 'done' is not one of pending, in_progress, complete"),
        (VARIANTS["v3"] | {"status": "complete", "step": "forty"}, "step 'forty' is not an integer"),
    ],
)
def test_what_upstream_refuses_counts_as_pending(payload: dict[str, Any], why: str) -> None:
    """`pending_hf_export_steps` protects a checkpoint whose request it cannot read as pending: so do we."""
    request = parse_request("u", payload)
    assert (request.status, request.unreadable) == ("pending", why)


def test_read_request_from_storage(tmp_path: Path) -> None:
    storage = LocalStorage()
    ckpt = tmp_path / "global_step_40"
    ckpt.mkdir()
    assert read_request(storage, str(ckpt)) is None  # no request: not a deferred export
    (ckpt / "hf_export_request.json").write_text("{not json")
    broken = read_request(storage, str(ckpt))
    assert broken is not None and broken.status == "pending" and broken.unreadable
    assert "counted as pending" in describe(broken)
    (ckpt / "hf_export_request.json").write_text(json.dumps(VARIANTS["v1"] | {"status": "in_progress", "attempts": 1}))
    running = read_request(storage, str(ckpt))
    assert running is not None and (running.status, running.attempts) == ("in_progress", 1)
    assert running.uri == str(ckpt / "hf_export_request.json")
