"""Virtual-hosted addressing: the bucket goes in front of the endpoint's host (object_store uses an explicit endpoint
as-is); path style leaves the endpoint alone. The real-server check is tests/e2e/test_s3_readme_command.py."""

from __future__ import annotations

import pytest

from rlcleanup.adapters.s3_client import S3Endpoint, bucket_endpoint


@pytest.mark.parametrize(
    ("endpoint", "bucket", "expected"),
    [
        ("https://cwobject.com", "marin-us-east-02a", "https://marin-us-east-02a.cwobject.com"),
        ("http://cwlota.com", "iris", "http://iris.cwlota.com"),
        ("https://cwobject.com/", "b", "https://b.cwobject.com/"),
        ("http://s3.rlcleanup.test:9000", "runs", "http://runs.s3.rlcleanup.test:9000"),
        ("https://runs.cwobject.com", "runs", "https://runs.cwobject.com"),  # already the bucket's endpoint
    ],
)
def test_a_virtual_hosted_endpoint_carries_the_bucket(endpoint: str, bucket: str, expected: str) -> None:
    assert bucket_endpoint(endpoint, bucket) == expected


def test_a_hostname_endpoint_defaults_to_virtual_an_ip_to_path() -> None:
    assert not S3Endpoint(name="d", endpoint_url="https://cwobject.com").path_style
    assert S3Endpoint(name="d", endpoint_url="http://127.0.0.1:9000").path_style
    assert S3Endpoint(name="d", endpoint_url="https://cwobject.com", addressing_style="path").path_style
