"""Every collection of the record store is named in exactly one place, ports/collections.py (issue 46 item 5):
a module that spells a collection's name (a top-level one as a string, a run collection as a path segment) fails
here. Modules read and write a collection through its typed repository (`Documents`, bound to its model)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

import rlcleanup
from rlcleanup.adapters.sqlite_records import SqliteRunRecords
from rlcleanup.ports import collections
from rlcleanup.ports.collections import Collection, RunCollection

PACKAGE = Path(rlcleanup.__file__).parent
HOME = PACKAGE / "ports" / "collections.py"


def declared() -> tuple[list[Collection], list[RunCollection]]:
    values = vars(collections).values()
    return [v for v in values if isinstance(v, Collection)], [v for v in values if isinstance(v, RunCollection)]


def literal_texts(path: Path) -> list[str]:
    """The string literals of the module that could name a collection: assigned, passed positionally, or a part of
    an f-string or a concatenation. A keyword's value or a dict's key is a label (`check="approvers"` in doctor),
    and docstrings are prose."""
    tree = ast.parse(path.read_text(), str(path))
    texts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.Return) and node.value is not None:
            texts.append(node.value)
        elif isinstance(node, ast.Call):
            texts += node.args
        elif isinstance(node, ast.JoinedStr | ast.BinOp):
            texts += node.values if isinstance(node, ast.JoinedStr) else [node.left, node.right]
    return [t.value for t in texts if isinstance(t, ast.Constant) and isinstance(t.value, str)]


def spellings(paths: list[Path]) -> list[str]:
    top, per_run = declared()
    found = []
    for path in paths:
        for text in literal_texts(path):
            hits = [c.name for c in top if text == c.name or text.startswith(c.name + "/")]
            hits += [c.name for c in per_run if "/" in text and re.search(rf"(^|/){re.escape(c.name)}(/|$)", text)]
            found += [f"{path.parent.name}/{path.name}: {text!r} names {name}" for name in hits]
    return found


def test_every_collection_is_named_in_one_place() -> None:
    top, per_run = declared()
    assert len(top) >= 12 and len(per_run) >= 6
    names = [c.name for c in (*top, *per_run)]
    assert len(names) == len(set(names))  # and once there
    others = [p for p in PACKAGE.rglob("*.py") if p != HOME]
    assert spellings(others) == []


def test_the_check_finds_a_collection_spelled_elsewhere(tmp_path: Path) -> None:
    planted = tmp_path / "rlcleanup" / "planted.py"
    planted.parent.mkdir()
    planted.write_text('"""run_ids in prose is fine."""\nA = "run_ids"\nB = f"runs/{x}/grants"\nC = "grants"\n')
    found = [f.split(": ", 1)[1] for f in spellings([planted])]
    assert found == ["'run_ids' names run_ids", "'/grants' names grants"]


class Note(BaseModel):
    text: str


def test_a_bound_collection_reads_and_writes_its_model(tmp_path: Path) -> None:
    records = SqliteRunRecords(tmp_path / "r.db")
    notes = RunCollection("notes").bind(records, "r1", Note)
    assert notes.put("a", Note(text="x"), only_if_absent=True) and not notes.put(
        "a", Note(text="y"), only_if_absent=True
    )
    assert notes.get("a") == Note(text="x") and notes.get("b") is None
    assert notes.list() == [("a", Note(text="x"))] and notes.path == "runs/r1/notes"
    records.put_doc(notes.path, "bad", {"text": 3})  # a document that is not one is an error, never a dict
    with pytest.raises(ValidationError):
        notes.get("bad")


def test_an_id_field_is_the_documents_id_never_a_stored_field(tmp_path: Path) -> None:
    """approvers/{id}: the approver's id is the document's; the stored document is what it always was (no id in
    it, so documents filed before the typed repository read back unchanged) and reads back as the model."""
    from rlcleanup.adapters.sqlite_records import SqliteRunRecords
    from rlcleanup.authority.grants import Approver, approvers, get_approver, new_key, public_b64, register_approver

    records = SqliteRunRecords(tmp_path / "r.db")
    register_approver(records, Approver(approver_id="alice", public_key=public_b64(new_key()), allowed_prefixes=["/m"]))
    stored = records.get_doc("approvers", "alice")
    assert stored is not None and "approver_id" not in stored and stored["allowed_prefixes"] == ["/m"]
    back = get_approver(records, "alice")
    assert back is not None and back.approver_id == "alice" and back.allowed_prefixes == ["/m"]
    assert [(doc_id, a.approver_id) for doc_id, a in approvers(records).list()] == [("alice", "alice")]
