"""Issue 47 item 1: Ctrl-C during `rlcleanup run` says what was left and how to go on, and plain `rlcleanup run ROOT`
again resumes the interrupted pass (reusing and sealing what it preserved); a run another live process is working
on is refused with who holds it. The interrupt is a real one: ^C typed into a pseudo-terminal, which the terminal
line discipline turns into SIGINT for the console script's process group."""

from __future__ import annotations

import json
import os
import pty
import select
import socket
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cli_support import invoke, read_terminal

from rlcleanup.adapters.sqlite_records import SqliteIdempotencyStore, SqliteRunRecords
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.runtime.resume import embedded_owner
from rlcleanup.samples.generator import write_sample_run

EXE = str(Path(sys.executable).with_name("rlcleanup"))
RUN_ID = "math-rl-completed-resumed-2026.11.30"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    env.pop("GOOGLE_CLOUD_PROJECT", None)
    return env | {"XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path), "COLUMNS": "120"}


def _run_in_pty(args: list[str], env: dict[str, str], interrupt_after: str, timeout: float = 120) -> tuple[int, str]:
    """Run the console script on a pseudo-terminal; type ^C once `interrupt_after` has been printed."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its controlling terminal is the pty, so ^C reaches it as SIGINT
        os.execve(EXE, [EXE, *args], env)
    seen, interrupted, deadline = b"", False, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if not ready:
                continue
            chunk = read_terminal(fd)
            if not chunk:
                break
            seen += chunk
            if not interrupted and interrupt_after.encode() in seen:
                os.write(fd, b"\x03")
                interrupted = True
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    assert interrupted, seen.decode(errors="replace")[-2000:]
    return os.waitstatus_to_exitcode(status), seen.decode(errors="replace").replace("\r\n", "\n")


def _undo(db: Path, key: str) -> None:
    """Forget that a step was done (as if the process doing it had been stopped before it finished)."""
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM claims WHERE run_id = ? AND key = ?", (RUN_ID, key))
        conn.execute("DELETE FROM claim_versions WHERE run_id = ? AND key = ?", (RUN_ID, key))


def test_ctrl_c_says_what_is_left_and_plain_run_resumes_and_seals(tmp_path: Path) -> None:
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    db, preserved = tmp_path / "r.db", tmp_path / "preserved"
    args = ["run", str(root), "--db", str(db), "--preserve-to", str(preserved)]
    env = _env(tmp_path)

    code, out = _run_in_pty(args, env, interrupt_after="✓ capture plan")
    assert code == 130, out[-2000:]
    assert "interrupted" in out and f"rlcleanup run {root}" in out, out[-2000:]
    assert "left:" in out, out[-2000:]  # what was still to do, by stage
    record = SqliteRunRecords(db).get(RUN_ID)
    assert record is not None and record.status.value == "in_progress"
    assert not (preserved / RUN_ID / "manifest.json").exists()

    done = subprocess.run(EXE.split() + args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resum" in done.stderr, done.stderr
    finished = SqliteRunRecords(db).get(RUN_ID)
    assert finished is not None and finished.status.value == "awaiting_authority", finished
    manifest = json.loads((preserved / RUN_ID / "manifest.json").read_text())
    assert manifest["objects"], manifest
    assert not (preserved / "reruns").exists()  # what the interrupted pass preserved is reused, not copied again


def test_a_run_held_by_a_live_process_is_refused_and_a_dead_one_taken_over(tmp_path: Path) -> None:
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    db = tmp_path / "r.db"
    record = run_embedded(str(root), db_path=db, preserve_root=str(tmp_path / "p"))
    assert record is not None
    # The run is in progress again, and a live process (this test's parent: alive, not the CLI) holds a step.
    records, claims = SqliteRunRecords(db), SqliteIdempotencyStore(db)
    records.update(RUN_ID, {"status": "in_progress"})
    _undo(db, "select")
    now = datetime.now(UTC)
    owner = embedded_owner(os.getppid(), socket.gethostname(), "7")
    assert claims.claim(RUN_ID, "select", 600, now, owner=owner).value == "acquired"
    code, _, err = invoke("run", str(root), "--db", str(db), "--preserve-to", str(tmp_path / "p"))
    assert code == 3, err
    err = " ".join(err.split())
    assert f"held by pid {os.getppid()} on host {socket.gethostname()} since" in err, err
    expires = now + timedelta(seconds=600)  # its own date: a lease taken before midnight expires the day after
    assert f"it expires at {expires:%Y-%m-%d %H:%M}" in err, err
    # Nothing was taken over: the live holder's claim is still its own.
    assert claims.claim(RUN_ID, "select", 600, datetime.now(UTC), owner="someone-else").value == "busy"
    # The same step left by a process that is gone (a pid above pid_max): its lease is taken over and the run ends.
    _undo(db, "select")
    claims.claim(RUN_ID, "select", 600, datetime.now(UTC), owner=embedded_owner(2**22 + 11, socket.gethostname(), "3"))
    again = run_embedded(str(root), db_path=db, preserve_root=str(tmp_path / "p"))
    assert again is not None and again.status.value == "awaiting_authority"
