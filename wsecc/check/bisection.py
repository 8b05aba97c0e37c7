"""Bisection over the integers, for the monotone searches of sizing, lanes and the ISPD 2020
solver (the least stage time at which something fits)."""

from __future__ import annotations

from collections.abc import Callable


def least_true(pred: Callable[[int], bool], lo: int, hi: int) -> int:
    """The least integer x in (lo, hi] with pred(x), for pred monotone (false, then true),
    given pred(hi) true and pred(lo) false (not evaluated). Bisection: log2(hi - lo) calls."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi
