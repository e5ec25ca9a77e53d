"""Python dict literals as a training log prints them (the legacy and console metric blocks): `ast.literal_eval`
plus `nan`/`inf` and numpy/torch scalar reprs, never evaluating anything else."""

from __future__ import annotations

import ast
import math
from typing import Any

_NAMED_CONSTANTS = {"nan": math.nan, "NaN": math.nan, "inf": math.inf, "Infinity": math.inf, "None": None}
_SCALAR_WRAPPERS = {"float64", "float32", "float16", "bfloat16", "int64", "int32", "float", "int", "tensor", "array"}


def _literal(node: ast.AST) -> Any:
    """ast.literal_eval plus `nan`/`inf` and numpy/torch scalar reprs (`np.float64(0.5)`, `tensor(0.5)`)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _literal(node.operand)
        if isinstance(operand, int | float) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Name) and node.id in _NAMED_CONSTANTS:
        return _NAMED_CONSTANTS[node.id]
    if isinstance(node, ast.Call) and len(node.args) == 1:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in _SCALAR_WRAPPERS:
            return _literal(node.args[0])
    raise ValueError(f"not a literal: {type(node).__name__}")


def parse_dict_literal(text: str) -> dict[Any, Any] | None:
    """A Python dict literal, or None for anything else (never raises)."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
        value = _literal(tree.body)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None
    return value if isinstance(value, dict) else None
