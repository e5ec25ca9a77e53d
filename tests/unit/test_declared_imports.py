"""Every third-party module rlcleanup or functions/main.py imports comes from a distribution pyproject.toml declares
(dependencies or an extra): nothing works only because another package happened to pull it in (cloudevents was
imported and undeclared; werkzeug, flask, botocore, urllib3 too)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from collections.abc import Mapping
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = {"google"}  # a namespace package: its sub-packages are checked instead (google.cloud.storage, ...)


def _imports() -> dict[str, set[str]]:
    """Top-level module (or google.<sub>.<pkg>) -> the files importing it."""
    found: dict[str, set[str]] = {}
    for path in [*(ROOT / "shared" / "rlcleanup").rglob("*.py"), ROOT / "functions" / "main.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "rlcleanup":
                    continue
                parts = name.split(".")
                key = ".".join(parts[: 3 if parts[1:2] == ["cloud"] else 2]) if top in NAMESPACE else top
                found.setdefault(key, set()).add(str(path.relative_to(ROOT)))
    return found


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = list(project["dependencies"]) + [s for extra in project["optional-dependencies"].values() for s in extra]
    names = {re.split(r"[\s<>=!~;\[]", s, maxsplit=1)[0] for s in specs}
    return {re.sub(r"[-_.]+", "-", n).lower() for n in names}


@cache
def _top_level_providers() -> Mapping[str, list[str]]:
    return md.packages_distributions()  # reads every installed distribution's file list: once, not per module


@cache
def _installed_files() -> list[tuple[str, list[str]]]:
    """(distribution name, its files) of every installed distribution, read once for all the namespace modules."""
    return [(dist.metadata["Name"], [str(f) for f in dist.files or []]) for dist in md.distributions()]


def _distributions(module: str) -> set[str]:
    """Installed distributions providing `module` (for google.x.y: those whose files include google/x/y)."""
    if "." not in module:
        return {re.sub(r"[-_.]+", "-", d).lower() for d in _top_level_providers().get(module, [])}
    prefix = module.replace(".", "/")
    out = set()
    for name, files in _installed_files():
        if any(f.startswith((prefix + "/", prefix + ".py")) for f in files):
            out.add(re.sub(r"[-_.]+", "-", name).lower())
    return out


def test_every_imported_distribution_is_declared() -> None:
    declared = _declared()
    undeclared = {}
    for module, files in sorted(_imports().items()):
        providers = _distributions(module)
        if not providers & declared:
            undeclared[module] = (sorted(providers), sorted(files)[:3])
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
