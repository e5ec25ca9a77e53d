"""Issue 47: `make demo` without the 1.8 GB `layout-check` extra (torch + transformers; the Makefile's demo install
leaves it out, `make test` adds it). The demo's pipeline then records the tensor layout check as skipped: a warning
on each candidate, never a problem, the same verdicts otherwise; and the demo says so."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from rlcleanup.formats.checkpoints import tensor_layout
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run

REPO = Path(__file__).resolve().parents[2]
SKIPPED = "tensor layout check skipped: transformers/torch not installed or not importable"


def _demo_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rlcleanup_demo_script", REPO / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def without_layout_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As on the demo's install: `import torch` / `import transformers` fail (the verdict caches are cleared
    around it and the verdicts kept on disk are a fresh install's, none, so no answer from a test with the extra is
    reused)."""
    monkeypatch.setenv("RLCLEANUP_LAYOUT_VERDICTS_DIR", str(tmp_path / "verdicts"))
    tensor_layout._meta_model.cache_clear()
    tensor_layout._verdict.cache_clear()
    for name in ("torch", "transformers"):
        monkeypatch.setitem(sys.modules, name, None)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in ("torch", "transformers") else real(name, *a)
    )
    yield
    tensor_layout._meta_model.cache_clear()
    tensor_layout._verdict.cache_clear()


def test_the_demo_run_without_the_extra_records_the_layout_check_as_skipped(
    tmp_path: Path, without_layout_extra: None
) -> None:
    root = write_sample_run(tmp_path / "src", "completed-resumed")
    record = run_embedded(str(root), db_path=tmp_path / "records.db", preserve_root=str(tmp_path / "preserved"))
    assert record is not None and record.status.value == "awaiting_authority", record.errors
    assert record.candidates and all(c.valid for c in record.candidates)
    for candidate in record.candidates:
        assert any(w.startswith(SKIPPED) for w in candidate.warnings), candidate.warnings
        assert not [p for p in candidate.problems if "layout" in str(p).lower()], candidate.problems
    assert not record.errors
    assert "layout-check" in (_demo_script().layout_check_note() or "")


def test_the_demo_says_nothing_of_the_check_where_the_extra_is_installed() -> None:
    assert _demo_script().layout_check_note() is None  # the dev env has it (tests/unit/test_tensor_layout.py)
