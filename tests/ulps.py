"""Tolerances that follow the arithmetic: how far two paths to one result may differ in a
precision, in units in the last place of its storage type. Imported by tests anywhere under
tests/ (`from ulps import assert_within_fp16_ulps`), as `half_exports` is."""

from __future__ import annotations

import numpy as np


def fp16_ulps(desired: np.ndarray, roundings: int, *, per_element: bool = False) -> np.ndarray:
    """The tolerance mixed precision gives two paths to one result: `roundings` fp16 spacings
    (ulps, `np.spacing(np.float16(x))`) at the values' magnitude — each value's own with
    `per_element`, else the tensor's largest (a flip upstream moves a value near zero by an
    amount set by its neighbours, not by itself).

    Mixed stores every kernel's output in fp16 and accumulates in float32. Two paths that
    compute the same sums in another float32 order (a window of many rows against one row:
    BLAS's blocking differs) differ by a few float32 ulps before the output's fp16 rounding,
    ~1e-7 relative against fp16's 4.9e-4 half-spacing: the rounding agrees, or lands one fp16
    ulp away where the float32 value lay that close to a rounding boundary. Each such flip is
    one rounding; the caller states how many its path can differ by."""
    top = np.abs(np.asarray(desired, np.float64))
    mag = top if per_element else np.full_like(top, top.max(initial=0.0))
    return roundings * np.spacing(mag.astype(np.float16)).astype(np.float64)


def assert_within_fp16_ulps(
    actual: np.ndarray, desired: np.ndarray, roundings: int, *, per_element: bool = False
) -> None:
    """|actual − desired| ≤ `fp16_ulps(desired, roundings)` everywhere, or an error naming the
    worst element in ulps."""
    bound = fp16_ulps(desired, roundings, per_element=per_element)
    diff = np.abs(np.asarray(actual, np.float64) - np.asarray(desired, np.float64))
    if not (diff <= bound).all():
        worst = int(np.argmax(diff / np.maximum(bound, np.finfo(np.float64).tiny)))
        d, b = diff.reshape(-1)[worst], bound.reshape(-1)[worst]
        raise AssertionError(
            f"differ by {d:.3e} at flat index {worst}: {roundings * d / b:.2f} fp16 ulps where "
            f"{roundings} are allowed"
        )
