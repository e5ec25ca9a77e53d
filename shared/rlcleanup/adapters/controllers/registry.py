"""The job-state controller registry: which controllers exist, and how each is built from the settings.

The one place that knows controllers. Each `ControllerKind` names the `JobEvent` source it serves (a source of
models/controller_states.py) and builds its adapter from the deployment settings, or None when this deployment
does not configure it. The wiring (runtime/) asks the registry; policy only sees the `JobController` port.

Failing closed: a controller name nobody registered (a sweep message naming one) is `UnknownControllerError`
naming the known ones; a source with no controller (`manual`, `slurm`, ...) has none, and the pre-cancel capture
says so and reads the run from its files. Adding a controller = its adapter module, one `ControllerKind` in
`BUILTIN` and its settings group in settings.py (docs/architecture.md, "Add a job-state controller").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rlcleanup.adapters.named_registry import NamedRegistry
from rlcleanup.models.controller_states import SOURCES
from rlcleanup.ports.controllers import JobController, UnknownControllerError
from rlcleanup.settings import DeploymentSettings


@dataclass(frozen=True)
class ControllerKind:
    name: str  # the JobEvent source it serves: pre-cancel events of that source are snapshotted through it
    build: Callable[[DeploymentSettings], JobController | None]  # None: not configured in this deployment


class ControllerRegistry(NamedRegistry[ControllerKind]):
    """Immutable: a deployment or a test extends one by building another from its `kinds`."""

    noun = "job-state controllers"

    def __init__(self, kinds: Iterable[ControllerKind] = ()) -> None:
        super().__init__(kinds)
        if strangers := [name for name in self._kinds if name not in SOURCES]:  # their events would be refused
            raise ValueError(f"job-state controllers {strangers} serve no known source ({', '.join(SOURCES)})")

    def build(self, name: str, settings: DeploymentSettings) -> JobController | None:
        """The named controller as this deployment configures it (None: not configured); an unknown name is
        `UnknownControllerError`."""
        kind = self._kinds.get(name)
        if kind is None:
            raise UnknownControllerError(name, self.names)
        return kind.build(settings)

    def for_source(self, source: str, settings: DeploymentSettings) -> JobController | None:
        """The controller of an event's source, if it has one and it is configured."""
        return self.build(source, settings) if source in self._kinds else None

    def polling(self, settings: DeploymentSettings) -> list[str]:
        """The controllers the sweep polls in this deployment, in name order."""
        built = ((name, self.build(name, settings)) for name in self.names)
        return [name for name, controller in built if controller is not None and controller.polls]


def _iris(settings: DeploymentSettings) -> JobController:
    from rlcleanup.adapters.controllers.iris import IrisController

    return IrisController.from_settings(settings.iris)  # always: its CLI snapshots even without a controller URL


def _ray(settings: DeploymentSettings) -> JobController | None:
    from rlcleanup.adapters.controllers.ray import RayController

    return RayController.from_settings(settings.ray)


BUILTIN = ControllerRegistry([ControllerKind("iris", _iris), ControllerKind("ray", _ray)])
