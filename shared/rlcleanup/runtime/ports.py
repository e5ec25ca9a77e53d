"""The ports a handler needs, bundled; built from the environment for Cloud Run or from flags locally."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rlcleanup.ports.bus import Bus
from rlcleanup.ports.clock import Clock, SystemClock
from rlcleanup.ports.records import RecordStore
from rlcleanup.ports.storage import Storage

DEFAULT_MAX_EVENT_AGE_SECONDS = 7 * 24 * 3600


@dataclass
class Ports:
    storage: Storage
    records: RecordStore
    bus: Bus
    clock: Clock = field(default_factory=SystemClock)
    preserve_root: str | None = None  # where evidence goes unless the event names a place
    max_event_age_seconds: float = DEFAULT_MAX_EVENT_AGE_SECONDS
    lease_seconds: float = 600.0


def cloud_ports() -> Ports:
    """GCS + Firestore + Pub/Sub, configured by env (emulator hosts honoured). Clients are created lazily."""
    from rlcleanup.adapters.firestore_records import FirestoreRecordStore
    from rlcleanup.adapters.pubsub_bus import PubSubBus
    from rlcleanup.adapters.storage_router import RoutingStorage

    project = os.environ.get("GOOGLE_CLOUD_PROJECT", "test-project")
    return Ports(
        storage=RoutingStorage(),
        records=FirestoreRecordStore(project=project),
        bus=PubSubBus(project=project),
        preserve_root=os.environ.get("RLCLEANUP_PRESERVE_ROOT"),
        max_event_age_seconds=float(os.environ.get("RLCLEANUP_MAX_EVENT_AGE_SECONDS", DEFAULT_MAX_EVENT_AGE_SECONDS)),
        lease_seconds=float(os.environ.get("RLCLEANUP_LEASE_SECONDS", 600)),
    )
