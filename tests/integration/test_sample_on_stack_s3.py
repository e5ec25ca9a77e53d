"""Issue 47: a sample run put on the stack's S3 server as on its fake-gcs, with nothing but what `stack up`
exports for S3 (RLCLEANUP_S3_ENDPOINT_STACK: path-style, its own keys), no AWS_* variable in the environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlcleanup.adapters.s3_storage import S3Storage
from rlcleanup.cli.main import app
from rlcleanup.stack import StackState
from rlcleanup.stack.s3_server import STACK_ENDPOINT_VAR

pytestmark = pytest.mark.integration


def test_sample_run_upload_to_the_stacks_s3_bucket(stack: StackState, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)  # only what `stack up` exports into a shell
    monkeypatch.setenv(STACK_ENDPOINT_VAR, stack.env[STACK_ENDPOINT_VAR])
    target = f"s3://{stack.buckets['s3-runs']}/samples/{tmp_path.name}"
    args = ["sample-run", str(tmp_path / "s"), "--upload-to", target, "--rename", "math-s3", "--json"]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.stderr
    run_uri = json.loads(done.stdout)["uploaded_run_uri"]
    assert run_uri == f"{target}/durable/math-s3/2026.11.30"
    storage = S3Storage()  # the same settings: the stack's bucket resolves to the stack's endpoint, path-style
    assert storage.endpoint_for(stack.buckets["s3-runs"]).path_style
    names = {info.uri for info in storage.list(run_uri)}
    assert f"{run_uri}/.executor_status" in names and len(names) > 10
    config = storage.read_bytes(next(n for n in names if n.endswith("resolved-skyrl.json"))).decode()
    assert f"{target}/" in config and str(tmp_path) not in config  # its local paths became the bucket's URIs
