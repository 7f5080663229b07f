"""polytrace.columns builds the same Arrow arrays pa.array does, without importing pandas."""
from __future__ import annotations

import subprocess
import sys
from datetime import datetime

import numpy as np
import pyarrow as pa
import pytest

from polytrace.columns import from_list, from_numpy

CASES = [
    ([1, None, 3], pa.int32()),
    ([2**40, -1], pa.int64()),
    ([True, None, False], pa.bool_()),
    ([1.5, None, 2], pa.float64()),
    (["a", None, "üñï", ""], pa.string()),
    (["plain", "ascii"], pa.string()),
    ([], pa.string()),
    ([None, None], pa.int32()),
    ([datetime(2026, 11, 30, 5, 20, 1, 7), None], pa.timestamp("us")),
]


@pytest.mark.parametrize("values, type", CASES)
def test_lists_match_pa_array(values, type):
    built = from_list(values, type)
    assert built.type == type
    assert built.equals(pa.array(values, type))


def test_numpy_arrays_with_nulls_and_narrowing():
    assert from_numpy(np.array([4, 5, 6], np.int32), np.array([True, False, True])).to_pylist() == [4, None, 6]
    assert from_numpy(np.array([True, False])).to_pylist() == [True, False]
    assert from_list(np.array([7, 8], np.int64), pa.int32()).equals(pa.array([7, 8], pa.int32()))
    with pytest.raises(OverflowError):
        from_list(np.array([2**31], np.int64), pa.int32())
    with pytest.raises(OverflowError):
        from_list([2**31], pa.int32())


def test_no_pandas_import():
    code = ("import sys, pyarrow as pa; from polytrace.columns import from_list; "
            "from_list(['x', None], pa.string()); from_list([1, 2], pa.int32()); "
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
