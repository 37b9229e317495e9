"""Unpickle plain containers and numeric numpy arrays from untrusted bytes (CIFAR-10 batches).

A restricted ``find_class`` keeps a pickle from running code, but numpy's own reconstruction
(``ndarray.__setstate__``, ``dtype.__setstate__``) trusts its arguments: a damaged or forged state
crashed the process (a segmentation fault found by ``tests/test_properties.py``). So numpy's
globals are replaced here by stand-ins that only record their arguments; :func:`safe_load` then
builds each array itself with :func:`numpy.frombuffer` after checking dtype, shape and length.
Anything else is a :class:`pickle.UnpicklingError`.
"""

from __future__ import annotations

import math
import pickle
from typing import IO, Any

import numpy as np

DTYPES = frozenset(f"{k}{n}" for k in "iu" for n in (1, 2, 4, 8)) | {"f4", "f8", "b1"}
BYTE_ORDERS = {"|": "|", "<": "<", ">": ">", "=": "=", "": "="}
MAX_DEPTH = 16  # containers nested deeper than a CIFAR batch needs are refused


class _NDArray:
    """Stands for ``numpy.ndarray`` (the first argument of ``_reconstruct``)."""


class _DType:
    """``numpy.dtype(name, align, copy)`` and its state (the byte order is its second entry)."""

    def __init__(self, name: Any, *args: Any):
        self.name, self.order = name, "="

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) > 1:
            order = state[1].decode("latin1") if isinstance(state[1], bytes) else state[1]
            if order not in BYTE_ORDERS:
                raise pickle.UnpicklingError(
                    f"dtype byte order {order!r}: expected one of {sorted(BYTE_ORDERS)}")
            self.order = BYTE_ORDERS[order]

    def resolve(self) -> np.dtype:
        name = self.name.decode("latin1") if isinstance(self.name, bytes) else self.name
        if name not in DTYPES:
            raise pickle.UnpicklingError(f"dtype {name!r} is not a plain numeric type")
        return np.dtype(name).newbyteorder(self.order) if np.dtype(name).itemsize > 1 else np.dtype(name)


def _array(raw: Any, dtype: Any, shape: Any, fortran: bool = False) -> np.ndarray:
    """An array of ``shape`` from the bytes ``raw``, every argument checked."""
    if not isinstance(dtype, _DType):
        raise pickle.UnpicklingError(f"array dtype: expected a numpy dtype, found {type(dtype).__name__}")
    dt = dtype.resolve()
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, tuple) or len(shape) > 8 or not all(
            isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**40 for n in shape):
        raise pickle.UnpicklingError(f"array shape {shape!r}: expected up to 8 non-negative integers")
    if isinstance(raw, str):
        raw = raw.encode("latin1")
    if isinstance(raw, pickle.PickleBuffer):
        raw = raw.raw()
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise pickle.UnpicklingError(f"array data: expected bytes, found {type(raw).__name__}")
    raw = bytes(raw)
    if len(raw) != math.prod(shape) * dt.itemsize:
        raise pickle.UnpicklingError(f"array data of {len(raw)} bytes does not fit shape {shape} of {dt}")
    return np.frombuffer(raw, dtype=dt).reshape(shape, order="F" if fortran else "C").copy()


class _Array:
    """``numpy._core.multiarray._reconstruct(ndarray, ...)``; the array comes with its state."""

    def __init__(self, cls: Any, *args: Any):
        if cls is not _NDArray:
            raise pickle.UnpicklingError("_reconstruct of something other than numpy.ndarray")
        self.array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise pickle.UnpicklingError("array state: expected (version, shape, dtype, fortran, data)")
        shape, dtype, fortran, raw = state[-4:]
        self.array = _array(raw, dtype, shape, bool(fortran))


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: Any = "C") -> np.ndarray:
    """``numpy._core.numeric._frombuffer`` (pickle protocol 5)."""
    return _array(buf, dtype, shape, order == "F")


def _scalar(dtype: Any, raw: Any = b"") -> np.generic:
    """``numpy._core.multiarray.scalar``: one value of ``dtype``."""
    return _array(raw, dtype, ())[()]


def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
    """``_codecs.encode``: how Python 3 writes bytes with pickle protocol 2."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode: expected a str and the latin1 codec")
    return text.encode("latin1")


GLOBALS = {
    **{(f"numpy.{core}.{mod}", name): f for core in ("core", "_core") for mod, name, f in (
        ("multiarray", "_reconstruct", _Array), ("multiarray", "scalar", _scalar),
        ("numeric", "_frombuffer", _frombuffer))},
    ("numpy", "ndarray"): _NDArray,
    ("numpy", "dtype"): _DType,
    ("_codecs", "encode"): _encode,
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = GLOBALS.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return found


def _resolve(obj: Any, depth: int = 0) -> Any:
    """``obj`` with every array stand-in replaced by its array."""
    if depth > MAX_DEPTH:
        raise pickle.UnpicklingError(f"containers nested more than {MAX_DEPTH} deep")
    if isinstance(obj, _Array):
        if obj.array is None:
            raise pickle.UnpicklingError("an array without its state")
        return obj.array
    if isinstance(obj, dict):
        return {k: _resolve(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_resolve(v, depth + 1) for v in obj)
    return obj


def safe_load(fh: IO[bytes]) -> Any:
    """What the pickle in ``fh`` holds, numpy arrays built as described above (Python 2 ``str``
    objects come as ``bytes``). Raises whatever the unpickler raises on damaged bytes."""
    return _resolve(_Unpickler(fh, encoding="bytes").load())
