"""The large-run generator: the planned shape on disk, sparse 70B exports, and the whole pipeline on a CI-sized run."""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlcleanup.cli.main import app
from rlcleanup.formats.checkpoints.hf_safetensors import ESTIMATE_TOLERANCE, estimate_parameters
from rlcleanup.formats.safetensors_header import parse_header
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.large import (
    _NODE_FILES,
    RANKS_PER_NODE,
    SCALES,
    LargeSpec,
    planned_objects,
    write_large_run,
    write_spec,
)
from rlcleanup.samples.large_exports import MODELS, llama70b_tensors, llama_tensors
from rlcleanup.steps.capture import MAX_PART_ITEMS

MEDIUM = SCALES["medium"]


@pytest.fixture(scope="module")
def medium(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("medium")
    return base, write_spec(base, MEDIUM)


def _files(base: Path) -> list[Path]:
    return [p for p in base.rglob("*") if p.is_file()]


def test_object_count_matches_the_plan_and_large_reaches_10k(medium: tuple[Path, Path]) -> None:
    base, _ = medium
    assert len(_files(base)) == planned_objects(MEDIUM)
    assert planned_objects(SCALES["large"]) >= 10_000


def test_logs_are_about_the_requested_size(medium: tuple[Path, Path]) -> None:
    base, _ = medium
    logs = [p for p in _files(base) if "/logs/" in str(p)]
    total = sum(p.stat().st_size for p in logs)
    assert 0.85 * MEDIUM.log_bytes_total <= total <= 1.3 * MEDIUM.log_bytes_total
    workers = [p for p in logs if p.name.startswith("worker-")]
    assert len(workers) == 2 * MEDIUM.ranks * MEDIUM.attempts


def test_exports_are_70b_shaped_and_sparse(medium: tuple[Path, Path]) -> None:
    _, run = medium
    exports = sorted((run / "exports").iterdir())
    assert len(exports) == MEDIUM.exports
    policy = exports[-1] / "policy"
    shards = sorted(policy.glob("*.safetensors"))
    assert len(shards) == 30
    params = 0
    for shard in shards:
        raw = shard.open("rb").read(1 << 20)
        (n,) = struct.unpack("<Q", raw[:8])
        header = parse_header(raw[: 8 + n], shard.stat().st_size)
        assert header.expected_size == shard.stat().st_size  # whole, by the header's own account
        params += header.parameter_count
        assert shard.stat().st_blocks * 512 < 1 << 20  # the data section is a hole
    assert params == sum(math.prod(shape) for _, shape in llama70b_tensors())
    assert 70e9 < params < 71e9
    index = json.loads((policy / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {s.name for s in shards}


def test_pipeline_finds_the_buried_oom_and_completes(medium: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = medium
    record = run_embedded(str(run), db_path=tmp_path / "r.db", preserve_root=str(tmp_path / "p"))
    assert record is not None
    assert record.terminal_state is not None and record.terminal_state.value == "completed"
    # A completed run keeps no failure cause; the reasoning still cites the error it recovered from, file and line,
    # never as the first causal error (issue 44: the reasoning names no cause the field lacks).
    assert record.first_failure_cause is None
    assert not any(r.startswith("First causal error") for r in record.terminal_reasoning)
    cited = next(r for r in record.terminal_reasoning if r.startswith("An error was logged,"))
    assert "it is not the run's failure cause" in cited
    assert "torch.OutOfMemoryError: CUDA out of memory" in cited
    uri, line = re.search(r" at (\S+\.err):(\d+) \(attempt (\w+)\)", cited).group(1, 2)  # type: ignore[union-attr]
    assert "/ray_session_logs/worker-" in uri
    assert int(line) > 500  # deep in the file, past the chatter
    assert f"(attempt {record.chain.attempts[0].attempt_id})" in cited
    assert [c.step for c in record.candidates if c.valid] == [5, 10, 15, 20]
    assert all(c.shard_count == 30 and c.size_label == "71B" for c in record.candidates)
    assert record.resume_safety is not None and record.resume_safety.safe


def _digest(base: Path) -> dict[str, bytes]:
    """Path -> size and first MiB (sparse shards are terabytes long; their holes need not be read)."""
    out = {}
    for p in _files(base):
        with p.open("rb") as fh:
            out[str(p.relative_to(base))] = str(p.stat().st_size).encode() + b":" + fh.read(1 << 20)
    return out


def test_generation_is_deterministic(tmp_path: Path) -> None:
    a = write_large_run(tmp_path / "a", ranks=3, attempts=2, exports=1, log_bytes_total=256 * 1024, shards=2)
    b = write_large_run(tmp_path / "b", ranks=3, attempts=2, exports=1, log_bytes_total=256 * 1024, shards=2)
    tree_a, tree_b = _digest(tmp_path / "a"), _digest(tmp_path / "b")
    assert tree_a.keys() == tree_b.keys()
    differing = [
        k for k in tree_a if tree_a[k] != tree_b[k].replace(str(b.parents[2]).encode(), str(a.parents[2]).encode())
    ]
    assert differing == []


def test_cli_scale_with_overrides(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["sample-run", str(tmp_path), "--scale", "medium", "--ranks", "4", "--exports", "1", "--log-mb", "1"]
    )
    assert result.exit_code == 0, result.output
    run = Path(result.output.strip())
    assert (run / "resolved-skyrl.json").is_file()
    workers = list(run.parents[2].rglob("worker-*.err"))
    assert len(workers) == 4 * MEDIUM.attempts
    bad = CliRunner().invoke(app, ["sample-run", str(tmp_path / "x"), "--scale", "huge"])
    assert bad.exit_code == 2


def test_tiny_model_keeps_the_70b_tensor_list_with_whole_shards(tmp_path: Path) -> None:
    """The `ci` scale's model: same 80-layer tensor names, tiny dimensions, data really written (an in-memory GCS
    emulator cannot hold sparse holes), and a config whose 12·L·H²+2·V·H estimate stays within tolerance."""
    tiny = MODELS["llama-tiny"]
    assert [n for n, _ in llama_tensors(tiny)] == [n for n, _ in llama70b_tensors()]
    run = write_large_run(tmp_path, ranks=4, attempts=2, exports=2, log_bytes_total=256 * 1024, model="llama-tiny")
    spec = LargeSpec(ranks=4, attempts=2, exports=2, log_bytes_total=256 * 1024, model="llama-tiny")
    assert len(_files(tmp_path)) == planned_objects(spec)
    policy = run / "exports" / "global_step_10" / "policy"
    shards = sorted(policy.glob("*.safetensors"))
    assert len(shards) == 30
    params = 0
    for shard in shards:
        raw = shard.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = parse_header(raw[: 8 + n], len(raw))
        assert header.expected_size == len(raw)
        params += header.parameter_count
    assert params == sum(math.prod(shape) for _, shape in llama_tensors(tiny))
    config = json.loads((policy / "config.json").read_text())
    estimate = estimate_parameters(config)
    assert estimate is not None and abs(params - estimate) / params < ESTIMATE_TOLERANCE
    assert sum(s.stat().st_size for s in shards) < 4 * 2**20
    with pytest.raises(ValueError, match="unknown model"):
        write_large_run(tmp_path / "x", ranks=2, attempts=2, exports=1, model="gpt-5")


def test_ci_scale_is_big_but_fits_the_emulator() -> None:
    ci = SCALES["ci"]
    assert ci.model == "llama-tiny" and ci.exports >= 20 and ci.shards >= 30 and ci.attempts >= 3
    per_attempt = 3 * ci.ranks + len(_NODE_FILES) * math.ceil(ci.ranks / RANKS_PER_NODE)
    assert per_attempt > MAX_PART_ITEMS  # each attempt's logs need more than one capture part
    assert ci.log_bytes_total <= 32 * 2**20 and planned_objects(ci) < 2500


def test_cli_ci_scale(tmp_path: Path) -> None:
    args = ["sample-run", str(tmp_path), "--scale", "ci", "--ranks", "2", "--exports", "1", "--log-mb", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    run = Path(result.output.strip())
    config = json.loads((run / "exports" / "global_step_5" / "policy" / "config.json").read_text())
    assert config["hidden_size"] == MODELS["llama-tiny"].hidden and config["num_hidden_layers"] == 80
