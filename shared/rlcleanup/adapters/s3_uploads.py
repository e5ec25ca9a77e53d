"""S3 multipart uploads that were never completed: listed (ListMultipartUploads + ListParts, one boto3 client per
endpoint) and aborted (AbortMultipartUpload). obstore has no call for either, so this is the one place the S3
adapter talks boto3 for an object operation; endpoints and credentials are the same `S3Endpoint` the obstore
client uses (adapters/s3_client.py)."""

from __future__ import annotations

from typing import Any

from rlcleanup.adapters.s3_client import S3Endpoint, object_key
from rlcleanup.adapters.s3_copy import botocore_client, botocore_code
from rlcleanup.ports.storage import IncompleteUpload, StorageAccessError, StorageError

_ACCESS = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket", "AllAccessDisabled"}


def map_error(exc: Exception, what: str, ep: S3Endpoint) -> Exception:
    """botocore's errors in our vocabulary: refused access is permanent, anything else is retried."""
    code, _ = botocore_code(exc)
    where = f"{what} at {ep.endpoint_url or 'AWS'}"
    if code in _ACCESS:
        return StorageAccessError(f"{where}: {code}")
    return StorageError(f"{where}: {type(exc).__name__}: {str(exc)[:300]}")


def _client(ep: S3Endpoint) -> Any:
    """The same boto3 client the multipart copy makes (addressing, credentials, retries): one place builds it."""
    return botocore_client(ep, workers=1)


def list_incomplete(ep: S3Endpoint, prefix_uri: str) -> list[IncompleteUpload]:
    bucket, key = object_key(prefix_uri.rstrip("/"))
    prefix = key.rstrip("/") + "/" if key else ""
    try:
        client = _client(ep)
        found: list[IncompleteUpload] = []
        for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=prefix):
            for upload in page.get("Uploads") or []:
                size = parts = 0
                for part_page in client.get_paginator("list_parts").paginate(
                    Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                ):
                    for part in part_page.get("Parts") or []:
                        size += int(part.get("Size") or 0)
                        parts += 1
                found.append(
                    IncompleteUpload(
                        key_uri=f"s3://{bucket}/{upload['Key']}",
                        upload_id=upload["UploadId"],
                        initiated=upload.get("Initiated"),
                        parts=parts,
                        bytes=size,
                    )
                )
        return found
    except Exception as exc:
        raise map_error(exc, prefix_uri, ep) from exc


def abort(ep: S3Endpoint, key_uri: str, upload_id: str) -> bool:
    bucket, key = object_key(key_uri)
    try:
        _client(ep).abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        return True
    except Exception as exc:
        if "NoSuchUpload" in str(exc):
            return False
        raise map_error(exc, key_uri, ep) from exc
