"""Forgetting a run and setting one aside on the Firestore emulator, through the port: the scenario SQLite runs
(tests/unit/test_forget_run.py)."""

from __future__ import annotations

import pytest

from forget_scenario import check_forget, check_set_aside_and_put_back
from rlcleanup.adapters.firestore_records import firestore_stores
from rlcleanup.stack import StackState

pytestmark = pytest.mark.integration


def test_forget_removes_exactly_the_runs_documents_on_firestore(stack: StackState, uid: str) -> None:
    records, claims = firestore_stores(project=stack.project)
    check_forget(records, claims, f"gone-{uid}", f"kept-{uid}")


def test_a_run_set_aside_is_put_back_as_it_was_on_firestore(stack: StackState, uid: str) -> None:
    records, claims = firestore_stores(project=stack.project)
    check_set_aside_and_put_back(records, claims, f"redone-{uid}")
