"""Which deployments can submit an export job to Iris: only one with the controller's URL (its Connect RPCs);
a snapshot-only Iris (the CLI, no URL) is no submitter, so an export grant is refused `no_controller`."""

from __future__ import annotations

from rlcleanup.adapters.controllers.iris import IrisController
from rlcleanup.runtime.ports import export_submitter
from rlcleanup.settings import DeploymentSettings, IrisSettings


def test_iris_submits_only_with_a_controller_url() -> None:
    snapshots_only = DeploymentSettings(iris=IrisSettings(url=None))
    assert export_submitter("iris", snapshots_only) is None
    with_url = DeploymentSettings(iris=IrisSettings(url="http://iris:8080", token="t"))
    submitter = export_submitter("iris", with_url)
    assert isinstance(submitter, IrisController) and submitter.submits
