"""The README's shell blocks, run verbatim as a new user would paste them (issue 18).

Every ```bash block of README.md is either run here or listed in NOT_RUN with the reason; a new block that is
neither fails the test, so the README cannot grow an untested command. Blocks run from the repo root (they say
`.venv/bin/...`) in bash with HOME, XDG_* and TMPDIR pointing into a temp dir, so records, keys, published copies
and the stack's state land there and nothing of the user's is touched. Like an interactive paste, a failing line
does not stop the lines after it (the stack block relies on that to always reach `stack down`); every failing line
is reported and fails the test. The only substitution: `<printed key>`, which the README says is the key `keygen`
printed.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from rlcleanup.stack.state import CLIENT_ENV_NAMES

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

# First line of a block (its command, before any comment) -> why this test does not run it.
NOT_RUN = {
    "make test": "`make test` runs this very test: running it here would recurse (the block's `make demo` line runs)",
    "rlcleanup sample-run DIR --scenario NAME": "a usage synopsis with placeholders (DIR, RUN_URI, RUN_ID), not commands",
    "rlcleanup approver add alice --public-key <printed key> --prefix hf://": "needs a Hugging Face Hub account and "
    "HF_TOKEN (hf:// hand-off is tested against the Hub stand-in, docs/hub.md)",
    "AWS_ENDPOINT_URL=https://cwobject.com": "run by tests/e2e/test_s3_readme_command.py as written, with only the "
    "endpoint and keys changed (a local virtual-hosted S3 server instead of CoreWeave's)",
}
DEMO = "make demo"
STACK = 'eval "$(.venv/bin/rlcleanup stack up)"'
AUTHORITY = ".venv/bin/rlcleanup keygen --id alice"

# Runs each line like an interactive shell would (a failure does not stop the rest), but remembers failures.
HARNESS = """failed=0
trap 'echo "README LINE FAILED (exit $?): $BASH_COMMAND" >&2; failed=1' ERR
{body}
exit $failed
"""


def bash_blocks() -> list[str]:
    return [m.group(1) for m in re.finditer(r"```bash\n(.*?)```", README.read_text(), re.S)]


def _command(line: str) -> str:
    return line.split("#", 1)[0].strip()


def _block(first: str) -> str:
    return next(b for b in bash_blocks() if _command(b.splitlines()[0]).startswith(first))


@pytest.fixture
def user_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    for var in ("GOOGLE_CLOUD_PROJECT", "RLCLEANUP_DB", "RLCLEANUP_STACK_DIR", "RLCLEANUP_PRESERVE_ROOT"):
        env.pop(var, None)
    (tmp_path / "home").mkdir()
    (tmp_path / "tmp").mkdir()
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        TMPDIR=str(tmp_path / "tmp"),
    )
    return env


def _run(script: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", "-c", HARNESS.format(body=script)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    return done


def _processes_in(directory: Path) -> list[int]:
    """Processes whose working directory is inside `directory` (the stack starts every server there)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        if cwd == directory or directory in cwd.parents:
            found.append(int(proc.name))
    return found


def test_every_block_is_run_or_says_why_not() -> None:
    firsts = [_command(b.splitlines()[0]) for b in bash_blocks()]
    covered = (DEMO, STACK, AUTHORITY, *NOT_RUN)
    unclassified = [f for f in firsts if not any(f.startswith(c) for c in covered)]
    assert unclassified == [], f"README blocks neither run by this test nor listed in NOT_RUN: {unclassified}"
    first_block = bash_blocks()[0].splitlines()
    assert [_command(line) for line in first_block] == [DEMO, "make test"]
    # Issue 47: the first sentence says what rlcleanup is, and the test command its time, before any command.
    intro = README.read_text().split("```bash", 1)[0].split("\n", 1)[1].strip()
    assert intro.startswith("rlcleanup is ") and re.search(r"`make test` — about \d+ min on 2 cores", intro)
    assert re.search(r"about \d+ min on 2 cores", first_block[1])


def test_demo_then_authority_block_closes_the_record(user_env: dict[str, str], tmp_path: Path) -> None:
    demo = _command(bash_blocks()[0].splitlines()[0])
    assert demo == DEMO
    shown = _run(demo, user_env, timeout=600)
    assert ".venv/bin/rlcleanup status" in shown.stdout  # the demo prints the next commands...
    status = subprocess.run(
        [str(REPO / ".venv/bin/rlcleanup"), "status", "--json"], env=user_env, capture_output=True, text=True
    )
    assert status.returncode == 0 and "math-rl-completed-resumed-2026.11.30" in status.stdout  # ...and they work

    block = _block(AUTHORITY)
    lines = block.splitlines()
    keygen, rest = lines[0], "\n".join(lines[1:])
    assert "<printed key>" in rest
    printed = _run(keygen, user_env, timeout=60).stdout
    key = re.search(r"^public key:\s+(\S+)$", printed, re.M)
    assert key is not None, printed
    done = _run(rest.replace("<printed key>", key.group(1)), user_env, timeout=300)
    out = done.stdout
    assert "dry run: publish step 20" in out and "creates " in out
    assert ": published" in out and ": reclaimed" in out
    assert "math-rl-completed-resumed-2026.11.30: completed" in out and "nothing needs a person" in out
    published = tmp_path / "home" / "rlcleanup-models" / "math-20"
    assert (published / "_PUBLISHED.json").is_file()
    assert oct(published.stat().st_mode & 0o777) == "0o700"


def test_local_stack_block_runs_and_leaves_no_server_behind(user_env: dict[str, str], tmp_path: Path) -> None:
    stack_dir = tmp_path / "cache" / "rlcleanup" / "stack"
    try:
        # Then, in the same shell: which of the stack's variables are still set (issue 38: none may outlive it).
        left = "\n".join(f'[ -n "${{{name}+x}}" ] && echo "STILL SET: {name}" || true' for name in CLIENT_ENV_NAMES)
        done = _run(_block(STACK) + "\n" + left, user_env, timeout=900)
        assert "stopped " in done.stderr and f"of the stack in {stack_dir}" in done.stderr
        assert "STILL SET" not in done.stdout, done.stdout
        assert "awaiting_authority" in done.stdout or "nothing needs a person" in done.stdout
    finally:
        # Whatever happened above, never leave the servers up (`down` signals only its own marked groups).
        subprocess.run(
            [str(REPO / ".venv/bin/rlcleanup"), "stack", "down"], env=user_env, capture_output=True, timeout=120
        )
    assert not (stack_dir / "state.json").exists()
    assert _processes_in(stack_dir) == []
