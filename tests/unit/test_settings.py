"""The one typed deployment configuration: read once, validated with the variable named, and every variable used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from authority_support import make_world
from pydantic_settings import BaseSettings

from rlcleanup.runtime import functions
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event
from rlcleanup.runtime.handlers import resolve_run_id
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.settings import (
    CopySettings,
    GrantLimits,
    HubSettings,
    S3Settings,
    SettingsError,
    env_names,
    load_settings,
    read,
    s3_endpoint_specs,
    unconfigured,
)
from rlcleanup.uris import in_run_buckets, within

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in env_names():  # the stack fixture may have exported some
        monkeypatch.delenv(name, raising=False)


def test_defaults_without_any_variable() -> None:
    settings = load_settings()
    assert settings == unconfigured()
    assert settings.run_buckets is None and settings.allowed_destination_prefixes is None
    assert (settings.lease_seconds, settings.limit_warn_fraction, settings.log_level) == (600.0, 0.8, "INFO")


def test_values_as_terraform_writes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLCLEANUP_RUN_BUCKETS", "runs-a,runs-b")  # join(",", var.run_buckets)
    monkeypatch.setenv("RLCLEANUP_ALLOWED_DESTINATION_PREFIXES", "")  # join(",", []): set, and nothing allowed
    monkeypatch.setenv("RLCLEANUP_FUNCTION", "capture-part")
    monkeypatch.setenv("RLCLEANUP_RAY_DASHBOARD", "")
    monkeypatch.setenv("RLCLEANUP_LOG_LEVEL", "debug")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "my-project-1")
    settings = load_settings()
    assert settings.run_buckets == ("runs-a", "runs-b")
    assert settings.allowed_destination_prefixes == ()
    assert settings.function == "capture-part" and settings.ray.dashboard is None
    assert settings.log_level == "DEBUG" and settings.project == "my-project-1"


def test_controller_groups_keep_their_variable_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLCLEANUP_IRIS_URL", "http://iris:8080")
    monkeypatch.setenv("RLCLEANUP_IRIS_TOKEN", " ")  # empty (a secret not set): unset
    monkeypatch.setenv("RLCLEANUP_RAY_DASHBOARD", "http://head:8265")
    settings = load_settings()
    assert (settings.iris.url, settings.iris.token, settings.ray.dashboard) == (
        "http://iris:8080",
        None,
        "http://head:8265",
    )
    assert {"RLCLEANUP_IRIS_URL", "RLCLEANUP_IRIS_STATUS_CMD", "RLCLEANUP_RAY_DASHBOARD"} <= env_names()
    assert "RLCLEANUP_IRIS" not in env_names() and "RLCLEANUP_RAY" not in env_names()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RLCLEANUP_MAX_EVENT_AGE_SECONDS", "a week"),
        ("RLCLEANUP_LEASE_SECONDS", "0"),
        ("RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS", "-3"),
        ("RLCLEANUP_LOG_LEVEL", "LOUD"),
        ("RLCLEANUP_RUN_BUCKETS", "runs-a,Runs B"),
        ("RLCLEANUP_ALLOWED_DESTINATION_PREFIXES", "handoff/releases"),
        ("RLCLEANUP_IRIS_STATUS_CMD", ""),  # a controller's settings group names its own variables
    ],
)
def test_a_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=f"{name}='{value}'"):
        load_settings()


def test_a_bad_value_stops_a_function_at_cold_start() -> None:
    """Importing the functions module (what functions/main.py does when the instance starts) reads the settings."""
    env = {**os.environ, "RLCLEANUP_LEASE_SECONDS": "ten minutes"}
    proc = subprocess.run(
        [sys.executable, "-c", "import rlcleanup.runtime.functions"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "SettingsError" in proc.stderr and "RLCLEANUP_LEASE_SECONDS='ten minutes'" in proc.stderr


def test_the_deployed_function_is_cross_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLCLEANUP_FUNCTION", "capture-part")
    settings = load_settings()
    assert functions.serving("capture_part", settings).name == "capture-part"
    with pytest.raises(functions.WrongFunction, match=r"serves capture-part .* invoked as apply-grant"):
        functions.serving("apply_grant", settings)


def test_bucket_and_prefix_matching() -> None:
    assert in_run_buckets("gs://runs-a/x/y", ("runs-a",)) and not in_run_buckets("gs://runs-ab/x", ("runs-a",))
    assert in_run_buckets("s3://cw/x", ("runs-a", "s3://cw")) and not in_run_buckets("/local/run", ("runs-a",))
    assert in_run_buckets("/local/run", None) and not in_run_buckets("gs://runs-a/x", ())
    assert within("gs://h/rel/m", ("gs://h/rel/",)) and not within("gs://h/release/m", ("gs://h/rel",))


def test_a_run_outside_the_run_buckets_is_refused_without_a_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLCLEANUP_RUN_BUCKETS", "runs-a")
    run_root = write_sample_run(tmp_path / "sample", "completed-resumed")
    stack = EmbeddedStack.create(tmp_path / "r.db", str(tmp_path / "preserved"))  # reads the settings once
    event = manual_event(str(run_root))
    stack.emit(event)
    # A refusal creates no record and binds no id (issue 37 item 5): it is filed on its own and dead-lettered.
    assert stack.ports.records.get(resolve_run_id(stack.ports, event)) is None
    [(_, filed)] = stack.ports.records.list_docs("poison_messages")
    assert filed["code"] == "run_outside_buckets" and "RLCLEANUP_RUN_BUCKETS" in filed["message"]
    assert stack.ports.records.list_docs("run_ids") == []
    assert [m.topic for m in stack.bus.published] == ["job-events", "on-job-event-dlq"]


def test_a_destination_outside_the_deployment_prefixes_is_refused(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    inside_alice_only = world.grant()  # within alice's allowed prefixes, not within the deployment's
    world.stack.ports.settings = world.stack.ports.settings.model_copy(
        update={"allowed_destination_prefixes": (str(tmp_path / "other"),)}
    )
    world.deliver(world.message(inside_alice_only))
    doc = world.grant_doc(inside_alice_only.grant_id)
    assert doc["refusal"] == "out_of_prefix" and "RLCLEANUP_ALLOWED_DESTINATION_PREFIXES" in doc["detail"]
    assert not any(world.dest_root.rglob("*")), "nothing may be copied"
    # The same grant is carried out where the deployment allows its destination.
    world.stack.ports.settings = world.stack.ports.settings.model_copy(
        update={"allowed_destination_prefixes": (str(world.dest_root),)}
    )
    allowed = world.grant()
    world.deliver(world.message(allowed))
    assert world.grant_doc(allowed.grant_id)["state"] == "used"


@pytest.mark.parametrize(
    ("kind", "name", "value"),
    [
        (GrantLimits, "RLCLEANUP_GRANT_MAX_LIFETIME_SECONDS", "a week"),
        (GrantLimits, "RLCLEANUP_GRANT_CLOCK_SKEW_SECONDS", "-1"),
        (HubSettings, "HF_ENDPOINT", "huggingface.co"),
        (S3Settings, "RLCLEANUP_S3_ADDRESSING_STYLE", "sideways"),
        (CopySettings, "RLCLEANUP_COPY_S3_MULTIPART_THRESHOLD", "6442450944"),  # past S3's 5 GiB CopyObject limit
        (CopySettings, "RLCLEANUP_COPY_GCS_REWRITE_BYTES_PER_CALL", "1000"),  # not whole MiB
        (CopySettings, "RLCLEANUP_COPY_STATE_PREFIX", "../elsewhere"),
    ],
)
def test_every_settings_group_names_a_bad_variable(
    monkeypatch: pytest.MonkeyPatch, kind: type[BaseSettings], name: str, value: str
) -> None:
    """The groups beside the deployment settings (read where they are used) fail the same way, never by falling
    back to a default: a grant lifetime typo used to be silently 7 days."""
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=f"{name}='{value}'"):
        read(kind)


def test_grant_limits_and_local_paths_come_from_their_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from rlcleanup.authority.grants import lifetime_limits
    from rlcleanup.paths import default_db, stack_dir

    monkeypatch.setenv("RLCLEANUP_GRANT_MAX_LIFETIME_SECONDS", "3600")
    monkeypatch.setenv("RLCLEANUP_GRANT_CLOCK_SKEW_SECONDS", "5")
    assert lifetime_limits().max_lifetime.total_seconds() == 3600 and lifetime_limits().clock_skew.seconds == 5
    monkeypatch.setenv("RLCLEANUP_DB", str(tmp_path / "r.db"))
    monkeypatch.setenv("RLCLEANUP_STACK_DIR", str(tmp_path / "stack"))
    assert default_db() == tmp_path / "r.db" and stack_dir() == tmp_path / "stack"


def test_a_bad_s3_endpoint_names_its_variable_and_never_its_secret() -> None:
    secret = '{"access_key_id": "AKIA-not-shown", "buckets": "one"}'
    with pytest.raises(SettingsError, match="RLCLEANUP_S3_ENDPOINT_CW is not a valid") as caught:
        s3_endpoint_specs({"RLCLEANUP_S3_ENDPOINT_CW": secret})
    assert "AKIA" not in str(caught.value)
    assert s3_endpoint_specs({"RLCLEANUP_S3_ENDPOINT_CW": '{"buckets": ["b"]}'}) == {"cw": {"buckets": ["b"]}}


def test_ports_read_their_settings_object_and_never_copy_it(tmp_path: Path) -> None:
    """Ports hold the one DeploymentSettings object; `p.run_buckets` and the others are read-only views of it, so a
    per-delivery copy (dataclasses.replace, as dispatch does) and a replaced settings object both read through."""
    import dataclasses

    from rlcleanup.adapters.inprocess_bus import InProcessBus
    from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
    from rlcleanup.adapters.storage_router import RoutingStorage
    from rlcleanup.runtime.ports import Ports
    from rlcleanup.settings import DeploymentSettings

    db = tmp_path / "r.db"
    bare = Ports(RoutingStorage(), SqliteRunRecords(db), InProcessBus(), SqliteIdempotencyStore(db))
    assert bare.run_buckets is None and bare.lease_seconds == 600.0 and bare.capture_page_objects == 5000
    settings = DeploymentSettings.model_construct(run_buckets=("runs-a",), lease_seconds=30.0, preserve_root="/p")
    ports = dataclasses.replace(bare, settings=settings)
    delivery = dataclasses.replace(ports, delivery_id="m-1")
    assert delivery.settings is settings and delivery.delivery_id == "m-1" and ports.delivery_id is None
    assert (delivery.run_buckets, delivery.lease_seconds, delivery.preserve_root) == (("runs-a",), 30.0, "/p")
    with pytest.raises(AttributeError, match="read-only"):
        ports.lease_seconds = 1.0
    assert ports.lease_seconds == 30.0
