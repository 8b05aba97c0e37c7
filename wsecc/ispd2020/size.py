"""Sizing: for a target Δt, the rectangles each kernel can take with time ≤ Δt and memory ≤ memlimit.

Search space. Only *ceil-breakpoints* matter: for a dimension n, any p' with the same ceil(n/p')
as a smaller p' costs more area and buys nothing, so h' ranges over {ceil(H/q) : q = 1..H} (about
2·√H values; for a cblock, the union over its convs' H). For a kernel whose convs share h', w'
(a conv is a one-conv block) the shape is

    height = h'·w'·(max_i c_i' + 1),     width = 3·Σ_i k_i'.

Fix (h', w') and a cap c on the c_i': every conv then takes c_i' = min(c, C_i) (larger c' only
lowers time and memory, and the height already pays for c), and its smallest k_i' follows in
closed form from the two constraints

    time ≤ Δt   ⇔  ceil(K/k') ≤ m = floor(Δt·T·U / (ceil(H/h')·ceil(W/w')·ceil(C/c')·R·S))
                ⇔  k' ≥ ceil(K/m)
    mem  ≤ L    ⇔  k' ≥ ceil( K·(C·R·S·h'w' + (W+S−1)(H+R−1)·c') / (L·c'·h'w') ).

So one vectorised pass over (h', w', c) — a few 10⁴ points — gives, for every height, the least
width: the exact (height, width) Pareto frontier of the kernel at that Δt. `min area` is the least
height·width on it. The area lower bound on Δt is the smallest Δt with Σ_kernels min area ≤ W·H.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from wsecc.ispd2020.perf import ExecParams, KernelSpec


@dataclass(frozen=True)
class SizedShape:
    """One parameter choice of a kernel on the (height, width) Pareto frontier."""

    params: ExecParams
    height: int
    width: int
    time: int

    @property
    def area(self) -> int:
        return self.height * self.width


def breakpoints(n: int) -> np.ndarray:
    """{ceil(n/q) : q = 1..n}, ascending: the least p' for every value of ceil(n/p')."""
    q = np.arange(1, n + 1, dtype=np.int64)
    return np.unique(-(-n // q))


def _cdiv(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    return -(-np.asarray(a) // b)


def frontier(
    spec: KernelSpec, dt: int, memlimit: int, fabric: tuple[int, int]
) -> tuple[SizedShape, ...]:
    """All non-dominated (height, width) shapes of `spec` with time ≤ dt, memory ≤ memlimit,
    fitting the `fabric` (width, height) in R0 or R90; sorted by height ascending (width
    descending). Empty if the kernel cannot meet dt."""
    convs = spec.convs
    hs = np.unique(np.concatenate([breakpoints(c.H) for c in convs]))
    ws = np.unique(np.concatenate([breakpoints(c.W) for c in convs]))
    caps = np.unique(np.concatenate([breakpoints(c.C) for c in convs]))
    hs, ws = hs[hs <= spec.H], ws[ws <= spec.W]
    h, w, cap = (a.ravel() for a in np.meshgrid(hs, ws, caps, indexing="ij"))
    hw = h * w
    ok = np.ones(h.shape, dtype=bool)
    width = np.zeros(h.shape, dtype=np.int64)
    cs, ks = [], []
    for conv in convs:
        c = np.minimum(cap, conv.C)
        q = _cdiv(conv.H, h) * _cdiv(conv.W, w) * _cdiv(conv.C, c) * conv.R * conv.S
        m = (dt * conv.T * conv.U) // q
        act = (conv.W + conv.S - 1) * (conv.H + conv.R - 1)
        k_mem = _cdiv(conv.K * (conv.C * conv.R * conv.S * hw + act * c), memlimit * c * hw)
        k = np.maximum(_cdiv(conv.K, np.maximum(m, 1)), np.maximum(k_mem, 1))
        ok &= (m >= 1) & (k <= conv.K)
        width += 3 * k
        cs.append(c)
        ks.append(k)
    height = hw * (cap + 1)
    fw, fh = fabric
    ok &= ((width <= fw) & (height <= fh)) | ((width <= fh) & (height <= fw))
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return ()
    idx = idx[np.lexsort((width[idx], height[idx]))]
    running_min = np.minimum.accumulate(width[idx])
    keep = np.ones(idx.size, dtype=bool)
    keep[1:] = running_min[1:] < running_min[:-1]
    shapes = []
    for i in idx[keep]:
        params = ExecParams(
            int(h[i]), int(w[i]), tuple(int(c[i]) for c in cs), tuple(int(k[i]) for k in ks)
        )
        perf = spec.perf(params)
        shapes.append(SizedShape(params, perf.height, perf.width, perf.time))
    return tuple(shapes)


@dataclass(frozen=True)
class Sizer:
    """Frontiers of a set of kernels, memoised per (cost model, Δt) for one solve.

    Kernels with identical convs share one computation (C has 100 convs of 24 kinds).
    """

    specs: tuple[KernelSpec, ...]
    memlimit: int
    fabric: tuple[int, int]
    _cache: dict[tuple, tuple[SizedShape, ...]] = field(default_factory=dict, repr=False)

    def frontier(self, spec: KernelSpec, dt: int) -> tuple[SizedShape, ...]:
        key = (spec.convs, spec.H, spec.W, dt)
        if key not in self._cache:
            self._cache[key] = frontier(spec, dt, self.memlimit, self.fabric)
        return self._cache[key]

    def min_areas(self, dt: int) -> list[int] | None:
        """Least area of every kernel at dt, or None if some kernel cannot meet dt."""
        areas = []
        for spec in self.specs:
            f = self.frontier(spec, dt)
            if not f:
                return None
            areas.append(min(s.area for s in f))
        return areas

    def fits_area(self, dt: int, fill: float = 1.0) -> bool:
        areas = self.min_areas(dt)
        return areas is not None and sum(areas) <= fill * self.fabric[0] * self.fabric[1]

    def area_lower_bound(self, fill: float = 1.0) -> int:
        """Smallest Δt at which Σ min area ≤ fill·W·H (fill=1: a valid lower bound on Δt)."""
        hi = 1
        while not self.fits_area(hi, fill):
            hi *= 2
            if hi > 1 << 40:
                raise ValueError("the kernels do not fit the fabric at any Δt")
        lo = hi // 2  # fits_area(lo) is False (or lo = 0)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.fits_area(mid, fill):
                hi = mid
            else:
                lo = mid
        return hi
