"""The ports a handler needs, bundled; built from the deployment settings for Cloud Run or from flags locally."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcleanup.ports.bus import Bus
from rlcleanup.ports.clock import Clock, SystemClock
from rlcleanup.ports.records import IdempotencyStore, RunRecords
from rlcleanup.ports.storage import Storage
from rlcleanup.settings import DEFAULT_IRIS_STATUS_CMD, DeploymentSettings

DEFAULT_MAX_EVENT_AGE_SECONDS = 7 * 24 * 3600


@dataclass
class Ports:
    storage: Storage
    records: RunRecords  # completion records, event ledger, auxiliary documents
    bus: Bus
    claims: IdempotencyStore  # at-most-once steps: leases, claims, step results
    clock: Clock = field(default_factory=SystemClock)
    preserve_root: str | None = None  # where evidence goes unless the event names a place
    max_event_age_seconds: float = DEFAULT_MAX_EVENT_AGE_SECONDS
    lease_seconds: float = 600.0
    # Deployment boundaries (None = not restricted): runs are read only from these buckets, grants hand off only
    # under these prefixes. The emulator stack and Terraform set them; the embedded default leaves them open.
    run_buckets: tuple[str, ...] | None = None
    allowed_destination_prefixes: tuple[str, ...] | None = None
    ray_dashboard: str | None = None  # the pre-cancel capture's Ray controller, if any
    iris_status_cmd: str = DEFAULT_IRIS_STATUS_CMD
    # The delivery being handled (its Pub/Sub message id): `dispatch` sets it on its own copy of the ports, and
    # claims pass it as their lease owner explicitly (never read from the logging context).
    delivery_id: str | None = None
    settings: DeploymentSettings | None = None  # the whole configuration, for handlers with their own (the sweep)


def settings_fields(settings: DeploymentSettings) -> dict[str, object]:
    """The Ports fields a deployment configuration sets (the cloud and the embedded stack both use it)."""
    return {
        "preserve_root": settings.preserve_root,
        "max_event_age_seconds": settings.max_event_age_seconds,
        "lease_seconds": settings.lease_seconds,
        "run_buckets": settings.run_buckets,
        "allowed_destination_prefixes": settings.allowed_destination_prefixes,
        "ray_dashboard": settings.ray_dashboard,
        "iris_status_cmd": settings.iris_status_cmd,
        "settings": settings,
    }


def cloud_ports(settings: DeploymentSettings) -> Ports:
    """GCS + Firestore + Pub/Sub from the settings read at cold start (emulator hosts honoured). Clients are
    created lazily."""
    from rlcleanup.adapters.firestore_records import firestore_stores
    from rlcleanup.adapters.pubsub_bus import PubSubBus
    from rlcleanup.adapters.storage_router import RoutingStorage

    project = settings.project or "test-project"
    records, claims = firestore_stores(project, timeout=settings.record_store_timeout_seconds)
    return Ports(
        storage=RoutingStorage(),
        records=records,
        claims=claims,
        bus=PubSubBus(project=project),
        **settings_fields(settings),  # type: ignore[arg-type]
    )
