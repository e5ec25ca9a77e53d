"""Issue 46: the record's console page is a method of the `RunRecords` port that every records backend implements
(Firestore: its data viewer's page of the run document; SQLite: none), not a capability probed with `getattr`. The
report's banner and the model events read it from the port. tests/integration/test_record_stores.py asks the
Firestore emulator's store too."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from rlcleanup.adapters.firestore_records import FirestoreRunRecords
from rlcleanup.adapters.sqlite_records import SqliteRunRecords
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.records import RunRecords
from rlcleanup.report import publish
from rlcleanup.runtime.backends import StoreBackend, open_storage

# Every backend a face can open (runtime/backends.py `StoreBackend`), by the class that holds its records.
RECORDS_BACKENDS: dict[str, type] = {
    StoreBackend.sqlite: SqliteRunRecords,
    StoreBackend.firestore: FirestoreRunRecords,
}


def _port_methods() -> list[str]:
    return [name for name, member in vars(RunRecords).items() if inspect.isfunction(member) and name[0] != "_"]


def test_every_records_backend_implements_every_method_of_the_port() -> None:
    """A backend added to the store choices without a row here fails; a backend lacking a method of the port (the
    console page included) fails: nothing asks a store whether it happens to have one."""
    assert set(RECORDS_BACKENDS) == set(StoreBackend)
    assert "console_url" in _port_methods()
    for backend, cls in RECORDS_BACKENDS.items():
        missing = [name for name in _port_methods() if not callable(getattr(cls, name, None))]
        assert missing == [], f"the {backend} records backend lacks {missing}"


def test_a_sqlite_store_has_no_console_page(tmp_path: Path) -> None:
    assert SqliteRunRecords(tmp_path / "r.db").console_url("math-rl-2026.11.30") is None


@pytest.mark.parametrize(
    ("database", "shown"),
    [("(default)", "-default-"), ("rl cleanup/eu", "rl%20cleanup%2Feu")],
)
def test_a_firestore_store_names_its_run_documents_page(database: str, shown: str) -> None:
    """The run id, the database and the project are quoted: a run id is data, never part of the page's path."""
    store = FirestoreRunRecords(project="hai gcp", client=object(), database=database)
    assert store.console_url("r/../x?y") == (
        f"https://console.cloud.google.com/firestore/databases/{shown}/data/panel/runs/r%2F..%2Fx%3Fy?project=hai%20gcp"
    )


class _ConsoleRecords(SqliteRunRecords):
    """A SQLite store with a console page of its own, to see the report take the page from the port."""

    def console_url(self, run_id: str) -> str:
        return f"https://console.example/runs/{run_id}"


def test_the_report_links_the_page_the_store_names(tmp_path: Path) -> None:
    run = tmp_path / "preserved" / "r1"
    run.mkdir(parents=True)
    record = CompletionRecord(run_id="r1", run_uri=str(tmp_path / "run"), preserved_locations=[str(run)])
    for records, linked in ((_ConsoleRecords(tmp_path / "a.db"), True), (SqliteRunRecords(tmp_path / "b.db"), False)):
        records.create_if_absent(record)
        # A second report of the same run differs (no link): it is written under its content-addressed name.
        written = publish.publish_report(open_storage(), records, "r1")
        html = Path(written["html"]).read_text(encoding="utf-8")
        assert ("https://console.example/runs/r1" in html) is linked
    assert not hasattr(publish, "record_console_url")  # the getattr probe is gone: the port is the one way to ask
