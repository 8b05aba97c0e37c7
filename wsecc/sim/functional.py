"""Functional simulation: run the compiled kernel program as the fabric would, and check it.

`simulate_functional` walks the fused Graph in node order. A node that lowering made a kernel
(`wsecc.passes.lower.kernel_names`) runs a tiled implementation on its region, h x w PEs from the
Sizing, that follows the mapping its cost model states (`wsecc.kernels.costs`); view ops
(Reshape, Transpose, Split, Slice, Expand, Cast, Identity, Dropout) re-address data and run with
the reference rules (`wsecc.ir.rules`). `validate` compares every output with onnxruntime on the
original ONNX file.

What is emulated, per kernel kind
    linear, lm_head   W[K, N] tiled K over the h rows and N over the w columns (kh = cdiv(K, h),
        nw = cdiv(N, w), zero-padded). PE (i, j) forms its partial x[:, K_i] @ W[K_i, N_j] and
        adds it to the running sum arriving from the PE above, in the cost model's
        reduce-scatter order (`wsecc.kernels.kinds.matmul.matmul_cost`): a column's nw outputs
        are cut into h segments of own = cdiv(nw, h), and segment s's chain starts on row
        s + 1 and runs down the rows cyclically to row s, which finishes it (acc =
        ((p_{s+1} + p_{s+2}) + ...) + p_s), one addition per row. The epilogue (bias, then the
        activation, evaluated in float32) runs on the finished sum.
    attention   keys and values dealt cyclically over the h rows (key j on row j mod h). Each PE
        scores the queries against its keys (the 1/sqrt(d) scale folded into the queries, as the
        cost model says), masked pairs replaced by the node's `fill` as in the reference, and
        keeps a partial (max m_i, sum l_i = sum exp(s - m_i), acc_i = sum exp(s - m_i) v, both
        sums in key order); the partials are merged down the column row by row (online
        softmax: m = max(m, m_i), l = l e^(m_old - m) + l_i e^(m_i - m), same for acc) and
        normalised at the bottom, out = acc / l. Heads and query groups over columns change no
        arithmetic. ALiBi: slope_h × key position (`wsecc.ir.rules.attention_bias`) added
        to each kept score, in float32, before the fp16 rounding; a bias operand (`has_bias`,
        MPNet's relative position bias) the same way, resident and so rounded to storage. Rotary: q and k rotated (x cos + rotate(x) sin, in float32, rounded to
        storage) before scoring; grouped K/V heads read once per query head they serve.
    layernorm   the feature dim split over the w columns (dw = cdiv(dim, w)). Each PE sums its
        features in order; the per-PE sums are combined along the region row in column order
        (column 0 first). Two such row reductions: sum x gives the mean, then sum (x - mean)^2 the
        variance. (The cost model charges stats = 2 per row and LAYERNORM_OPS = 6 per element;
        the two-pass form has the same counts and, unlike sum x^2 - mean^2, does not cancel when
        |mean| >> std.) With a skip input, s = x + skip is formed in the accumulate type and
        normalised from there; only the emitted copy (the residual stream) is rounded to storage.
    rmsnorm     as layernorm, one row reduction: sum x^2 gives the mean square.
    gated_linear   linear's tiles over W_gate and W_up interleaved column by column (a gate
        column and its up column on one PE column), the same summation order; silu(gate) * up
        on the finished pair, in float32.
    softmax     row-wise like layernorm: per-PE max (exact in any order), then per-PE sums of
        exp(x - max) combined in column order.
    embedding   the tables, stacked, tiled vocab over the h rows (vh = cdiv(vocab, h)) and dim
        over the w columns; a lookup reads row id // vh, slot id % vh; a token's lookups are
        summed in table order (the order they meet going down the column).
    elementwise, generic   the reference rule on storage-rounded inputs, evaluated in float32
        (its transcendentals in float64, as the rule does), the result rounded to storage: no
        tiling changes an elementwise op, and a generic kernel has no stated mapping.

Precisions (`wsecc.kernels.ir.PRECISION_TABLE`: storage and accumulate types)
    fp32    everything float32; only the summation order above differs from onnxruntime.
    mixed   storage fp16: graph inputs, weights and every kernel's outputs are rounded to
            float16 (round to nearest even, overflow to inf). Products and partials are formed in
            float32 (a product of two fp16 values is exact there) and every accumulation is
            float32.
    fp16    as mixed, and the accumulate type is fp16 too: each PE's partial is formed in float32
            and rounded once to fp16, and every running sum is rounded to fp16 after each PE's
            contribution (each add of the column chain, each merge step, each row-reduction
            step); each stage of a kernel (scores, exp, mean, variance, epilogue) is evaluated in
            float32 and rounded to fp16 at its end. A finite attention `fill` below the fp16
            range is clamped to -65504 rather than becoming -inf.
    Not modelled: the order of the kh multiply-adds inside one PE (BLAS forms a PE's partial of
    two or more products), the PE's transcendental approximations (evaluated to float32
    accuracy, then rounded), denormal flushing.

Cost. The fabric's order makes the simulator add h x M x N partials per linear kernel where a
matmul would add none. The linear, attention and layernorm kernels are compiled loops
(`wsecc.sim.compiled`, the GIL released) that split a kernel's column blocks, heads or rows over
a thread per CPU (`_THREADS`; results are the same at any count); their products are BLAS calls
(one per region row, BLAS itself on one thread: threadpoolctl), and fp16's roundings of partials
and running sums happen in the same loops, in hardware. On a 2-core machine GPT-2 small at
1x128 runs in 0.25-0.3 s (fp32, mixed) and 0.43 s (fp16): 3-5x onnxruntime on its two threads
(bench/bench_sim.py, bench/RESULTS.md).

Values between kernels are float32 arrays holding storage-precision values, so the graph's dtypes
hold throughout. Faults for tests (`fault=`): "drop_partial" drops PE (0, 0)'s partial sums in the
first linear kernel; "misplace_tile" swaps the weight tiles of PE (0, 0) and PE (0, 1) (or (1, 0)
in a one-column region) in the first linear kernel.

Generation (`wsecc.sim.generate`) runs the same program one window of tokens at a time: every
kernel's run takes any number of token rows (its output shape follows its inputs'), and the
attention kernel's run (`AttentionRun`) comes in the pieces a K/V cache reuses.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import metadata
from types import MappingProxyType
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from wsecc.check.numerics import (
    AsWritten,
    Criterion,
    OutputError,
    as_written,
    compare,
    float32_noise,
    ort_run,
    verdict_line,
    within_noise,
)
from wsecc.errors import SimulationError
from wsecc.interp import run as run_reference
from wsecc.ir.core import Graph, Node, Op, Value
from wsecc.ir.rules import (
    ACTIVATIONS,
    GELU_TANH_C,
    attention_bias,
    attention_keep,
    attention_mask_operand,
    embedding_ids,
    evaluate_op,
    moe_bias_start,
    rope,
    split_heads,
    top_k_indices,
)
from wsecc.kernels import KernelGraph, KernelKind, KernelSizing, Sizing, precision
from wsecc.kernels.costs import cdiv
from wsecc.kernels.kinds.moe import moe_grid, router_columns
from wsecc.options import FAULTS
from wsecc.passes.lower import kernel_names
from wsecc.sim.compiled import (
    attention_heads,
    chain_f16,
    column_blocks,
    layernorm_rows,
    round_f16_into,
)
from wsecc.vocab import Precision

_BLOCK_ELEMS = 1 << 16
"""Running-sum elements (M x columns) per column block of a linear kernel (256 KB: a block's
partials and running sums stay in the core's L2 cache; measured fastest of 2^12..2^16 on GPT-2
small and BERT-base)."""
_MIN_BLOCK_COLUMNS = 16
"""Blocks no narrower than this, however many rows M (BLAS calls on fewer columns are slow)."""
_NO_BIAS = np.empty(0, np.float32)
_EMPTY_ROWS = np.empty((0, 0), np.float32)
_THREAD_WORK = 1 << 20
"""Multiply-adds below which a kernel runs on the calling thread (handing out costs more)."""
_THREADS = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
"""Threads for a kernel's column blocks, heads or rows: the CPUs this process may use."""


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(_THREADS, thread_name_prefix="wsecc-sim")


