"""Load the resolved configuration (JSON or YAML) and read dotted keys tolerantly."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import yaml

from rlcleanup.errors import PermanentError

_MISSING = object()
_INT = re.compile(r"-?[0-9]+")


def parse_int(text: str) -> int | None:
    """ASCII integers only: str.isdigit() admits '¹' and other digits that int() rejects (untrusted input)."""
    text = text.strip()
    return int(text) if len(text) <= 32 and _INT.fullmatch(text) else None


class ConfigError(PermanentError, ValueError):
    """A run configuration that cannot be parsed safely: the run is unreadable (bad input, not a defect)."""

    def __init__(self, message: str) -> None:
        super().__init__("unreadable_run", message)


# Resolved configs nest < 10 deep and are dumped without anchors: deeper nesting or many aliases is hostile
# (a recursion bomb, or a "billion laughs" alias bomb whose expansion explodes in whatever walks it).
MAX_CONFIG_DEPTH = 64
MAX_CONFIG_ALIASES = 64


def _check_yaml_shape(text: str, name: str) -> None:
    """Walk the YAML event stream (iterative: no recursion, nothing built) and refuse bombs before loading."""
    depth = aliases = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_CONFIG_DEPTH:
                raise ConfigError(f"{name}: nested deeper than {MAX_CONFIG_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_CONFIG_ALIASES:
                raise ConfigError(f"{name}: more than {MAX_CONFIG_ALIASES} YAML aliases (an alias bomb?)")


def parse_config(data: bytes, name: str) -> dict[str, Any]:
    """Parse by content: JSON first (also valid YAML, but stricter), then YAML. Anything but a mapping is an error."""
    text = data.decode("utf-8", errors="strict")
    try:
        parsed: Any = json.loads(text)
    except RecursionError as exc:
        raise ConfigError(f"{name}: JSON nested too deeply") from exc
    except json.JSONDecodeError:
        try:
            _check_yaml_shape(text, name)
            parsed = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{name}: neither JSON nor YAML: {exc}") from exc
        except ValueError as exc:  # a YAML scalar its constructor rejects, e.g. the date 2020-02-30
            raise ConfigError(f"{name}: YAML value cannot be read: {exc}") from exc
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


def as_int(value: Any) -> int | None:
    """An integer from an untrusted JSON/YAML value: ints, integral floats, ASCII digit strings; never bools."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return parse_int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def get_int(config: dict[str, Any], dotted: str) -> int | None:
    return as_int(get(config, dotted))
