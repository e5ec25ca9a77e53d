"""The log scanner's import path stays light: a scan-log-part process must fit bench/bench_logs.py's peak-RSS goal
(<= 64 MiB whatever the file size), and google.api_core + grpc + requests alone weigh ~20 MiB. error_kind finds
the client libraries' network errors in sys.modules instead of importing them (an exception of a library that was
never imported cannot exist)."""

from __future__ import annotations

import json
import subprocess
import sys

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
