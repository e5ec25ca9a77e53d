"""The plan of a server-side S3 copy at the real limits (adapters/s3_copy.py): one CopyObject up to 5 GiB, parts
above it, never more than S3's 10,000 parts, and the ETag S3 gives the completed upload."""

from __future__ import annotations

import hashlib
import itertools

import pytest

from rlcleanup.adapters.s3_copy import MAX_PARTS, multipart_etag, part_ranges, part_size
from rlcleanup.settings import GIB, MIB, CopySettings


def test_real_threshold_decides_multipart_only_past_5_gib() -> None:
    settings = CopySettings()
    assert settings.s3_multipart_threshold == 5 * GIB  # S3's CopyObject limit, the default
    with pytest.raises(ValueError):
        CopySettings(s3_multipart_threshold=5 * GIB + 1)  # never past what S3 accepts in one CopyObject
    ranges = part_ranges(5 * GIB + MIB, part_size(5 * GIB + MIB, settings.s3_part_bytes))
    assert len(ranges) == 11 and ranges[0] == (1, 0, 512 * MIB - 1) and ranges[-1] == (11, 5 * GIB, 5 * GIB + MIB - 1)


def test_parts_cover_every_byte_once_within_s3s_part_count() -> None:
    for size in (1, 5 * MIB, 5 * GIB + 1, 5 * 1024 * GIB):  # up to 5 TiB, S3's largest object
        bytes_per_part = part_size(size, 512 * MIB)
        ranges = part_ranges(size, bytes_per_part)
        assert len(ranges) <= MAX_PARTS
        assert ranges[0][1] == 0 and ranges[-1][2] == size - 1
        assert all(a[2] + 1 == b[1] for a, b in itertools.pairwise(ranges))
        assert bytes_per_part % MIB == 0


def test_the_completed_uploads_etag_is_the_md5_of_its_parts_md5s() -> None:
    parts = [b"a" * 10, b"b" * 7]
    etags = [hashlib.md5(p, usedforsecurity=False).hexdigest() for p in parts]
    whole = hashlib.md5(b"".join(hashlib.md5(p, usedforsecurity=False).digest() for p in parts), usedforsecurity=False)
    assert multipart_etag([f'"{e}"' for e in etags]) == f"{whole.hexdigest()}-2"
    assert multipart_etag(["not-an-md5"]) is None  # a server's own part ETags: only the part count is checked
