"""Issue 38 item 4: reports stay true. Every change of a finished record re-renders its report (write-once: the
newest is `report_uri`), and `show`, `status`, `report` and the report file take the verdict and the selection from
report/verdict.py; through the CLI with --json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.models.record import CompletionRecord
from rlcleanup.report.verdict import build_verdict
from rlcleanup.samples.generator import write_sample_run

RUN = "math-rl-completed-resumed-2026.11.30"


@pytest.fixture(autouse=True)
def _xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolated_cli_env(tmp_path, monkeypatch)


def _json(*args: str) -> Any:
    code, out, err = invoke(*args, "--json")
    assert code == 0, (out, err)
    return json.loads(out)


def test_after_publish_and_reclaim_every_surface_and_the_report_file_agree(tmp_path: Path, _xdg: Path) -> None:
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    first = CompletionRecord.model_validate(_json("run", str(root)))
    assert first.report_uri and first.report_uri.endswith("/derived/report.html")
    code, out, err = invoke("keygen", "--id", "alice")
    assert code == 0, err
    public = next(line.split()[-1] for line in out.splitlines() if line.startswith("public key:"))
    models = _xdg / "models"
    assert invoke("approver", "add", "alice", "--public-key", public, "--prefix", str(models))[0] == 0
    dest = models / "m20"
    base = ["grant", RUN, "--step", "20", "--destination", str(dest), "--key", "alice"]
    assert _json(*base, "--action", "publish")["state"] == "published"
    assert _json(*base, "--action", "reclaim")["state"] == "reclaimed"

    record = CompletionRecord.model_validate(_json("show", RUN))
    line = build_verdict(record).line
    assert "step 20 chosen by a publish grant" in line and "unresolved" not in line
    assert record.reclaimed_bytes > 0

    (row,) = _json("status", RUN)
    assert (row["selection"], row["selected_step"], row["verdict"]) == ("chosen", 20, line)
    code, out, _ = invoke("status", RUN)
    assert code == 0 and "step 20 (chosen)" in out and "unresolved" not in out

    code, out, _ = invoke("show", RUN)
    assert code == 0 and out.splitlines()[0] == line
    assert "selection unresolved" not in out and "selection      step 20 chosen by a publish grant" in out
    assert f"step 20 published to {dest}" in out  # where the model went
    assert f"reclaimed {record.reclaimed_bytes} bytes of step 20's export" in out  # what was reclaimed

    report = _json("report", RUN)
    assert report["verdict"] == line
    done = next(s for s in report["sections"] if s["anchor"] == "authority")
    assert any(str(dest) in item for item in done["blocks"][0]["items"])

    # The report file the record names now is the one rendered after the reclaim: it says what show says.
    assert record.report_uri and record.report_uri != first.report_uri
    html = Path(record.report_uri).read_text()
    derived = Path(record.report_uri).parent
    newest_md = max(derived.glob("report*.md"), key=lambda f: f.stat().st_mtime_ns).read_text()
    for text in (html, newest_md):
        assert "chosen by a publish grant" in text and "selection unresolved" not in text
        assert "nothing needs a person" in text and str(dest) in text
    # The first report stays as it was written (evidence is write-once) and the newest manifest lists both.
    assert "selection unresolved" in Path(first.report_uri).read_text()
    manifest = json.loads(Path(record.manifest_uri or "").read_text())
    listed = {o["destination"] for o in manifest["objects"]}
    assert {first.report_uri, record.report_uri} <= listed
