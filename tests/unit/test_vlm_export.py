"""VLM exports (run-layout-v3.md §5): NovaSky SkyRL saves the base model's processor beside a VLM export
(`processor.save_pretrained`: transformers 4's `preprocessor_config.json`, transformers 5's `processor_config.json`);
the tokenizer rule is MarinSkyRL's `validate_portable_hf_model_files` (`tokenizer*` or `*.model`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from layout_support import bare_layout

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.samples.hf_export import write_hf_export
from rlcleanup.steps.validate import validate_candidate

QWEN2_VL_IMAGE_PROCESSOR = {
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_processor_type": "Qwen2VLImageProcessor",
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "max_pixels": 12845056,
    "merge_size": 2,
    "min_pixels": 3136,
    "patch_size": 14,
    "processor_class": "Qwen2_5_VLProcessor",
    "temporal_patch_size": 2,
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@pytest.mark.parametrize(
    ("vision", "processor", "tokenizer", "codes", "warned"),
    [
        # a VLM with its processor, as upstream writes it (tokenizer files from processor.save_pretrained too)
        (True, "preprocessor_config.json", True, [], False),
        (True, "processor_config.json", True, [], False),  # transformers 5's unified processor file
        (True, "chat_template+preprocessor", True, [], False),
        # a VLM that carries its processor but no tokenizer file beside it: loaded through the processor
        (True, "preprocessor_config.json", False, [], True),
        # the processor save failed (upstream logs a warning and goes on): vLLM cannot load it
        (True, None, True, ["missing_processor"], False),
        (True, "unreadable", True, ["invalid_processor_config"], False),
        # text-only exports keep the tokenizer rule
        (False, None, True, [], False),
        (False, None, False, ["missing_tokenizer"], False),
        (False, "preprocessor_config.json", False, ["missing_tokenizer"], False),
        (None, None, True, [], False),  # vision_config: null is text-only (check_is_vlm)
    ],
)
def test_vlm_processor_and_tokenizer(
    tmp_path: Path, vision: bool | None, processor: str | None, tokenizer: bool, codes: list[str], warned: bool
) -> None:
    export = tmp_path / "exports" / "global_step_5" / "policy"
    write_hf_export(export)
    config = json.loads((export / "config.json").read_text())
    if vision is not None:
        config["vision_config"] = {"depth": 2, "hidden_size": 32, "patch_size": 14} if vision else None
    else:
        config["vision_config"] = None
    (export / "config.json").write_text(json.dumps(config))
    if processor == "unreadable":
        (export / "preprocessor_config.json").write_text("{not json")
    elif processor == "chat_template+preprocessor":
        (export / "preprocessor_config.json").write_text(json.dumps(QWEN2_VL_IMAGE_PROCESSOR))
        (export / "chat_template.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    elif processor is not None:
        (export / processor).write_text(json.dumps(QWEN2_VL_IMAGE_PROCESSOR))
    if not tokenizer:
        for name in TOKENIZER_FILES:
            (export / name).unlink()
    candidate = validate_candidate(
        LocalStorage(checksums=False), bare_layout(tmp_path), 5, metric_steps=None, step_budget=None
    )
    assert candidate.problem_codes == codes
    assert any("no tokenizer files beside the VLM processor" in w for w in candidate.warnings) is warned


@pytest.mark.parametrize("name", ["spiece.model", "tokenizer.model", "tokenizer/tokenizer.json", "tokenizer.json"])
def test_tokenizer_files_by_upstreams_rule(tmp_path: Path, name: str) -> None:
    export = tmp_path / "exports" / "global_step_5" / "policy"
    write_hf_export(export)
    for existing in TOKENIZER_FILES:
        (export / existing).unlink()
    (export / name).parent.mkdir(parents=True, exist_ok=True)
    (export / name).write_bytes(b"tok")
    candidate = validate_candidate(
        LocalStorage(checksums=False), bare_layout(tmp_path), 5, metric_steps=None, step_budget=None
    )
    assert "missing_tokenizer" not in candidate.problem_codes
