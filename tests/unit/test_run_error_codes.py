"""Run-error codes are one vocabulary (issue 46): every code an error is raised or recorded with, anywhere in
shared/, is a member of errors.py's RunErrorCode, and the enum's values are the strings records already hold."""

from __future__ import annotations

import re
from pathlib import Path

import rlcleanup
from rlcleanup.errors import INTERNAL_ERROR, PermanentError, RecordStoreLost, RunErrorCode
from rlcleanup.models.record import RunError

SHARED = Path(rlcleanup.__file__).resolve().parent
# An error raised with a code (`PermanentError("bad_input", ...)`, `super().__init__("record_store_lost", ...)`,
# possibly on the next line) or a code assigned (`code = "..."`, `code="..."`).
_RAISED = re.compile(r'(?:Error|__init__)\(\s*"([a-z]+(?:_[a-z]+)*)"\s*,')
_ASSIGNED = re.compile(r'\bcode\s*(?::\s*str\s*)?=\s*"([a-z]+(?:_[a-z]+)*)"')


def spelled_codes() -> dict[str, str]:
    """Every code spelled as a string in shared/rlcleanup, with where it first appears."""
    found: dict[str, str] = {}
    for path in sorted(SHARED.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for pattern in (_RAISED, _ASSIGNED):
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.setdefault(match.group(1), f"{path.relative_to(SHARED)}:{line}")
    return found


def test_every_code_spelled_in_shared_is_a_run_error_code() -> None:
    spelled = spelled_codes()
    assert len(spelled) >= 30  # the scan sees the codes (a broken pattern would find none and pass)
    unknown = {code: where for code, where in spelled.items() if code not in set(RunErrorCode)}
    assert unknown == {}, "add these to errors.py RunErrorCode"


def test_the_enum_keeps_the_stored_strings() -> None:
    assert INTERNAL_ERROR == "internal_error" and RunErrorCode.run_id_conflict == "run_id_conflict"
    error = RunError(step="sweep", code=RunErrorCode.stalled, message="stalled: no progress")
    assert error.model_dump(mode="json")["code"] == "stalled"
    assert RunError.model_validate_json(error.model_dump_json()).code == "stalled"
    assert RecordStoreLost("r", "select_candidate", None).code == RunErrorCode.record_store_lost
    assert PermanentError(RunErrorCode.bad_input, "x").code == "bad_input"
