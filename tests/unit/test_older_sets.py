"""Issue 34 item 6: what the older held-out sets still read wrong, each case built from upstream's behaviour.

(a) a protocol-v2 checkpoint whose trainer state is not the one its receipt digested is not safe to resume from;
(c) a Megatron async save whose marker was written before metadata.json is not the last saved checkpoint;
(d) a fused-MoE export whose config's model_type cannot build its declared MoE class is checked, not skipped;
(e) a client connection error in chatter is not the first cause when a later error in the attempt ended it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.parsing.attempt_logs import scan_attempt
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.steps.first_cause import find_first_error
from rlcleanup.steps.layout import AttemptFiles, discover
from rlcleanup.steps.validate import check_resume_safety

STORAGE = LocalStorage(checksums=False)


# -- (c) Megatron async save -----------------------------------------------------------------------------------


def test_an_unfinished_megatron_save_named_by_the_marker_is_not_saved(tmp_path: Path) -> None:
    """Megatron-LM serialization.save: metadata.json is an async request's finalize step; SkyRL writes the marker
    after scheduling it. The sample's final save (step 20) lacks metadata.json; 15 finished."""
    run = write_sample_run(tmp_path, "megatron-checkpoint")
    layout = discover(STORAGE, str(run))
    assert (layout.marker_step, layout.unfinished_save, layout.last_saved_step) == (20, 20, 15)
    # The async write lands later (metadata.json written): the marker's save is the last saved one again.
    finished = Path(layout.checkpoint_uri(15)) / "policy" / "metadata.json"
    (Path(layout.checkpoint_uri(20)) / "policy" / "metadata.json").write_bytes(finished.read_bytes())
    layout = discover(STORAGE, str(run))
    assert (layout.marker_step, layout.unfinished_save, layout.last_saved_step) == (20, None, 20)
    # No finished save at all: nothing is saved.
    for step in layout.checkpoint_steps:
        (Path(layout.checkpoint_uri(step)) / "policy" / "metadata.json").unlink()
    layout = discover(STORAGE, str(run))
    assert (layout.unfinished_save, layout.last_saved_step) == (20, None)


def test_an_fsdp_marker_is_the_last_saved_step_without_extra_reads(tmp_path: Path) -> None:
    layout = discover(STORAGE, str(write_sample_run(tmp_path, "protocol-v2")))
    assert (layout.unfinished_save, layout.last_saved_step) == (None, layout.marker_step)


# -- (d) fused-MoE names against a declared architecture its model_type cannot build --------------------------


@pytest.mark.parametrize("fused", [True, False])
def test_moe_names_over_a_dense_model_type_do_not_read_valid(fused: bool) -> None:
    """`architectures: [Qwen3MoeForCausalLM]` over `model_type: qwen3`: transformers cannot build the declared class
    from that config (the check used to skip, so the export read valid), and AutoModelForCausalLM.from_pretrained
    builds the dense Qwen3ForCausalLM the type names, whose meta model declares no experts: the expert tensors
    are unexpected and the dense MLP missing."""
    from rlcleanup.formats.checkpoints.tensor_layout import check_tensor_layout
    from rlcleanup.samples.moe import moe_config, moe_tensors

    report = check_tensor_layout(dict(moe_config(), model_type="qwen3"), set(moe_tensors(fused=fused)))
    assert report.checked and report.mismatch, report
    assert report.architecture == (
        "Qwen3MoeForCausalLM (not buildable from model_type 'qwen3'; loaded as Qwen3ForCausalLM)"
    )
    assert "model.layers.0.mlp.gate_proj.weight" in report.missing
    assert "model.layers.0.mlp.gate.weight" in report.unexpected


# -- (a) protocol v2: the trainer-state digest ------------------------------------------------------------------


