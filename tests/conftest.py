"""Shared fixtures. `stack`: the real local stack (Pub/Sub + Firestore emulators, fake-gcs-server, one
functions-framework per function), started once per session (so once per xdist worker under `make test`) on free ports and stopped by process group at the
end — also on failure, Ctrl-C or an interpreter exit (atexit), so no emulator outlives the test run.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlcleanup.stack import StackState, down, s3_server, up
from rlcleanup.stack.provision import client_env

# One tensor-layout verdict cache for every process of the session (formats/checkpoints/layout_verdicts.py): the
# xdist workers inherit it from the controller that made it, and the stack's functions and every CLI subprocess
# from them, whatever XDG_CACHE_HOME a test gives its own user. So torch + transformers are imported to decide a
# config and name set once per session, not in each `rlcleanup run` subprocess (~5 s CPU each). The tests of the
# cache itself and of an install without the extra point it at an empty directory of their own.
if "RLCLEANUP_LAYOUT_VERDICTS_DIR" not in os.environ:
    _verdicts = tempfile.mkdtemp(prefix="rlcleanup-verdicts-")
    os.environ["RLCLEANUP_LAYOUT_VERDICTS_DIR"] = _verdicts
    atexit.register(shutil.rmtree, _verdicts, ignore_errors=True)


@pytest.fixture(scope="session")
def stack() -> Iterator[StackState]:
    state_dir = Path(tempfile.mkdtemp(prefix="rlcleanup-stack-"))
    # Capture plans page at 500 objects here (5,000 deployed): the CI-size big run (1,858 objects) is planned in
    # pages on the real emulators, continuation messages and all; every sample run stays one page.
    state = up(state_dir, project="rlcleanup-test", timeout=120, extra_env={"RLCLEANUP_CAPTURE_PAGE_OBJECTS": "500"})
    stopped = False

    def stop() -> None:
        nonlocal stopped
        if not stopped:
            stopped = True
            down(state_dir)

    atexit.register(stop)
    try:
        # The tests' clients reach the stack; the environment is restored before stop. The S3 tests' own buckets
        # (made per test) are on the stack's server too: this process's default S3 endpoint is pointed there, which
        # `stack up` never exports to a user's shell (it claims only its own buckets, RLCLEANUP_S3_ENDPOINT_STACK).
        with client_env({**state.env, **s3_server.client_env(state.s3_endpoint)}):
            yield state
    finally:
        stop()
        atexit.unregister(stop)
        left = [path for path in state.leftovers if Path(path).exists()]
        assert not left, f"`down` left the stack's servers' files outside its state dir: {left}"
        refused = _guard_refusals_in_logs(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
    assert not refused, f"the publish guard refused publishes in the stack's functions: {refused}"


def _guard_refusals_in_logs(state_dir: Path) -> list[str]:
    """Lines where a functions-framework process of the stack refused an undeclared publish (the guard is on there
    too, in `dispatch`); the delivery failed and was retried, so only its log says so."""
    return [
        line.strip()[:300]
        for log in sorted(state_dir.glob("fn-*.log"))
        for line in log.read_text(errors="replace").splitlines()
        if "undeclared_publish" in line or "which topology.yaml does not declare" in line
    ]


class _RefusalLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.refused: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        info = getattr(record, "undeclared_publish", None)
        if info:
            self.refused.append(f"{info['function']} -> {info['topic']}")


@pytest.fixture(autouse=True)
def undeclared_publishes() -> Iterator[list[str]]:
    """The publish guard is on in every test: `dispatch` applies it to every handler it runs (embedded stack,
    in-process buses over the emulators, functions.py). A publish it refused fails the test here, even one a bus
    retried and then parked as a dead letter. A test that provokes a refusal on purpose clears this list."""
    handler = _RefusalLog()
    logger = logging.getLogger("rlcleanup.runtime.guard")
    logger.addHandler(handler)
    try:
        yield handler.refused
    finally:
        logger.removeHandler(handler)
    assert not handler.refused, f"the publish guard refused undeclared publishes: {handler.refused}"


@pytest.fixture
def uid() -> str:
    """A short unique suffix for run names, prefixes and buckets: tests never see each other's data."""
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="session")
def gcs_client(stack: StackState):  # type: ignore[no-untyped-def]
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project=stack.project, credentials=AnonymousCredentials())


@pytest.fixture(scope="session")
def firestore_client(stack: StackState):  # type: ignore[no-untyped-def]
    from google.cloud import firestore

    return firestore.Client(project=stack.project)


@pytest.fixture(autouse=True)
def _no_delivery_context() -> Iterator[None]:
    """Each test starts outside any delivery, as every Pub/Sub delivery starts with its own context: an in-process
    entry-point test must not leave its message id bound (a Firestore claim records it as the lease owner)."""
    from rlcleanup.runtime.logging_setup import set_context

    set_context()
    yield
    set_context()


@pytest.fixture(scope="session")
def s3_endpoint(stack: StackState) -> str:
    """The stack's real S3-compatible server (SeaweedFS, started by `up` in its own process group)."""
    return stack.s3_endpoint


@pytest.fixture(scope="session")
def s3_admin(s3_endpoint: str):  # type: ignore[no-untyped-def]
    """A boto3 client with the admin identity, for test setup only (the adapter under test uses obstore)."""
    from rlcleanup.stack.s3_server import boto3_client

    client = boto3_client(s3_endpoint)
    yield client
    client.close()


@pytest.fixture
def pin_resolutions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every resolution of a grant's artifact (authority.artifact.resolve_pinned: a listing and a re-digest of
    the export) made while the test runs, in order: tests that a grant's application pins it once."""
    from rlcleanup.authority import artifact

    resolutions: list[str] = []
    real = artifact.resolve_pinned

    def counting(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        resolutions.append("resolve")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(artifact, "resolve_pinned", counting)
    return resolutions
