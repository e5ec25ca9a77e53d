"""The backends faces get from the wiring (runtime/backends.py): one choice of record store with one wording for
its errors on every command, and the sample upload writing through the Storage port in Marin's order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlcleanup.cli.main import app
from rlcleanup.ports.storage import ObjectInfo, UnknownSchemeError, WriteOutcome
from rlcleanup.runtime import backends
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.samples.upload import STATUS_FILE, durable_root, upload_sample_run_to

runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_emulators(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)


def _invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stderr


# ------------------------------------------------------------------ open_store: one choice, typed errors


def test_open_store_raises_typed_errors_that_name_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(backends.NoRecordsDatabase, match="process a run first"):
        backends.open_store(None, missing, None)
    assert not missing.exists()  # reading creates nothing
    with pytest.raises(backends.StoreChoiceInvalid, match="unknown backend 'postgres'"):
        backends.open_store("postgres", missing, None)
    with pytest.raises(backends.StoreChoiceInvalid, match="GOOGLE_CLOUD_PROJECT"):
        backends.open_store("firestore", missing, None)
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:9")  # discard port: nothing listens
    with pytest.raises(backends.StoreUnreachable, match="not reachable"):
        backends.open_store(None, missing, "p")  # the emulator's variable chooses Firestore


def test_open_store_creates_sqlite_only_when_asked(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    opened = backends.open_store(None, db, None, create=True)
    assert opened.backend == backends.StoreBackend.sqlite and opened.db_path == db and opened.where == f"SQLite {db}"
    assert list(opened.store.list_runs()) == [] and db.exists()
    assert backends.open_store("sqlite", db, None).where == f"SQLite {db}"  # now it exists, a reader opens it


def test_every_command_words_a_store_error_the_same(tmp_path: Path) -> None:
    """status (operator), grants (authority) and show (main) open the store through the same wiring."""
    missing = tmp_path / "none.db"
    said = {_invoke(command, *args, "--db", str(missing)) for command, args in _READERS}
    assert len(said) == 1, said
    code, err = said.pop()
    assert code == 1 and f"no records database at {missing}: process a run first" in err
    assert not missing.exists()
    said = {_invoke(command, *args, "--backend", "firestore") for command, args in _READERS}
    assert len(said) == 1, said
    code, err = said.pop()
    assert code == 2 and "Firestore needs a project: set GOOGLE_CLOUD_PROJECT" in err


_READERS = [("status", ()), ("grants", ("some-run",)), ("show", ("some-run",))]


def test_approver_add_creates_the_records_database(tmp_path: Path) -> None:
    from rlcleanup.authority.grants import get_approver, new_key, public_b64

    db = tmp_path / "fresh.db"
    public = public_b64(new_key())
    args = ["approver", "add", "alice", "--public-key", public, "--prefix", str(tmp_path / "m"), "--db", str(db)]
    code, err = _invoke(*args)
    assert code == 0, err
    assert db.exists()
    assert get_approver(backends.open_store(None, db, None).store, "alice") is not None


def test_check_scheme_refuses_an_unregistered_scheme() -> None:
    backends.check_scheme("gs://bucket/run")
    backends.check_scheme("/a/local/path")
    with pytest.raises(UnknownSchemeError, match="'az'"):
        backends.check_scheme("az://container/run")


# ------------------------------------------------------------------ the sample upload, through the port


class RecordingStorage:
    """The wiring's storage, with every write and delete written down in order."""

    def __init__(self) -> None:
        self.inner = backends.open_storage()
        self.calls: list[tuple[str, str]] = []

    def stat(self, uri: str) -> ObjectInfo | None:
        return self.inner.stat(uri)

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix_uri)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        return self.inner.read_range(uri, start, length)

    def read_bytes(self, uri: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        return self.inner.read_bytes(uri, max_bytes)

    def iter_lines(self, uri: str) -> Iterator[str]:
        return self.inner.iter_lines(uri)

    def write_if_absent(self, uri: str, data: bytes, content_type: str = "application/octet-stream") -> WriteOutcome:
        self.calls.append(("write", uri))
        return self.inner.write_if_absent(uri, data, content_type)

    def copy_if_absent(self, src_uri: str, dst_uri: str) -> WriteOutcome:
        return self.inner.copy_if_absent(src_uri, dst_uri)

    def delete(self, uri: str) -> bool:
        self.calls.append(("delete", uri))
        return self.inner.delete(uri)


def test_status_last_writes_running_first_and_the_token_last(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_sample_run(src, "completed-resumed")
    token = (durable_root(src) / STATUS_FILE).read_bytes()
    storage = RecordingStorage()
    run_uri = upload_sample_run_to(storage, src, str(tmp_path / "bucket"), status_last=True)
    status_uri = f"{run_uri}/{STATUS_FILE}"
    writes = [uri for kind, uri in storage.calls if kind == "write"]
    assert writes[0] == status_uri and writes[-1] == status_uri and writes.count(status_uri) == 2
    assert storage.calls[0] == ("delete", status_uri) and storage.calls[-2] == ("delete", status_uri)
    assert len(writes) == sum(1 for p in src.rglob("*") if p.is_file()) + 1  # every file once, the status twice
    assert Path(status_uri).read_bytes() == token != b"RUNNING\n"
    # A replay (the status already final) starts over from RUNNING, as the client's overwrite did.
    upload_sample_run_to(storage, src, str(tmp_path / "bucket"), status_last=True)
    assert Path(status_uri).read_bytes() == token
