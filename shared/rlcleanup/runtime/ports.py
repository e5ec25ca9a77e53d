"""The ports a handler needs, bundled; built from the deployment settings for Cloud Run or from flags locally."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Never, Protocol, TypeVar, overload

from rlcleanup.adapters.controllers.registry import BUILTIN as BUILTIN_CONTROLLERS
from rlcleanup.adapters.controllers.registry import ControllerRegistry
from rlcleanup.adapters.notify_registry import BUILTIN as BUILTIN_CHANNELS
from rlcleanup.adapters.notify_registry import ChannelRegistry
from rlcleanup.ports.bus import Bus
from rlcleanup.ports.clock import Clock, SystemClock
from rlcleanup.ports.controllers import ExportSubmitter
from rlcleanup.ports.hub import HubFactory, HubReader, HubReaderFactory, ModelHub
from rlcleanup.ports.jobs import JobLauncher
from rlcleanup.ports.records import IdempotencyStore, RunRecords
from rlcleanup.ports.storage import Storage
from rlcleanup.runtime.topology import Topology, load_topology
from rlcleanup.settings import DeploymentSettings, SettingsError, unconfigured

HUB_JOB_MODULE = "rlcleanup.runtime.hub_job"
COPY_JOB_MODULE = "rlcleanup.runtime.copy_job"
# Each job kind's entry point (its Cloud Run job runs `python -m <module>`: infra/modules/rlcleanup/*.tf).
JOB_MODULES = {"hub-upload": HUB_JOB_MODULE, "large-copy": COPY_JOB_MODULE}
T = TypeVar("T")


def hugging_face_hub() -> ModelHub:
    """The Hugging Face Hub client (HF_ENDPOINT, HF_TOKEN), made when a grant names `hf://`, never at cold start:
    only apply-grant and the upload job hold the token."""
    from rlcleanup.adapters.hf_hub import HubDestination

    return HubDestination()


def hugging_face_reader() -> HubReader:
    """The read-only Hub client of the audit (HF_ENDPOINT, RLCLEANUP_HUB_AUDIT_TOKEN): made only when the
    deployment enables the audit (RLCLEANUP_HUB_AUDIT) and a run names a repo its export job published to."""
    from rlcleanup.adapters.hf_hub import HubReadOnly

    return HubReadOnly()


class _FromSettings(Generic[T]):
    """A read-only attribute of `Ports` that is the `DeploymentSettings` field of the same name: the settings stay
    one object, and a name that is no settings field fails when the class is defined."""

    def __set_name__(self, owner: type, name: str) -> None:
        if name not in DeploymentSettings.model_fields:
            raise TypeError(f"{owner.__name__}.{name}: DeploymentSettings has no field {name!r}")
        self.name = name

    @overload
    def __get__(self, ports: None, owner: type) -> _FromSettings[T]: ...

    @overload
    def __get__(self, ports: Ports, owner: type) -> T: ...

    def __get__(self, ports: Ports | None, owner: type) -> T | _FromSettings[T]:
        if ports is None:
            return self
        value: T = getattr(ports.settings, self.name)
        return value

    def __set__(self, ports: Ports, value: Never) -> None:  # Never: mypy refuses the assignment too
        raise AttributeError(f"Ports.{self.name} is read-only: replace ports.settings (model_copy(update=...))")


class ServedStages(Protocol):
    """The stage table a delivery is dispatched through (runtime/stage_table.py `StageTable`), as a handler that
    reads it sees it: the dead-letter recorder finds the failed function's row and failure route there. Declared
    here, not imported: the table's module builds on these ports."""

    @property
    def topology(self) -> Topology: ...

    def row(self, entry_point: str) -> Any: ...

    def route(self, entry_point: str) -> Any: ...


