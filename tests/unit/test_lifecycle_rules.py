"""When `tmp/ttl=<N>d/` evidence dies, per backend (issue 44 item 6): each storage backend declares its lifecycle
rule on the objects it lists (`ObjectInfo.lifecycle`, ports/lifecycle.py) and steps/expiry.expires_at dates by it.
GCS's Age condition: created + N days. AWS S3: created + N days rounded up to the next midnight UTC (AWS's own
example: created 1/1/2020 10:30 UTC, a 3-day rule, due 1/5/2020 00:00 UTC). CoreWeave and other S3-compatible
stores: created + N days, a stated assumption (the earlier reading). The listing side on real servers (fake-gcs,
SeaweedFS) is tests/integration/test_object_storage.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from rlcleanup.adapters.gcs_client import info_from_json
from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.s3_client import S3Endpoint, lifecycle_rule
from rlcleanup.adapters.s3_storage import S3Storage
from rlcleanup.ports.lifecycle import (
    AWS_S3_EXPIRATION,
    COREWEAVE_EXPIRATION,
    GCS_AGE,
    LOCAL_MIRROR,
    S3_COMPATIBLE_EXPIRATION,
    LifecycleRule,
)
from rlcleanup.ports.storage import ObjectInfo
from rlcleanup.steps.expiry import expires_at

CREATED = datetime(2020, 1, 1, 10, 30, tzinfo=UTC)
TEMP = "tmp/ttl=3d/skyrl/math-rl/v1/checkpoints/global_step_5/trainer_state.pt"


def _temp_object(scheme: str, rule: LifecycleRule | None, created: datetime = CREATED) -> ObjectInfo:
    return ObjectInfo(uri=f"{scheme}://marin-bucket/{TEMP}", size=1, created=created, lifecycle=rule)


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        (GCS_AGE, datetime(2020, 1, 4, 10, 30, tzinfo=UTC)),  # the Age condition: created + 3 days
        (AWS_S3_EXPIRATION, datetime(2020, 1, 5, 0, 0, tzinfo=UTC)),  # rounded up to the next midnight UTC
        (COREWEAVE_EXPIRATION, datetime(2020, 1, 4, 10, 30, tzinfo=UTC)),  # assumed: created + 3 days
        (S3_COMPATIBLE_EXPIRATION, datetime(2020, 1, 4, 10, 30, tzinfo=UTC)),
        (LOCAL_MIRROR, datetime(2020, 1, 4, 10, 30, tzinfo=UTC)),
    ],
)
def test_each_backends_rule_dates_the_same_object_its_own_way(rule: LifecycleRule, expected: datetime) -> None:
    assert expires_at(_temp_object("s3" if "S3" in rule.backend else "gs", rule)) == expected


def test_aws_rounding_keeps_an_exact_midnight_and_converts_other_zones() -> None:
    midnight = datetime(2020, 1, 1, tzinfo=UTC)
    assert AWS_S3_EXPIRATION.expires(midnight, 3) == datetime(2020, 1, 4, tzinfo=UTC)
    # 23:30 at UTC-5 is 04:30 UTC the next day: the rounding is in UTC, never the stamp's own zone.
    eastern = datetime(2020, 1, 1, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
    assert AWS_S3_EXPIRATION.expires(eastern, 1) == datetime(2020, 1, 4, tzinfo=UTC)
    assert AWS_S3_EXPIRATION.expires(datetime(2020, 1, 1, 0, 0, 1, tzinfo=UTC), 1) == datetime(2020, 1, 3, tzinfo=UTC)


def test_only_an_undocumented_rule_is_marked_assumed() -> None:
    assert [r.assumed for r in (GCS_AGE, AWS_S3_EXPIRATION)] == [False, False]
    assert all(r.assumed for r in (COREWEAVE_EXPIRATION, S3_COMPATIBLE_EXPIRATION, LOCAL_MIRROR))
    assert COREWEAVE_EXPIRATION.describe().endswith("(assumed)") and "midnight" in COREWEAVE_EXPIRATION.basis


@pytest.mark.parametrize(
    ("endpoint_url", "rule"),
    [
        (None, AWS_S3_EXPIRATION),  # no endpoint: AWS itself
        ("https://s3.us-west-2.amazonaws.com", AWS_S3_EXPIRATION),
        ("https://cwobject.com", COREWEAVE_EXPIRATION),  # CoreWeave's public endpoint (run-layout-v2.md §8)
        ("http://cwlota.com", COREWEAVE_EXPIRATION),  # and its in-cluster LOTA endpoint
        ("https://acct.r2.cloudflarestorage.com", S3_COMPATIBLE_EXPIRATION),
        ("http://127.0.0.1:8333", S3_COMPATIBLE_EXPIRATION),  # SeaweedFS in the test stack
        ("https://notamazonaws.com", S3_COMPATIBLE_EXPIRATION),  # a look-alike host is not AWS
    ],
)
def test_the_s3_adapter_declares_the_rule_of_the_store_its_endpoint_reaches(
    endpoint_url: str | None, rule: LifecycleRule
) -> None:
    endpoint = S3Endpoint(name="default", endpoint_url=endpoint_url)
    assert lifecycle_rule(endpoint) is rule
    named = S3Endpoint(name="cw", endpoint_url="https://cwobject.com", buckets=("marin-us-east-02a",))
    storage = S3Storage([named], endpoint)
    assert storage.lifecycle_for("some-bucket") is rule
    assert storage.lifecycle_for("marin-us-east-02a") is COREWEAVE_EXPIRATION  # a named endpoint's buckets


def test_the_gcs_and_local_adapters_declare_their_rules(tmp_path: Path) -> None:
    gcs = info_from_json(
        "marin-us-central2",
        {"name": TEMP, "size": "1", "generation": "7", "timeCreated": "2020-01-01T10:30:00.000Z"},
    )
    assert gcs.lifecycle is GCS_AGE and expires_at(gcs) == datetime(2020, 1, 4, 10, 30, tzinfo=UTC)
    path = tmp_path / TEMP
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x")
    local = LocalStorage(checksums=False)
    (listed,) = list(local.list(str(tmp_path / "tmp")))
    stat = local.stat(str(path))
    assert listed.lifecycle is LOCAL_MIRROR and stat is not None and stat.lifecycle is LOCAL_MIRROR
    assert listed.created is not None and expires_at(listed) == listed.created + timedelta(days=3)
