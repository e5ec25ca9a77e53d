"""No face runs SQL or reaches a record store's client (issue 46 item 5): the CLI, the local stack, the samples
and the entry points import neither `sqlite3` nor `google.cloud`; they go through the ports runtime/backends.py
hands them (`OpenStore.store.forget_run`, `set_aside`, `claims.claims_of`, ...). The import-linter contract
"Faces run no SQL" holds the sqlite3 half for every import path; this reads the source for both."""

from __future__ import annotations

import ast
from pathlib import Path

import rlcleanup

PACKAGE = Path(rlcleanup.__file__).parent
FACES = [*(PACKAGE / "cli").rglob("*.py"), *(PACKAGE / "stack").rglob("*.py"), *(PACKAGE / "samples").rglob("*.py")]
FACES.append(PACKAGE / "entrypoints.py")
FORBIDDEN = ("sqlite3", "google.cloud")
# Named exceptions, each with its reason: the local stack creates the emulators' topics, subscriptions and buckets
# itself (there is no port for provisioning infrastructure; Terraform does it on GCP).
ALLOWED = {("stack/provision.py", "google.cloud")}


def imported(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def forbidden_imports(paths: list[Path], root: Path = PACKAGE) -> list[str]:
    found = []
    for path in paths:
        where = path.relative_to(root).as_posix()
        for module in sorted(imported(path)):
            for banned in FORBIDDEN:
                if (module == banned or module.startswith(banned + ".")) and (where, banned) not in ALLOWED:
                    found.append(f"{where}: {module}")
    return found


def test_no_face_imports_sqlite3_or_google_cloud() -> None:
    assert len(FACES) > 20  # the scan reads the faces, not an empty list
    assert forbidden_imports(FACES) == []


def test_the_scan_finds_a_face_that_runs_sql(tmp_path: Path) -> None:
    planted = tmp_path / "cli" / "planted.py"
    planted.parent.mkdir()
    planted.write_text("import sqlite3\n\ndef f():\n    from google.cloud import firestore\n")
    assert forbidden_imports([planted], tmp_path) == [
        "cli/planted.py: google.cloud",
        "cli/planted.py: google.cloud.firestore",
        "cli/planted.py: sqlite3",
    ]
