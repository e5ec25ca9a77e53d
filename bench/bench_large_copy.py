"""A real S3 object over CopyObject's 5 GiB limit, copied server-side at the real threshold (issue 36 item 1).

Starts its own SeaweedFS, uploads a generated object of 5 GiB + 1 MiB (random 64 MiB block repeated; uploaded
directly, not through the copy), then copies it through `S3Storage.copy_if_absent` with the default settings
(threshold 5 GiB, 512 MiB parts, 8 at once) in a child process behind the counting proxy
(tests/servers/s3_fault_proxy.py), SIGKILLs that process once `--kill-after` parts are done, checks nothing looks
whole, and resumes the copy in this process. Prints the upload and copy times, the parts copied before and after the
kill, the body bytes through the proxy and the disk the server used. Asserts what the tests assert; needs
~2.2x the object in free disk (SeaweedFS writes the copied parts).

    .venv/bin/python bench/bench_large_copy.py [--gib 5] [--kill-after 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "shared"))

from rlcleanup.stack import procs, s3_server

ROOT = Path(__file__).resolve().parent.parent

MIB = 1024 * 1024
_COPY = "import os, sys\nfrom rlcleanup.adapters.s3_storage import S3Storage\nS3Storage.from_env(os.environ).copy_if_absent(sys.argv[1], sys.argv[2])\n"


def _stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/__proxy/stats", timeout=5) as resp:
        stats: dict[str, Any] = json.loads(resp.read())
        return stats


def _upload(client: Any, bucket: str, key: str, size: int) -> None:
    block = os.urandom(64 * MIB)
    up = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts: list[dict[str, Any]] = []
    offset = 0
    while offset < size:
        n = len(parts) + 1
        body = block[: min(len(block), size - offset)]
        etag = client.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=n, Body=body)["ETag"]
        parts.append({"PartNumber": n, "ETag": etag})
        offset += len(body)
    client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=int, default=5)
    ap.add_argument("--kill-after", type=int, default=4)
    args = ap.parse_args()
    size = args.gib * 1024 * MIB + MIB
    with tempfile.TemporaryDirectory(prefix="bench-large-copy-") as tmp, s3_server.running(Path(tmp) / "s3") as s3:
        import boto3
        from botocore.config import Config

        admin = boto3.client(
            "s3",
            endpoint_url=s3.endpoint,
            aws_access_key_id=s3_server.ADMIN_KEY,
            aws_secret_access_key=s3_server.ADMIN_SECRET,
            region_name=s3_server.REGION,
            config=Config(s3={"addressing_style": "path"}, read_timeout=600),
        )
        admin.create_bucket(Bucket="bench-large-copy")
        t0 = time.monotonic()
        _upload(admin, "bench-large-copy", "ckpt/shard.bin", size)
        upload_s = time.monotonic() - t0
        script = ROOT / "tests" / "servers" / "s3_fault_proxy.py"
        target = s3.endpoint.removeprefix("http://")
        proxy, port = procs.start_listening(
            "s3-counting-proxy",
            lambda port: [
                sys.executable,
                str(script),
                "--port",
                str(port),
                "--target",
                target,
                "--upstream-timeout",
                "900",
            ],
            lambda port: procs.http_status(f"http://127.0.0.1:{port}/__proxy/stats") == 200,
            state_dir=Path(tmp),
            env=dict(os.environ),
        )
        url = f"http://127.0.0.1:{port}"
        try:
            env = {**os.environ, **s3_server.client_env(url), "PYTHONPATH": str(ROOT / "shared")}
            src, dst = "s3://bench-large-copy/ckpt/shard.bin", "s3://bench-large-copy/preserved/shard.bin"
            t1 = time.monotonic()
            child = subprocess.Popen([sys.executable, "-c", _COPY, src, dst], env=env, start_new_session=True)

            def parts_done() -> int:
                uploads = admin.list_multipart_uploads(Bucket="bench-large-copy").get("Uploads", [])
                if not uploads:
                    return 0
                u = uploads[0]
                return len(
                    admin.list_parts(Bucket="bench-large-copy", Key=u["Key"], UploadId=u["UploadId"]).get("Parts", [])
                )

            while parts_done() < args.kill_after:
                assert child.poll() is None, "the copy ended before it was killed"
                time.sleep(0.2)
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            killed_s, held = time.monotonic() - t1, parts_done()
            assert "Contents" not in admin.list_objects_v2(Bucket="bench-large-copy", Prefix="preserved/")
            before = _stats(url)
            for name, value in s3_server.client_env(url).items():
                os.environ[name] = value
            from rlcleanup.adapters.s3_storage import S3Storage

            t2 = time.monotonic()
            outcome = S3Storage.from_env(os.environ).copy_if_absent(src, dst)
            resume_s = time.monotonic() - t2
            after = _stats(url)
            head = admin.head_object(Bucket="bench-large-copy", Key="preserved/shard.bin")
            assert int(head["ContentLength"]) == size
            used = shutil.disk_usage(s3.data_dir).used
            du = subprocess.run(["du", "-sb", str(s3.data_dir)], capture_output=True, text=True, check=True).stdout
            resumed = after["part_copies"][len(before["part_copies"]) :]
            print(
                f"object: {size:,} bytes (5 GiB + 1 MiB at --gib 5); upload {upload_s:.0f} s (direct, not measured as the copy)"
            )
            print(
                f"copy: {outcome}, killed after {killed_s:.1f} s with {held} parts done; resumed in {resume_s:.1f} s copying parts {sorted(resumed)}"
            )
            print(f"multipart uploads started: {after['creates']}; final ETag {head['ETag']}")
            print(f"body bytes through the proxy (both processes, both ways): {after['body_bytes']:,}")
            print(f"server data dir: {int(du.split()[0]) / 1024**3:.1f} GiB; disk used {used / 1024**3:.0f} GiB")
        finally:
            procs.stop_group(proxy.pid, popen=proxy.popen, grace=2)


if __name__ == "__main__":
    main()
