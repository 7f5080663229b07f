"""Arrow arrays built straight from numpy arrays and Python lists, for every table written to the store.

`pa.array()` imports pandas on its first call, to check whether its input is a pandas
object. That import takes about 0.2 s, a fifth of ingesting a 120 MB Kineto trace, and
each forked parse worker would pay it again. These builders never call `pa.array()`, and
convert lists as fast as it does.
"""
from __future__ import annotations

from datetime import datetime

import numpy as np
import pyarrow as pa


def _validity(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def from_numpy(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A 1-d numpy array of numbers or bools as an Arrow array; `valid` False marks nulls."""
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), len(values), [_validity(valid), data])
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values),
                                 [_validity(valid), pa.py_buffer(values)])


def from_list(values, type: pa.DataType) -> pa.Array:
    """Python values (None for null) or a numpy array as an Arrow array of `type`: an integer,
    float, bool, string or microsecond timestamp type. OverflowError for an integer `type`
    cannot hold."""
    if isinstance(values, np.ndarray):
        return from_numpy(_narrowed(values, np.dtype(type.to_pandas_dtype())))
    valid = None if None not in values else np.fromiter((v is not None for v in values), bool, len(values))
    if pa.types.is_string(type):
        return _strings(values, valid)
    if pa.types.is_timestamp(type):
        stamps = np.array([v if isinstance(v, datetime) else None for v in values], "datetime64[us]")
        return pa.Array.from_buffers(type, len(values), [_validity(valid), pa.py_buffer(stamps.view(np.int64))])
    dtype = np.dtype(type.to_pandas_dtype())
    if valid is None:
        return from_numpy(np.array(values, dtype))
    filled = np.fromiter((dtype.type(0) if v is None else v for v in values), dtype, len(values))
    return from_numpy(filled, valid)


def _narrowed(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu" and values.dtype.kind in "iu" and values.size:
        info = np.iinfo(dtype)
        if values.min() < info.min or values.max() > info.max:
            raise OverflowError(f"a value is out of the {dtype} range")
    return values.astype(dtype, copy=False)


def _strings(values: list, valid: np.ndarray | None) -> pa.Array:
    if valid is not None:
        values = ["" if v is None else v for v in values]
    data = "".join(values).encode()
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    if len(data) != lengths.sum():  # some are not ASCII: count their UTF-8 bytes
        lengths = np.fromiter((len(v.encode()) for v in values), np.int64, len(values))
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    large = offsets[-1] > np.iinfo(np.int32).max
    type, offsets = (pa.large_string(), offsets) if large else (pa.string(), offsets.astype(np.int32))
    return pa.Array.from_buffers(type, len(values), [_validity(valid), pa.py_buffer(offsets), pa.py_buffer(data)])
