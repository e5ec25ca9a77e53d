"""Server-side S3 copies beyond one CopyObject: objects over the multipart threshold (S3 stops CopyObject at
5 GiB) and copies between two buckets of one endpoint. No byte of the object passes through this process.

A large object is copied as a multipart upload (CreateMultipartUpload, then ranged UploadPartCopy parts, several
at once, then CompleteMultipartUpload); only a resumed copy reads bytes, the kept parts' ranges, to verify them. Until that last call the destination does not exist: a copy interrupted
half way never leaves a partial object that looks whole. Every part copy is pinned to the source's ETag
(`x-amz-copy-source-if-match`), so a source overwritten meanwhile fails the copy instead of mixing two versions.

Resume: the upload id is recorded in a small state object the copy owns (`<state_prefix>/<sha256 of the
destination>.json` in the destination's bucket: the deployment's prefix, never a place an input chooses), and the
server records the parts already done. The state names the grant the copy is made for: a state made for another
grant (or none, or another source version) aborts its upload and the copy starts afresh. A retried copy reads the
state, lists the parts (ListParts) and resumes only if every listed part verifies against the source: its ETag
(S3 gives a copied part the MD5 of its bytes) must equal the MD5 of that byte range of the pinned source, read
once by a ranged GET held to the source's ETag (If-Match). Otherwise (a part that differs, or an ETag in a
server's own scheme that no digest can be compared with) the upload is aborted and the copy starts afresh.
Whoever can write the destination bucket and read the upload id from the state can upload parts to it, so a
listed part proves nothing by itself. A refusal (access denied, the source changed, the destination
created meanwhile) aborts the upload, so no incomplete upload is left holding bytes.

Verification: each part's ETag (as this copy returned it, or as verified against the source) must be the one
ListParts reports before completing, the completed object's ETag must be the multipart ETag of exactly those parts,
and its size the source's. The source's
ETag is kept on the destination (`x-amz-meta-rlcleanup-source-etag`), so a replayed copy compares the two objects
by it (a multipart ETag never equals a single-part source's).

Client: botocore (obstore has neither UploadPartCopy nor cross-bucket copies); built once per endpoint, only
when such a copy happens.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

from rlcleanup.adapters.s3_client import S3Endpoint
from rlcleanup.ports.storage import ObjectInfo, SourceChangedError, StorageAccessError, StorageError, WriteOutcome
from rlcleanup.settings import CopySettings

SOURCE_ETAG_META = "rlcleanup-source-etag"
MAX_PARTS = 10_000  # S3's limit on parts per upload
_MIB = 1024 * 1024
_MD5 = re.compile(r"^[0-9a-fA-F]{32}$")


class MultipartCopyState(BaseModel):
    """What a resumed copy needs besides the server's own list of finished parts."""

    source: str
    source_etag: str
    size: int
    part_bytes: int
    upload_id: str
    grant_id: str | None = None  # the grant the copy is made for: another grant's upload is never resumed


