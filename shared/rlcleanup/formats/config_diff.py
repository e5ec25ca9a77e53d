"""Hydra-aware configuration diff: two resolved configurations compared key by key, never as text.

A run's SkyRL configuration (`RunLayout.skyrl`: a resolved YAML/JSON, a launch.yaml's `skyrl`, or resolved-skyrl.json's
`hydra_args` composed by `formats/hydra_overrides.py`) is loaded into OmegaConf, its interpolations resolved (a
`${trainer.micro_train_batch_size_per_gpu}` elsewhere compares as the value it stands for), and flattened to the
dotted keys Hydra overrides use (`trainer.micro_train_batch_size_per_gpu`). A list is one value, as a Hydra override
sets it whole. Values are kept as canonical JSON text, so `8` and `8.0` differ but key order and YAML quoting do not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MAX_FLAT_KEYS = 4096  # a SkyRL configuration has a few hundred keys; more is not a configuration
MAX_VALUE_CHARS = 2000  # a long prompt template compares by its first characters and its length


def _resolved(config: Mapping[str, Any]) -> Any:
    """The configuration with its interpolations resolved; as written when one cannot be (a missing key)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        node = OmegaConf.create(dict(config))
    except (OmegaConfBaseException, ValueError, TypeError):
        return dict(config)
    try:
        return OmegaConf.to_container(node, resolve=True)
    except OmegaConfBaseException:
        return OmegaConf.to_container(node, resolve=False)


def _text(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return text if len(text) <= MAX_VALUE_CHARS else f"{text[:MAX_VALUE_CHARS]}… ({len(text)} chars)"


def flatten_config(config: Mapping[str, Any]) -> dict[str, str]:
    """Dotted key → canonical JSON text of its value, for every leaf (at most MAX_FLAT_KEYS keys)."""
    flat: dict[str, str] = {}
    stack: list[tuple[str, Any]] = [("", _resolved(config))]
    while stack and len(flat) < MAX_FLAT_KEYS:
        prefix, node = stack.pop()
        if isinstance(node, Mapping) and node:
            stack.extend((f"{prefix}.{key}" if prefix else str(key), value) for key, value in node.items())
        elif prefix:
            flat[prefix] = _text(node)
    return dict(sorted(flat.items()))


def diff_flat(before: Mapping[str, str], after: Mapping[str, str]) -> list[tuple[str, str | None, str | None]]:
    """(key, value before, value after) for every key whose value differs, sorted by key; None: absent."""
    keys = sorted(set(before) | set(after))
    return [(k, before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)]
