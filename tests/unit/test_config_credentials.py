"""A configuration is evidence (issue 45 item 6): credentials planted in the configuration of the run that fixed an
experiment, and in the failing run's own configuration and launch command, appear nowhere that keeps or shows
anything across runs: `similar` and `show` (text and --json), the reports and every preserved file, the record
store's file (records and `run_configs/`), the notification. The finding is shown as its key and rule.

Three runs of one experiment: a failure, a later completed run whose configuration carries `trainer.hf_token`, a
W&B key and an AWS secret, the same failure again (the last through the whole embedded pipeline)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlcleanup.adapters.sqlite_records import SqliteRunRecords
from rlcleanup.authority.config_screen import screen_command, screen_config
from rlcleanup.cli.main import app
from rlcleanup.errors import names_credential
from rlcleanup.models.failures import ConfigChange
from rlcleanup.models.record import Classification, CompletionRecord
from rlcleanup.models.vocab import ClassificationKind, TerminalState
from rlcleanup.report.build import build_document
from rlcleanup.report.html import render_html
from rlcleanup.report.inputs import ReportInputs
from rlcleanup.report.markdown import render_markdown
from rlcleanup.report.notice import build_notice
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.steps.history import keep_config, kept_config

runner = CliRunner()
HF = "hf_QwErTyUiOpAsDfGhJkLzXcVbNm12345678"
WANDB = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"
AWS = "Zq3vX9kLp2Rt8sYw4Nb7Cd1Ef6Gh0Jm5Ua9Io2Pe"
PASSWORD = "correct-horse-battery-staple"
SECRETS = (HF, WANDB, AWS, PASSWORD)
PLANTED = {
    "hf_token": HF,
    "logger_env": f"WANDB_API_KEY={WANDB}",  # a value a rule flags, under a name that names no credential
    "storage": {"aws_secret_access_key": AWS, "region": "us-east-1"},
    "db": {"password": PASSWORD},
}


@pytest.fixture(autouse=True)
def _sqlite_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST", raising=False)


def _plant_in_run(root: Path) -> None:
    """The failing run's own configuration and launch command carry the credentials too."""
    config = root / "resolved-skyrl.json"
    doc = json.loads(config.read_text())
    doc["trainer"] |= PLANTED
    config.write_text(json.dumps(doc, indent=2))
    for path in [root / "terminal.json", *root.parent.parent.parent.glob("tmp/**/attempts/*.json")]:
        body = json.loads(path.read_text())
        body["request"]["command"] += [f"trainer.hf_token={HF}", "--password", PASSWORD]
        path.write_text(json.dumps(body, indent=2))


def _written_by_rlcleanup(base: Path, source: Path) -> dict[Path, bytes]:
    """Every file under `base` (the record store's files, the preserved location: reports, manifest, derived
    files, parts) except the run's own evidence preserved byte for byte (a copy of a file of the run, whose writer
    holds those bytes anyway) and the run's parsed layout that its own pipeline stages pass on (`_parts/layout`)."""
    originals = {p.read_bytes() for p in source.rglob("*") if p.is_file()}
    return {
        p: p.read_bytes()
        for p in sorted(base.rglob("*"))
        if p.is_file() and p.read_bytes() not in originals and "layout" not in p.relative_to(base).parts
    }


