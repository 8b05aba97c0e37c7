"""The ISPD 2020 contest's convolution cost model: `convperf`, `dblockperf`, `cblockperf`.

The contest (Cerebras CS-1, reference/ispd2020.md) sizes a conv kernel by execution parameters
(h', w', c', k') rather than by a region shape. For a conv with formal arguments
(H, W, R, S, C, K, T, U):

    height = h'·w'·(c'+1)
    width  = 3·k'
    time   = ceil( ceil(H/h')·ceil(W/w')·ceil(C/c')·ceil(K/k')·R·S / (T·U) )
    memory = (C/c')·(K/k')·R·S + ((W+S−1)/w')·((H+R−1)/h')·(K/k')        (words, real division)

A dblock/cblock is a group of convs sharing h' and w' (each conv i has its own c_i', k_i'):

    height = max_i height_i     width = Σ_i width_i     time = max_i time_i     memory = max_i memory_i

    dblock(H, W, F):  conv(H, W, 1, 1, F,   F/4, 1), conv(H, W, 3, 3, F/4, F/4, 1),
                      conv(H, W, 1, 1, F/4, F,   1)
    cblock(H, W, F):  conv(H, W, 1, 1, F/2, F/4, 1), conv(H, W, 3, 3, F/4, F/4, 2),
                      conv(H/2, W/2, 1, 1, F/4, F, 1), conv(H, W, 1, 1, F/2, F, 2)

These are the kernel kinds `conv`, `dblock` and `cblock` of `wsecc.kernels`: their definitions
(`wsecc.kernels.kinds.contest`) turn the (height, width) `frontier` below into the shared sizing's menu,
so `size_regions` sizes a contest graph with the same search as a transformer's.

Our conventions for what the handout leaves open (docs/ispd2020.md §Conventions):
- *stride*: the handout divides by T·T; a kgraph conv carries T and U and we divide by T·U (all
  benchmarks have T = U, so this is the same number).
- *fractional time*: a stride-2 time that is not an integer is rounded **up** (a tile cannot finish
  a fraction of a step), so `time` is always an integer and so is Δt.
- *memory*: real (exact rational) division as printed, kept as a `Fraction`; compared with memlimit
  exactly.
- *parameter bounds*: positive integers with h' ≤ H, w' ≤ W (the kernel's formal H, W), and for
  every internal conv c_i' ≤ C_i, k_i' ≤ K_i. Without them real-division memory would reward
  absurdly oversized parameters.
- *halving*: cblock's conv3 works on ceil(H/2) × ceil(W/2) (all benchmarks have even H, W); F must
  be divisible by 4.

The frontier. Only *ceil-breakpoints* matter: for a dimension n, any p' with the same ceil(n/p')
as a smaller p' costs more area and buys nothing, so h' ranges over {ceil(H/q) : q = 1..H} (about
2·√H values; for a cblock, the union over its convs' H). Fix (h', w') and a cap c on the c_i':
every conv then takes c_i' = min(c, C_i) (larger c' only lowers time and memory, and the height
already pays for c), and its smallest k_i' follows in closed form from the two constraints

    time ≤ Δt   ⇔  ceil(K/k') ≤ m = floor(Δt·T·U / (ceil(H/h')·ceil(W/w')·ceil(C/c')·R·S))
                ⇔  k' ≥ ceil(K/m)
    mem  ≤ L    ⇔  k' ≥ ceil( K·(C·R·S·h'w' + (W+S−1)(H+R−1)·c') / (L·c'·h'w') ).

So one vectorised pass over (h', w', c) — a few 10⁴ points — gives, for every height, the least
width: the (height, width) Pareto frontier of the kernel at that Δt (exact when memory does not
bind; with binding memory an off-breakpoint h', w' or c' can occasionally do better).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Conv:
    """Formal arguments of one convolution: input H×W×C, K filters of R×S, strides T (rows), U."""

    H: int
    W: int
    R: int
    S: int
    C: int
    K: int
    T: int = 1
    U: int = 1

    @property
    def macs(self) -> int:
        """Multiply-accumulates: cdiv(H, T)·cdiv(W, U) outputs of K channels, C·R·S each."""
        return cdiv(self.H, self.T) * cdiv(self.W, self.U) * self.K * self.C * self.R * self.S


@dataclass(frozen=True)
class Perf:
    """What a kernel's execution parameters cost: its rectangle, its time and per-tile memory."""

    height: int
    width: int
    time: int
    memory: Fraction

    @property
    def area(self) -> int:
        return self.height * self.width


