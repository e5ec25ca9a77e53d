"""Cost of the export tensor-layout check (formats/checkpoints/tensor_layout.py) per candidate, each case in a fresh
interpreter: the first check of a process (torch + transformers import, the model class, the meta model) and a
second check of the same config (the meta model is cached per config.json), with the process's CPU time, wall time
and peak RSS. Each process starts with an empty verdict cache (layout_verdicts.py), so "first" is a cold process's
cost, and a second process of the same case reads the verdict the first kept on disk (its cost is the last column).
Cases: the tests' tiny Qwen3-MoE (fused and per-expert) and tiny Llama, and real-size name sets
(Qwen3-30B-A3B per-expert: 18,867 names; its fused form; Qwen3-8B dense; Llama-3-70B) built from their configs'
dimensions: only names are read, so a real size costs what its name count costs. Nothing is asserted on time.
Run: .venv/bin/python bench/bench_tensor_layout.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from _common import REPO

CASES = [
    "tiny-qwen3-moe-fused",
    "tiny-qwen3-moe-per-expert",
    "tiny-llama-dense",
    "qwen3-30b-a3b-per-expert",
    "qwen3-30b-a3b-fused",
    "qwen3-8b-dense",
    "llama-3-70b-dense",
]

_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")


def _qwen3(layers: int, hidden: int, heads: int, kv: int, *, experts: int = 0, fused: bool = False) -> Any:
    cfg: dict[str, Any] = {
        "architectures": ["Qwen3MoeForCausalLM" if experts else "Qwen3ForCausalLM"],
        "model_type": "qwen3_moe" if experts else "qwen3",
        "hidden_size": hidden,
        "intermediate_size": 6144 if experts else 12288,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    if experts:
        cfg |= {"moe_intermediate_size": 768, "num_experts": experts, "num_experts_per_tok": 8}
        cfg |= {"decoder_sparse_step": 1, "mlp_only_layers": []}
    names = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    for layer in range(layers):
        p = f"model.layers.{layer}."
        names |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight"}
        names |= {f"{p}self_attn.{n}.weight" for n in (*_ATTN, "q_norm", "k_norm")}
        if not experts:
            names |= {f"{p}mlp.{n}.weight" for n in ("gate_proj", "up_proj", "down_proj")}
        elif fused:
            names |= {p + "mlp.gate.weight"} | {f"{p}mlp.moe.experts.w{i}" for i in (1, 2, 3)}
        else:
            names |= {p + "mlp.gate.weight"}
            names |= {
                f"{p}mlp.experts.{e}.{n}.weight" for e in range(experts) for n in ("gate_proj", "up_proj", "down_proj")
            }
    return cfg, names


def case(name: str) -> tuple[dict[str, Any], set[str]]:
    from rlcleanup.samples import hf_export, large_exports, moe

    if name.startswith("tiny-qwen3-moe"):
        return moe.moe_config(), set(moe.moe_tensors(fused=name.endswith("fused")))
    if name == "tiny-llama-dense":
        return hf_export.model_config(), {n for shard in hf_export.shard_layout() for n, _ in shard}
    if name.startswith("qwen3-30b-a3b"):
        return _qwen3(48, 2048, 32, 4, experts=128, fused=name.endswith("fused"))
    if name == "qwen3-8b-dense":
        return _qwen3(36, 4096, 32, 8)
    return large_exports.llama70b_config(), {n for n, _ in large_exports.llama70b_tensors()}


def child(name: str) -> None:
    import resource
    import time

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    from rlcleanup.formats.checkpoints.tensor_layout import check_tensor_layout

    config, names = case(name)
    c0, w0 = cpu(), time.perf_counter()
    first = check_tensor_layout(config, names)
    c1, w1 = cpu(), time.perf_counter()
    check_tensor_layout(config, names)
    c2, w2 = cpu(), time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = {"case": name, "names": len(names), "checked": first.checked, "missing": len(first.missing)}
    out |= {
        "unexpected": len(first.unexpected),
        "experts": len(first.experts),
        "first_cpu_s": c1 - c0,
        "first_wall_s": w1 - w0,
    }
    out |= {"cached_cpu_s": c2 - c1, "cached_wall_s": w2 - w1, "peak_rss_mb": rss}
    print(json.dumps(out))


def _child_run(name: str, verdicts: str) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, __file__, "--child", name],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "RLCLEANUP_LAYOUT_VERDICTS_DIR": verdicts},
    )
    out: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    print(f"tensor-layout check per candidate, fresh process per case (load {os.getloadavg()[0]:.1f}):")
    print(
        f"  {'case':28} {'names':>6} {'miss':>5} {'unexp':>5}  first: cpu / wall   cached: cpu / wall   peak RSS"
        "   kept by an earlier process: cpu / wall, peak RSS"
    )
    for name in CASES:
        with tempfile.TemporaryDirectory(prefix="bench-layout-") as verdicts:  # none kept by an earlier process
            r = _child_run(name, verdicts)
            kept = _child_run(name, verdicts)  # a second process: the verdict the first one kept
        if not r["checked"]:
            print(f"  {name:28} not checked (the layout-check extra is not installed)")
            continue
        print(
            f"  {name:28} {r['names']:>6} {r['missing']:>5} {r['unexpected']:>5}  "
            f"{r['first_cpu_s']:6.2f} s / {r['first_wall_s']:6.2f} s   {r['cached_cpu_s']:6.3f} s / "
            f"{r['cached_wall_s']:6.3f} s   {r['peak_rss_mb']:.0f} MB   "
            f"{kept['first_cpu_s']:6.3f} s / {kept['first_wall_s']:6.3f} s, {kept['peak_rss_mb']:.0f} MB"
        )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main()
