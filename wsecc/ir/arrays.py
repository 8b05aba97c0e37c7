"""Constant data compared, hashed and laid out without copying a uniform array.

A uniform array has every stride 0: one element of memory, shown at its full shape (what
`np.broadcast_to` gives). That is how a weight without data is held (`wsecc compile --weights
inputs`: `placeholder`), so a 20B-parameter model costs bytes, not gigabytes. The helpers below
keep it so — `np.ascontiguousarray`, `np.array_equal` or `.tobytes()` would allocate it in
full — and give every other array exactly what the numpy calls they replace give."""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

import numpy as np

T = TypeVar("T")

FOLD_MAX_BYTES = 1 << 28
"""The largest constant a fold makes (256 MiB): a node whose output would be larger stays a node.
Shape arithmetic is far smaller; what is larger is data the bound sequence makes, such as a
causal mask [1, 1, S, S] from two position ranges (GPT-2 13B at seq 51200: 2.6 GB as bool,
21 GB as the int64 ranges broadcast against each other), which the attention fusion reads
a block of rows at a time and the wafer never holds."""


def foldable_size(shape: tuple[int, ...], itemsize: int) -> bool:
    """Whether a constant of `shape` is small enough to make (`FOLD_MAX_BYTES`)."""
    n = 1
    for d in shape:
        n *= d
    return n * itemsize <= FOLD_MAX_BYTES


def is_uniform(a: np.ndarray) -> bool:
    """Every element is the same stored one (all strides 0)."""
    return a.size > 1 and all(s == 0 for s in a.strides)


def placeholder(dtype: np.dtype, shape: tuple[int, ...], tag: int) -> np.ndarray:
    """A read-only uniform array of `shape` whose every element is `tag + 1`.

    Weights without data get distinct tags, so no two of them compare equal: sharing identical
    constants (canonicalize), a tied head (`fuse-lm-head`) and the parameter count see each
    weight as itself, as they would see real weights. Not 0 or 1: a zero bias or a unit scale
    is what value-dependent rewrites drop. Integers, exact in the dtype, far apart for the
    fusions that recover a vector by fitting it (`fuse-layernorm`)."""
    value = np.array(tag + 1, dtype)
    if int(value) != tag + 1:
        raise ValueError(f"{np.dtype(dtype)} holds no exact tag {tag + 1}: too many weights")
    return np.broadcast_to(value, shape)


def content_key(a: np.ndarray) -> tuple[str, tuple[int, ...], str]:
    """(dtype, shape, digest of the elements): equal keys mean equal arrays. A uniform array
    is keyed by its one element, so a dense copy of it gets another key (it is not shared with
    it: a missed saving, never a wrong merge)."""
    if is_uniform(a):
        return str(a.dtype), a.shape, "uniform " + a.reshape(-1)[:1].tobytes().hex()
    # hashed in place: a contiguous array is a buffer (`.tobytes()` would copy every weight)
    return str(a.dtype), a.shape, hashlib.sha1(np.ascontiguousarray(a).data).hexdigest()


class FirstOfContent(Generic[T]):
    """Each array's first holder: `first(item, a)` is the item first given with an array whose
    `content_key` equals a's, else `item` (which becomes the first of its content).

    The same answers as a dictionary keyed by `content_key`, without hashing every array: a's
    key is taken only when an array seen before agrees with it on dtype, shape, uniformity and a
    few of its elements (`_sample`). Weights differ there, so a model's weights are not read in
    full to find that no two are the same (GPT-2 small's 500 MB: a third of a second)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[Hashable, ...], list[list[Any]]] = {}  # [item, array, key]

    def first(self, item: T, a: np.ndarray) -> T:
        entries = self._seen.setdefault(_sample(a), [])
        if not entries:
            entries.append([item, a, None])
            return item
        key = content_key(a)
        for entry in entries:
            if entry[2] is None:
                entry[2] = content_key(entry[1])
            if entry[2] == key:
                return entry[0]
        entries.append([item, a, key])
        return item


_SAMPLED = 8  # elements from each end of an array that `_sample` reads


def _sample(a: np.ndarray) -> tuple[Hashable, ...]:
    """What two arrays of equal `content_key` share, cheap to take: dtype, shape, whether uniform,
    and the bytes of the first and last `_SAMPLED` elements in row-major order (a uniform array:
    its one element)."""
    if is_uniform(a):
        return (str(a.dtype), a.shape, True, a.reshape(-1)[:1].tobytes())
    n = a.size
    at = np.unique(np.r_[0 : min(n, _SAMPLED), max(0, n - _SAMPLED) : n])
    return (str(a.dtype), a.shape, False, np.ascontiguousarray(a.flat[at]).tobytes())


def same_data(a: np.ndarray, b: np.ndarray) -> bool:
    """`np.array_equal(a, b)`, without expanding uniform arrays."""
    if a.shape != b.shape:
        return False
    if is_uniform(b):
        a, b = b, a
    if not is_uniform(a):
        return bool(np.array_equal(a, b))
    one = a.reshape(-1)[0]  # compared with the uniform array's one element
    return bool(b.reshape(-1)[0] == one) if is_uniform(b) else bool(np.all(b == one))


def all_equal(a: np.ndarray) -> bool:
    """Whether `a` has elements and every one equals the first (a fill; NaN equals nothing),
    a uniform array compared at its one stored element, without being expanded."""
    if a.size == 0:
        return False
    first = a.reshape(-1)[0]
    return bool(first == first) if is_uniform(a) else bool(np.all(a == first))


def dense(a: np.ndarray) -> np.ndarray:
    """`np.ascontiguousarray(a)`, except that a uniform array stays one element."""
    return a if is_uniform(a) else np.ascontiguousarray(a)