# --- precision ------------------------------------------------------------------------------------


def round_to_f16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest float16 (ties to even; beyond 65504 to inf;
    subnormals kept), returned as float32. Bit-identical to x.astype(float16).astype(float32)
    but for a nan's payload (tests/sim pin it), in one vectorized pass (`wsecc.sim.compiled`)."""
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty_like(x)
    round_f16_into(x.reshape(-1), out.reshape(-1))
    return out


def _identity(x: np.ndarray) -> np.ndarray:
    return x


@dataclass(frozen=True)
class Arithmetic:
    """Where a precision rounds: `store` (inputs, weights, kernel outputs) and `acc` (partials,
    running sums, kernel-internal stages). Both take and return float32 arrays."""

    name: str
    store: Callable[[np.ndarray], np.ndarray]
    acc: Callable[[np.ndarray], np.ndarray]

    @property
    def half_accum(self) -> bool:
        return self.acc is round_to_f16

    @staticmethod
    def of(name: Precision) -> Arithmetic:
        p = precision(name)  # raises on an unknown name

        def rounding(nbytes: int) -> Callable[[np.ndarray], np.ndarray]:
            return round_to_f16 if nbytes == 2 else _identity

        return Arithmetic(name, rounding(p.storage_bytes), rounding(p.accum_bytes))


def _stored(const: np.ndarray, ar: Arithmetic) -> np.ndarray:
    """A constant or input as the fabric holds it: float32 rounded to storage, others as is."""
    c = np.asarray(const)
    return ar.store(c) if c.dtype == np.float32 else c


def _chain(partials: np.ndarray, ar: Arithmetic) -> np.ndarray:
    """partials[0] + partials[1] + ... in that order, each partial and each running sum in the
    accumulate type. numpy reduces a non-innermost axis of a C-contiguous array in index order
    (pairwise summation applies only along the innermost axis), so in float32 one reduction
    keeps the order when each partial has two or more elements; tests/sim pin that. In fp16,
    `wsecc.sim.compiled.chain_f16`."""
    partials = np.ascontiguousarray(partials, np.float32)
    if not ar.half_accum:  # accumulate, unlike reduce, adds in index order at any size
        if partials[0].size > 1:
            return np.add.reduce(partials, axis=0)
        return np.add.accumulate(partials, axis=0)[-1]
    out = np.empty(partials.shape[1:], np.float32)
    chain_f16(partials.reshape(len(partials), -1), out.reshape(-1))
    return out


def _pad_to(x: np.ndarray, axis: int, n: int, value: float) -> np.ndarray:
    """x with `axis` extended to n entries of `value` (x itself when it has n already)."""
    if x.shape[axis] == n:
        return x
    shape = list(x.shape)
    shape[axis] = n
    out = np.full(shape, value, np.float32)
    out[(slice(None),) * axis + (slice(0, x.shape[axis]),)] = x
    return out


def _row_reduce(x: np.ndarray, cols: int, ar: Arithmetic) -> np.ndarray:
    """sum over the last axis of x[R, D] with D split over `cols` PE columns: each PE sums its
    cdiv(D, cols) features, the per-PE sums are combined in column order. Returns [R]."""
    R, D = x.shape
    dw = cdiv(D, cols)
    per_pe = _pad_to(x, 1, dw * cols, 0.0).reshape(R, cols, dw).sum(axis=2, dtype=np.float32)
    return _chain(per_pe.T, ar)


# --- kernels ----------------------------------------------------------------------------------------

Arrays = Sequence[Any]  # a node's inputs: arrays, None where the region holds the constant
Run = Callable[[Arrays], list[np.ndarray]]


@dataclass(frozen=True)
class _Build:
    """What a kernel builder gets: the node, its region, the arithmetic and the fault, if any.
    The run it returns gets the node's inputs in order, constants rounded to storage, except
    the ones the builder took with `resident` (those arrive as None)."""

    node: Node
    region: KernelSizing
    ar: Arithmetic
    fault: str | None
    held: set[int] = field(default_factory=set)

    def resident(self, i: int) -> np.ndarray:
        """Input i, a constant the region keeps in its SRAM, rounded to storage."""
        v = self.node.inputs[i]
        if v.const is None:
            raise self.fail(f"input {v.name!r} is not a constant, so it cannot be resident")
        self.held.add(i)
        return _stored(v.const, self.ar)

    def fail(self, why: str) -> SimulationError:
        return SimulationError(
            f"kernel {self.region.name!r} ({self.region.kind}, node {self.node.name!r}): {why}"
        )

    def expect(self, *ops: Op) -> None:
        if self.node.op not in ops:
            raise self.fail(f"a {self.region.kind} kernel cannot run op {self.node.op.name}")


