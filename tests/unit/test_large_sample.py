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
from rlcleanup.formats.safetensors_header import parse_header
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.large import SCALES, llama70b_tensors, planned_objects, write_large_run, write_spec

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
    # A completed run keeps no failure cause; the reasoning still cites the first causal error, file and line.
    cited = next(r for r in record.terminal_reasoning if r.startswith("First causal error:"))
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