def part_size(size: int, wanted: int) -> int:
    """`wanted`, or larger (in whole MiB) when the object would need more than S3's 10,000 parts."""
    least = -(-size // MAX_PARTS)
    return max(wanted, -(-least // _MIB) * _MIB)


def part_ranges(size: int, part_bytes: int) -> list[tuple[int, int, int]]:
    """(part number, first byte, last byte) of every part."""
    return [(n + 1, start, min(start + part_bytes, size) - 1) for n, start in enumerate(range(0, size, part_bytes))]


def multipart_etag(part_etags: list[str]) -> str | None:
    """The ETag S3 gives a completed multipart upload: the MD5 of the parts' binary MD5s, then `-<parts>`; None
    when a part's ETag is not a plain MD5 (a server's own scheme: only the part count can be checked)."""
    if not all(_MD5.match(e.strip('"')) for e in part_etags):
        return None
    digest = hashlib.md5(b"".join(bytes.fromhex(e.strip('"')) for e in part_etags), usedforsecurity=False)
    return f"{digest.hexdigest()}-{len(part_etags)}"


def botocore_client(ep: S3Endpoint, workers: int) -> Any:
    import boto3
    from botocore.config import Config

    session = boto3.Session(profile_name=ep.profile) if ep.profile and not ep.access_key_id else boto3.Session()
    return session.client(
        "s3",
        endpoint_url=ep.endpoint_url,
        region_name=ep.region,
        aws_access_key_id=ep.access_key_id,
        aws_secret_access_key=ep.secret_access_key,
        aws_session_token=ep.session_token,
        config=Config(
            s3={"addressing_style": "path" if ep.path_style else "virtual"},
            retries={"max_attempts": 5, "mode": "standard"},
            max_pool_connections=workers + 4,
            connect_timeout=10,
            read_timeout=900,  # one part copy of a few GiB is one request the server answers when done
        ),
    )


def botocore_code(exc: BaseException) -> tuple[str, int]:
    """A botocore ClientError's error code and HTTP status ('', 0 for any other exception)."""
    response = getattr(exc, "response", None) or {}
    error = response.get("Error", {})
    return str(error.get("Code", "")), int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _mapped(exc: BaseException, what: str) -> BaseException:
    code, status = botocore_code(exc)
    if code in ("NoSuchKey", "404", "NotFound"):
        return FileNotFoundError(what)
    if status == 403 or code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return StorageAccessError(f"access denied for {what}: {code}")
    return StorageError(f"{what}: {code or type(exc).__name__} {str(exc)[:300]}")


class ServerSideCopier:
    """Copies within one endpoint, server-side, write-once. `client` is a botocore S3 client for that endpoint."""

    def __init__(self, client: Any, settings: CopySettings) -> None:
        self.client = client
        self.settings = settings

    # ------------------------------------------------------------------ entry

    def copy(
        self,
        src: ObjectInfo,
        dst_uri: str,
        *,
        split: Callable[[str], tuple[str, str]],
        grant_id: str | None = None,
    ) -> WriteOutcome:
        """`src` (stat'ed) to the absent `dst_uri`: one CopyObject up to the threshold, else a multipart copy
        (resumed only from a state made for the same grant and source version)."""
        sb, sk = split(src.uri)
        db, dk = split(dst_uri)
        if src.size <= self.settings.s3_multipart_threshold:
            return self._copy_object(src, (sb, sk), (db, dk))
        return self._multipart(src, (sb, sk), (db, dk), grant_id)

    def source_etag(self, uri: str, split: Callable[[str], tuple[str, str]]) -> str | None:
        """The source ETag a server-side copy recorded on the object (None: not one of ours)."""
        bucket, key = split(uri)
        try:
            head = self.client.head_object(Bucket=bucket, Key=key)
        except Exception as exc:
            raise _mapped(exc, uri) from exc
        value = head.get("Metadata", {}).get(SOURCE_ETAG_META)
        return str(value) if value else None

    # ------------------------------------------------------------------ one request

    def _copy_object(self, src: ObjectInfo, s: tuple[str, str], d: tuple[str, str]) -> WriteOutcome:
        try:
            self.client.copy_object(
                Bucket=d[0],
                Key=d[1],
                CopySource={"Bucket": s[0], "Key": s[1]},
                CopySourceIfMatch=f'"{src.etag}"',
                IfNoneMatch="*",
                MetadataDirective="REPLACE",
                Metadata={SOURCE_ETAG_META: src.etag or ""},
            )
        except Exception as exc:
            code, status = botocore_code(exc)
            if status == 412 or code == "PreconditionFailed":
                raise Precondition() from exc
            raise _mapped(exc, f"copy {src.uri} -> s3://{d[0]}/{d[1]}") from exc
        return WriteOutcome.created

    # ------------------------------------------------------------------ multipart

    def state_key(self, dst_uri: str) -> str:
        return f"{self.settings.state_prefix}/{hashlib.sha256(dst_uri.encode()).hexdigest()}.json"

    def _read_state(self, bucket: str, key: str) -> MultipartCopyState | None:
        try:
            body = self.client.get_object(Bucket=bucket, Key=key)["Body"].read(64 * 1024)
        except Exception as exc:
            if botocore_code(exc)[0] in ("NoSuchKey", "404"):
                return None
            raise _mapped(exc, f"s3://{bucket}/{key}") from exc
        try:
            return MultipartCopyState.model_validate_json(body)
        except ValueError:
            return None  # not a state this code wrote: start afresh (the upload it named, if any, stays aborted)

    def _multipart(self, src: ObjectInfo, s: tuple[str, str], d: tuple[str, str], grant_id: str | None) -> WriteOutcome:
        dst_uri = f"s3://{d[0]}/{d[1]}"
        state_key = self.state_key(dst_uri)
        state = self._read_state(d[0], state_key)
        done: dict[int, tuple[str, int]] = {}
        made_for = (src.uri, src.etag, src.size, grant_id)
        if state is not None and (state.source, state.source_etag, state.size, state.grant_id) != made_for:
            self._abort(d, state.upload_id)  # another grant's, or another source version's: its parts are not ours
            state = None
        if state is not None:
            held = self._parts(d, state.upload_id)
            if held is None:  # the upload is gone (aborted, or completed by a copy that then died)
                state = None
            else:
                with self._aborted_on_refusal(d, state.upload_id, state_key):  # the source moved or is gone
                    kept = self._verified(src, s, state, held)
                if kept:
                    done = held
                else:
                    self._abort(d, state.upload_id)  # a listed part not vouched for by the source: start afresh
                    state = None
        if state is None:
            upload_id = self._create(src, d)
            state = MultipartCopyState(
                source=src.uri,
                source_etag=src.etag or "",
                size=src.size,
                part_bytes=part_size(src.size, self.settings.s3_part_bytes),
                upload_id=upload_id,
                grant_id=grant_id,
            )
            self.client.put_object(Bucket=d[0], Key=state_key, Body=state.model_dump_json().encode())
            done = {}
        with self._aborted_on_refusal(d, state.upload_id, state_key):
            etags = self._copy_parts(src, s, d, state, done)
            self._complete(src, d, state.upload_id, etags)
        self._delete_state(d[0], state_key)
        return WriteOutcome.created

    def _create(self, src: ObjectInfo, d: tuple[str, str]) -> str:
        try:
            made = self.client.create_multipart_upload(
                Bucket=d[0], Key=d[1], Metadata={SOURCE_ETAG_META: src.etag or ""}
            )
        except Exception as exc:
            raise _mapped(exc, f"start copy to s3://{d[0]}/{d[1]}") from exc
        return str(made["UploadId"])

    def _parts(self, d: tuple[str, str], upload_id: str) -> dict[int, tuple[str, int]] | None:
        """{part number: (ETag, size)} the server holds for the upload; None when the upload is gone."""
        out: dict[int, tuple[str, int]] = {}
        marker = 0
        while True:
            try:
                page = self.client.list_parts(Bucket=d[0], Key=d[1], UploadId=upload_id, PartNumberMarker=marker)
            except Exception as exc:
                if botocore_code(exc)[0] == "NoSuchUpload" or botocore_code(exc)[1] == 404:
                    return None
                raise _mapped(exc, f"list parts of s3://{d[0]}/{d[1]}") from exc
            for part in page.get("Parts", []):
                out[int(part["PartNumber"])] = (str(part["ETag"]).strip('"'), int(part["Size"]))
            if not page.get("IsTruncated"):
                return out
            marker = int(page["NextPartNumberMarker"])

    def _copy_parts(
        self,
        src: ObjectInfo,
        s: tuple[str, str],
        d: tuple[str, str],
        state: MultipartCopyState,
        done: dict[int, tuple[str, int]],
    ) -> list[str]:
        ranges = part_ranges(src.size, state.part_bytes)
        etags: dict[int, str] = {}
        todo = []
        for number, first, last in ranges:
            have = done.get(number)
            if have is not None and have[1] == last - first + 1:  # verified against the source (_verified): kept
                etags[number] = have[0]
            else:
                todo.append((number, first, last))

        def one(part: tuple[int, int, int]) -> tuple[int, str]:
            number, first, last = part
            try:
                result = self.client.upload_part_copy(
                    Bucket=d[0],
                    Key=d[1],
                    UploadId=state.upload_id,
                    PartNumber=number,
                    CopySource={"Bucket": s[0], "Key": s[1]},
                    CopySourceRange=f"bytes={first}-{last}",
                    CopySourceIfMatch=f'"{state.source_etag}"',
                )
            except Exception as exc:
                code, status = botocore_code(exc)
                if status == 412 or code == "PreconditionFailed":
                    raise SourceChangedError(f"{src.uri}: changed while it was being copied") from exc
                raise _mapped(exc, f"copy part {number} of {src.uri}") from exc
            etag = str(result.get("CopyPartResult", {}).get("ETag", "")).strip('"')
            if not etag:
                raise StorageError(f"copy part {number} of {src.uri}: the server returned no ETag")
            return number, etag

        with ThreadPoolExecutor(max_workers=self.settings.s3_workers, thread_name_prefix="s3-part-copy") as pool:
            for number, etag in pool.map(one, todo):
                etags[number] = etag
        # Verified part by part: what the server holds is what each copy returned, at each part's size.
        listed = self._parts(d, state.upload_id) or {}
        for number, first, last in ranges:
            held = listed.get(number)
            if held is None or held != (etags[number], last - first + 1):
                raise StorageError(f"copy of {src.uri}: part {number} is {held}, expected {etags[number]}")
        return [etags[n] for n, _, _ in ranges]

    @contextmanager
    def _aborted_on_refusal(self, d: tuple[str, str], upload_id: str, state_key: str) -> Iterator[None]:
        """A refusal for good (the source changed, moved or is gone, or a precondition failed) aborts the upload and
        drops its state before it propagates: no incomplete upload keeps the bytes, nothing is left to resume."""
        try:
            yield
        except (Precondition, SourceChangedError, StorageAccessError, FileNotFoundError):
            self._abort(d, upload_id)
            self._delete_state(d[0], state_key)
            raise

    def _verified(
        self, src: ObjectInfo, s: tuple[str, str], state: MultipartCopyState, held: dict[int, tuple[str, int]]
    ) -> bool:
        """Whether every part the server lists for a resumed upload holds its range of the pinned source, so it may
        be kept. Each must be one of the copy's parts at its size, with an ETag that is the MD5 of that range (S3
        gives a copied or uploaded part the MD5 of its bytes). A part in a server's own ETag scheme (no plain MD5,
        e.g. SeaweedFS's copied parts) cannot be vouched for: the upload is then started afresh rather than kept
        or patched (re-uploading a part number does not replace the listed part on every server)."""
        ranges = {number: (first, last) for number, first, last in part_ranges(src.size, state.part_bytes)}
        for number, (etag, size) in sorted(held.items()):
            first, last = ranges.get(number, (0, -2))
            if size != last - first + 1 or not self._same_bytes(src, s, etag, first, last):
                return False
        return True

    def _same_bytes(self, src: ObjectInfo, s: tuple[str, str], part_etag: str, first: int, last: int) -> bool:
        """Whether a part whose ETag is `part_etag` holds bytes first..last of the pinned source: the MD5 of that
        range, read once by a ranged GET held to the source's ETag (If-Match), against the ETag."""
        if not _MD5.match(part_etag):
            return False
        try:
            body = self.client.get_object(
                Bucket=s[0], Key=s[1], Range=f"bytes={first}-{last}", IfMatch=f'"{src.etag}"'
            )["Body"]
        except Exception as exc:
            code, status = botocore_code(exc)
            if status == 412 or code == "PreconditionFailed":
                raise SourceChangedError(f"{src.uri}: changed since it was pinned") from exc
            raise _mapped(exc, f"verify bytes {first}-{last} of {src.uri}") from exc
        digest = hashlib.md5(usedforsecurity=False)
        try:
            while chunk := body.read(_MIB):
                digest.update(chunk)
        finally:
            body.close()
        return digest.hexdigest() == part_etag.lower()

    def _complete(self, src: ObjectInfo, d: tuple[str, str], upload_id: str, etags: list[str]) -> None:
        parts = [{"PartNumber": n, "ETag": f'"{e}"'} for n, e in enumerate(etags, start=1)]
        try:
            self.client.complete_multipart_upload(
                Bucket=d[0], Key=d[1], UploadId=upload_id, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
            )
        except Exception as exc:
            code, status = botocore_code(exc)
            if status == 412 or code == "PreconditionFailed":
                raise Precondition() from exc
            raise _mapped(exc, f"complete copy to s3://{d[0]}/{d[1]}") from exc
        head = self.client.head_object(Bucket=d[0], Key=d[1])
        size, etag = int(head["ContentLength"]), str(head.get("ETag", "")).strip('"')
        expected = multipart_etag(etags) or f"-{len(etags)}"
        if size != src.size or not etag.endswith(expected):
            raise StorageError(
                f"copy of {src.uri}: the completed object has {size} bytes and ETag {etag}, expected "
                f"{src.size} bytes and an ETag ending {expected}"
            )

    def _abort(self, d: tuple[str, str], upload_id: str) -> None:
        try:
            self.client.abort_multipart_upload(Bucket=d[0], Key=d[1], UploadId=upload_id)
        except Exception as exc:
            if botocore_code(exc)[0] != "NoSuchUpload":
                raise _mapped(exc, f"abort copy to s3://{d[0]}/{d[1]}") from exc

    def _delete_state(self, bucket: str, key: str) -> None:
        try:
            self.client.delete_object(Bucket=bucket, Key=key)
        except Exception as exc:
            raise _mapped(exc, f"s3://{bucket}/{key}") from exc


class Precondition(Exception):
    """The destination was created meanwhile (If-None-Match), or the source is another version (If-Match)."""
