"""Issue 38 item 3: every `grant --dry-run` preview (publish, hand-off, register, reclaim) renders, as text
and as JSON, on a local run; the reclaim preview crashed with `KeyError: 'crc32c'` (its rows carry no checksum).
The GCS and S3 variants are in tests/integration (test_authority_emulators.py, test_s3_authority.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_cli_operator_day import SELECTED, _approver, _invoke, _json, _sample, _xdg  # noqa: F401 - fixture

from rlcleanup.cli.preview_text import render_preview

# A cancel of this (ended) run is refused as run_ended, by its preview as by the grant (issue 47 item 3:
# tests/unit/test_preview_refuses_as_grant.py); its preview rendering is checked there.
ACTIONS = ("publish", "handoff", "register")


def _preview(action: str, dest: Path) -> tuple[str, dict[str, Any]]:
    args = ["grant", SELECTED, "--action", action, "--destination", str(dest), "--key", "alice", "--dry-run"]
    code, text, err = _invoke(*args)
    assert code == 0, (action, text, err)
    return text, _json(*args)


def test_every_preview_renders_as_text_and_json_on_a_local_run(tmp_path: Path, _xdg: Path) -> None:  # noqa: F811
    _json("run", str(_sample(tmp_path, "selection-policy")))
    _approver(_xdg / "models")
    dest = _xdg / "models" / "math"
    for action in ACTIONS:
        text, preview = _preview(action, dest)
        assert preview["action"] == action and preview["would"] == action, preview
        assert text.startswith(f"dry run: {action}"), text
        for row in preview.get("objects", []):  # each object the grant would copy, with its size
            assert f"  {row['name']}  {row['size']} B" in text
            assert f"crc32c {row['crc32c']}" in text and f"md5 {row['md5']}" in text
    assert not dest.exists()  # a preview writes nothing

    code, _, err = _invoke("grant", SELECTED, "--action", "publish", "--destination", str(dest), "--key", "alice")
    assert code == 0, err
    text, preview = _preview("reclaim", dest)  # the one that crashed: KeyError 'crc32c'
    assert preview["would"] == "reclaim" and preview["delete_count"] == len(preview["delete"]) > 0
    assert text.splitlines()[0].startswith(f"dry run: reclaim step {preview['step']} would delete")
    for row in preview["delete"]:
        assert f"  delete {row['uri']}  {row['size']} B" in text
        assert Path(row["uri"]).exists()  # listed, not deleted
    assert "None" not in text


def test_a_refused_reclaim_preview_exits_3_in_both_forms(tmp_path: Path, _xdg: Path) -> None:  # noqa: F811
    _json("run", str(_sample(tmp_path, "selection-policy")))
    _approver(_xdg / "models")
    args = ["grant", SELECTED, "--action", "reclaim", "--destination", str(_xdg / "models" / "x"), "--key", "alice"]
    code, text, _ = _invoke(*args, "--dry-run")
    assert code == 3 and "would be REFUSED (destination_unverified)" in text
    code, out, _ = _invoke(*args, "--dry-run", "--json")
    assert code == 3 and json.loads(out)["refusal"] == "destination_unverified"


@pytest.mark.parametrize(
    ("row", "shown", "absent"),
    [
        ({"uri": "/r/a", "size": 4}, "4 B", "crc32c"),  # a reclaim row: size only
        ({"name": "config.json", "size": 9, "crc32c": None, "md5": "bWQ1"}, "md5 bWQ1", "crc32c"),  # S3: no CRC32C
        ({"name": "README.md", "source": "generated", "size": 3, "crc32c": None, "md5": None}, "3 B", "None"),
        ({"name": "w", "size": None, "crc32c": "AAAAAA=="}, "size unknown  crc32c AAAAAA==", "None"),
    ],
)
def test_preview_rows_show_what_their_backend_gave(row: dict[str, Any], shown: str, absent: str) -> None:
    base = {"action": "publish", "would": "publish", "destination": "/d", "step": 5, "digest": "sha256:x"}
    publish = {**base, "object_count": 1, "total_bytes": 0, "visibility": "private", "visibility_evidence": "e"}
    publish |= {"secret_scan": "clean", "creates": [], "objects": [{"name": "n", **row}]}
    reclaim = {**base, "action": "reclaim", "would": "reclaim", "delete": [{"uri": "/u", **row}], "delete_count": 1}
    reclaim |= {"delete_bytes": 0, "keep_count": 0}
    for preview in (publish, reclaim):
        line = render_preview(preview).splitlines()[-1]
        assert shown in line and absent not in line, line