@dataclass(frozen=True)
class _MatmulTiles:
    """W[K, N] as a region holds it: PE row i owns K_i (zero-padded to kh), PE column j owns
    N_j (nw columns); each PE column's nw outputs are cut into h segments of own = cdiv(nw, h),
    segment s finished on row s (the cost model's reduce-scatter). Stored for
    `wsecc.sim.compiled.column_blocks` as blocks of output columns that share a segment, so
    they share a summation order: `tiles`[blocks, h, kh, cw] (W's columns, zero-padded),
    `cols`[blocks, cw] (the output column of each, -1 for padding), `first`[blocks] (the row
    whose partial starts the chain: (s + 1) mod h), `drop`[blocks, cw] (row 0's partial lost:
    the drop_partial fault)."""

    N: int
    tiles: np.ndarray
    cols: np.ndarray
    first: np.ndarray
    drop: np.ndarray

    @staticmethod
    def of(W: np.ndarray, h: int, w: int, M: int, fault: str | None) -> _MatmulTiles:
        """`misplace_tile` swaps PE (0, 0)'s tile with PE (0, 1)'s (PE (1, 0)'s if w = 1);
        `drop_partial` loses PE (0, 0)'s partial sums."""
        K, N = W.shape
        kh, nw = cdiv(K, h), cdiv(N, w)
        own = cdiv(nw, h)
        pe = np.zeros((h, kh, w, nw), np.float32)  # pe[i, :, j, :] is PE (i, j)'s tile
        pe.reshape(h * kh, w * nw)[:K, :N] = W
        if fault == "misplace_tile":
            i, j = (0, 1) if w > 1 else (1, 0)
            pe[0, :, 0], pe[i, :, j] = pe[i, :, j].copy(), pe[0, :, 0].copy()
        columns = np.arange(N)
        segment = (columns % nw) // own
        cw = _block_columns(M, N)
        groups = [columns[segment == s] for s in range(h)]
        chunks = [(s, g[k : k + cw]) for s, g in enumerate(groups) for k in range(0, len(g), cw)]
        blocks = len(chunks)
        flat = pe.reshape(h, kh, w * nw)
        tiles = np.zeros((blocks, h, kh, cw), np.float32)
        cols = np.full((blocks, cw), -1, np.int64)
        first = np.empty(blocks, np.int64)
        drop = np.zeros((blocks, cw), np.bool_)
        for b, (s, chunk) in enumerate(chunks):
            tiles[b, :, :, : len(chunk)] = flat[:, :, chunk]
            cols[b, : len(chunk)] = chunk
            first[b] = (s + 1) % h
            if fault == "drop_partial":
                drop[b, : len(chunk)] = chunk < nw  # PE column 0's outputs
        return _MatmulTiles(N, tiles, cols, first, drop)


