"""Secret-scan throughput on trainer-shaped logs (issue 13 item 4): the pre-filtered scan against the slow path
(detect-secrets on every line), and that both find the same planted secrets. Prints figures; asserts nothing.

    .venv/bin/python bench/bench_secret_scan.py [MB]   # default 8 MB of log text
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "shared"))

from rlcleanup.authority import secrets as S  # noqa: E402

PLANTED = [
    "export HF_TOKEN=hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "wandb.login(key=" + '"' + "0123456789abcdef" * 2 + "01234567" + '")',
    "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
]
LINES = [
    "(TrainerActor pid=4165) step {i} loss 0.{i} reward/mean 0.51 grad_norm 1.2 INFO trainer.py:412",
    '{{"step": {i}, "policy_loss": 0.31, "reward/mean": 0.52, "timing/generate": 12.4, "num_tokens": 81234}}',
    "2026-11-30 12:00:{s:02d} INFO worker-42c0472f8646b322907322326673c08bac20d53625d1648dfcd5e5b0 started",
    '  File "/opt/skyrl/skyrl_train/trainer.py", line {i}, in train',
    "[vllm] INFO 11-30 12:00:00 metrics.py:341 Avg prompt throughput: 1520.3 tokens/s, GPU KV cache usage: 41.2%",
]


def _text(mb: float) -> str:
    rng = random.Random(13)
    out, size, i = [], 0, 0
    while size < mb * 1e6:
        line = rng.choice(LINES).format(i=i, s=i % 60)
        if i % 50_000 == 7:
            line = PLANTED[(i // 50_000) % len(PLANTED)]
        out.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(out)


def main() -> None:
    mb = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    text = _text(mb)
    t0 = time.perf_counter()
    fast = {(f.line, f.rule) for f in S.scan_string(text, "bench")}
    fast_s = time.perf_counter() - t0
    sample = "\n".join(text.split("\n")[:20_000])  # the slow path on a slice (it is ~1 ms per line)
    t0 = time.perf_counter()
    with S.detect_secrets_session():
        slow = {(i, r) for i, line in enumerate(sample.split("\n"), 1) for r in S._line_findings(line)}
    slow_s = time.perf_counter() - t0
    fast_sample = {(f.line, f.rule) for f in S.scan_string(sample, "bench")}
    print(f"pre-filtered scan: {len(text) / 1e6:.1f} MB in {fast_s:.1f} s = {len(text) / 1e6 / fast_s:.2f} MB/s, "
          f"{len(fast)} findings")  # fmt: skip
    print(
        f"slow path (every line): {len(sample) / 1e6:.2f} MB in {slow_s:.1f} s = {len(sample) / 1e6 / slow_s:.2f} MB/s"
    )
    print(f"same findings on the slice: {slow <= fast_sample} (slow {len(slow)}, fast {len(fast_sample)})")


if __name__ == "__main__":
    main()
