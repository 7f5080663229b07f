"""Binding: a query's parameter values typed, range-checked and defaulted, as the runner passes them."""
from __future__ import annotations

from typing import Any

from polytrace.queries.catalog.model import INT_RANGE, Param, ParamError, Query

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _coerce(param: Param, value: Any) -> Any:
    if value is None:
        return None
    try:
        typed = _typed(param.type, value)
    except (TypeError, ValueError):
        raise ParamError(f"parameter {param.name!r} must be {param.type}, got {value!r}") from None
    if param.type in INT_RANGE:
        lo, hi = INT_RANGE[param.type]
        if not lo <= typed <= hi:
            raise ParamError(f"parameter {param.name!r} must be between {lo} and {hi}, got {typed}")
        if param.minimum is not None and typed < param.minimum:
            raise ParamError(f"parameter {param.name!r} must be at least {param.minimum}, got {typed}")
    return typed


def _typed(sql_type: str, value: Any) -> Any:
    if sql_type in INT_RANGE:
        return int(value)
    if sql_type == "DOUBLE":
        return float(value)
    if sql_type == "BOOLEAN":
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise ValueError(value)
    return str(value)


def bind(query: Query, values: dict[str, Any]) -> dict[str, Any]:
    """Typed values for every declared parameter, defaults filled in."""
    unknown = sorted(set(values) - {p.name for p in query.params})
    if unknown:
        raise ParamError(f"unknown parameter {unknown[0]!r} for query {query.name!r}")
    bound = {}
    for p in query.params:
        raw = values.get(p.name)
        if raw is None or raw == "":
            if p.required:
                raise ParamError(f"missing required parameter {p.name!r}")
            raw = None if p.default.upper() == "NULL" else p.default
        bound[p.name] = _coerce(p, raw)
    return {k: v for k, v in bound.items() if k in query.used_params}
