"""What we deploy is what we tested (issue 13 item 9): the function bundle ships a hash-pinned lock of exactly the
functions' dependencies, the suite's venv holds exactly those versions, and the functions import no CLI package."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "functions" / "requirements.lock"
CLI_ONLY = {"typer", "rich"}  # the `rlcleanup` command's packages: the `cli` extra, never in the bundle


def _builder():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("build_bundle", ROOT / "scripts" / "build_bundle.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entries() -> list[tuple[str, list[str]]]:
    """(requirement, its --hash options) per entry of the lock (backslash continuations joined)."""
    text = re.sub(r"\\\n\s*", " ", LOCK.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req, *options = line.split(" --")
            out.append((req.strip(), [o.strip() for o in options]))
    return out


def test_every_bundle_requirement_is_pinned_exactly_with_hashes() -> None:
    entries = _entries()
    assert len(entries) > 20
    for req, options in entries:
        parsed = Requirement(req)
        assert parsed.url is None and not parsed.extras, req
        specs = list(parsed.specifier)
        assert len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version, req
        hashes = [o for o in options if o.startswith("hash=sha256:")]
        assert hashes and len(hashes) == len(options), (req, options)
        assert all(re.fullmatch(r"hash=sha256:[0-9a-f]{64}", h) for h in hashes), req


def test_the_bundle_ships_the_lock_and_the_lock_covers_every_declared_dependency() -> None:
    builder = _builder()
    assert builder.runtime_requirements() == LOCK.read_text(encoding="utf-8")
    locked = {canonicalize_name(Requirement(req).name) for req, _ in _entries()}
    for dep in builder.declared_dependencies():
        assert canonicalize_name(Requirement(dep).name) in locked, dep
    assert not locked & CLI_ONLY, "CLI-only packages would ship into every function"


def test_the_suite_runs_against_exactly_the_locked_versions() -> None:
    """make setup installs the lock first (dev extras on top): every locked package is installed at its pin."""
    wrong = {}
    for req, _ in _entries():
        parsed = Requirement(req)
        pin = next(iter(parsed.specifier)).version
        try:
            installed = metadata.version(parsed.name)
        except metadata.PackageNotFoundError:
            installed = "missing"
        if installed != pin:
            wrong[parsed.name] = (pin, installed)
    assert wrong == {}, f"installed versions differ from functions/requirements.lock: {wrong} (run make setup)"


def test_the_functions_import_no_cli_package() -> None:
    """functions/main.py imports with typer and rich unimportable (as in the bundle), and loads neither."""
    code = (
        "import importlib.abc, json, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name.split('.')[0] in {sorted(CLI_ONLY)!r}: raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "sys.path.insert(0, 'functions')\n"
        "import main\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = {m.split(".")[0] for m in json.loads(proc.stdout)}
    assert not loaded & CLI_ONLY