def test_credentials_in_a_fixing_runs_configuration_are_shown_nowhere(tmp_path: Path) -> None:
    template_run = run_embedded(
        str(write_sample_run(tmp_path / "src" / "t", "failed-first-link")),
        db_path=tmp_path / "scratch" / "r.db",
        preserve_root=str(tmp_path / "scratch" / "p"),
    )
    assert template_run is not None and template_run.signature and template_run.ended_at
    db = tmp_path / "kept" / "r.db"
    db.parent.mkdir()
    store = SqliteRunRecords(db)
    base_config = {"trainer": {"micro_train_batch_size_per_gpu": 8, "project_name": "math"}}
    # Run 1 failed the same way two days earlier; run 2 of the same experiment completed a day earlier.
    failed = template_run.model_copy(
        update={
            "run_id": "math-v1",
            "run_uri": "gs://b/math-rl/v1",
            "ended_at": template_run.ended_at - 2 * timedelta(1),
        }
    )
    fixed = template_run.model_copy(
        update={
            "run_id": "math-v2",
            "run_uri": "gs://b/math-rl/v2",
            "ended_at": template_run.ended_at - timedelta(1),
            "terminal_state": TerminalState.completed,
            "signature": None,
            "first_failure_cause": None,
        }
    )
    for record, trainer in ((failed, {}), (fixed, {"micro_train_batch_size_per_gpu": 4, **PLANTED})):
        store.create_if_absent(record)
        keep_config(store, record, {"trainer": base_config["trainer"] | trainer}, screen_config)
    kept = kept_config(store, "math-v2")
    assert kept is not None and kept["trainer.hf_token"] == '"[withheld: credential_key]"'
    assert kept["trainer.logger_env"] == '"[withheld: W&B API key]"'

    run = write_sample_run(tmp_path / "src" / "r3", "failed-first-link")
    _plant_in_run(run)
    record = run_embedded(str(run), db_path=db, preserve_root=str(tmp_path / "kept" / "preserved"))
    assert record is not None and record.run_id == template_run.run_id
    fix = next(s.fix for s in record.similar_runs if s.run_id == "math-v1")
    assert fix is not None and fix.completed_run_id == "math-v2"
    shown = {c.key: c.after for c in fix.changes}
    assert shown["trainer.hf_token"] == '"[withheld: credential_key]"'  # the finding: key and rule
    assert shown["trainer.storage.aws_secret_access_key"] == '"[withheld: credential_key]"'
    assert shown["trainer.micro_train_batch_size_per_gpu"] == "4"  # what fixed it is still shown
    assert record.launch_command is not None and "trainer.hf_token=[withheld: credential_key]" in record.launch_command

    outputs = [
        runner.invoke(app, [*command, record.run_id, "--db", str(db), *flag])
        for command in (["similar"], ["show"])
        for flag in ([], ["--json"])
    ]
    assert all(out.exit_code == 0 for out in outputs), [out.output for out in outputs]
    assert any("trainer.hf_token" in out.stdout for out in outputs)
    doc = build_document(ReportInputs(record=record), with_figure=False)
    notice = build_notice(record, record.ended_at or template_run.ended_at, warning=timedelta(days=3), on_complete=True)
    surfaces = [out.stdout for out in outputs] + [render_markdown(doc), render_html(doc), record.model_dump_json()]
    surfaces.append(notice.model_dump_json() if notice is not None else "")
    written = _written_by_rlcleanup(tmp_path / "kept", tmp_path / "src" / "r3")
    names = {p.name for p in written}
    assert {"r.db", "report.md", "report.html", "manifest.json", "launch_command.txt"} <= names
    for secret in SECRETS:
        assert not [s for s in surfaces if secret in s], secret
        assert not [p for p, body in written.items() if secret.encode() in body], secret


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        ("trainer.hf_token", '"abc"', "credential_key"),
        ("env.WANDB_API_KEY", '"x"', "credential_key"),
        ("trainer.note", json.dumps(f"login with {HF}"), "Hugging Face token"),
        ("trainer.url", '"https://bob:s3cr3tpass@example.com/x"', "Basic Auth Credentials,Credentials in a URL"),
    ],
)
def test_a_flagged_value_is_kept_as_its_rule(key: str, value: str, rule: str) -> None:
    values, findings = screen_config({key: value, "trainer.lr": "1e-06"})
    assert values == {key: json.dumps(f"[withheld: {rule}]"), "trainer.lr": "1e-06"}
    assert findings == [f"{key}: {rule}"]


def test_key_names_and_tokenizer_tokens() -> None:
    assert all(names_credential(k) for k in ("hf_token", "WANDB_API_KEY", "aws_access_key_id", "wandb.key", "pwd"))
    assert not any(names_credential(k) for k in ("eos_token", "pad_token_id", "max_tokens", "data.key", "lr"))


def test_a_change_read_from_an_unscreened_record_is_screened() -> None:
    """A record written before configurations were screened still shows no credential."""
    change = ConfigChange(key="trainer.hf_token", before=None, after=json.dumps(HF))
    assert change.after == '"[withheld: credential_key]"'
    other = ConfigChange(key="trainer.note", before=json.dumps(f"token {HF}"), after=None)
    assert other.before is not None and HF not in other.before
    kept = CompletionRecord(run_id="r", run_uri="gs://b/r", launch_command=f"python -m x trainer.note=token-{HF}")
    assert kept.launch_command is not None and HF not in kept.launch_command
    decided = Classification(kind=ClassificationKind.standard, evidence=[f"environment.env_class={HF}"])
    assert HF not in decided.model_dump_json()  # the classification's config values, shown on the record


def test_an_unscreened_kept_configuration_is_not_compared(tmp_path: Path) -> None:
    store = SqliteRunRecords(tmp_path / "r.db")
    store.put_doc("run_configs", "old", {"run_id": "old", "keys": [{"key": "trainer.hf_token", "value": "x"}]})
    assert kept_config(store, "old") is None


def test_a_launch_command_keeps_no_credential() -> None:
    command = f"python -m x trainer.hf_token={HF} --password {PASSWORD} WANDB_API_KEY={WANDB} trainer.lr=1e-6"
    screened = screen_command(command)
    assert all(secret not in screened for secret in (HF, PASSWORD, WANDB))
    assert screened.endswith("trainer.lr=1e-6") and "trainer.hf_token=[withheld: credential_key]" in screened
