"""When a backend's lifecycle rule deletes an object N days old: a fact each storage backend declares on the objects
it lists (`ObjectInfo.lifecycle`), so policy (steps/expiry.py) dates `tmp/ttl=<N>d/` evidence without ever branching
on a URI's scheme (issue 44 item 6: an S3 expiry was dated as GCS's).

- GCS, the Age condition: "The time when the Age condition is considered to be satisfied is calculated by adding
  the specified value to the object creation time" (google-cloud-storage `BucketInfo.LifecycleRule.
  LifecycleCondition.Builder.setAge`, https://cloud.google.com/java/docs/reference/google-cloud-storage/latest/
  com.google.cloud.storage.BucketInfo.LifecycleRule.LifecycleCondition.Builder; the JSON API's `condition.age`
  "satisfied when an object reaches the specified age"). Deletion is asynchronous and may come later, never sooner.
- AWS S3, an Expiration `Days` rule: "Amazon S3 calculates the time by adding the number of days specified in the
  rule to the object creation time and rounding the resulting time to the next day midnight UTC" (Amazon S3 User
  Guide, "Lifecycle configuration elements", as Ceph's commit 0c57b20 quotes it; AWS re:Post knowledge center
  https://repost.aws/knowledge-center/s3-lifecycle-rule-delay: "Amazon S3 rounds the transition or expiration date
  of an object to midnight UTC the next day", an object
  created 1/1/2020 10:30 UTC under a 3-day rule is due 1/5/2020 00:00 UTC). Apache Ozone's S3 gateway
  (`OmLCExpiration.getExpiryTime`) and Ceph RGW (ceph/ceph 0c57b2061875, "rgw:lc: using midnight time to check obj
  expiration") implement the same.
- CoreWeave AI Object Storage (and any other S3-compatible store): its lifecycle `Expiration` acts "when an object
  ... reaches the rule's age threshold" (docs.coreweave.com products/storage/object-storage/buckets/lifecycle-
  policies); whether it rounds to midnight as AWS does is not documented. ASSUMED: created + N days, the earlier of
  the two readings, so a deadline rlcleanup states is never later than the deletion.
- A local directory runs no lifecycle; a local mirror of a bucket is dated as the Age condition dates it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum


class ExpiryClock(StrEnum):
    created_plus_days = "created_plus_days"  # created + N days
    next_midnight_utc = "next_midnight_utc"  # created + N days, rounded up to the next 00:00 UTC


@dataclass(frozen=True)
class LifecycleRule:
    """How one backend turns "N days old" into the moment an object is deleted."""

    backend: str  # as a person names it: "GCS", "AWS S3", "CoreWeave AI Object Storage"
    clock: ExpiryClock
    basis: str  # the documented rule, or the assumption, in a sentence
    assumed: bool = False  # not documented by the backend: a stated assumption

    def expires(self, created: datetime, days: int) -> datetime:
        at = (created if created.tzinfo else created.replace(tzinfo=UTC)) + timedelta(days=days)
        if self.clock is ExpiryClock.next_midnight_utc:
            utc = at.astimezone(UTC)
            midnight = utc.replace(hour=0, minute=0, second=0, microsecond=0)
            return midnight if midnight == utc else midnight + timedelta(days=1)
        return at

    def describe(self) -> str:
        return f"{self.backend}: {self.basis}" + (" (assumed)" if self.assumed else "")


GCS_AGE = LifecycleRule(
    "GCS", ExpiryClock.created_plus_days, "the Age condition holds at the object's creation time + N days"
)
AWS_S3_EXPIRATION = LifecycleRule(
    "AWS S3",
    ExpiryClock.next_midnight_utc,
    "Expiration Days: creation time + N days, rounded up to the next midnight UTC",
)
COREWEAVE_EXPIRATION = LifecycleRule(
    "CoreWeave AI Object Storage",
    ExpiryClock.created_plus_days,
    "Expiration Days at creation time + N days (midnight rounding undocumented: the earlier reading is taken)",
    assumed=True,
)
S3_COMPATIBLE_EXPIRATION = LifecycleRule(
    "S3-compatible store",
    ExpiryClock.created_plus_days,
    "Expiration Days at creation time + N days (the store's rounding is unknown: the earlier reading is taken)",
    assumed=True,
)
LOCAL_MIRROR = LifecycleRule(
    "local directory",
    ExpiryClock.created_plus_days,
    "no lifecycle runs on a local disk; a mirror of a bucket is dated as GCS's Age condition, from the file's mtime",
    assumed=True,
)
