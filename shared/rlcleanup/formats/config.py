"""Load the resolved configuration (JSON or YAML) and read dotted keys tolerantly."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import yaml

_MISSING = object()
_INT = re.compile(r"-?[0-9]+")


def parse_int(text: str) -> int | None:
    """ASCII integers only: str.isdigit() admits '¹' and other digits that int() rejects (untrusted input)."""
    text = text.strip()
    return int(text) if len(text) <= 32 and _INT.fullmatch(text) else None


class ConfigError(ValueError):
    pass


def parse_config(data: bytes, name: str) -> dict[str, Any]:
    """Parse by content: JSON first (also valid YAML, but stricter), then YAML. Anything but a mapping is an error."""
    text = data.decode("utf-8", errors="strict")
    try:
        parsed: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{name}: neither JSON nor YAML: {exc}") from exc
    if not isinstance(parsed, dict):
        raise ConfigError(f"{name}: expected a mapping at the top level, got {type(parsed).__name__}")
    return parsed


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def skyrl_section(config: dict[str, Any]) -> dict[str, Any]:
    """launch.yaml nests the SkyRL config under `skyrl`; resolved-skyrl.json is flat. Return the SkyRL part."""
    inner = config.get("skyrl")
    if isinstance(inner, dict) and ("trainer" in inner or "generator" in inner or "data" in inner):
        return inner
    return config


def get(config: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """`get(cfg, "trainer.max_steps")`; also accepts flat keys with dots (Hydra overrides saved verbatim)."""
    if dotted in config:
        return config[dotted]
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def get_int(config: dict[str, Any], dotted: str) -> int | None:
    value = get(config, dotted)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return parse_int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
