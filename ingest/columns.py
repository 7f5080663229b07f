"""Arrow arrays built straight from buffers, for the ingest paths where start-up time counts.

`pa.array()` imports pandas on its first call, to check whether its input is a pandas
object. That import takes about 0.2 s, a fifth of ingesting a 120 MB Kineto trace, and a
forked parse worker would pay it again. These builders never call `pa.array()`.
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


def from_list(values: list, type: pa.DataType) -> pa.Array:
    """Python values (None for null) as an Arrow array of `type`: an integer, float, bool,
    string or microsecond timestamp type."""
    valid = np.fromiter((v is not None for v in values), bool, len(values))
    if pa.types.is_string(type):
        return _strings(values, valid)
    if pa.types.is_timestamp(type):
        stamps = np.array([v if isinstance(v, datetime) else None for v in values], "datetime64[us]")
        return pa.Array.from_buffers(type, len(values), [_validity(valid), pa.py_buffer(stamps.view(np.int64))])
    dtype = np.dtype(type.to_pandas_dtype())
    filled = np.fromiter((dtype.type(0) if v is None else v for v in values), dtype, len(values))
    return from_numpy(filled, valid)


def _strings(values: list, valid: np.ndarray) -> pa.Array:
    encoded = [b"" if v is None else v.encode() for v in values]
    lengths = np.fromiter((len(b) for b in encoded), np.int64, len(encoded))
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    large = offsets[-1] > np.iinfo(np.int32).max
    type, offsets = (pa.large_string(), offsets) if large else (pa.string(), offsets.astype(np.int32))
    return pa.Array.from_buffers(type, len(values), [_validity(valid), pa.py_buffer(offsets),
                                                     pa.py_buffer(b"".join(encoded))])