@dataclass
class Ports:
    """The adapters one handler talks to, and the deployment settings it obeys: one `DeploymentSettings` object
    (read once per process), whose values the handlers read through the read-only attributes below."""

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
    hub_reader: HubReaderFactory = hugging_face_reader  # the audit's read-only Hub client, made on first use
    # Hand-offs to the Hub larger than settings.hub_job_threshold_bytes are uploaded by this job (None: inline).
    hub_upload_job: JobLauncher | None = None
    # Capture parts planned to copy more than settings.copy_job_threshold_bytes are copied by this job (None: inline).
    large_copy_job: JobLauncher | None = None
    # The pipeline graph the handlers run in (claim keys, fan-outs, barriers): the packaged topology.yaml, or the
    # one the dispatching stage table was checked against (runtime/stage_table.py).
    topology: Topology = field(default_factory=load_topology)
    # The stage table this delivery is dispatched through, whose graph `topology` is: `dispatch` sets both on its
    # own copy of the ports (the packaged table, or the one a development stack serves, `stack up --stages`), so a
    # handler that reads the table reads the one it was served from, never a module's. None outside dispatch.
    stages: ServedStages | None = None
    # The embedded default (`rlcleanup run`): no sweep and no event source; a to-do for a person names the
    # command that redoes a run there (`rlcleanup run ROOT --rerun`), not the terminal event a deployment re-emits.
    embedded: bool = False

    # Read-only views of the settings, under the names the handlers use (e.g. `p.run_buckets`).
    preserve_root = _FromSettings[str | None]()  # where evidence goes unless the event names a place
    max_event_age_seconds = _FromSettings[float]()
    lease_seconds = _FromSettings[float]()
    # Deployment boundaries (None = not restricted): runs are read only from these buckets, grants hand off only
    # under these prefixes. The emulator stack and Terraform set them; the embedded default leaves them open.
    run_buckets = _FromSettings[tuple[str, ...] | None]()
    allowed_destination_prefixes = _FromSettings[tuple[str, ...] | None]()
    readable_roots = _FromSettings[tuple[str, ...] | None]()  # RLCLEANUP_READABLE_ROOTS: widens the local default
    hub_job_threshold_bytes = _FromSettings[int]()
    copy_job_threshold_bytes = _FromSettings[int]()
    copy_job_max_tasks = _FromSettings[int]()
    capture_page_objects = _FromSettings[int]()  # objects one plan-capture page lists (bounded work per invocation)
    max_run_objects = _FromSettings[int]()  # a run holding more is refused as run_too_large by the paged plans
    # The job-state controllers by name: each built from `settings` when the sweep polls it or a pre-cancel capture
    # asks it (runtime/source_handlers.py, runtime/authority_handlers.py); tests hand in a registry of their own.
    controllers: ControllerRegistry = BUILTIN_CONTROLLERS
    # The notification channels by name (the notify function posts on those the settings configure).
    channels: ChannelRegistry = BUILTIN_CHANNELS

    def export_submitter(self, name: str) -> ExportSubmitter | None:
        return export_submitter(name, self.settings, self.controllers)

    @property
    def cancel_cleared_topic(self) -> str:
        """Where a cleared cancel is announced (the grant functions' `cleared` route in topology.yaml): handed to
        authority through its GrantPorts, since policy cannot import the wiring's topology."""
        return self.topology.route("apply-grant", "cleared")


def export_submitter(
    name: str, settings: DeploymentSettings, controllers: ControllerRegistry = BUILTIN_CONTROLLERS
) -> ExportSubmitter | None:
    """The named controller as an export submitter (export grants): None when this deployment does not configure
    it or it cannot submit (Iris configured for snapshots only: no `RLCLEANUP_IRIS_URL`, no RPCs to launch
    through); an unknown name is refused as the registry refuses it."""
    controller = controllers.build(name, settings)
    if not isinstance(controller, ExportSubmitter) or not getattr(controller, "submits", True):
        return None
    return controller


def hub_upload_job(settings: DeploymentSettings, job_args: tuple[str, ...] = ()) -> JobLauncher | None:
    """The upload job RLCLEANUP_HUB_UPLOAD_JOB names: a Cloud Run job, or `local` (the same entry point as a
    child process; `job_args` tell it where this process's records are)."""
    return job_launcher("hub-upload", settings.hub_upload_job, job_args)


def large_copy_job(
    settings: DeploymentSettings, job_args: tuple[str, ...] = (), *, wait: bool = False
) -> JobLauncher | None:
    """The large-copy job RLCLEANUP_LARGE_COPY_JOB names (`wait`: a local execution is awaited, see
    adapters/local_jobs.py)."""
    return job_launcher("large-copy", settings.large_copy_job, job_args, wait=wait)


def job_launcher(
    kind: str, name: str | None, job_args: tuple[str, ...] = (), *, wait: bool = False
) -> JobLauncher | None:
    """The job of this kind a setting names: a Cloud Run job's full name, or `local` (the kind's entry point as a
    child process; `job_args` tell it where this process's records are). None: the work runs inline."""
    if name is None:
        return None
    if name == "local":
        from rlcleanup.adapters.local_jobs import SubprocessJobLauncher

        return SubprocessJobLauncher(JOB_MODULES[kind], job_args, wait=wait)
    from rlcleanup.adapters.cloud_run_jobs import CloudRunJobLauncher

    return CloudRunJobLauncher(name)


def cloud_ports(settings: DeploymentSettings) -> Ports:
    """GCS + Firestore + Pub/Sub from the settings read at cold start (emulator hosts honoured). Clients are
    created lazily. No project (GOOGLE_CLOUD_PROJECT): SettingsError, before any client is made."""
    from rlcleanup.adapters.firestore_records import firestore_stores
    from rlcleanup.adapters.pubsub_bus import PubSubBus
    from rlcleanup.adapters.storage_router import RoutingStorage

    project = settings.project
    if not project:  # never a made-up project: records and messages would go to one nobody deployed
        raise SettingsError(
            "GOOGLE_CLOUD_PROJECT is not set: the Cloud Run ports need the project of their Firestore database and "
            "Pub/Sub topics (Terraform sets it on every function; an emulator stack's `stack up` prints it)"
        )
    records, claims = firestore_stores(project, timeout=settings.record_store_timeout_seconds)
    return Ports(
        storage=RoutingStorage(),
        records=records,
        claims=claims,
        bus=PubSubBus(project=project),
        settings=settings,
        hub_upload_job=hub_upload_job(settings),
        large_copy_job=large_copy_job(settings),
    )
