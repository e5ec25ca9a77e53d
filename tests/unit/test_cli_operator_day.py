"""Issue 18, the operator's day: each behaviour a new user hit, through the CLI with --json outputs.

Defaults live under XDG dirs (set per test to tmp dirs), so these tests also check that nothing depends on the
working directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.models.record import CompletionRecord
from rlcleanup.paths import default_db, keys_dir, stack_dir
from rlcleanup.report.verdict import build_verdict
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.stack import StackState
from rlcleanup.stack.local import MARKER_VAR

COMPLETED = "math-rl-completed-resumed-2026.11.30"
SELECTED = "math-rl-selection-policy-2026.11.30"
MISSING = "math-rl-missing-shard-2026.11.30"


@pytest.fixture(autouse=True)
def _xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolated_cli_env(tmp_path, monkeypatch)


_invoke = invoke


def _json(*args: str) -> Any:
    code, out, err = _invoke(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def _sample(tmp_path: Path, scenario: str) -> Path:
    return write_sample_run(tmp_path / "src" / scenario, scenario)


def _approver(prefix: Path) -> None:
    code, out, err = _invoke("keygen", "--id", "alice")
    assert code == 0, err
    assert (keys_dir() / "alice.pem").is_file()
    public = next(line.split()[-1] for line in out.splitlines() if line.startswith("public key:"))
    code, _, err = _invoke("approver", "add", "alice", "--public-key", public, "--prefix", str(prefix))
    assert code == 0, err


# ------------------------------------------------------------------ defaults: XDG, not the working directory


def test_defaults_are_xdg_locations_not_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_db() == tmp_path / "state" / "rlcleanup" / "records.db"
    assert keys_dir() == tmp_path / "config" / "rlcleanup" / "keys"
    assert stack_dir() == tmp_path / "cache" / "rlcleanup" / "stack"
    root = _sample(tmp_path, "completed-resumed")
    monkeypatch.chdir(tmp_path / "src")
    assert _json("run", str(root))["run_id"] == COMPLETED
    monkeypatch.chdir(tmp_path)  # elsewhere, `status` still finds the run
    assert [row["run_id"] for row in _json("status")] == [COMPLETED]
    assert not (tmp_path / ".rlcleanup").exists() and not (tmp_path / "src" / ".rlcleanup").exists()


def test_version_and_python_dash_m() -> None:
    code, out, _ = _invoke("--version")
    assert code == 0 and out.startswith("rlcleanup ")
    done = subprocess.run([sys.executable, "-m", "rlcleanup", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == out


def test_fixed_choices_are_listed_in_help(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps at 80 otherwise
    code, out, _ = _invoke("grant", "--help")
    flat = " ".join(out.replace("│", " ").split())
    assert code == 0
    assert (
        "<publish|handoff|register|reclaim|cancel|purge|export|preserve>" in flat
        and "<private|internal|public>" in flat
    )
    code, out, _ = _invoke("report", "--help")
    assert "<md|html|json>" in " ".join(out.replace("│", " ").split())


def test_shell_completion_offers_the_fixed_choices() -> None:
    """What bash completion (`rlcleanup --install-completion`) asks the program for, asked the same way."""
    import os
    import subprocess
    import sys

    exe = Path(sys.executable).with_name("rlcleanup")
    env = {**os.environ, "_RLCLEANUP_COMPLETE": "complete_bash", "COMP_WORDS": "rlcleanup status --backend "}
    out = subprocess.run([str(exe)], env={**env, "COMP_CWORD": "3"}, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["sqlite", "firestore"], out.stderr[-500:]
    env["COMP_WORDS"] = "rlcleanup grant RUN --action "
    out = subprocess.run([str(exe)], env={**env, "COMP_CWORD": "4"}, capture_output=True, text=True, timeout=60)
    actions = ["publish", "handoff", "register", "reclaim", "cancel", "purge", "export", "preserve"]
    assert out.stdout.split() == actions, out.stderr[-500:]


# ------------------------------------------------------------------ 1. watch waits for the record


def test_watch_waits_for_the_record_to_appear(tmp_path: Path) -> None:
    root = _sample(tmp_path, "completed-resumed")
    db = tmp_path / "r.db"
    db.touch()  # the store exists (a stack is up), the run's record does not yet

    def late_run() -> None:
        time.sleep(1.0)
        run_embedded(str(root), db_path=db, preserve_root=str(tmp_path / "p"))

    worker = threading.Thread(target=late_run)
    worker.start()
    try:
        code, out, err = _invoke("watch", COMPLETED, "--db", str(db), "--interval", "0.1", "--timeout", "60", "--json")
    finally:
        worker.join()
    assert code == 0, err
    last = json.loads(out.splitlines()[-1])
    assert last["finished"] and last["status"] == "awaiting_authority"
    selection = next(s for s in last["stages"] if s["name"] == "selection")
    assert selection["done"] == selection["total"] == 1  # was "selection 0/1" on a finished record


def test_watch_times_out_with_a_clear_message(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    db.touch()
    started = time.monotonic()
    code, out, err = _invoke("watch", "never-emitted", "--db", str(db), "--interval", "0.1", "--timeout", "0.5")
    assert code == 3 and out == ""
    assert "no record for run 'never-emitted' appeared in SQLite" in err and "within 0.5s" in err
    assert time.monotonic() - started < 10


# ------------------------------------------------------------------ 2. stack state from any directory


def test_stack_status_and_down_find_the_stack_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = stack_dir()
    where.mkdir(parents=True)
    stack_id = uuid.uuid4().hex
    # A stand-in server: its own process group, carrying the stack's marker (what `down` checks before signalling).
    server = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={**os.environ, MARKER_VAR: stack_id},
        start_new_session=True,
    )
    try:
        StackState(state_dir=str(where), project="p", stack_id=stack_id, pgids={"fn-x": server.pid}).save()
        other = tmp_path / "elsewhere"
        other.mkdir()
        monkeypatch.chdir(other)
        assert _json("stack", "status") == {
            "servers": {"fn-x": "running"},
            "state_dir": str(where),
        }  # no port: its group
        code, _, err = _invoke("stack", "down")
        assert code == 0 and f"stopped 1 server(s) of the stack in {where}" in err
        assert server.wait(timeout=15) == -signal.SIGTERM
        code, _, err = _invoke("stack", "status")
        assert code == 1 and "no stack recorded" in err
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


# ------------------------------------------------------------------ 3/4/7. grants close the record; local destinations; previews


def test_publish_and_reclaim_close_the_record_and_the_preview_equals_the_effect(tmp_path: Path, _xdg: Path) -> None:
    root = _sample(tmp_path, "completed-resumed")
    assert _json("run", str(root))["status"] == "awaiting_authority"
    models = _xdg / "rlcleanup-models"
    _approver(models)
    dest = models / "math-20"
    base = ["grant", COMPLETED, "--step", "20", "--destination", str(dest), "--key", "alice"]

    preview = _json(*base, "--action", "publish", "--dry-run")
    assert preview["would"] == "publish" and preview["visibility"] == "private"
    assert preview["creates"] == [str(models), str(dest)]
    assert not models.exists()  # a preview writes nothing
    assert preview["total_bytes"] == sum(o["size"] for o in preview["objects"]) > 0

    used = _json(*base, "--action", "publish", "--reason", "best EMA reward")
    assert used["state"] == "published" and used["record_status"] == "awaiting_authority"
    assert oct(models.stat().st_mode & 0o777) == "0o700" and oct(dest.stat().st_mode & 0o777) == "0o700"
    assert f"created {models}, {dest} (mode 0700)" in used["detail"]
    provenance = json.loads((dest / "provenance.json").read_text())
    copied = {row["name"]: row for row in provenance["manifest"]}
    assert set(copied) == {o["name"] for o in preview["objects"]}  # the preview is what was copied,
    for row in preview["objects"]:  # version for version
        assert {k: copied[row["name"]][k] for k in ("source", "source_version", "size")} == {
            k: row[k] for k in ("source", "source_version", "size")
        }
    assert used["remaining_work"] == ["reclaim: needs a separate reclaim grant, only after the destination is verified"]

    plan_preview = _json(*base, "--action", "reclaim", "--dry-run")
    assert plan_preview["would"] == "reclaim" and plan_preview["delete_count"] > 0
    reclaimed = _json(*base, "--action", "reclaim", "--reason", "published copy verified")
    assert reclaimed["state"] == "reclaimed"
    assert reclaimed["record_status"] == "complete" and reclaimed["remaining_work"] == []
    record = CompletionRecord.model_validate(_json("show", COMPLETED))
    plan_ref = next(a.uri for a in record.authority_actions if a.action == "reclaim")
    assert plan_ref and "/reclaim_plans/" in plan_ref  # kept in the record store, never in a bucket
    planned = {d["uri"] for d in plan_preview["delete"]}
    assert planned and not any(Path(u).exists() for u in planned)  # the preview is what was deleted
    assert (dest / "_PUBLISHED.json").exists()

    assert record.status.value == "complete" and record.remaining_work == []
    report = _json("report", COMPLETED)
    assert "nothing needs a person" in report["verdict"] and "chosen by a publish grant" in report["verdict"]
    rows = _json("grants", COMPLETED)
    assert [(r["action"], r["result"]) for r in rows] == [("publish", "published"), ("reclaim", "reclaimed")]
    code, out, _ = _invoke("grants", COMPLETED)  # the table has a header; each state is said once
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:4] == ["grant", "action", "state", "result"]
    assert [line.split()[1:4] for line in lines[1:]] == [
        ["publish", "used", "published"],
        ["reclaim", "used", "reclaimed"],
    ]


def test_publish_register_reclaim_all_used_closes_a_registering_run(tmp_path: Path, _xdg: Path) -> None:
    root = _sample(tmp_path, "selection-policy")
    record = _json("run", str(root))
    assert any(item.startswith("register:") for item in record["remaining_work"])
    _approver(_xdg / "models")
    dest = _xdg / "models" / "math"
    for action in ("publish", "register", "reclaim"):
        out = _json("grant", SELECTED, "--action", action, "--destination", str(dest), "--key", "alice")
        assert out["refusal"] is None, out
    assert out["record_status"] == "complete" and out["remaining_work"] == []
    assert _json("status", SELECTED)[0]["remaining_work"] == 0


def test_grant_on_a_pubsub_deployment_is_published_on_the_wirings_bus(
    tmp_path: Path, _xdg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With PUBSUB_EMULATOR_HOST set, `grant` signs and publishes to authority-grants (the deployed apply-grant
    function applies it) through the bus the wiring hands out; nothing is applied here."""
    import rlcleanup.cli.authority as authority

    root = _sample(tmp_path, "completed-resumed")
    _json("run", str(root))
    _approver(_xdg / "m")
    sent: list[tuple[str, dict[str, object], dict[str, str] | None]] = []

    class Bus:
        def publish(self, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
            sent.append((topic, json.loads(data), attributes))
            return "m-1"

    monkeypatch.setattr(authority, "open_bus", lambda project: Bus())
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:9")
    args = ["grant", COMPLETED, "--action", "publish", "--step", "20", "--destination", str(_xdg / "m" / "x")]
    out = _json(*args, "--key", "alice", "--backend", "sqlite")
    assert out["state"] == "published" and out["message_id"] == "m-1"
    ((topic, grant, attributes),) = sent
    assert topic == "authority-grants" and attributes == {"run_id": COMPLETED}
    assert grant["grant"]["grant_id"] == out["grant_id"] and grant["signature"]
    assert _json("grants", COMPLETED) == []  # published, not applied: the record store has no grant yet


def test_refusals_and_previews_name_the_fix(tmp_path: Path, _xdg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    root = _sample(tmp_path, "completed-resumed")
    _json("run", str(root))
    _approver(_xdg / "m")
    code, _, err = _invoke("grant", "math-rl-completed-resumd", "--action", "publish", "--key", "alice")
    assert code == 1 and "no such run 'math-rl-completed-resumd'" in err and f"did you mean {COMPLETED}?" in err

    def no_credentials(*_a: object, **_k: object) -> None:
        raise DefaultCredentialsError("none")

    monkeypatch.setattr(google.auth, "default", no_credentials)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    gs = ["grant", COMPLETED, "--action", "publish", "--step", "20", "--key", "alice"]
    code, _, err = _invoke(*gs, "--destination", "gs://team-models/rl/math-20")
    assert code == 3 and "no Google Cloud credentials" in err and "GOOGLE_APPLICATION_CREDENTIALS" in err
    assert _json("grants", COMPLETED) == []  # refused before anything was signed or filed

    code, out, _ = _invoke(
        "grant",
        COMPLETED,
        "--action",
        "reclaim",
        "--step",
        "20",
        "--destination",
        str(_xdg / "m" / "x"),
        "--key",
        "alice",
        "--dry-run",
    )
    assert code == 3 and "would be REFUSED (destination_unverified)" in out  # reclaim before any publish


# ------------------------------------------------------------------ 5/6. re-running, wrong paths, forget


def test_rerun_after_a_fix_processes_again_and_keeps_the_history(tmp_path: Path) -> None:
    root = _sample(tmp_path, "missing-shard")
    first = _json("run", str(root))
    bad = next(c for c in first["candidates"] if not c["valid"])
    assert bad["step"] == 10
    code, out, err = _invoke("run", str(root))
    assert code == 0 and "INVALID (missing_shard)" in out
    assert f"{MISSING} already had a record" in err and "--rerun" in err  # not silently the old record

    export = Path(bad["uri"])
    donor = next(export.glob("model-00001-of-*.safetensors"))
    (export / "model-00002-of-00003.safetensors").write_bytes(donor.read_bytes())  # "fix" the missing shard
    code, out, err = _invoke("run", str(root), "--rerun", "--json")
    assert code == 0, err
    again = json.loads(out)
    assert f"re-ran {MISSING}; the previous record is kept as runs/{MISSING}/history/0001" in err
    redone = next(c for c in again["candidates"] if c["step"] == 10)
    assert redone["problems"] != bad["problems"]  # validated again, not the stored verdict
    assert "missing_shard" not in " ".join(redone["problems"])
    assert again["errors"] == []  # the first capture is write-once: the re-run preserves beside it, no conflicts
    assert again["preserved_locations"][0].endswith(f"reruns/{MISSING}/0001/{MISSING}")
    assert Path(first["manifest_uri"]).is_file() and Path(again["manifest_uri"]).is_file()


def test_forget_removes_a_record_only_with_yes(tmp_path: Path) -> None:
    root = _sample(tmp_path, "completed-resumed")
    _json("run", str(root))
    dry = _json("forget", COMPLETED)
    assert dry["removed"] is False and _json("show", COMPLETED)["run_id"] == COMPLETED
    forgot = _json("forget", COMPLETED, "--yes")
    assert forgot["removed"] is True and forgot["documents_removed"] > 1  # the record and its claims at least
    code, _, err = _invoke("show", COMPLETED)
    assert code == 1 and "no record for run" in err
    assert _json("status") == []
    assert _json("run", str(root))["run_id"] == COMPLETED  # a forgotten run can be processed afresh


# ------------------------------------------------------------------ 8/9/10/13. one verdict; read commands agree


def test_one_verdict_line_on_every_surface(tmp_path: Path) -> None:
    root = _sample(tmp_path, "missing-shard")
    record = CompletionRecord.model_validate(_json("run", str(root)))
    line = build_verdict(record).line
    assert "1 invalid export (10)" in line
    code, out, _ = _invoke("show", MISSING)
    assert code == 0 and out.splitlines()[0] == line
    assert _json("report", MISSING)["verdict"] == line


def test_show_offers_close_matches_and_report_takes_json(tmp_path: Path) -> None:
    _json("run", str(_sample(tmp_path, "completed-resumed")))
    code, _, err = _invoke("show", "completed-resumed")
    assert code == 1 and f"did you mean {COMPLETED}?" in err
    assert _json("report", COMPLETED)["run_id"] == COMPLETED


def test_run_state_is_checked_and_used(tmp_path: Path) -> None:
    root = _sample(tmp_path, "completed-resumed")
    code, _, err = _invoke("run", str(root), "--state", "BOGUS")
    assert code == 2 and "--state 'BOGUS' is not a controller verdict" in err and "SUCCEEDED" in err
    record = _json("run", str(root), "--state", "succeeded")
    assert "manual event: succeeded" in record["controller_state"]  # it reached the record (was dropped)


def test_sample_run_list_needs_no_destination() -> None:
    code, out, _ = _invoke("sample-run", "--scenario", "list")
    assert code == 0 and out.splitlines()[0].startswith("completed-resumed")
    code, _, err = _invoke("sample-run", "--scenario", "completed-resumed")
    assert code == 2 and "missing DEST" in err


def test_emit_says_what_was_sent_and_where(monkeypatch: pytest.MonkeyPatch) -> None:
    import rlcleanup.stack.emit as emit

    monkeypatch.setattr(emit, "publish_event", lambda event, project, topic: "4242")
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:8085")
    code, out, _ = _invoke("emit", "--run-uri", "gs://b/r/v1", "--state", "SUCCEEDED", "--project", "p")
    assert code == 0
    assert out.strip() == (
        "sent iris SUCCEEDED for gs://b/r/v1 to projects/p/topics/job-events (emulator 127.0.0.1:8085): message 4242"
    )
    sent = _json("emit", "--run-uri", "gs://b/r/v1", "--state", "SUCCEEDED", "--project", "p")
    assert sent["message_id"] == "4242" and sent["event"]["state"] == "SUCCEEDED"


def test_text_summary_has_no_none_ranges_and_short_paths(tmp_path: Path) -> None:
    root = _sample(tmp_path, "failed-first-link")
    _json("run", str(root))
    code, out, _ = _invoke("show", "math-rl-failed-first-link-2026.11.30")
    assert code == 0
    assert "None..None" not in out and "steps None" not in out
    cause_at = next(line for line in out.splitlines() if line.strip().startswith("attempt ") and " at " in line)
    assert str(root) not in cause_at  # relative to the run root printed on the `run` line
    # Long absolute paths appear once, on the `run` line: reasons print them relative to the run root, and the
    # temp root beside it from the run's base (`…/tmp/...`).
    base = str(root).rsplit("/durable/", 1)[0]
    assert [line for line in out.splitlines() if base in line] == [f"run            {root}"]
    assert "exports/global_step_5/policy" in out and "…/tmp/ttl=14d/" in out


def test_a_completed_run_says_no_failure_and_shows_preemption_in_the_chain(tmp_path: Path) -> None:
    _json("run", str(_sample(tmp_path, "completed-resumed")))
    code, out, _ = _invoke("show", COMPLETED)
    assert code == 0
    assert "No causal error was found" not in out
    assert "no failure: the run completed" in out
    chain = [line for line in out.splitlines() if line.startswith("  - d196629b17f2")]
    assert chain and "preempted" in chain[0]


def test_the_first_cause_is_printed_once(tmp_path: Path) -> None:
    _json("run", str(_sample(tmp_path, "failed-first-link")))
    code, out, _ = _invoke("show", "math-rl-failed-first-link-2026.11.30")
    assert code == 0 and out.count("Tried to allocate 2.00 GiB") == 1
    # Each attempt's own reason: the first cause's attempt points at it, the others keep their own words.
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("  - ") and " steps " in line}
    assert rows["25511f18f009"].endswith("(first cause: torch.OutOfMemoryError, above)")
    assert rows["e9c2f23dd818"].endswith("(Iris job failed: task 0 exited with code 1)")


def test_approver_prefixes_keep_every_scheme_and_make_local_paths_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a local path is made absolute: an s3:// or hf:// prefix used to become `<cwd>/s3:/...`."""
    from rlcleanup.adapters.sqlite_records import SqliteRunRecords
    from rlcleanup.authority.grants import get_approver, new_key, public_b64

    monkeypatch.chdir(tmp_path)
    prefixes = ["s3://models-bucket/team", "hf://rl-team", "gs://b/handoff", "./local/models"]
    code, _, err = _invoke(
        "approver",
        "add",
        "carol",
        "--public-key",
        public_b64(new_key()),
        *(a for p in prefixes for a in ("--prefix", p)),
    )
    assert code == 0, err
    approver = get_approver(SqliteRunRecords(default_db()), "carol")
    assert approver is not None
    assert approver.allowed_prefixes == [*prefixes[:3], str(tmp_path / "local" / "models")]
