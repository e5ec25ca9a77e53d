"""Issue 38 item 5: a shell that pasted the stack block keeps the emulator variables after the stack is gone.

Every command that needs the record store or the bus checks the emulator it names first and exits 3 at once with
the fix (`eval "$(rlcleanup stack down)"`), never a 30 s client timeout and a traceback; and `stack down` prints the
`unset` line that makes the shell forget every variable `stack up` exported.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest
from cli_support import invoke, isolated_cli_env, runner

from rlcleanup.cli.main import app
from rlcleanup.paths import keys_dir
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.stack import StackState
from rlcleanup.stack.state import CLIENT_ENV_NAMES, client_env, unset_line

RUN = "math-rl-completed-resumed-2026.11.30"
FIX = 'eval "$(rlcleanup stack down)"'


@pytest.fixture(autouse=True)
def _xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolated_cli_env(tmp_path, monkeypatch)


def _closed_port() -> int:
    """A port nothing listens on: bound by the kernel's choice, then released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def stopped_stack(monkeypatch: pytest.MonkeyPatch) -> str:
    """The variables `stack up` exported, left behind by a `stack down` that was not eval'd."""
    dead = f"127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", dead)
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", dead)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{dead}")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "rlcleanup-local")
    return dead


def _public_key() -> str:
    code, out, err = invoke("keygen", "--id", "alice")
    assert code == 0, err
    assert (keys_dir() / "alice.pem").is_file()
    return next(line.split()[-1] for line in out.splitlines() if line.startswith("public key:"))


def _fails_fast_with_the_fix(*args: str) -> str:
    started = time.monotonic()
    result = runner.invoke(app, list(args))
    took = time.monotonic() - started
    assert isinstance(result.exception, SystemExit), result.exception  # a typed exit, not a crash
    assert result.exit_code == 3, (result.exit_code, result.stderr)
    assert took < 8, f"{args[0]} took {took:.1f}s"
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert FIX in err and "not reachable" in err, err
    return err


def test_authority_commands_fail_fast_when_the_stack_is_stopped(stopped_stack: str, tmp_path: Path) -> None:
    public = _public_key()
    err = _fails_fast_with_the_fix("approver", "add", "alice", "--public-key", public, "--prefix", str(tmp_path))
    assert f"Firestore emulator at {stopped_stack} (FIRESTORE_EMULATOR_HOST)" in err
    _fails_fast_with_the_fix("grants", RUN)
    dest = str(tmp_path / "models" / "m")
    _fails_fast_with_the_fix(
        "grant", RUN, "--action", "publish", "--step", "20", "--key", "alice", "--destination", dest
    )
    _fails_fast_with_the_fix("show", RUN)  # as show always did, in the same words