@pytest.mark.parametrize("tamper", ["same_size_other_bytes", "resized", "deleted"])
def test_a_checkpoint_that_is_not_the_receipts_is_not_resume_safe(tmp_path: Path, tamper: str) -> None:
    """MarinSkyRL training_result.validate_native_checkpoint: exact sizes and sha256(trainer_state.pt) must match."""
    run = write_sample_run(tmp_path, "protocol-v2")
    layout = discover(STORAGE, str(run))
    assert check_resume_safety(STORAGE, layout).safe  # as written: the receipt's checkpoint
    state = Path(layout.checkpoint_uri(20)) / "trainer_state.pt"
    data = state.read_bytes()
    if tamper == "same_size_other_bytes":
        state.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    elif tamper == "resized":
        state.write_bytes(data + b"\0")
    else:
        (Path(layout.checkpoint_uri(20)) / "data.pt").unlink()
    resume = check_resume_safety(STORAGE, discover(STORAGE, str(run)))
    assert not resume.safe and resume.from_step is None
    codes = [r.split(":", 1)[0] for r in resume.reasons]
    assert "receipt_mismatch" in codes, resume.reasons
    mismatches = [r for r in resume.reasons if r.startswith("receipt_mismatch")]
    expected = {
        "same_size_other_bytes": "sha256(trainer_state.pt) differs from the receipt",
        "resized": "checkpoint file(s) changed size: trainer_state.pt",
        "deleted": "1 checkpoint file(s) missing: data.pt",
    }[tamper]
    assert any(expected in why for why in mismatches), mismatches
    assert all("(training receipt " in why for why in mismatches)


# NovaSky-AI/SkyRL@a956457 skyrl/backends/skyrl_train/inference_servers/remote_inference_client.py retries a POST on
# aiohttp.ServerDisconnectedError / ClientOSError; a worker logging the exception it retried prints this chatter.
_RETRIED = [
    "2026-11-30 10:02:11,004 WARNING remote_inference_client.py:341 -- POST retry 1/3 failed",
    "Traceback (most recent call last):",
    '  File "/app/skyrl/backends/skyrl_train/inference_servers/remote_inference_client.py", line 318, in _post',
    "    async with session.post(url, json=payload) as resp:",
    "aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host 10.0.3.7:8001 ssl:default "
    "[Connect call failed ('10.0.3.7', 8001)]",
    "2026-11-30 10:02:12,010 INFO trainer.py:512 -- Started: 'step'",
]
_STEPS = [f"2026-11-30 10:0{3 + s}:00,000 INFO trainer.py:540 -- global_step {s} done" for s in range(3)]
_OOM = [
    "2026-11-30 10:09:41,552 ERROR worker.py:88 -- policy forward failed",
    "Traceback (most recent call last):",
    '  File "/app/skyrl/backends/skyrl_train/workers/worker.py", line 402, in forward',
    "    output = self.model(**batch)",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
    "79.11 GiB of which 1.02 GiB is free.",
]


def _attempt(tmp_path: Path, files: dict[str, list[str]]) -> AttemptFiles:
    logs = tmp_path / "a1" / "logs"
    logs.mkdir(parents=True)
    for name, lines in files.items():
        (logs / name).write_text("\n".join(lines) + "\n")
    return AttemptFiles(attempt_id="a1", log_prefix=str(logs))


def test_a_retried_connection_error_yields_to_the_later_oom_in_the_same_file(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path, {"finelog.log": [*_RETRIED, *_STEPS, *_OOM]})
    first = find_first_error([scan_attempt(STORAGE, attempt)])
    assert first is not None and first.causal
    assert first.candidate.error_type == "torch.OutOfMemoryError"


def test_a_retried_connection_error_yields_to_a_later_oom_in_a_worker_log(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path, {"finelog.log": [*_RETRIED, *_STEPS], "worker-policy-0.err": _OOM})
    scan = scan_attempt(STORAGE, attempt)
    first = find_first_error([scan])
    assert first is not None and (first.causal, first.candidate.error_type) == (True, "torch.OutOfMemoryError")
    (retried,) = [e for e in scan.errors if e.error_type.endswith("ClientConnectorError")]
    assert (retried.causal, retried.noise) == (False, "client_connection")


def test_a_connection_error_with_nothing_after_it_stays_the_cause(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path, {"finelog.log": [*_STEPS, *_RETRIED]})
    first = find_first_error([scan_attempt(STORAGE, attempt)])
    assert first is not None and first.causal
    assert first.candidate.error_type == "aiohttp.client_exceptions.ClientConnectorError"