@dataclass(frozen=True)
class ExecParams:
    """Execution parameters of a kernel: shared h', w' and one (c_i', k_i') per internal conv."""

    h: int
    w: int
    c: tuple[int, ...]
    k: tuple[int, ...]


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for integers."""
    return -(-a // b)


def conv_time(conv: Conv, h: int, w: int, c: int, k: int) -> int:
    """ceil(ceil(H/h')·ceil(W/w')·ceil(C/c')·ceil(K/k')·R·S / (T·U))."""
    work = cdiv(conv.H, h) * cdiv(conv.W, w) * cdiv(conv.C, c) * cdiv(conv.K, k)
    return cdiv(work * conv.R * conv.S, conv.T * conv.U)


def conv_memory(conv: Conv, h: int, w: int, c: int, k: int) -> Fraction:
    """(C/c')·(K/k')·R·S + ((W+S−1)/w')·((H+R−1)/h')·(K/k'), exact."""
    weights = Fraction(conv.C * conv.K * conv.R * conv.S, c * k)
    activations = Fraction((conv.W + conv.S - 1) * (conv.H + conv.R - 1) * conv.K, w * h * k)
    return weights + activations


def convperf(conv: Conv, h: int, w: int, c: int, k: int) -> Perf:
    """The handout's convperf(H,W,R,S,C,K,T; h',w',c',k'): (h'·w'·(c'+1), 3·k', time, memory)."""
    return Perf(
        height=h * w * (c + 1),
        width=3 * k,
        time=conv_time(conv, h, w, c, k),
        memory=conv_memory(conv, h, w, c, k),
    )


def dblock_convs(H: int, W: int, F: int) -> tuple[Conv, ...]:
    """The three convs of a ResNet identity block (bottleneck F → F/4 → F/4 → F)."""
    _check_divisible(F)
    q = F // 4
    return (Conv(H, W, 1, 1, F, q), Conv(H, W, 3, 3, q, q), Conv(H, W, 1, 1, q, F))


def cblock_convs(H: int, W: int, F: int) -> tuple[Conv, ...]:
    """The four convs of a ResNet projection block: F/2 channels in, stride 2, F channels out."""
    _check_divisible(F)
    q, half = F // 4, F // 2
    return (
        Conv(H, W, 1, 1, half, q),
        Conv(H, W, 3, 3, q, q, 2, 2),
        Conv(cdiv(H, 2), cdiv(W, 2), 1, 1, q, F),
        Conv(H, W, 1, 1, half, F, 2, 2),
    )


def _check_divisible(F: int) -> None:
    if F % 4:
        raise ValueError(f"block width F={F} is not divisible by 4")


def blockperf(
    convs: tuple[Conv, ...], h: int, w: int, cs: tuple[int, ...], ks: tuple[int, ...]
) -> Perf:
    """Aggregate convs sharing h', w': max height, Σ width, max time, max memory."""
    if not (len(convs) == len(cs) == len(ks)):
        raise ValueError(f"{len(convs)} convs need {len(convs)} c' and k' values")
    parts = [convperf(conv, h, w, c, k) for conv, c, k in zip(convs, cs, ks, strict=True)]
    return Perf(
        height=max(p.height for p in parts),
        width=sum(p.width for p in parts),
        time=max(p.time for p in parts),
        memory=max(p.memory for p in parts),
    )


def dblockperf(
    H: int, W: int, F: int, h: int, w: int, cs: tuple[int, ...], ks: tuple[int, ...]
) -> Perf:
    """dblockperf(H,W,F; h',w',c1',c2',c3',k1',k2',k3')."""
    return blockperf(dblock_convs(H, W, F), h, w, cs, ks)


def cblockperf(
    H: int, W: int, F: int, h: int, w: int, cs: tuple[int, ...], ks: tuple[int, ...]
) -> Perf:
    """cblockperf(H,W,F; h',w',c1'..c4',k1'..k4')."""
    return blockperf(cblock_convs(H, W, F), h, w, cs, ks)


CONV_ARGS = ("H", "W", "R", "S", "C", "K", "T", "U")
BLOCK_ARGS = ("H", "W", "F")


def convs_of(kind: str, params: Mapping[str, Any]) -> tuple[Conv, ...]:
    """The convs of a `conv`, `dblock` or `cblock` kernel's params."""
    if kind == "conv":
        return (Conv(*(int(params[a]) for a in CONV_ARGS)),)
    H, W, F = (int(params[a]) for a in BLOCK_ARGS)
    return {"dblock": dblock_convs, "cblock": cblock_convs}[kind](H, W, F)


def slowest_time(convs: tuple[Conv, ...]) -> int:
    """The time with every parameter 1: no shape is slower."""
    return max(conv_time(c, 1, 1, 1, 1) for c in convs)


# --- the frontier --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvShape:
    """One parameter choice of a kernel on its (height, width) Pareto frontier."""

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


def _vcdiv(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    return -(-np.asarray(a) // b)


def frontier(
    convs: tuple[Conv, ...],
    H: int,
    W: int,
    dt: int,
    memlimit: Fraction | int,
    fabric: tuple[int, int],
) -> tuple[ConvShape, ...]:
    """All non-dominated (height, width) shapes of a kernel made of `convs` sharing h' ≤ H and
    w' ≤ W, with time ≤ dt and memory ≤ memlimit words, fitting the `fabric` (width, height) in
    R0 or R90; sorted by height ascending (width descending). Empty if the kernel cannot meet dt.
    """
    limit = Fraction(memlimit)
    hs = np.unique(np.concatenate([breakpoints(c.H) for c in convs]))
    ws = np.unique(np.concatenate([breakpoints(c.W) for c in convs]))
    caps = np.unique(np.concatenate([breakpoints(c.C) for c in convs]))
    hs, ws = hs[hs <= H], ws[ws <= W]
    h, w, cap = (a.ravel() for a in np.meshgrid(hs, ws, caps, indexing="ij"))
    hw = h * w
    ok = np.ones(h.shape, dtype=bool)
    width = np.zeros(h.shape, dtype=np.int64)
    cs, ks = [], []
    for conv in convs:
        c = np.minimum(cap, conv.C)
        q = _vcdiv(conv.H, h) * _vcdiv(conv.W, w) * _vcdiv(conv.C, c) * conv.R * conv.S
        m = (dt * conv.T * conv.U) // q
        act = (conv.W + conv.S - 1) * (conv.H + conv.R - 1)
        need = conv.K * (conv.C * conv.R * conv.S * hw + act * c) * limit.denominator
        k_mem = _vcdiv(need, limit.numerator * c * hw)
        k = np.maximum(_vcdiv(conv.K, np.maximum(m, 1)), np.maximum(k_mem, 1))
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
        perf = blockperf(convs, params.h, params.w, params.c, params.k)
        shapes.append(ConvShape(params, perf.height, perf.width, perf.time))
    return tuple(shapes)
