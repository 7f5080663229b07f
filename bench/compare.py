"""Query answers compared across engines (DuckDB, DuckDB over the lake, Spark), floats to 1e-9."""
from __future__ import annotations

import math
from decimal import Decimal


def same_value(a, b) -> bool:
    """Integers equal, floats equal to 1e-9 (NaN equals NaN), everything else equal."""
    if isinstance(a, Decimal) and a == a.to_integral_value():
        a = int(a)
    if isinstance(b, Decimal) and b == b.to_integral_value():
        b = int(b)
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def row_differences(expected: list[tuple], actual: list[tuple]) -> list[str]:
    """What differs between two results, row by row in order; empty when they agree."""
    if len(expected) != len(actual):
        return [f"{len(actual)} rows != {len(expected)}"]
    return [f"row {i}: {tuple(b)} != {tuple(a)}" for i, (a, b) in enumerate(zip(expected, actual))
            if len(a) != len(b) or not all(same_value(x, y) for x, y in zip(a, b))]
