"""Wrap-up (select-candidate) audits the Hub repo a run's own export job published to (authority/hub_audit.py):
only when the export request is complete or the training config names the repo, only when the deployment enables
the audit, and its findings go on the record (`hub_audits`, a `needs person:` item, status needs_person).
The Hub here is a fake `HubReader` serving the export's own files; tests/integration/test_hub_audit.py runs the
real huggingface_hub client against the stand-in Hub."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

import pytest

from rlcleanup.models.record import CompletionRecord
from rlcleanup.models.vocab import RecordStatus, Visibility
from rlcleanup.ports.hub import RemoteFile, git_blob_sha
from rlcleanup.ports.storage import VisibilityReading
from rlcleanup.runtime import evidence
from rlcleanup.runtime.embedded import EmbeddedStack, manual_event, resolve_run_id
from rlcleanup.samples.generator import write_sample_run

REPO = "marin-community/math-rl-resumed"


class FakeHub:
    """A repo holding exactly `files` (LFS for .safetensors), `private` as given; counts every call."""

    endpoint = "https://hub.example"

    def __init__(self, files: dict[str, bytes], private: bool) -> None:
        self.files, self.private, self.requests = files, private, 0

    def visibility(self, repo_id: str) -> VisibilityReading | None:
        self.requests += 1
        return VisibilityReading(Visibility.private if self.private else Visibility.public, "fake")

    def file_names(self, repo_id: str, revision: str) -> list[str]:
        self.requests += 1
        return sorted(self.files)

    def remote_files(self, repo_id: str, paths: Iterable[str], revision: str = "main") -> dict[str, RemoteFile]:
        self.requests += 1
        out = {}
        for p in paths:
            data = self.files[p]
            lfs = hashlib.sha256(data).hexdigest() if p.endswith(".safetensors") else None
            out[p] = RemoteFile(p, len(data), git_blob_sha(data), lfs)
        return out

    def read_small(self, repo_id: str, path: str, revision: str, max_bytes: int) -> bytes | None:
        self.requests += 1
        data = self.files[path]
        return data if len(data) <= max_bytes else None


def _sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: str) -> tuple[Path, dict[str, bytes]]:
    monkeypatch.setattr(evidence, "publish_report", lambda *args, **kwargs: None)
    run = write_sample_run(tmp_path / "runs", "completed-resumed")
    ckpt = next((tmp_path / "runs").rglob("checkpoints/global_step_20"))
    request = {"schema_version": 1, "status": status, "step": 20, "attempts": 1, "last_exit_code": 0}
    request |= {"hf_hub_repo_id": REPO, "hf_hub_private": True, "hf_hub_revision": "main", "hf_upload_mode": "latest"}
    (ckpt / "hf_export_request.json").write_text(json.dumps(request))
    policy = next((tmp_path / "runs").rglob("exports/global_step_20/policy"))
    return run, {p.name: p.read_bytes() for p in policy.iterdir() if p.is_file()}


def _run(tmp_path: Path, run: Path, hub: FakeHub | None) -> CompletionRecord:
    stack = EmbeddedStack.create(tmp_path / "records.db", str(tmp_path / "preserved"))
    if hub is not None:
        stack.ports.settings = stack.ports.settings.model_copy(update={"hub_audit": True})
        stack.ports.hub_reader = lambda: hub
    event = manual_event(str(run))
    stack.emit(event)
    record = stack.ports.records.get(resolve_run_id(stack.ports, event))
    assert record is not None
    return record


def test_a_clean_published_repo_is_recorded_as_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, files = _sample(tmp_path, monkeypatch, "complete")
    record = _run(tmp_path, run, FakeHub(files, private=True))
    [audit] = record.hub_audits
    assert (audit.repo_id, audit.status, audit.step, audit.visibility) == (REPO, "checked", 20, "private")
    assert audit.named_by.endswith("global_step_20/hf_export_request.json") and audit.text_files_scanned >= 4
    assert record.status is RecordStatus.awaiting_authority


def test_a_public_repo_with_a_token_in_its_readme_makes_the_record_needs_person(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, files = _sample(tmp_path, monkeypatch, "complete")
    token = "hf_" + "q" * 8 + "Z1x2C3v4B5n6M7a8S9d0F1g2"
    record = _run(tmp_path, run, FakeHub(files | {"README.md": f"token: {token}\n".encode()}, private=False))
    [audit] = record.hub_audits
    assert audit.problem_codes == ["hub_secret_found", "hub_visibility_mismatch"]
    assert record.status is RecordStatus.needs_person
    assert any(i.startswith(f"needs person: Hub repo {REPO}") for i in record.remaining_work)
    assert token not in record.model_dump_json()


def test_an_export_request_still_pending_published_nothing_and_is_not_audited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, files = _sample(tmp_path, monkeypatch, "pending")
    hub = FakeHub(files, private=True)
    record = _run(tmp_path, run, hub)
    assert record.hub_audits == [] and hub.requests == 0


def test_without_the_audit_enabled_the_record_says_the_repo_was_not_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, _ = _sample(tmp_path, monkeypatch, "complete")
    record = _run(tmp_path, run, None)
    [audit] = record.hub_audits
    assert audit.status == "not_configured" and audit.endpoint is None
    assert any("not audited" in i and "RLCLEANUP_HUB_AUDIT" in i for i in record.remaining_work)
    assert record.status is RecordStatus.awaiting_authority


class VanishingHub(FakeHub):
    """Lists every file; reading `gone` answers what the adapter maps a 404 to (hf_hub._mapped: a ValueError), or
    raises `defect` (an error no mapping covers) on every read."""

    def __init__(self, files: dict[str, bytes], gone: str, defect: Exception | None = None) -> None:
        super().__init__(files, private=True)
        self.gone, self.defect = gone, defect

    def read_small(self, repo_id: str, path: str, revision: str, max_bytes: int) -> bytes | None:
        if self.defect is not None:
            raise self.defect
        if path == self.gone:
            self.requests += 1
            raise ValueError(f"Hub rejected read {path} (404): Entry not found")
        return super().read_small(repo_id, path, revision, max_bytes)


def test_a_listed_file_that_reads_404_is_retried_and_the_run_still_gets_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45 item 8 (P29): never `internal_error: ValueError` and no record."""
    run, files = _sample(tmp_path, monkeypatch, "complete")
    record = _run(tmp_path, run, VanishingHub(files, gone="config.json"))
    [audit] = record.hub_audits
    assert (audit.status, audit.problem_codes, audit.attempts) == ("problems", ["hub_file_unreadable"], 3)
    assert "config.json (404)" in audit.problems[0]
    assert record.status is RecordStatus.needs_person and record.terminal_state is not None
    assert not [e for e in record.errors if e.code == "internal_error"]


def test_an_audit_that_fails_on_a_defect_is_recorded_not_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, files = _sample(tmp_path, monkeypatch, "complete")
    record = _run(tmp_path, run, VanishingHub(files, gone="", defect=KeyError("siblings")))
    [audit] = record.hub_audits
    assert (audit.status, audit.problem_codes) == ("problems", ["hub_audit_failed"])
    assert "KeyError" in audit.problems[0] and record.status is RecordStatus.needs_person
