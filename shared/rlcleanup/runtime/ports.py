"""The ports a handler needs, bundled; built from the deployment settings for Cloud Run or from flags locally."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcleanup.adapters.controllers.registry import BUILTIN as BUILTIN_CONTROLLERS
from rlcleanup.adapters.controllers.registry import ControllerRegistry
from rlcleanup.ports.bus import Bus
from rlcleanup.ports.clock import Clock, SystemClock
from rlcleanup.ports.hub import HubFactory, ModelHub
from rlcleanup.ports.jobs import JobLauncher
from rlcleanup.ports.records import IdempotencyStore, RunRecords
from rlcleanup.ports.storage import Storage
from rlcleanup.settings import DeploymentSettings

DEFAULT_MAX_EVENT_AGE_SECONDS = 7 * 24 * 3600
HUB_JOB_MODULE = "rlcleanup.runtime.hub_job"


def hugging_face_hub() -> ModelHub:
    """The Hugging Face Hub client (HF_ENDPOINT, HF_TOKEN), made when a grant names `hf://`, never at cold start:
    only apply-grant and the upload job hold the token."""
    from rlcleanup.adapters.hf_hub import HubDestination

    return HubDestination()


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
    # The delivery being handled (its Pub/Sub message id): `dispatch` sets it on its own copy of the ports, and
    # claims pass it as their lease owner explicitly (never read from the logging context).
    delivery_id: str | None = None
    settings: DeploymentSettings | None = None  # the whole configuration, for handlers with their own (the sweep)
    model_hub: HubFactory = hugging_face_hub  # the `hf://` destination's client, made on first use
    # Hand-offs to the Hub larger than the threshold are uploaded by this job (None: always inline).
    hub_upload_job: JobLauncher | None = None
    hub_job_threshold_bytes: int = 1 << 30
    capture_page_objects: int = 5000  # objects one plan-capture page lists (bounded work per invocation)
    # The job-state controllers by name: each built from `settings` when the sweep polls it or a pre-cancel capture
    # asks it (runtime/source_handlers.py, runtime/authority_handlers.py); tests hand in a registry of their own.
    controllers: ControllerRegistry = BUILTIN_CONTROLLERS


def hub_upload_job(settings: DeploymentSettings, job_args: tuple[str, ...] = ()) -> JobLauncher | None:
    """The upload job RLCLEANUP_HUB_UPLOAD_JOB names: a Cloud Run job, or `local` (the same entry point as a
    child process; `job_args` tell it where this process's records are)."""
    if settings.hub_upload_job is None:
        return None
    if settings.hub_upload_job == "local":
        from rlcleanup.adapters.local_jobs import SubprocessJobLauncher

        return SubprocessJobLauncher(HUB_JOB_MODULE, job_args)
    from rlcleanup.adapters.cloud_run_jobs import CloudRunJobLauncher

    return CloudRunJobLauncher(settings.hub_upload_job)


def settings_fields(settings: DeploymentSettings) -> dict[str, object]:
    """The Ports fields a deployment configuration sets (the cloud and the embedded stack both use it)."""
    return {
        "preserve_root": settings.preserve_root,
        "max_event_age_seconds": settings.max_event_age_seconds,
        "lease_seconds": settings.lease_seconds,
        "run_buckets": settings.run_buckets,
        "allowed_destination_prefixes": settings.allowed_destination_prefixes,
        "hub_job_threshold_bytes": settings.hub_job_threshold_bytes,
        "capture_page_objects": settings.capture_page_objects,
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
        hub_upload_job=hub_upload_job(settings),
        **settings_fields(settings),  # type: ignore[arg-type]
    )