def test_grant_checks_the_bus_before_it_signs(
    stopped_stack: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The records are in SQLite, but PUBSUB_EMULATOR_HOST still routes grants to a stopped emulator: before this
    fix the publish waited 30 s and crashed with TimeoutError (exit 1)."""
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST")
    db = tmp_path / "records.db"
    root = write_sample_run(tmp_path / "src" / "completed-resumed", "completed-resumed")
    run_embedded(str(root), db_path=str(db), preserve_root=str(tmp_path / "preserved"))
    public = _public_key()
    code, _, err = invoke(
        "approver", "add", "alice", "--public-key", public, "--prefix", str(tmp_path), "--db", str(db)
    )
    assert code == 0, err
    dest = str(tmp_path / "models" / "m")
    grant = ("grant", RUN, "--action", "publish", "--step", "20", "--key", "alice", "--destination", dest)
    err = _fails_fast_with_the_fix(*grant, "--backend", "sqlite", "--db", str(db))
    assert f"Pub/Sub emulator at {stopped_stack} (PUBSUB_EMULATOR_HOST)" in err
    code, out, err = invoke(*grant, "--backend", "sqlite", "--db", str(db), "--dry-run")  # publishes nothing
    assert code == 0 and "dry run: publish step 20" in out, err


def test_emit_fails_fast_when_the_stack_is_stopped(stopped_stack: str) -> None:
    err = _fails_fast_with_the_fix("emit", "--run-uri", "gs://rlcleanup-local-runs/x", "--state", "SUCCEEDED")
    assert "PUBSUB_EMULATOR_HOST" in err


def test_run_on_gcs_fails_fast_when_the_storage_emulator_is_gone(stopped_stack: str, tmp_path: Path) -> None:
    """Issue 47 item 7: `run gs://...` with a stopped stack's STORAGE_EMULATOR_HOST hung 115 s in the GCS client's
    retries and ended in a raw RetryError; now one connect, then the fix."""
    db = str(tmp_path / "r.db")
    err = _fails_fast_with_the_fix("run", "gs://rlcleanup-local-runs/durable/math-rl/2026.11.30", "--db", db)
    assert f"GCS storage emulator at http://{stopped_stack} (STORAGE_EMULATOR_HOST)" in err
    err = _fails_fast_with_the_fix("run", str(tmp_path), "--preserve-to", "gs://rlcleanup-local-preserve", "--db", db)
    assert "STORAGE_EMULATOR_HOST" in err
    assert not Path(db).exists()  # nothing was written


# ------------------------------------------------------------------ stack down: the unset line


def _exported_after(script: str) -> dict[str, str]:
    done = subprocess.run(["bash", "-c", f"{script}\nenv"], capture_output=True, text=True, check=True, env={})
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def _stack_env() -> dict[str, str]:
    from rlcleanup.stack import s3_server

    ports = {"pubsub": 8085, "firestore": 8080, "gcs": 4443}
    buckets = {"preserve": "p-preserve", "watched-runs": "p-watched-runs"}
    return client_env("p", ports, buckets, s3_server.stack_endpoint_env("http://127.0.0.1:8333", ["p-s3-runs"]))


def test_client_env_names_are_what_stack_up_exports() -> None:
    assert sorted(_stack_env()) == sorted(CLIENT_ENV_NAMES)
    assert not [name for name in CLIENT_ENV_NAMES if name.startswith("AWS_")]  # the standard ones stay the user's


def test_after_stack_up_a_coreweave_command_keeps_its_own_endpoint_keys_and_virtual_hosted_style() -> None:
    """Issue 47 item 7: `stack up` exported AWS_ENDPOINT_URL, the stack's admin keys and AWS_S3_ADDRESSING_STYLE=path,
    which turned the README's CoreWeave command (and any AWS tool) in that shell towards the stack, path-style.
    Now the stack's S3 server is one rlcleanup variable claiming only the stack's buckets: the settings resolve the
    README's command to CoreWeave with the user's keys, virtual-hosted, and the stack's bucket to the stack."""
    from rlcleanup.adapters.s3_storage import S3Storage

    # What the shell holds after `eval "$(rlcleanup stack up)"`, then the README's CoreWeave command's variables.
    shell = _exported_after(_state_exports())
    coreweave = {**shell, "AWS_ENDPOINT_URL": "https://cwobject.com", "AWS_ACCESS_KEY_ID": "cw-key"}
    coreweave["AWS_SECRET_ACCESS_KEY"] = "cw-secret"
    storage = S3Storage.from_env(coreweave)
    readme_bucket = storage.endpoint_for("marin-us-east-02a")
    assert readme_bucket.endpoint_url == "https://cwobject.com" and not readme_bucket.path_style
    assert readme_bucket.access_key_id == "cw-key"  # the user's keys, not the stack's admin identity
    stack_bucket = storage.endpoint_for("p-s3-runs")
    assert stack_bucket.endpoint_url == "http://127.0.0.1:8333" and stack_bucket.path_style
    # Nothing the stack exported reaches the standard variables, with or without the user's own.
    assert not [name for name in shell if name.startswith("AWS_")]
    assert not S3Storage.from_env(shell).endpoint_for("marin-us-east-02a").endpoint_url  # AWS itself, as before
    # `stack down` unsets exactly what `stack up` set: never the user's own AWS_* variables, except those an
    # older stack itself exported (recorded in its state.json).
    assert not [name for name in unset_line(None).split()[1:] if name.startswith("AWS_")]
    older = StackState(state_dir="/nonexistent", project="p", stack_id="s", env={"AWS_ENDPOINT_URL": "http://x"})
    assert unset_line(older) == "unset AWS_ENDPOINT_URL"


def _state_exports() -> str:
    return StackState(state_dir="/nonexistent", project="p", stack_id="s", env=_stack_env()).exports()


@pytest.mark.parametrize("recorded", [True, False], ids=["stack-recorded", "already-down"])
def test_stack_down_output_evals_to_unset_every_exported_variable(tmp_path: Path, recorded: bool) -> None:
    where = tmp_path / "stack"
    where.mkdir()
    state = StackState(state_dir=str(where), project="p", stack_id="s", env=_stack_env())
    if recorded:
        state.save()  # no live server in it: `down` stops nothing and still prints the line
    assert set(_exported_after(state.exports())) >= set(CLIENT_ENV_NAMES)  # what `eval "$(stack up)"` leaves
    code, out, err = invoke("stack", "down", "--state-dir", str(where))
    assert code == 0 and out.startswith("unset ") and len(out.splitlines()) == 1, (out, err)
    assert "no stack running" in err  # the words go to stderr, never into the eval
    left = _exported_after(f"{state.exports()}\neval {out.strip()!r}")
    assert [name for name in CLIENT_ENV_NAMES if name in left] == []
