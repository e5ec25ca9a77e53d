"""Issue 47 "Reading at scale": the report's banner states GPU-hours and compute cost where durable facts give them
(the resolved configuration the record hashed, each attempt's start and end, a declared price), else "unknown"
with the reason, never an estimate. Tested on the sample runs: `launch-yaml` states its Iris request (4 x H100),
`completed-resumed` a non-colocated placement (its total GPUs are not stated)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.models.record import CompletionRecord
from rlcleanup.report.build import build_document
from rlcleanup.report.compute import accelerators, attempt_hours
from rlcleanup.report.inputs import load_inputs
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run

PRICES = "RLCLEANUP_GPU_PRICES_USD_PER_HOUR"


@pytest.fixture(autouse=True)
def _sqlite_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRESTORE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv(PRICES, raising=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CompletionRecord]:
    tmp = tmp_path_factory.mktemp("compute")
    found = {}
    for scenario in ("launch-yaml", "completed-resumed"):
        root = write_sample_run(tmp / scenario, scenario)
        record = run_embedded(str(root), db_path=tmp / f"{scenario}.db", preserve_root=str(tmp / f"p-{scenario}"))
        assert record is not None and record.resolved_config is not None
        found[scenario] = record
    return found


def _banner(record: CompletionRecord) -> list[str]:
    return build_document(load_inputs(RoutingStorage(), record), with_figure=False).facts


def test_gpu_hours_from_the_iris_request_and_each_attempts_own_times(runs: dict[str, CompletionRecord]) -> None:
    record = runs["launch-yaml"]
    hours = attempt_hours(record)
    assert hours is not None and hours > 0
    expected = sum((a.ended_at - a.started_at).total_seconds() for a in record.chain.attempts) / 3600 * 4  # type: ignore[operator]
    facts = _banner(record)
    [line] = [f for f in facts if f.startswith("GPU-hours ")]
    assert line.startswith(f"GPU-hours {expected:,.1f} (4 x H100 from iris.resources"), line
    assert "compute cost unknown (no price declared for H100)" in facts  # no price table: never a guess


def test_compute_cost_only_with_a_declared_price(
    runs: dict[str, CompletionRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    record = runs["launch-yaml"]
    monkeypatch.setenv(PRICES, '{"H100": 2.5, "A100": 1.0}')
    gpu_hours = 4 * (attempt_hours(record) or 0)
    assert f"compute cost ${gpu_hours * 2.5:,.2f} at $2.5/GPU-hour (declared)" in _banner(record)
    monkeypatch.setenv(PRICES, '{"A100": 1.0}')  # a price for another type only
    assert "compute cost unknown (no price declared for H100)" in _banner(record)


def test_a_placement_that_does_not_state_its_total_is_unknown(runs: dict[str, CompletionRecord]) -> None:
    facts = _banner(runs["completed-resumed"])
    assert any(f.startswith("GPU-hours unknown (") and "not colocated" in f for f in facts), facts
    assert "compute cost unknown" in facts


def test_a_config_changed_since_classification_is_not_read(runs: dict[str, CompletionRecord], tmp_path: Path) -> None:
    record = runs["launch-yaml"]
    assert record.resolved_config is not None
    moved = record.model_copy(
        update={"resolved_config": record.resolved_config.model_copy(update={"sha256": "0" * 64})}
    )
    inputs = load_inputs(RoutingStorage(), moved)
    assert inputs.gpus.count is None and any("changed since classification" in n for n in inputs.notes)
    assert any(f.startswith("GPU-hours unknown") for f in build_document(inputs, with_figure=False).facts)


def test_an_attempt_without_its_times_makes_the_hours_unknown(runs: dict[str, CompletionRecord]) -> None:
    record = runs["launch-yaml"]
    first = record.chain.attempts[0].model_copy(update={"ended_at": None})
    chain = record.chain.model_copy(update={"attempts": [first, *record.chain.attempts[1:]]})
    assert attempt_hours(record.model_copy(update={"chain": chain})) is None


@pytest.mark.parametrize(
    ("config", "count", "gpu_type"),
    [
        ({"iris": {"resources": {"gpu": "H100", "gpu_count": 8}}}, 8, "H100"),
        ({"iris": {"resources": {"gpu": "H100", "gpu_count": 8}}, "ray": {"num_nodes": 1}}, 8, "H100"),
        ({"iris": {"resources": {"gpu": "H100", "gpu_count": 8}}, "ray": {"num_nodes": 2}}, None, "H100"),
        ({"iris": {"resources": {"gpu_count": 0}}}, None, None),
        ({"trainer": {"placement": {"colocate_all": True, "policy_num_nodes": 2, "policy_num_gpus_per_node": 8}}}, 16, None),
        ({"trainer": {"placement": {"colocate_all": False, "policy_num_nodes": 2, "policy_num_gpus_per_node": 8}}}, None, None),
        ({"trainer": {"placement": {"colocate_all": "true", "policy_num_nodes": 2, "policy_num_gpus_per_node": 8}}}, None, None),
        ({"skyrl": {"trainer": {"placement": {"colocate_all": True, "policy_num_nodes": 1, "policy_num_gpus_per_node": 4}}}}, 4, None),
        (None, None, None),
    ],
)  # fmt: skip
def test_only_a_stated_total_counts(config: dict | None, count: int | None, gpu_type: str | None) -> None:  # type: ignore[type-arg]
    found = accelerators(config)
    assert (found.count, found.gpu_type) == (count, gpu_type)
