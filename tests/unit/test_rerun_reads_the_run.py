"""A `--rerun` reads the run, never the earlier preserved copy (issue 37 item 1, "rerun"): evidence is write-once,
so the rerun preserves into a location of its own, copied from the run's own files; the first capture's objects
are neither its sources nor its inputs. Tampering with every byte of the earlier copy therefore changes nothing the
rerun records, and every object it preserves matches the run file it came from."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import invoke, isolated_cli_env

from rlcleanup.samples.generator import write_sample_run

SCENARIO = "completed-resumed"
FORGED = b"all checks passed\n"


def _run(*args: str) -> dict[str, Any]:
    code, out, err = invoke("run", *args, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def _manifest(record: dict[str, Any]) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = json.loads(Path(record["manifest_uri"]).read_text())["objects"]
    return objects


def test_a_rerun_reads_the_run_not_the_earlier_preserved_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolated_cli_env(tmp_path, monkeypatch)
    root = write_sample_run(tmp_path / "src", SCENARIO)
    first = _run(str(root))
    old_location = Path(first["preserved_locations"][0])
    tampered = [p for p in old_location.rglob("*") if p.is_file()]
    assert len(tampered) > 5
    for path in tampered:  # every byte of the first capture replaced: logs, metrics, configs, manifest, report
        path.write_bytes(FORGED)

    again = _run(str(root), "--rerun")

    new_location = Path(again["preserved_locations"][0])
    assert new_location != old_location and not new_location.is_relative_to(old_location)
    objects = _manifest(again)  # the new manifest is the rerun's own (the old one now holds only FORGED)
    assert objects
    copied = [o for o in objects if o["source"] != "derived"]  # the rest the pipeline wrote itself
    assert copied
    for obj in objects:
        destination = Path(obj["destination"])
        assert destination.is_relative_to(new_location), obj
        data = destination.read_bytes()
        assert FORGED not in data and base64.b64encode(hashlib.md5(data).digest()).decode() == obj["md5"], obj
    for obj in copied:
        source = Path(obj["source"])
        assert not source.is_relative_to(old_location), obj  # read from the run, not from the first copy
        assert source.is_relative_to(tmp_path / "src"), obj  # the run's durable or temp root
        assert Path(obj["destination"]).read_bytes() == source.read_bytes(), obj
    for key in ("terminal_state", "first_cause", "classification"):
        assert again.get(key) == first.get(key), key
    assert [c["digest"] for c in again["candidates"]] == [c["digest"] for c in first["candidates"]]
    report = (new_location / "derived" / "report.md").read_text()
    assert FORGED.decode().strip() not in report