def _block_columns(M: int, N: int) -> int:
    """Columns per block: a block's running sums (M x columns) stay in cache. Fixed by the
    kernel's shape alone, never the thread count: BLAS may add a partial's kh products in
    another order at another block width, so changing this changes results."""
    return max(1, min(N, max(_MIN_BLOCK_COLUMNS, _BLOCK_ELEMS // max(M, 1))))


def _tiled_linear(
    x: np.ndarray, tiles: _MatmulTiles, ar: Arithmetic, bias: np.ndarray | None, act: str
) -> np.ndarray:
    """y[M, N] = act(x[M, K] W + bias) in storage: PE row i's partial x[:, K_i] W[K_i, :],
    added to the running sum arriving from the row above, each output's chain starting below
    the row that finishes it (`_MatmulTiles`), then the epilogue; the column blocks split over
    the threads."""
    blocks, h, kh, _ = tiles.tiles.shape
    M = x.shape[0]
    xt = np.ascontiguousarray(_pad_to(x, 1, h * kh, 0.0).reshape(M, h, kh).transpose(1, 0, 2))
    y = np.empty((M, tiles.N), np.float32)
    bias = _NO_BIAS if bias is None else np.ascontiguousarray(bias, np.float32)
    in_kernel = act in _KERNEL_ACTIVATIONS  # else numpy's, after
    code = _KERNEL_ACTIVATIONS.index(act) if in_kernel else 0
    store_half = ar.store is round_to_f16 and in_kernel
    block = functools.partial(
        column_blocks, xt, tiles.tiles, tiles.cols, tiles.first, tiles.drop, ar.half_accum,
        bias, code, store_half, y,
    )  # fmt: skip
    _on_threads(block, blocks, work=M * h * kh * tiles.N)
    return y if in_kernel else ar.store(ar.acc(_NUMPY_ACTIVATIONS[act](y)))


_KERNEL_ACTIVATIONS = ("none", "relu", "gelu")
"""The activations the compiled epilogue applies (`wsecc.sim.compiled.column_blocks`)."""
_GELU_C, _GELU_A = np.float32(GELU_TANH_C), np.float32(0.044715)
_NUMPY_ACTIVATIONS: Mapping[str, Callable[[np.ndarray], np.ndarray]] = MappingProxyType(
    {
        "tanh": np.tanh,
        "gelu_tanh": lambda y: (
            np.float32(0.5) * y * (np.float32(1) + np.tanh(_GELU_C * (y + _GELU_A * y * y * y)))
        ),
    }
)
"""The tanh activations, evaluated in float32 with numpy's vectorized tanh."""


def _on_threads(task: Callable[[int, int], None], n: int, work: int) -> None:
    """task(i0, i1) for n items split into one contiguous run per thread (`_THREADS`), or
    task(0, n) on this one when the `work` (multiply-adds) is under `_THREAD_WORK`."""
    runs = min(n, _THREADS) if work >= _THREAD_WORK else 1
    if runs <= 1:
        task(0, n)
        return
    bounds = [n * t // runs for t in range(runs + 1)]
    for _ in _pool().map(task, bounds[:-1], bounds[1:]):
        pass


def _linear(b: _Build) -> Run:
    """linear / lm_head: `_matmul` of wsecc.kernels.costs; bias and activation in the epilogue."""
    b.expect(Op.LINEAR, Op.LM_HEAD)
    W = b.resident(1)
    h, w = b.region.h, b.region.w
    if b.fault == "misplace_tile" and h * w < 2:
        raise b.fail("misplace_tile needs two PEs, the region is 1x1")
    x = b.node.inputs[0].type
    tiles = _MatmulTiles.of(W, h, w, x.size // x.shape[-1], b.fault)
    has_bias = len(b.node.inputs) == 3
    act = b.node.attr("activation", "none")
    if act not in ACTIVATIONS:
        raise b.fail(f"unknown activation {act!r}")
    ar, N = b.ar, W.shape[1]
    cap = np.float32(b.node.attr("softcap", 0.0))

    def run(args: Arrays) -> list[np.ndarray]:  # any rows: a window of tokens too
        x = args[0].reshape(-1, args[0].shape[-1])
        bias = args[2] if has_bias else None
        y = _tiled_linear(x, tiles, ar, bias, act)
        if cap:  # the soft-cap c·tanh(y / c) in the epilogue, each step in float32
            y = ar.store(ar.acc(np.tanh(ar.acc(y / cap)) * cap))
        return [y.reshape(*args[0].shape[:-1], N)]

    return run


def _gated_linear(b: _Build) -> Run:
    """gated_linear: `_linear`'s tiles over W_gate and W_up side by side, column j of each on
    the same PE column (interleaved: weight column 2j is W_gate's j, 2j + 1 W_up's), summed in
    the same fabric order; the epilogue act(gate) * up (SiLU or GELU), in float32, on the finished
    pairs."""
    b.expect(Op.GATED_LINEAR)
    wg, wu = b.resident(1), b.resident(2)
    K, N = wg.shape
    W = np.empty((K, 2 * N), np.float32)
    W[:, 0::2], W[:, 1::2] = wg, wu
    h, w = b.region.h, b.region.w
    x = b.node.inputs[0].type
    tiles = _MatmulTiles.of(W, h, w, x.size // x.shape[-1], b.fault)
    has_bias = len(b.node.inputs) == 5
    gate = b.node.attr("activation", "silu")
    ar = b.ar

    def run(args: Arrays) -> list[np.ndarray]:
        shape = (*args[0].shape[:-1], N)
        x = args[0].reshape(-1, args[0].shape[-1])
        bias = None
        if has_bias:
            bias = np.empty(2 * N, np.float32)
            bias[0::2], bias[1::2] = args[3], args[4]
        y = _tiled_linear(x, tiles, ar, bias, "none")
        g, u = y[:, 0::2], y[:, 1::2]
        if gate == "silu":
            with np.errstate(over="ignore"):  # exp(-g) is inf for g < -88: silu is then -0
                out = ar.acc(g / (np.float32(1) + np.exp(-g)))
        elif gate == "gelu_tanh":
            out = ar.acc(_NUMPY_ACTIVATIONS["gelu_tanh"](g))
        else:  # GeGLU's exact GELU, erf in float32
            import scipy.special  # on first use: a fifth of a second to import

            half = np.float32(0.5)
            out = ar.acc(half * g * (np.float32(1) + scipy.special.erf(g * np.float32(0.70710677))))
        return [ar.store(ar.acc(out * u)).reshape(shape)]

    return run


def _moe(b: _Build) -> Run:
    """moe: `wsecc.kernels.kinds.moe`'s mapping on its grid of cells (`moe_grid`). The router's
    W[H, E] tiled H over cell row 0's rows and E over its first min(E, w) columns
    (`_tiled_linear`; a shared expert's sigmoid gate on column 0), its logits, scores, choice
    and weights kept in the accumulate type; each expert on its cell
    (hs rows by ws columns): gate and up as `_gated_linear`'s tiles, silu(g)·u rounded to
    storage (it travels back up the column), W_down[F, H] with F over the cell's columns (each
    output's partials chained along the row) and H over the rows. The combine, in the
    accumulate type: each cell row below the first sums w_j · y_e over its cells in column
    order (experts of one cell in index order); those sums are added last cell row first (the
    sum going north); cell row 0's running sum starts from that and adds its own cells' in
    column order; rounded to storage as it leaves. A shared expert's output starts the sum
    (its S over the er cell rows' w columns, in that order). A shard (`split-moe`) routes over
    all R of the router's experts and adds the choices among its E (`first` on), its sum
    starting from the running sum it reads (`accumulate`, in the accumulate type) rather
    than 0."""
    b.expect(Op.MOE)
    a: dict[str, Any] = b.node.attr_dict
    wr, wg, wu, wd = (b.resident(i) for i in range(1, 5))
    E, H, F = wg.shape
    R, first = wr.shape[1], int(a.get("first", 0))
    h, w = b.region.h, b.region.w
    grid = moe_grid(E, H, F, h, w)
    hs, ws = grid.hs, grid.ws
    xt = b.node.inputs[0].type
    M = xt.size // xt.shape[-1]
    ar = b.ar
    inner = Arithmetic(ar.name, _identity, ar.acc)  # sums that stay in the region
    shared = a.get("shared", "none")
    router = [_MatmulTiles.of(wr, hs, router_columns(R, w)[0], M, None)]
    if shared == "sigmoid":  # its gate's column on column 0
        router.append(_MatmulTiles.of(b.resident(8), hs, 1, M, None))
    if shared != "none":
        sg, su, sd = (b.resident(i) for i in range(5, 8))
        S = sg.shape[1]
        W = np.empty((H, 2 * S), np.float32)
        W[:, 0::2], W[:, 1::2] = sg, su
        shared_gate_up, shared_down = (
            _MatmulTiles.of(W, hs, grid.er * w, M, None),
            _MatmulTiles.of(sd, grid.er * w, hs, M, None),
        )
    gate_up, down = [], []
    for e in range(E):
        W = np.empty((H, 2 * F), np.float32)
        W[:, 0::2], W[:, 1::2] = wg[e], wu[e]
        gate_up.append(_MatmulTiles.of(W, hs, ws, M, None))
        down.append(_MatmulTiles.of(wd[e], ws, hs, M, None))
    # the combine's order: cell rows last to first (each its own sum), cells west to east,
    # a cell's experts by index (`grid.cell`)
    by_row: list[list[int]] = [[] for _ in range(grid.er)]
    for e in sorted(range(E), key=lambda e: (grid.cell(e)[1], e // grid.cells)):
        by_row[grid.cell(e)[0]].append(e)
    k = int(a["k"])
    j = moe_bias_start(a)
    br, bg, bu, bd = (b.resident(j + i) for i in range(4)) if a.get("bias", False) else (None,) * 4
    clamped = a["activation"] == "clamped_silu"
    on_input = a.get("scale", "output") == "input"  # Llama 4: w_j scales the expert's input
    alpha, limit = np.float32(a.get("alpha", 0.0)), np.float32(a.get("limit", 0.0))

    def hidden(g: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The expert's hidden units in the accumulate type (`wsecc.ir.rules.moe_gate`)."""
        if not clamped:
            return ar.acc(ar.acc(g / (np.float32(1) + np.exp(-g))) * u)
        g, u = np.minimum(g, limit), np.clip(u, -limit, limit)
        sig = ar.acc(np.float32(1) / (np.float32(1) + np.exp(-ar.acc(alpha * g))))
        return ar.acc(ar.acc(g * sig) * ar.acc(u + np.float32(1)))

    def run(args: Arrays) -> list[np.ndarray]:
        shape = args[0].shape
        x = args[0].reshape(-1, shape[-1])
        logits = np.concatenate([_tiled_linear(x, t, inner, None, "none") for t in router], 1)
        if br is not None:
            logits[:, :R] = ar.acc(logits[:, :R] + br)
        acc = np.zeros(x.shape, np.float32)
        if shared != "none":
            y = _tiled_linear(x, shared_gate_up, ar, None, "none")
            g, u = y[:, 0::2], y[:, 1::2]
            with np.errstate(over="ignore"):
                hid = ar.store(ar.acc(ar.acc(g / (np.float32(1) + np.exp(-g))) * u))
                acc = _tiled_linear(hid, shared_down, inner, None, "none")
                if shared == "sigmoid":
                    gate = ar.acc(np.float32(1) / (np.float32(1) + np.exp(-logits[:, R:])))
                    acc = ar.acc(acc * gate)
            logits = logits[:, :R]
        if a.get("accumulate", False):  # the shards before: the row's sum starts from theirs
            acc = ar.acc(args[-1].reshape(x.shape) + acc)
        with np.errstate(over="ignore"):
            if a["router"] == "softmax":
                z = np.exp(logits - logits.max(axis=1, keepdims=True))
                scores = ar.acc(z / z.sum(axis=1, keepdims=True, dtype=np.float32))
            else:
                scores = ar.acc(np.float32(1) / (np.float32(1) + np.exp(-logits)))
        idx = top_k_indices(scores if a["router"] == "softmax" else logits, k, 1)
        weights = np.take_along_axis(scores, idx, axis=1)
        if a["normalize"]:
            weights = ar.acc(weights / weights.sum(axis=1, keepdims=True, dtype=np.float32))

        def add_expert(total: np.ndarray, e: int) -> None:
            """total[t] += w_e · y_e(x[t]) for the tokens that chose e (of the router's,
            `first` + e)."""
            rows, slot = np.nonzero(idx == first + e)
            if not rows.size:
                return
            bias = None
            if bg is not None and bu is not None:  # the epilogue's, interleaved as W
                bias = np.empty(2 * F, np.float32)
                bias[0::2], bias[1::2] = bg[e], bu[e]
            xe = ar.store(ar.acc(x[rows] * weights[rows, slot, None])) if on_input else x[rows]
            y = _tiled_linear(xe, gate_up[e], ar, bias, "none")
            g, u = y[:, 0::2], y[:, 1::2]
            with np.errstate(over="ignore"):
                hid = ar.store(hidden(g, u))
            ye = _tiled_linear(hid, down[e], inner, None if bd is None else bd[e], "none")
            if not on_input:
                ye = ar.acc(ye * weights[rows, slot, None])
            total[rows] = ar.acc(total[rows] + ye)

        for r in range(grid.er - 1, 0, -1):  # the cell rows below the first, going north
            row_sum = np.zeros(x.shape, np.float32)
            for e in by_row[r]:
                add_expert(row_sum, e)
            acc = ar.acc(acc + row_sum)
        for e in by_row[0]:
            add_expert(acc, e)
        return [ar.store(acc).reshape(shape)]

    return run


def _attention(b: _Build) -> Run:
    """attention_cost's mapping: keys cyclic over the rows, per-PE online-softmax partials merged
    down the column in row order, normalised at the bottom (`wsecc.sim.compiled.attention_heads`,
    the heads split over the threads)."""
    b.expect(Op.ATTENTION)
    a: dict[str, Any] = b.node.attr_dict
    fill = np.float32(a["fill"])
    if b.ar.half_accum and np.isfinite(fill):
        fill = np.maximum(fill, np.float32(np.finfo(np.float16).min))
    n_in = len(b.node.inputs)
    rotary = a.get("rotary", "none") != "none"
    cos, sin = (b.resident(n_in - 2), b.resident(n_in - 1)) if rotary else (None, None)
    bias = b.resident(3 + (a["mask"] != "none")) if a.get("has_bias") else None
    return AttentionRun(a, b.region.h, b.ar, fill, cos, sin, bias)


@dataclass(frozen=True)
class AttentionRun:
    """An attention kernel's run, in pieces a K/V cache can reuse (`wsecc.sim.generate`):
    `heads` splits q, k, v into heads and rotates q and k with the cos/sin rows of their
    positions, `attend` scores queries against keys in the fabric's order. Called with the
    node's inputs, it runs the whole sequence (positions 0 .. S - 1)."""

    attrs: dict[str, Any]
    rows: int  # the region's rows: key j on row j mod rows
    ar: Arithmetic
    fill: np.float32
    cos: np.ndarray | None  # [S, rotary dims] resident tables, None without rotary
    sin: np.ndarray | None
    bias: np.ndarray | None = None  # [H, Sq, Sk] resident bias operand, None without

    def __call__(self, args: Arrays) -> list[np.ndarray]:
        q, k, v = self.heads(args, np.arange(args[0].shape[1]), np.arange(args[1].shape[1]))
        B, _, Sq, _ = q.shape
        mask = attention_mask_operand(args, self.attrs)
        keep = attention_keep(self.attrs, B, Sq, k.shape[2], mask)
        bias = attention_bias(self.attrs, B, k.shape[2], mask, self.bias)
        return [self.attend(q, k, v, keep, bias)]

    def heads(
        self, args: Arrays, q_pos: np.ndarray, k_pos: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """q [B, H, Sq, d] and k, v [B, Hk, Sk, d] (K/V heads not yet repeated) from the
        inputs' q, k, v sources [B, S, features], q and k rotated with the rows q_pos and k_pos
        of the cos/sin tables, in float32, rounded to storage."""
        a = self.attrs
        H, Hk, dh = a["num_heads"], a.get("kv_heads", a["num_heads"]), a["head_dim"]
        q = self.rotated(split_heads(args[0], a["q_offset"], H, dh), q_pos)
        k = self.rotated(split_heads(args[1], a["k_offset"], Hk, dh), k_pos)
        return q, k, split_heads(args[2], a["v_offset"], Hk, dh)

    def rotated(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """x [B, h, S, d] rotated with the cos/sin rows of `positions` (x itself without rotary)."""
        if self.cos is None or self.sin is None:
            return x
        cos, sin = self.cos[..., positions, :], self.sin[..., positions, :]
        ar = self.ar
        return ar.store(ar.acc(rope(x, cos, sin, self.attrs["rotary"], self.attrs["rotary_dim"])))

    def attend(
        self,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
        keep: np.ndarray,
        bias: np.ndarray | None = None,
    ) -> np.ndarray:
        """out [B, Sq, H d] for q [B, H, Sq, d] against k, v [B, Hk, Sk, d] where keep
        [B, 1, Sq, Sk] is true, the scores raised by bias [B | 1, H, 1 | Sq, Sk] (ALiBi's, a bias
        operand's: `attention_bias`) when given."""
        a, ar = self.attrs, self.ar
        H = q.shape[1]
        if k.shape[1] != H:  # each K/V head serves H / Hk query heads: held once per column
            k, v = np.repeat(k, H // k.shape[1], axis=1), np.repeat(v, H // k.shape[1], axis=1)
        k, v = np.ascontiguousarray(k), np.ascontiguousarray(v)
        if a.get("sinks"):
            k, v, keep, bias = _sink_key(a["sinks"], k, v, keep, bias)
        B, _, Sq, dh = q.shape
        Sk = k.shape[2]
        qs = np.ascontiguousarray(ar.store(q * np.float32(a["scale"])))
        out = np.empty((B, Sq, H, dh), np.float32)
        bias = np.zeros((0, 0, 0, 0), np.float32) if bias is None else bias
        heads = functools.partial(
            attention_heads, qs, k, v, np.ascontiguousarray(keep[:, 0]),
            np.ascontiguousarray(bias, np.float32), self.fill,
            np.float32(a.get("softcap", 0.0)), self.rows,
            ar.half_accum, ar.store is round_to_f16, bool(a.get("nan_to_zero")), out,
        )  # fmt: skip
        _on_threads(heads, B * H, work=B * H * Sq * Sk * dh)
        return out.reshape(B, Sq, H * dh)


def _sink_key(
    sinks: Sequence[float],
    k: np.ndarray,
    v: np.ndarray,
    keep: np.ndarray,
    bias: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Attention sinks as one more key after the last: k = 0 and v = 0 (its score is its bias,
    its probability weighs nothing), always kept, its bias sink_h per head; it lands on the
    row after the last key's (`attention_heads`' key j on row j mod rows)."""
    B, H, _, d = k.shape
    zeros = np.zeros((B, H, 1, d), np.float32)
    k, v = np.concatenate([k, zeros], axis=2), np.concatenate([v, zeros], axis=2)
    keep = np.concatenate([keep, np.ones((*keep.shape[:3], 1), bool)], axis=3)
    base = np.zeros((1, H, 1, 1), np.float32) if bias is None else bias
    sink = np.asarray(sinks, np.float32)[None, :, None, None]
    column = np.broadcast_to(sink, (*base.shape[:3], 1))
    rest = np.broadcast_to(base, (*base.shape[:3], k.shape[2] - 1))
    bias = np.concatenate([rest, column], axis=3)
    return k, v, keep, np.ascontiguousarray(bias)


def _rmsnorm(b: _Build) -> Run:
    """rmsnorm_cost's mapping: features over the columns; the mean of squares a per-PE sum
    combined along the region row in column order (as layernorm's), in the accumulate type."""
    b.expect(Op.RMS_NORM)
    eps = np.float32(b.node.attr("epsilon"))
    skip, emit = b.node.attr("has_skip"), b.node.attr("emit_sum")
    cols, ar = b.region.w, b.ar

    def run(args: Arrays) -> list[np.ndarray]:
        shape = args[0].shape
        x = np.asarray(args[0], np.float32).reshape(-1, shape[-1])
        s = ar.acc(x + _skips(args[1:-1], shape, ar).reshape(x.shape)) if skip else x
        ms = ar.acc(_row_reduce(ar.acc(s * s), cols, ar) / np.float32(shape[-1]))
        rms = ar.acc(np.sqrt(ms + eps))
        y = ar.store(ar.acc(s / rms[:, None]) * _vector(args[-1]))
        return [y.reshape(shape)] + ([ar.store(s).reshape(shape)] if emit else [])

    return run


def _layernorm(b: _Build) -> Run:
    """layernorm_cost's mapping: features over the columns; mean, then variance, each a
    per-PE sum combined along the region row in column order."""
    b.expect(Op.LAYER_NORM)
    eps = np.float32(b.node.attr("epsilon"))
    skip, emit = b.node.attr("has_skip"), b.node.attr("emit_sum")
    cols, ar = b.region.w, b.ar

    def run(args: Arrays) -> list[np.ndarray]:
        shape = args[0].shape
        x = np.ascontiguousarray(args[0]).reshape(-1, shape[-1])
        skipped = _skips(args[1:-2], shape, ar).reshape(x.shape) if skip else _EMPTY_ROWS
        y = np.empty_like(x)
        s = np.empty_like(x) if emit else _EMPTY_ROWS
        gamma, beta = _vector(args[-2]), _vector(args[-1])
        rows = functools.partial(
            layernorm_rows, x, skipped, gamma, beta, eps, cols, ar.half_accum,
            ar.store is round_to_f16, y, s,
        )  # fmt: skip
        _on_threads(rows, len(x), work=x.size * 8)  # about eight operations a feature
        return [y.reshape(shape), s.reshape(shape)] if emit else [y.reshape(shape)]

    return run


def _skips(skips: Sequence[np.ndarray], shape: tuple[int, ...], ar: Any) -> np.ndarray:
    """A norm's skip operands summed in order, each step rounded as the accumulator rounds
    (`rules.norm_input`): one skip as it is; a parallel block's attention and MLP outputs
    summed before the residual stream is added."""
    total = np.ascontiguousarray(np.broadcast_to(np.asarray(skips[0], np.float32), shape))
    for r in skips[1:]:
        total = ar.acc(total + np.broadcast_to(np.asarray(r, np.float32), shape))
    return np.ascontiguousarray(total, np.float32)


def _vector(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).reshape(-1)


def _softmax(b: _Build) -> Run:
    """softmax_cost's mapping over the last axis: a per-PE max, then per-PE sums of exp(x - max)
    combined in column order."""
    b.expect(Op.SOFTMAX)
    if b.node.attr("axis") not in (-1, b.node.output.type.rank - 1):
        raise b.fail("a softmax kernel normalises the last axis only")
    cols, ar = b.region.w, b.ar

    def run(args: Arrays) -> list[np.ndarray]:
        x = args[0].reshape(-1, args[0].shape[-1])
        e = ar.acc(np.exp(x - x.max(axis=-1, keepdims=True)))
        total = _row_reduce(e, cols, ar)
        return [ar.store(e / total[:, None]).reshape(args[0].shape)]

    return run


def _embedding(b: _Build) -> Run:
    """embedding_cost's mapping: the stacked tables' rows over the region rows."""
    b.expect(Op.EMBEDDING)
    tables = [b.resident(i) for i in range(1, len(b.node.inputs), 2)]
    sizes = [t.shape[0] for t in tables]
    starts = np.cumsum([0, *sizes[:-1]])
    stacked = np.concatenate(tables)
    vocab, dim = stacked.shape
    h = b.region.h
    vh = cdiv(vocab, h)
    padded = np.zeros((h * vh, dim), np.float32)
    padded[:vocab] = stacked
    resident = padded.reshape(h, vh, dim)  # row r holds table rows r vh .. (r + 1) vh - 1
    ar = b.ar
    scale = b.node.attr("scale")
    scale = None if scale is None else np.float32(scale)

    def run(args: Arrays) -> list[np.ndarray]:
        shape = (*np.broadcast_shapes(*(ids.shape for ids in args[0::2])), dim)
        out = None
        looked_up = embedding_ids(args, b.node.attr_dict)  # RoBERTa's positions from its ids
        for ids, n, start in zip(looked_up, sizes, starts, strict=True):
            if ids.size and (ids.min() < -n or ids.max() >= n):
                raise b.fail(
                    f"an index is out of range [{-n}, {n}) (if these are positions, the table "
                    f"holds {n} rows: bind a shorter --seq)"
                )
            g = np.where(ids < 0, ids + n, ids) + start
            row = resident[g // vh, g % vh]
            out = row if out is None else ar.acc(out + row)
        assert out is not None
        if scale is not None:  # Gemma's √d, on the stored sum
            out = ar.acc(ar.store(out) * scale)
        return [np.broadcast_to(ar.store(out), shape)]

    return run


def _reference(b: _Build) -> Run:
    """The reference rule in the chosen precision: float results rounded to storage."""
    node, store = b.node, b.ar.store
    attrs = node.attr_dict

    def run(args: Arrays) -> list[np.ndarray]:
        outs = evaluate_op(node.op, args, attrs)
        return [store(o) if o.dtype == np.float32 else o for o in map(np.asarray, outs)]

    return run


Builder = Callable[[_Build], Run]
"""A kernel kind's tiled implementation: the run of one node on its region."""

BUILDERS: Mapping[KernelKind, Builder] = MappingProxyType(
    {
        KernelKind.LINEAR: _linear,
        KernelKind.GATED_LINEAR: _gated_linear,
        KernelKind.LM_HEAD: _linear,
        KernelKind.MOE: _moe,
        KernelKind.ATTENTION: _attention,
        KernelKind.LAYERNORM: _layernorm,
        KernelKind.RMSNORM: _rmsnorm,
        KernelKind.SOFTMAX: _softmax,
        KernelKind.EMBEDDING: _embedding,
        KernelKind.ELEMENTWISE: _reference,
        KernelKind.GENERIC: _reference,
    }
)
"""The functional simulator of each kernel kind it runs (the contest's kinds have none). The
simulator names the kinds, not the kinds the simulator: a kind's definition
(`wsecc.kernels.kinds`) never imports the simulator (numba)."""


# --- the program ------------------------------------------------------------------------------------


@functools.cache
def _blas_threads() -> Any:
    return ThreadpoolController()


@contextmanager
def _one_blas_thread() -> Iterator[None]:
    """The simulator's matmuls are many and small (one per PE row): BLAS threads cost more than
    they give there, and stall badly on a busy machine (30x measured under load), so run one."""
    with _blas_threads().limit(limits=1, user_api="blas"):
        yield


@dataclass(frozen=True)
class _Step:
    node: Node
    run: Run
    args: tuple[Value | np.ndarray | None, ...]  # computed, a constant, or held by the region
    free: tuple[Value, ...]  # values whose last use this step is


@dataclass(frozen=True)
class FunctionalProgram:
    """A compiled program with its weights resident (tiled, rounded): `run` many input sets."""

    graph: Graph
    precision: Precision
    steps: tuple[_Step, ...]

    def stored_inputs(self, inputs: Mapping[str, np.ndarray]) -> dict[Value, np.ndarray]:
        """`inputs` (by graph input name) checked against the graph's and rounded to storage."""
        ar = Arithmetic.of(self.precision)
        env: dict[Value, np.ndarray] = {}
        for v in self.graph.inputs:
            if v.name not in inputs:
                raise SimulationError(f"missing input {v.name!r}")
            arr = np.asarray(inputs[v.name])
            if arr.shape != v.type.shape:
                raise SimulationError(
                    f"input {v.name!r} has shape {arr.shape}, the program wants {v.type.shape}"
                )
            env[v] = _stored(arr.astype(v.type.dtype.numpy, copy=False), ar)
        return env

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph's outputs by name for `inputs` (by graph input name)."""
        env = self.stored_inputs(inputs)
        with _one_blas_thread():
            for step in self.steps:
                args = [env[a] if isinstance(a, Value) else a for a in step.args]
                results = step.run(args)
                for v, r in zip(step.node.outputs, results, strict=True):
                    env[v] = np.asarray(r, dtype=v.type.dtype.numpy).reshape(v.type.shape)
                for v in step.free:
                    del env[v]
        return {v.name: (v.const if v.const is not None else env[v]) for v in self.graph.outputs}


def compile_functional(
    fused: Graph, kg: KernelGraph, sizing: Sizing, precision: Precision, *, fault: str | None = None
) -> FunctionalProgram:
    """Load the program: every kernel's region from `sizing`, its weights rounded to storage
    and tiled over it. Raises SimulationError if kg or sizing do not describe `fused`."""
    if fault is not None and fault not in FAULTS:
        raise SimulationError(f"unknown fault {fault!r} (expected one of {', '.join(FAULTS)})")
    ar = Arithmetic.of(precision)
    kernels = {k.name: k for k in kg.kernels}
    regions = {k.name: k for k in sizing.kernels}
    names = kernel_names(fused)
    if set(names.values()) != set(kernels):
        raise SimulationError(
            f"kernel graph {kg.name!r} does not match the fused graph {fused.name!r}: "
            f"{len(kernels)} kernels for {len(names)} kernel nodes"
        )
    last_use = {v: i for i, n in enumerate(fused.nodes) for v in n.inputs if not v.is_const}
    keep = set(fused.outputs)
    prepared: dict[Value, np.ndarray] = {}

    def arg(v: Value, held: bool) -> Value | np.ndarray | None:
        if held or v.const is None:
            return None if held else v
        if v not in prepared:
            prepared[v] = _stored(v.const, ar)
        return prepared[v]

    faulty = next((k.name for k in kg.kernels if k.kind is KernelKind.LINEAR), None)
    if fault is not None and faulty is None:
        raise SimulationError(f"fault {fault!r} needs a linear kernel; {kg.name!r} has none")
    steps = []
    for i, n in enumerate(fused.nodes):
        name = names.get(n)
        held: set[int] = set()
        if name is None:  # a view op: data re-addressed, nothing computed
            run = _view(n)
        else:
            if name not in regions:
                raise SimulationError(f"sizing {sizing.graph!r} has no region for {name!r}")
            builder = BUILDERS.get(kernels[name].kind)
            if builder is None:
                raise SimulationError(
                    f"no functional model for kernel kind {kernels[name].kind.value!r}"
                )
            build = _Build(n, regions[name], ar, fault if name == faulty else None)
            run = builder(build)
            held = build.held
        args = tuple(arg(v, j in held) for j, v in enumerate(n.inputs))
        free = tuple(dict.fromkeys(v for v in n.inputs if last_use.get(v) == i and v not in keep))
        steps.append(_Step(n, run, args, free))
    return FunctionalProgram(fused, precision, tuple(steps))


def _view(node: Node) -> Run:
    attrs = node.attr_dict

    def run(args: Arrays) -> list[np.ndarray]:
        return evaluate_op(node.op, args, attrs)

    return run


def simulate_functional(
    fused: Graph,
    kg: KernelGraph,
    sizing: Sizing,
    precision: Precision,
    inputs: Mapping[str, np.ndarray],
    *,
    fault: str | None = None,
) -> dict[str, np.ndarray]:
    """Run the program on `inputs` (by graph input name); the outputs by the fused graph's
    output names (the ONNX output names)."""
    return compile_functional(fused, kg, sizing, precision, fault=fault).run(inputs)


# --- the verdict -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NumericsResult:
    """The simulated program against onnxruntime on the original file, checked two or three
    times:

    precision   every output of the program in its precision (fp16 storage, say) against
                onnxruntime on the original file, within that precision's tolerance
                (`wsecc.check.numerics.TOLERANCE`): is the rounding acceptable, and did the passes
                keep the model's meaning?
    structure   the same tiled program (same regions, tiles, summation order, faults) run in
                fp32 against the reference interpreter on the fused graph (`wsecc.interp`, the
                same ops untiled), within 2e-5 (`TOLERANCE["structure"]`: clean programs
                measure up to 1.03e-5): is the program right? A wrong tile or a lost partial sum
                moves an output by 3.6e-5 to 6.5e-3 on the samples (in fp32), where the
                precision check's tolerance (3e-2 in mixed) lets it through.
                The interpreter, not onnxruntime, is the reference here because some of
                onnxruntime's fused contrib kernels are themselves 1.2e-5 from exact
                (bert_3d_attention_opt).
    fused       when the precision is not fp32: the fused graph itself (the reference
                interpreter, fp32) against onnxruntime, within 1e-3 (`TOLERANCE["fused"]`):
                did the passes keep the model's meaning, where the precision check's
                tolerance cannot tell? (Megatron's full mask ignored moves gpt2_megatron's
                logits by 2.47e-2, under mixed precision's 3e-2.) Empty in fp32.
    The fp32-level checks (precision in fp32, structure, fused) allow an output NOISE_FACTOR x
    what float32 itself loses on it, when that is more than the tolerance (`verdict`), so a
    graph whose outputs float32 cannot resolve (gpt2_attention_opt_skiplayernorm: 1.0e-4) does
    not fail for it.

    `passed` needs all of them. `fault` names a fault injected on purpose (`wsecc compile
    --inject-fault`, a check of the checks). `as_written`, for a file the frontend read as
    float32 (float16 weights): onnxruntime on the file as written against the reference, the
    file's own float16 rounding; information, no part of `passed`."""

    reference: str  # "onnxruntime <version>"
    precision: Precision
    outputs: tuple[OutputError, ...]
    structure: tuple[OutputError, ...]
    fault: str | None = None
    structure_reference: str = "wsecc reference interpreter (fused graph)"
    fused: tuple[OutputError, ...] = ()
    as_written: AsWritten | None = None  # a file read as float32: onnxruntime on it as written

    @property
    def precision_passed(self) -> bool:
        return all(e.passed for e in self.outputs)

    @property
    def structure_passed(self) -> bool:
        return all(e.passed for e in self.structure)

    @property
    def fused_passed(self) -> bool:
        return all(e.passed for e in self.fused)

    @property
    def passed(self) -> bool:
        return self.precision_passed and self.structure_passed and self.fused_passed

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "reference": self.reference,
            "precision": self.precision,
            "outputs": [asdict(o) for o in self.outputs],
            "passed": self.passed,
            "precision_passed": self.precision_passed,
            "structure": {
                "reference": self.structure_reference,
                "precision": "fp32",
                "outputs": [asdict(o) for o in self.structure],
                "passed": self.structure_passed,
            },
            "fault": self.fault,
        }
        if self.fused:
            out["fused"] = {
                "reference": self.reference,
                "precision": "fp32",
                "outputs": [asdict(o) for o in self.fused],
                "passed": self.fused_passed,
            }
        if self.as_written is not None:
            out["as_written"] = self.as_written.to_json()
        return out

    def summary(self) -> str:
        """Every check in one line (`wsecc.check.numerics.verdict_line`)."""
        return verdict_line(self.to_json())


def validate(
    model_path: str | os.PathLike[str],
    fused: Graph,
    kg: KernelGraph,
    sizing: Sizing,
    precision: Precision,
    inputs: Mapping[str, np.ndarray],
    *,
    fault: str | None = None,
) -> NumericsResult:
    """Simulate on `inputs` in `precision` and, for the structure check, the same tiled
    program in fp32 (the same run when `precision` is fp32); then `verdict`."""
    outputs = simulate_functional(fused, kg, sizing, precision, inputs, fault=fault)
    exact = (
        outputs
        if precision == Precision.FP32
        else simulate_functional(fused, kg, sizing, Precision.FP32, inputs, fault=fault)
    )
    return verdict(model_path, fused, inputs, outputs, precision, exact, fault=fault)


def verdict(
    model_path: str | os.PathLike[str],
    fused: Graph,
    inputs: Mapping[str, np.ndarray],
    outputs: Mapping[str, np.ndarray],
    precision: Precision,
    exact: Mapping[str, np.ndarray],
    *,
    fault: str | None = None,
    widened: Sequence[str] = (),
) -> NumericsResult:
    """Compare the simulated `outputs` with onnxruntime running the original ONNX file on
    `inputs`, within the tolerance of `precision`; `exact` (the same program in fp32) with the
    reference interpreter on `fused`, within fp32's; and, when `precision` is not fp32, the
    interpreter's outputs with onnxruntime's, within `TOLERANCE["fused"]`. An output the
    simulation lacks fails. onnxruntime runs the file as the compiler read it
    (`wsecc.check.numerics.ort_run`): when the frontend read its `widened` types (float16) as float32,
    it also runs the file as written, as information (`wsecc.check.numerics.as_written`).

    When an output fails an fp32-level check (the precision check in fp32, structure, fused)
    the interpreter runs again in float64, and those outputs are judged again within
    max(the tolerance, NOISE_FACTOR x what float32 loses on them) (`wsecc.check.numerics`)."""
    inf = float("inf")

    def against(
        sim: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], p: Criterion
    ) -> tuple[OutputError, ...]:
        return tuple(
            compare(name, sim[name], r, p)
            if name in sim
            else OutputError(name, inf, inf, 0.0, False)
            for name, r in ref.items()
        )

    ort, interpreted = ort_run(model_path, inputs), run_reference(fused, inputs)
    errors, structure = against(outputs, ort, precision), against(exact, interpreted, "structure")
    meaning = against(interpreted, ort, "fused") if precision != Precision.FP32 else ()
    fp32_level = [*structure, *meaning, *(errors if precision == Precision.FP32 else ())]
    if not all(e.passed for e in fp32_level):
        noise = float32_noise(fused, inputs, interpreted)
        structure = within_noise(structure, exact, interpreted, "structure", noise)
        meaning = within_noise(meaning, interpreted, ort, "fused", noise)
        if precision == Precision.FP32:
            errors = within_noise(errors, outputs, ort, precision, noise)
    return NumericsResult(
        f"onnxruntime {metadata.version('onnxruntime')}", precision, errors, structure, fault,
        fused=meaning, as_written=as_written(model_path, inputs, ort, widened) if widened else None,
    )  # fmt: skip


def save_npz(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray]) -> None:
    """Arrays by name (inputs, or outputs by output name) to an .npz file; `load_npz` reads it."""
    with open(path, "wb") as f:
        np.savez(f, **{k: np.asarray(v) for k, v in arrays.items()})  # type: ignore[arg-type]


def load_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
