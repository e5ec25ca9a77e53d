"""The log scanner's import path stays light: a scan-log-part process must fit bench/bench_logs.py's peak-RSS goal
(<= 64 MiB whatever the file size), and google.api_core + grpc + requests alone weigh ~20 MiB. error_kind finds
the client libraries' network errors in sys.modules instead of importing them (an exception of a library that was
never imported cannot exist)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("grpc", "google.api_core", "google.protobuf", "requests", "urllib3")
SCAN_PATH = (
    "rlcleanup.errors",
    "rlcleanup.parsing.attempt_logs",
    "rlcleanup.steps.logscan",
    "rlcleanup.steps.terminal",
    "rlcleanup.adapters.local_storage",
)


def test_the_scan_path_imports_no_network_client() -> None:
    code = (
        "import importlib, json, sys\n"
        f"for name in {SCAN_PATH!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout)
    heavy = [m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY)]
    assert heavy == [], f"the scan path imports {heavy[:5]}"


def test_a_client_error_is_transient_once_its_library_is_loaded() -> None:
    code = (
        "from rlcleanup.errors import error_kind\n"
        "import requests\n"
        "from google.api_core import exceptions as gexc\n"
        "print(error_kind(requests.ConnectionError('x')).value, error_kind(gexc.ServiceUnavailable('x')).value)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True).stdout.split()
    assert out == ["transient", "transient"]


# ------------------------------------------------------------------ entry points: every cold start's first cost

LAZY = ("torch", "transformers", "botocore", "huggingface_hub")  # only the step that uses one imports it


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        check=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_an_entry_point_imports_no_heavy_library_before_its_first_use() -> None:
    """Importing the entry module (the package's, and the bundle's functions/main.py) loads none of the heavy
    libraries, nor the pipeline (the first delivery imports it: runtime/functions.py); importing the pipeline loads
    none of the heavy libraries either (the validation, S3 and Hub steps import them when they run)."""
    for code in ("import rlcleanup.entrypoints", "import sys; sys.path.insert(0, 'functions'); import main"):
        loaded = _loaded_after(code)
        heavy = sorted(m for m in loaded if m.split(".")[0] in LAZY)
        assert heavy == [], f"{code!r} imports {heavy[:5]}"
        assert "rlcleanup.runtime.handlers" not in loaded and "rlcleanup.runtime.functions" not in loaded, code
    pipeline = _loaded_after("import rlcleanup.runtime.functions")
    assert sorted(m for m in pipeline if m.split(".")[0] in LAZY) == []


def test_the_entry_points_are_the_topologys_functions() -> None:
    from rlcleanup.entrypoints import ENTRY_POINTS, entry_point_names
    from rlcleanup.runtime.topology import load_topology

    assert entry_point_names() == [fn.entry_point for fn in load_topology().functions] == list(ENTRY_POINTS)


DEFERRED_SETTINGS = ("CopyJobSettings", "HubSettings", "S3Settings", "CopySettings", "LocalPaths", "Platform")


def test_the_entry_import_builds_only_the_settings_a_cold_start_validates() -> None:
    """The deployment settings (and the groups they hold) are validated at cold start; the other settings groups
    build their validators when first read (settings.py, `defer_build`), not in every cold start."""
    code = (
        "import json, sys; sys.path.insert(0, 'functions'); import main\n"
        "from rlcleanup import settings\n"
        f"names = {(*DEFERRED_SETTINGS, 'DeploymentSettings', 'IrisSettings', 'NotifySettings')!r}\n"
        "print(json.dumps({n: getattr(settings, n).__pydantic_complete__ for n in names}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        check=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    built = json.loads(out.splitlines()[-1])
    assert [name for name in DEFERRED_SETTINGS if built[name]] == [], "built at import: every cold start pays them"
    assert built["DeploymentSettings"] and built["IrisSettings"] and built["NotifySettings"]


def test_a_deferred_settings_group_still_reads_and_checks_its_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlcleanup.settings import CopySettings, SettingsError, platform, read

    monkeypatch.setenv("CLOUD_RUN_TASK_COUNT", "3")
    monkeypatch.setenv("RLCLEANUP_COPY_S3_WORKERS", "65")
    assert platform().task_count == 3
    with pytest.raises(SettingsError, match="RLCLEANUP_COPY_S3_WORKERS='65'"):
        read(CopySettings)
