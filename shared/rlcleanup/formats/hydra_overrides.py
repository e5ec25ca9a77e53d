"""Hydra override strings (`trainer.max_steps=100`, `++trainer.max_ckpts_to_keep=2`, `~trainer.x`) composed into a
nested mapping with Hydra's own grammar, never a hand-written split on `=`.

Upstream reads `resolved-skyrl.json` the same way: MarinSkyRL `cloud/iris/training_result.py` and
`cloud/iris/export_job.py` run `OverridesParser.create().parse_overrides(resolved["hydra_args"])` and take
`override.key_or_group` / `override.value()`. The trainer then applies the same overrides on top of SkyRL's
`ppo_base_config.yaml`; rlcleanup does not have that base, so the composed mapping holds only what the run set and
every reader must treat an absent key as "the SkyRL default" (run-layout-v2.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_OVERRIDES = 4096  # a real launch passes < 200; more is hostile input, not a run
MAX_OVERRIDE_CHARS = 64 * 1024


@dataclass
class ComposedOverrides:
    config: dict[str, Any] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)  # the override strings that set or deleted a key
    deleted: list[str] = field(default_factory=list)  # dotted keys removed by `~key`
    problems: list[str] = field(default_factory=list)  # unparseable, sweeps, oversize: named, then skipped


def _set(node: dict[str, Any], dotted: str, value: Any) -> bool:
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child  # a later `a.b=...` replaces a scalar `a=...`, as OmegaConf.update does
        node = child
    node[parts[-1]] = value
    return True


def _delete(node: dict[str, Any], dotted: str) -> bool:
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            return False
        node = child
    return node.pop(parts[-1], _MISSING) is not _MISSING


_MISSING = object()


def compose_overrides(hydra_args: list[Any], base: dict[str, Any] | None = None) -> ComposedOverrides:
    """Apply each override in order onto a copy of `base` (Hydra applies them left to right; the last one wins).

    Parsed one by one, so one malformed string is reported and the rest still apply.
    """
    # Imported here: hydra pulls in antlr4 and omegaconf (about 0.2 s), and only config reading needs it.
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    out = ComposedOverrides(config=_deep_copy(base or {}))
    if len(hydra_args) > MAX_OVERRIDES:
        out.problems.append(f"{len(hydra_args)} hydra_args: only the first {MAX_OVERRIDES} were read")
    parser = OverridesParser.create()
    for raw in hydra_args[:MAX_OVERRIDES]:
        if not isinstance(raw, str):
            out.problems.append(f"hydra_args entry {raw!r} is not a string; skipped")
            continue
        if len(raw) > MAX_OVERRIDE_CHARS:
            out.problems.append(f"hydra_args entry of {len(raw)} characters (starts {raw[:60]!r}); skipped")
            continue
        try:
            (override,) = parser.parse_overrides([raw])
        except (HydraException, ValueError) as exc:
            out.problems.append(f"hydra_args entry {raw!r} does not parse as a Hydra override: {exc}")
            continue
        key = override.key_or_group
        if override.is_delete():
            if _delete(out.config, key):
                out.deleted.append(key)
            out.applied.append(raw)
            continue
        if override.is_sweep_override():
            out.problems.append(f"hydra_args entry {raw!r} is a sweep (a multirun choice), not one value; skipped")
            continue
        try:
            value = override.value()
        except (HydraException, ValueError) as exc:
            out.problems.append(f"hydra_args entry {raw!r} has no single value: {exc}")
            continue
        _set(out.config, key, _plain(value))
        out.applied.append(raw)
    return out


def _plain(value: Any) -> Any:
    """Hydra returns lists and dicts of its own node types only for sweeps; plain containers pass through."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _deep_copy(node: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in node.items()}
