"""The house rule "modules under 500 lines", held by a test rather than a reviewer: every Python module of the
project's library, its faces, benches and scripts. A module that grows past it is split by concern (as
samples/v2.py was into v2_common, v2_protocol, v2_teardown and moe)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 500
TREES = ("shared/rlcleanup", "functions", "bench", "scripts")


def _modules() -> list[Path]:
    return sorted(p for tree in TREES for p in (ROOT / tree).rglob("*.py") if "__pycache__" not in p.parts)


def test_the_walk_finds_the_library() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert {"shared/rlcleanup/errors.py", "functions/main.py", "shared/rlcleanup/samples/v2.py"} <= names


def test_every_module_is_under_the_limit() -> None:
    over = {
        p.relative_to(ROOT).as_posix(): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) >= LIMIT
    }
    assert over == {}, f"modules at or over {LIMIT} lines (split them by concern): {over}"
