"""Roles (run-layout-v3.md §7 [PR]): a teacher (on-policy distillation) or an EAGLE draft trainer does not make a run
agentic, and the draft's checkpoints are not policy candidates nor resume points.

Upstream: MarinSkyRL `cloud/iris/protocol.py` @06d8e744c443 (`ModelRoleKind`: policy, reference, critic, rollout,
draft_trainer, teacher; `role_plan.claims[].kind`), `cloud/iris/configs/snowball_opd_math_smoke.yaml` and
`snowball_megatron_online_eagle.yaml` @0a87e8d22765 (`teachers.<name>`, `teacher_routing`,
`generator.speculative_decoding.training`), `marinskyrl/checkpoint_paths.py` @18c335dba3ec
(`DRAFT_CHECKPOINT_SUBDIRECTORY = "drafts"`, `LATEST_DRAFT_FILENAME = "latest.json"`) and the fork's evaluation
entrypoint (the draft trainer's `checkpoint_root = <trainer.ckpt_path>/drafts`, captures under `drafts/captures/`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.models.vocab import ClassificationKind
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.steps.classify import classify
from rlcleanup.steps.layout import discover
from rlcleanup.steps.validate import check_resume_safety

TEACHERS = {
    "math": {
        "source": "local_inference",
        "placement": "pinned",
        "backend": "vllm",
        "evidence": "chosen_token",
        "model": {"path": "open-athena/Snowball-67B-A2B-Math", "revision": "f8c394b378247d213e9b2d4768f13a47c81a41b7"},
        "resources": {"num_nodes": 1, "gpus_per_node": 8, "colocation_group": "teacher_math"},
    }
}
REMOTE_TEACHER = {"code": {"source": "remote_endpoint", "endpoint": "https://teacher.internal/v1", "model": "t"}}
SPECULATIVE = {
    "method": "eagle3",
    "model": {
        "source_uri": "hf://laion/snowball-eagle3-draft",
        "source_identity": "4bdb47c08e5b5190bea3c7a93c3e14470230e469",
    },
    "num_speculative_tokens": 3,
    "training": {"interval_steps": 4, "max_tokens_per_update": 131072, "holdout_fraction": 0.25},
}


def _claim(kind: str, execution: str = "local") -> dict[str, Any]:
    return {"role_id": kind, "kind": kind, "execution": execution, "backend": "vllm", "colocation_group": kind}


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda c: c.update(teachers=TEACHERS), id="local-teacher"),
        pytest.param(lambda c: c.update(teachers=REMOTE_TEACHER), id="remote-teacher"),
        pytest.param(
            lambda c: c.update(
                teachers=TEACHERS, teacher_routing={"opd": {"routes": {"default": {"teacher": "math"}}}}
            ),
            id="teacher-routing",
        ),
        pytest.param(lambda c: c["generator"].update(speculative_decoding=SPECULATIVE), id="eagle-draft-trainer"),
        pytest.param(
            lambda c: c["trainer"]["algorithm"].update(distillation={"objective": "sampled_reverse_kl"}),
            id="distillation",
        ),
    ],
)
def test_teacher_and_draft_roles_stay_standard(tmp_path: Path, edit: Any) -> None:
    root = write_sample_run(tmp_path / "runs", "layout-d")
    config_path = root / "resolved-skyrl.json"
    config = json.loads(config_path.read_text())
    config["trainer"].setdefault("algorithm", {})
    edit(config)
    config_path.write_text(json.dumps(config))
    # The attempts' role plans name the roles too (protocol.py SkyRLRolePlan.claims).
    attempts = root.parents[3] / "tmp" / "ttl=7d" / "skyrl" / "users" / "dlwh" / root.name / "attempts"
    for record_path in attempts.glob("*.json"):
        record = json.loads(record_path.read_text())
        claims = [_claim(k) for k in ("policy", "reference", "rollout", "draft_trainer", "teacher")]
        claims.append(_claim("teacher", "remote") | {"role_id": "teacher-remote"})
        record["request"]["topology"] = {"role_plan": {"claims": claims}}
        record_path.write_text(json.dumps(record))
    storage = LocalStorage(checksums=False)
    decided = classify(storage, discover(storage, str(root)))
    assert decided.kind is ClassificationKind.standard, decided.evidence


def test_draft_checkpoints_are_neither_candidates_nor_resume_points(tmp_path: Path) -> None:
    root = write_sample_run(tmp_path / "runs", "layout-d")
    storage = LocalStorage(checksums=False)
    before = discover(storage, str(root))
    safety_before = check_resume_safety(storage, before)
    drafts = Path(before.checkpoints_root) / "drafts"
    (drafts / "captures" / "offline-step-1").mkdir(parents=True)
    (drafts / "captures" / "offline-step-1" / "rank-0.json").write_text("{}")
    for step in (8, 16):  # accepted draft candidates written by the DraftTrainer
        draft = drafts / f"global_step_{step}"
        draft.mkdir(parents=True)
        (draft / "config.json").write_text(json.dumps({"architectures": ["Eagle3LlamaForCausalLM"]}))
        (draft / "model.safetensors").write_bytes(b"\x00" * 16)
    latest = {"step": 16, "revision": "draft-16", "uri": str(drafts / "global_step_16"), "source_identity": "x" * 40}
    (drafts / "latest.json").write_text(json.dumps(latest))
    after = discover(storage, str(root))
    assert (after.checkpoint_steps, after.export_steps, after.marker_step) == (
        before.checkpoint_steps,
        before.export_steps,
        before.marker_step,
    )
    assert 16 not in after.export_steps and 8 not in after.checkpoint_steps
    safety = check_resume_safety(storage, after)
    assert (safety.safe, safety.from_step, safety.reasons) == (
        safety_before.safe,
        safety_before.from_step,
        safety_before.reasons,
    )
