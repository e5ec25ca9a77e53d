"""The README's CoreWeave command, run as written with only the endpoint and keys changed: a hostname endpoint in
virtual-hosted style, as CoreWeave's `https://cwobject.com` is addressed (`<bucket>.cwobject.com`).

The stack's SeaweedFS serves `<bucket>.s3.rlcleanup.test` beside path style (`-s3.domainName`); the names reach it
through tests/servers/vhost_proxy.py (the standard HTTP_PROXY variable), never through the machine's DNS. Every
other S3 test addresses SeaweedFS by IP, in path style: together `make test` covers both styles on a real server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_readme_blocks import README, bash_blocks

from rlcleanup.adapters.s3_storage import S3Storage
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.samples.upload import upload_sample_run_to
from rlcleanup.stack import StackState
from rlcleanup.stack.s3_server import ADMIN_KEY, ADMIN_SECRET, VIRTUAL_HOST_DOMAIN, create_bucket
from servers.vhost_proxy import VhostProxy

pytestmark = pytest.mark.e2e

README_ENDPOINT = "AWS_ENDPOINT_URL=https://cwobject.com"


def _readme_command() -> str:
    (block,) = [b for b in bash_blocks() if b.startswith(README_ENDPOINT)]
    return block.strip()


def test_the_readme_s3_command_runs_in_virtual_hosted_style(  # type: ignore[no-untyped-def]
    stack: StackState, gcs_client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = _readme_command()
    run_uri = command.split("rlcleanup run ", 1)[1].split()[0]
    preserve = command.split("--preserve-to ", 1)[1].split()[0]
    bucket = run_uri.removeprefix("s3://").split("/", 1)[0]
    assert run_uri.endswith("/durable/math-rl/2026.11.30"), f"the README's run path changed: {README}"

    path_style = stack.s3_endpoint  # setup only: the IP endpoint, path style
    create_bucket(path_style, bucket)
    if gcs_client.lookup_bucket(preserve.removeprefix("gs://")) is None:
        gcs_client.create_bucket(preserve.removeprefix("gs://"))
    write_sample_run(tmp_path / "sample", "completed-resumed")
    # Setup writes in path style with the admin keys; monkeypatch restores the session's own S3 variables after.
    for name, value in (
        ("AWS_ENDPOINT_URL", path_style),
        ("AWS_ACCESS_KEY_ID", ADMIN_KEY),
        ("AWS_SECRET_ACCESS_KEY", ADMIN_SECRET),
    ):
        monkeypatch.setenv(name, value)
    uploaded = upload_sample_run_to(
        S3Storage(), tmp_path / "sample", run_uri.removesuffix("/durable/math-rl/2026.11.30"), rename="math-rl"
    )
    assert uploaded == run_uri

    port = path_style.rsplit(":", 1)[1]
    line = (
        command.replace("https://cwobject.com", f"http://{VIRTUAL_HOST_DOMAIN}:{port}", 1)
        .replace("AWS_ACCESS_KEY_ID=...", f"AWS_ACCESS_KEY_ID={ADMIN_KEY}", 1)
        .replace("AWS_SECRET_ACCESS_KEY=...", f"AWS_SECRET_ACCESS_KEY={ADMIN_SECRET}", 1)
        .replace("rlcleanup run", f"{Path(sys.executable).parent / 'rlcleanup'} run", 1)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "RLCLEANUP_DB"}
    env.update(
        STORAGE_EMULATOR_HOST=stack.env["STORAGE_EMULATOR_HOST"],
        XDG_STATE_HOME=str(tmp_path / "state"),
        NO_PROXY="127.0.0.1,localhost",
    )
    with VhostProxy(VIRTUAL_HOST_DOMAIN).running() as proxy:
        env["HTTP_PROXY"] = env["http_proxy"] = proxy.url
        done = subprocess.run(
            ["bash", "-c", line + " --json"], env=env, capture_output=True, text=True, timeout=300, check=False
        )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout)
    assert record["run_uri"] == run_uri and record["terminal_state"] == "completed", record.get("errors")
    assert record["status"] == "awaiting_authority" and record["candidates"], record.get("errors")
    assert record["manifest_uri"].startswith(f"{preserve}/")
    # Every S3 request named the bucket in its host, none in its path: the addressing CoreWeave wants.
    assert proxy.requests and all(r.split()[1] == f"{bucket}.{VIRTUAL_HOST_DOMAIN}" for r in proxy.requests)
    assert not any(r.split()[2].startswith(f"/{bucket}/") for r in proxy.requests)
