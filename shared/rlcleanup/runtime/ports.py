"""The ports a handler needs, bundled; built from the deployment settings for Cloud Run or from flags locally."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcleanup.ports.bus import Bus
from rlcleanup.ports.clock import Clock, SystemClock
from rlcleanup.ports.hub import HubFactory, ModelHub
from rlcleanup.ports.jobs import JobLauncher
from rlcleanup.ports.records import IdempotencyStore, RunRecords
from rlcleanup.ports.storage import Storage
from rlcleanup.settings import DeploymentSettings, unconfigured

HUB_JOB_MODULE = "rlcleanup.runtime.hub_job"


def hugging_face_hub() -> ModelHub:
    """The Hugging Face Hub client (HF_ENDPOINT, HF_TOKEN), made when a grant names `hf://`, never at cold start:
    only apply-grant and the upload job hold the token."""
    from rlcleanup.adapters.hf_hub import HubDestination

    return HubDestination()


@dataclass
class Ports:
    """The adapters one handler talks to, and the deployment settings it obeys: one `DeploymentSettings` object
    (read once per process), whose values the handlers read through the properties below."""

    storage: Storage
    records: RunRecords  # completion records, event ledger, auxiliary documents
    bus: Bus
    claims: IdempotencyStore  # at-most-once steps: leases, claims, step results
    clock: Clock = field(default_factory=SystemClock)
    # The whole configuration (a stack built by hand: the defaults, without reading the environment). A test or a
    # stack changes one value with `dataclasses.replace(ports, settings=ports.settings.model_copy(update=...))`.
    settings: DeploymentSettings = field(default_factory=unconfigured)
    # The delivery being handled (its Pub/Sub message id): `dispatch` sets it on its own copy of the ports, and
    # claims pass it as their lease owner explicitly (never read from the logging context).
    delivery_id: str | None = None
    model_hub: HubFactory = hugging_face_hub  # the `hf://` destination's client, made on first use
    # Hand-offs to the Hub larger than settings.hub_job_threshold_bytes are uploaded by this job (None: inline).
    hub_upload_job: JobLauncher | None = None

    @property
    def preserve_root(self) -> str | None:
        """Where evidence goes unless the event names a place."""
        return self.settings.preserve_root

    @property
    def max_event_age_seconds(self) -> float:
        return self.settings.max_event_age_seconds

    @property
    def lease_seconds(self) -> float:
        return self.settings.lease_seconds

    @property
    def run_buckets(self) -> tuple[str, ...] | None:
        """Deployment boundary (None = not restricted): runs are read only from these buckets. The emulator stack
        and Terraform set it; the embedded default leaves it open."""
        return self.settings.run_buckets

    @property
    def allowed_destination_prefixes(self) -> tuple[str, ...] | None:
        """Deployment boundary (None = not restricted): grants hand off only under these prefixes."""
        return self.settings.allowed_destination_prefixes

    @property
    def ray_dashboard(self) -> str | None:
        """The pre-cancel capture's Ray controller, if any."""
        return self.settings.ray_dashboard

    @property
    def iris_status_cmd(self) -> str:
        return self.settings.iris_status_cmd

    @property
    def hub_job_threshold_bytes(self) -> int:
        return self.settings.hub_job_threshold_bytes

    @property
    def capture_page_objects(self) -> int:
        """Objects one plan-capture page lists (bounded work per invocation)."""
        return self.settings.capture_page_objects


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
        settings=settings,
        hub_upload_job=hub_upload_job(settings),
    )
