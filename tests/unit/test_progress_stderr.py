"""Issue 38 item 10: long commands show progress on stderr (stages as they finish, a bar where the work is
countable) when stderr is a terminal, nothing when it is piped or with --quiet, and never anything on stdout:
`run --json` stays parseable and `eval "$(rlcleanup stack up)"` reads only the exports."""

from __future__ import annotations

import io
import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_support import read_terminal

from rlcleanup.cli import stack_cmds
from rlcleanup.cli.progress import Stage, StderrProgress
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.stack.state import StackState

REPO = Path(__file__).resolve().parents[2]
MARK = "✓"


def _read_all(fd: int) -> bytes:
    return b"".join(iter(lambda: read_terminal(fd), b""))


def _run(argv: list[str], out: Path, *, tty: bool, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run `argv` with stdout to a file and stderr to a pseudo-terminal (tty) or a pipe; returns (exit, stderr)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO / "shared"), **(env or {})}
    environment.pop("FIRESTORE_EMULATOR_HOST", None)
    with out.open("wb") as stdout:
        if not tty:
            done = subprocess.run(argv, stdout=stdout, stderr=subprocess.PIPE, env=environment, timeout=300)
            return done.returncode, done.stderr.decode()
        master, slave = pty.openpty()
        proc = subprocess.Popen(argv, stdout=stdout, stderr=slave, stdin=subprocess.DEVNULL, env=environment)
        os.close(slave)
        err = _read_all(master)
        os.close(master)
        return proc.wait(timeout=300), err.decode()


@pytest.fixture(scope="module")
def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample_run(tmp_path_factory.mktemp("progress") / "src", "completed-resumed")


@pytest.mark.parametrize(("tty", "quiet"), [(True, False), (False, False), (True, True)])
def test_run_shows_stages_on_a_terminal_only(tmp_path: Path, run_root: Path, tty: bool, quiet: bool) -> None:
    argv = [sys.executable, "-m", "rlcleanup.cli.main", "run", str(run_root), "--json"]
    argv += ["--db", str(tmp_path / "r.db"), "--preserve-to", str(tmp_path / "p")] + (["--quiet"] if quiet else [])
    code, err = _run(argv, tmp_path / "out.json", tty=tty)
    assert code == 0, err
    record = json.loads((tmp_path / "out.json").read_text())  # stdout is the record, nothing else
    assert record["status"] != "in_progress"
    if tty and not quiet:
        lines = [line.strip("\r\x1b[2K") for line in err.replace("\r", "\n").splitlines() if MARK in line]
        stages = [line.split(MARK, 1)[1].split(" (")[0].strip() for line in lines]
        assert stages[0] == "classify" and "selection" in stages, err
        assert any(s.startswith("validation ") for s in stages)  # a fan-out: counted (done/total)
        assert all(line.startswith("rlcleanup: ") and line.endswith(" s)") for line in lines)
    else:
        assert MARK not in err and "\r" not in err and "\x1b" not in err, err


def test_the_bar_redraws_in_place_and_clears_before_a_stage_line() -> None:
    stream = _Terminal()
    progress = StderrProgress(stream=stream, prefix="p")
    progress.stages([Stage("classify", 1, 0, 1), Stage("validation", 3, 0, 8)])
    progress.stages([Stage("classify", 1, 0, 1), Stage("validation", 8, 0, 8)])
    progress.close()
    text = stream.getvalue()
    assert text.count("p: ✓ classify") == 1 and text.count("p: ✓ validation 8/8") == 1
    assert "\r\x1b[2Kp: validation [#########...............] 3/8" in text
    assert text.endswith(" s)\n")  # the bar was erased before the stage line replaced it
    silent = io.StringIO()  # not a terminal
    StderrProgress(stream=silent).stage("classify")
    assert silent.getvalue() == ""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("quiet", [False, True])
def test_stack_up_progress_goes_to_stderr_and_eval_reads_only_exports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, quiet: bool
) -> None:
    """`stack up` with both streams terminals (as under a bare `rlcleanup stack up`): the servers' progress is on
    stderr; stdout is exactly what it printed before (the exports and `#` comments that `eval` reads)."""
    state = StackState(state_dir=str(tmp_path), project="p", stack_id="s", ports={"pubsub": 1})
    state.env = {"PUBSUB_EMULATOR_HOST": "127.0.0.1:1"}
    state.buckets = {"runs": "r", "preserve": "q", "watched-runs": "w"}
    state.pgids = {"pubsub": 11, "gcs": 12}

    def fake_up(where: Path, **kwargs: Any) -> StackState:
        for i, name in enumerate(("pubsub", "gcs"), 1):
            kwargs["on_ready"](name, i, 2)
        return state

    monkeypatch.setattr("rlcleanup.stack.up", fake_up)
    out, err = _Terminal(), _Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    stack_cmds.stack_up(state_dir=tmp_path, project="p", timeout=1.0, quiet=quiet)
    stdout = out.getvalue()
    assert stdout.startswith(state.exports()) and MARK not in stdout and "\r" not in stdout
    assert all(line.startswith(("export ", "#", "unset ")) or not line for line in stdout.splitlines())
    if quiet:
        assert err.getvalue() == ""
    else:
        assert "servers ready (gcs) [########################] 2/2" in err.getvalue()
        assert "rlcleanup stack: ✓ 2 servers ready" in err.getvalue()
        assert "✓ topics, subscriptions and buckets provisioned" in err.getvalue()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize(("tty", "quiet"), [(True, False), (False, False), (True, True)])
def test_make_announces_install_stages_on_a_terminal_only(tmp_path: Path, tty: bool, quiet: bool) -> None:
    """The Makefile's `step` (used by the venv install `make demo` runs first) through make itself."""
    argv = ["make", "-s", "-C", str(REPO), "--eval", "progress-probe: ; @$(call step,[1/5] creating .venv)"]
    argv += ["progress-probe"] + (["QUIET=1"] if quiet else [])
    code, err = _run(argv, tmp_path / "out.txt", tty=tty)
    assert code == 0, err
    assert (tmp_path / "out.txt").read_text() == ""  # never on stdout
    assert ("make: [1/5] creating .venv" in err) is (tty and not quiet), err
