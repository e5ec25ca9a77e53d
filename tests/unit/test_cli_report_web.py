"""Issue 47: `report --web` opens the report in a browser, as `gh ... --web` does: the standard library's choice
of browser ($BROWSER first), here a script that records the URL it was given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run

RUN = "math-rl-completed-resumed-2026.11.30"


@pytest.fixture(autouse=True)
def _xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolated_cli_env(tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run's record for every test here (the pipeline once)."""
    base = tmp_path_factory.mktemp("report-web")
    records = base / "records.db"
    root = write_sample_run(base / "src", "completed-resumed")
    assert run_embedded(str(root), db_path=records, preserve_root=str(base / "preserved")) is not None
    return records


def _recording_browser(tmp_path: Path) -> tuple[Path, Path]:
    script, seen = tmp_path / "browser.sh", tmp_path / "opened.txt"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> {seen}\n')
    script.chmod(0o755)
    return script, seen


def _report(db: Path, *args: str, browser: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BROWSER": browser, "DISPLAY": "", "WAYLAND_DISPLAY": ""}
    command = [sys.executable, "-m", "rlcleanup", "report", RUN, "--db", str(db), "--web", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_report_web_opens_the_rendered_html_report_in_the_browser(db: Path, tmp_path: Path) -> None:
    script, seen = _recording_browser(tmp_path)
    done = _report(db, browser=str(script))
    assert done.returncode == 0, done.stderr
    (url,) = seen.read_text().splitlines()
    assert urlsplit(url).scheme == "file"
    opened = Path(url2pathname(urlsplit(url).path))
    assert opened.name == "report.html" and opened.is_relative_to(tmp_path / "cache" / "rlcleanup" / "reports")
    assert RUN in opened.read_text() and "<html" in opened.read_text().lower()
    assert done.stdout.splitlines()[0] == str(opened)  # stdout: the files written; the words on stderr
    assert f"opened {url}" in done.stderr

    # --out chooses the directory, as it does without --web.
    done = _report(db, "--out", str(tmp_path / "mine"), browser=str(script))
    assert done.returncode == 0 and seen.read_text().splitlines()[-1] == (tmp_path / "mine" / "report.html").as_uri()


def test_report_web_without_a_browser_names_the_file_and_the_fix(db: Path, tmp_path: Path) -> None:
    failing = tmp_path / "no-browser.sh"
    failing.write_text("#!/bin/sh\nexit 1\n")
    failing.chmod(0o755)
    done = _report(db, browser=str(failing))
    assert done.returncode == 3 and "no web browser found" in done.stderr and "BROWSER" in done.stderr
    assert "file://" in done.stderr


def test_report_web_refuses_another_format(db: Path) -> None:
    code, out, err = invoke("report", RUN, "--db", str(db), "--web", "--format", "json")
    assert code == 2 and out == "" and "--web" in err
