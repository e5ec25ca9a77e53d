"""The sample-run generator writes realistic, readable, deterministic runs for every scenario."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
from safetensors import SafetensorError, safe_open

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.parsing.attempt_logs import attempt_log_objects, log_order
from rlcleanup.samples.exports_v3 import SCENARIOS_EXPORTS_V3
from rlcleanup.samples.generator import SCENARIOS, write_sample_run
from rlcleanup.samples.rendezvous import SCENARIOS_RDV
from rlcleanup.samples.skyrl_head import SCENARIOS_HEAD
from rlcleanup.samples.v2 import SCENARIOS_V2
from rlcleanup.samples.v3 import SCENARIOS_V3
from rlcleanup.steps.layout import AttemptFiles, discover

SHARDS = [f"model-0000{k}-of-00003.safetensors" for k in (1, 2, 3)]
BROKEN = {
    "missing-shard": (10, "missing"),
    "truncated-shard": (15, "truncated"),
    "index-size-mismatch": (10, "index"),
}
EXPECTED = {  # scenario -> (marker, export steps, attempts)
    "completed-resumed": (20, [5, 10, 15, 20], 2),
    "metrics-late": (20, [5, 10, 15, 20], 2),
    "failed-first-link": (5, [5], 3),
    "completed-budget-plus-one": (21, [5, 10, 15, 20, 21], 2),
    "missing-shard": (20, [5, 10, 15, 20], 1),
    "truncated-shard": (20, [5, 10, 15, 20], 1),
    "index-size-mismatch": (20, [5, 10, 15, 20], 1),
    "legacy-metrics": (20, [5, 10, 15, 20], 2),
    "agentic": (10, [5, 10], 1),
    "selection-policy": (40, [10, 15, 20, 25, 30, 35, 40], 1),
    "vanished-controller": (20, [5, 10, 15, 20], 1),
    "launch-yaml": (20, [5, 10, 15, 20], 1),
    "unknown": (20, [5, 10, 15, 20], 1),
    "partial-checkpoint": (20, [5, 10, 15, 20], 1),
    "many-candidates": (200, list(range(5, 201, 5)), 1),
}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _logs(attempt: AttemptFiles) -> list[str]:
    """The attempt's logs in scan order (discovery names a Marin attempt's log prefix; this lists it)."""
    return log_order(o.uri for o in attempt_log_objects(LocalStorage(checksums=False), attempt))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("samples")
    return {name: write_sample_run(base / name, name) for name in SCENARIOS}


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _header(path: Path) -> tuple[int, dict[str, dict[str, object]]]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return n, json.loads(raw[8 : 8 + n])


def _text(path: Path) -> str:
    return _ANSI.sub("", path.read_text())


def test_scenario_table_is_complete() -> None:
    # The run-layout-v2 scenarios are asserted whole in test_scenarios_v2.py, the issue-34 NovaSky HEAD /
    # budget-from-log ones in test_scenarios_head.py, the v3 export shapes in test_scenarios_exports_v3.py, the other
    # v3 ones in test_layout_d.py and test_model_manifest.py, the rendezvous ones (the cause outside the driver's
    # log) end to end in test_rendezvous_evidence.py.
    expected = set(EXPECTED) | set(SCENARIOS_V2) | set(SCENARIOS_HEAD) | set(SCENARIOS_EXPORTS_V3) | set(SCENARIOS_V3)
    assert set(SCENARIOS) == expected | set(SCENARIOS_RDV)
    with pytest.raises(ValueError):
        write_sample_run(Path("/nonexistent"), "no-such-scenario")


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_layout_discovery_and_expected_files(runs: dict[str, Path], scenario: str) -> None:
    root = runs[scenario]
    marker, exports, n_attempts = EXPECTED[scenario]
    layout = discover(LocalStorage(checksums=False), str(root))
    assert layout.kind == ("C" if scenario == "legacy-metrics" else "A")
    assert layout.marker_step == marker
    assert layout.export_steps == exports
    assert len(layout.attempts) == n_attempts
    assert marker in layout.checkpoint_steps
    assert layout.config.get("trainer") or layout.config.get("skyrl")
    first_log = _text(Path(_logs(layout.attempts[0])[0]))
    assert "No checkpoint found, starting training from scratch" in first_log
    if layout.kind == "A":
        starts = [a.started_at for a in layout.attempts]
        assert None not in starts and starts == sorted(starts)  # type: ignore[type-var]
        assert layout.skyrl["trainer"]["ckpt_path"] == layout.checkpoints_root
        assert (root / ".executor_info").is_file() and (root / ".executor_status").is_file()
        for att in layout.attempts:
            assert re.fullmatch(r"[0-9a-f]{12}", att.attempt_id)
            assert any(u.endswith("/finelog.log") for u in _logs(att))
            assert any(re.search(r"/worker-[0-9a-f-]+\.(out|err)$", u) for u in _logs(att))
        assert isinstance(layout.attempts[0].record["request"]["command"], list)
    else:
        assert all("_ray" not in u for a in layout.attempts for u in _logs(a))
        assert [int(a.attempt_id) for a in layout.attempts] == sorted(int(a.attempt_id) for a in layout.attempts)
        assert "'trainer/global_step': 7}" in first_log and "WANDB_MIRROR" not in first_log


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_exports_are_real_safetensors(runs: dict[str, Path], scenario: str) -> None:
    root = runs[scenario]
    broken_step, how = BROKEN.get(scenario, (None, None))
    for policy in sorted(root.glob("exports/global_step_*/policy")):
        step = int(policy.parent.name.rsplit("_", 1)[1])
        for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
            assert (policy / name).is_file()
        index = json.loads((policy / "model.safetensors.index.json").read_text())
        names: set[str] = set()
        total = 0
        for shard in SHARDS:
            path = policy / shard
            if step == broken_step and how == "missing" and shard == SHARDS[1]:
                assert not path.exists()
                continue
            n, header = _header(path)
            end = max(int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__")  # type: ignore[call-overload]
            if step == broken_step and how == "truncated" and shard == SHARDS[2]:
                assert path.stat().st_size < 8 + n + end
                with pytest.raises(SafetensorError), safe_open(str(path), framework="numpy") as fh:
                    fh.get_slice("lm_head.weight")
                continue
            with safe_open(str(path), framework="numpy") as fh:
                keys = set(fh.keys())
                for key in keys:
                    sl = fh.get_slice(key)
                    assert sl.get_dtype() == "BF16"
                    assert list(sl.get_shape()) == header[key]["shape"]
            names |= keys
            total += end
        if step == broken_step:
            if how == "index":
                assert index["metadata"]["total_size"] != total
            continue
        assert names == set(index["weight_map"])
        assert index["metadata"]["total_size"] == total
        for required in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
            assert required in names
        for i in (0, 1):
            for proj in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"):
                assert f"model.layers.{i}.{proj}.weight" in names
            for proj in ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
                assert f"model.layers.{i}.{proj}.weight" in names
            assert f"model.layers.{i}.input_layernorm.weight" in names
        cfg = json.loads((policy / "config.json").read_text())
        layers, hidden, vocab = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]
        estimate = 12 * layers * hidden**2 + 2 * vocab * hidden
        assert abs(total // 2 - estimate) / estimate < 0.15


def test_broken_exports_are_really_broken(runs: dict[str, Path]) -> None:
    for scenario, (step, how) in BROKEN.items():
        policy = runs[scenario] / "exports" / f"global_step_{step}" / "policy"
        index = json.loads((policy / "model.safetensors.index.json").read_text())
        if how == "missing":
            assert SHARDS[1] in index["weight_map"].values() and not (policy / SHARDS[1]).exists()
        if how == "index":
            n_bytes = sum(p.stat().st_size for p in policy.glob("*.safetensors"))
            assert index["metadata"]["total_size"] < n_bytes // 2


def test_scenario_specifics(runs: dict[str, Path]) -> None:
    failed = runs["failed-first-link"]
    layout = discover(LocalStorage(checksums=False), str(failed))
    errs = [Path(u) for u in _logs(layout.attempts[0]) if u.endswith(".err")]
    oom = [p for p in errs if "torch.OutOfMemoryError: CUDA out of memory" in p.read_text()]
    assert len(oom) == 1
    lines = oom[0].read_text().splitlines()
    pos = next(i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):"))
    assert pos > 0 and any("Watchdog caught collective operation timeout" in x for x in lines[pos:])
    for att in layout.attempts[1:]:
        text = "".join(Path(u).read_text() for u in _logs(att))
        assert "OutOfMemoryError" not in text and "RayActorError" in text
    assert (failed / ".executor_status").read_text().strip() == "FAILED"
    assert json.loads((failed / "terminal.json").read_text())["response"]["failure"]

    resumed = discover(LocalStorage(checksums=False), str(runs["completed-resumed"]))
    second = _text(Path(next(u for u in _logs(resumed.attempts[1]) if u.endswith("finelog.log"))))
    assert "Successfully loaded complete checkpoint state from global_step_10" in second
    assert "WANDB_MIRROR kind=train step=11 " in second and "Training done!" in second
    assert resumed.checkpoint_steps == [15, 20]

    vanished = runs["vanished-controller"]
    assert not (vanished / "terminal.json").exists()
    assert (vanished / ".executor_status").read_text().strip() == "RUNNING"

    tail = discover(LocalStorage(checksums=False), str(runs["completed-budget-plus-one"])).attempts[-1]
    assert "run is already COMPLETE" in _text(Path(next(u for u in _logs(tail) if u.endswith("finelog.log"))))

    partial = discover(LocalStorage(checksums=False), str(runs["partial-checkpoint"]))
    assert partial.checkpoint_steps[-1] == 30
    assert not Path(partial.checkpoint_uri(20), "policy", "model_world_size_2_rank_1.pt").exists()

    agentic = discover(LocalStorage(checksums=False), str(runs["agentic"]))
    assert agentic.skyrl["entrypoint"] == "terminal_bench"
    assert agentic.temp_root and list(Path(agentic.temp_root, "attempts", "trace_jobs").glob("*/result.json"))
    assert discover(LocalStorage(checksums=False), str(runs["launch-yaml"])).config_uri.endswith("launch.yaml")


def test_deterministic(tmp_path: Path) -> None:
    for scenario in ("failed-first-link", "legacy-metrics", "agentic"):
        a = write_sample_run(tmp_path / "a", scenario)
        b = write_sample_run(tmp_path / "b", scenario)
        tree_a = _tree(tmp_path / "a")
        tree_b = {
            k: v.replace(str(tmp_path / "b").encode(), str(tmp_path / "a").encode())
            for k, v in _tree(tmp_path / "b").items()
        }
        assert a.relative_to(tmp_path / "a") == b.relative_to(tmp_path / "b")
        assert tree_a == tree_b


def test_deterministic_same_destination(tmp_path: Path) -> None:
    write_sample_run(tmp_path / "x", "selection-policy")
    first = _tree(tmp_path / "x")
    write_sample_run(tmp_path / "y", "selection-policy")
    write_sample_run(tmp_path / "x", "selection-policy")
    assert _tree(tmp_path / "x") == first


def _rewards(text: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for m in re.finditer(r"WANDB_MIRROR kind=train step=(\d+) metrics=(\{.*\})", text):
        out.setdefault(int(m.group(1)), json.loads(m.group(2))["reward/avg_raw_reward"])
    return out


def test_reward_curves(runs: dict[str, Path]) -> None:
    sel = discover(LocalStorage(checksums=False), str(runs["selection-policy"]))
    rewards = _rewards(_text(Path(next(u for u in _logs(sel.attempts[0]) if u.endswith("finelog.log")))))
    assert sorted(rewards) == list(range(1, 41))
    ema: dict[int, float] = {}
    value = rewards[1]
    for step in range(1, 41):
        value = value + (rewards[step] - value) / 3
        ema[step] = value
    chosen = max(range(10, 41, 5), key=lambda s: ema[s])
    assert chosen == 30 and sel.config["cleanup"]["selection"]["metric"] == "reward/avg_raw_reward"

    res = discover(LocalStorage(checksums=False), str(runs["completed-resumed"]))
    links = [_rewards(_text(Path(next(u for u in _logs(a) if u.endswith("finelog.log"))))) for a in res.attempts]
    assert sorted(links[0]) == list(range(1, 13)) and sorted(links[1]) == list(range(11, 21))
    assert links[0][11] != links[1][11] and links[0][12] != links[1][12]
