"""The wheel carries what `rlcleanup stack up` needs outside a checkout: the entry-point module functions-framework
serves (rlcleanup/entrypoints.py), the topology and py.typed; the stack resolves its functions source inside the
installed package, never in the repository's functions/ directory."""

from __future__ import annotations

import runpy
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rlcleanup.runtime.topology import load_topology
from rlcleanup.stack import tools

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_ships_the_functions_source_and_the_stack_uses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
        cwd=tmp_path,  # never build into the checkout
    )
    (wheel,) = tmp_path.glob("rlcleanup-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        shipped = zf.read("rlcleanup/entrypoints.py")
    assert {"rlcleanup/entrypoints.py", "rlcleanup/runtime/topology.yaml", "rlcleanup/py.typed"} <= names
    assert shipped == (ROOT / "shared" / "rlcleanup" / "entrypoints.py").read_bytes()
    assert not any(n.startswith("functions/") for n in names)  # the bundle's main.py is not needed by the wheel

    # The stack serves the package's own entry-point module: every topology function is defined there.
    monkeypatch.delenv("RLCLEANUP_FUNCTIONS_SOURCE", raising=False)
    source = tools.functions_source()
    assert source == Path(tools.__file__).resolve().parents[1] / "entrypoints.py"
    served = {fn.entry_point for fn in tools.served_functions(load_topology(), source)}
    assert served == {fn.entry_point for fn in load_topology().functions}
    # The bundle's thin main.py names the same entry points (re-exported), and really binds them at the top level.
    main = ROOT / "functions" / "main.py"
    assert {fn.entry_point for fn in tools.served_functions(load_topology(), main)} == served
    bound = runpy.run_path(str(main))
    assert {name for name in served if callable(bound.get(name))} == served
