"""A tqdm bar redraws with a bare `\\r` and no newline, so the next output lands on its physical line (run-layout-v3.md
§7 [KL]): the stored traceback starts at its header, without the bar text, in every bar wording upstream prints
(NovaSky SkyRL "Training Batches Processed", the MarinSkyRL fork "Training Step Progress")."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.parsing.attempt_logs import scan_attempt
from rlcleanup.parsing.log_scanner import scan_lines
from rlcleanup.ports.storage import ObjectInfo
from rlcleanup.steps.layout import AttemptFiles

FRAMES = [
    '  File "/app/skyrl/train/trainer.py", line 412, in train',
    "    status = self.train_step(batch)",
    '  File "/app/skyrl/train/trainer.py", line 530, in train_step',
    "    loss = self.policy_loss(batch)",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.11 GiB",
]
HEADER = "Traceback (most recent call last):"
BARS = [
    "Training Batches Processed:  45%|████▌     | 9/20 [01:23<01:41,  9.21s/it]",
    "Training Step Progress:  60%|██████    | 12/20 [12:03<08:02, 60.30s/it]",
    "Training Batches Processed:   0%|          | 0/20 [00:00<?, ?it/s]",
]


@pytest.mark.parametrize("bar", BARS)
def test_bar_glued_to_the_header_is_not_stored(bar: str) -> None:
    scan = scan_lines(["step 8 done", bar + HEADER, *FRAMES], "log://w", "a1")
    (error,) = scan.errors
    assert error.traceback.splitlines() == [HEADER, *FRAMES]
    assert (error.line, error.error_type) == (2, "torch.OutOfMemoryError")


def test_chained_header_glued_to_a_bar() -> None:
    lines = [
        HEADER,
        *FRAMES[:2],
        "ValueError: first",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        BARS[0] + HEADER,
        *FRAMES,
    ]
    (error,) = scan_lines(lines, "log://w", "a1").errors
    assert BARS[0] not in error.traceback
    assert error.traceback.count(HEADER) == 2


@pytest.mark.parametrize("bar", BARS)
def test_a_pod_log_with_carriage_return_redraws(tmp_path: Path, bar: str) -> None:
    """The bytes as a pod log holds them: several `\\r` redraws, then the traceback on the bar's line."""
    log = tmp_path / "finelog.log"
    redraws = "".join(f"\r{bar}" for _ in range(3))
    log.write_bytes(("step 8 done\n" + redraws + HEADER + "\n" + "\n".join(FRAMES) + "\n").encode())
    attempt = AttemptFiles(attempt_id="a1", log_objects=[ObjectInfo(uri=str(log), size=log.stat().st_size)])
    (error,) = scan_attempt(LocalStorage(checksums=False), attempt).errors
    assert error.traceback.splitlines() == [HEADER, *FRAMES]
