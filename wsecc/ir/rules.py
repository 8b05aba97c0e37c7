"""Per-op rules, in one table keyed by `Op`: arity, type inference, the numpy reference and the
vector-Jacobian product (`vjp`, reverse-mode differentiation: `wsecc.ir.grad`).

A missing entry is a verifier error (see `verify`), never a silent fall-through. The reference
implementations follow ONNX semantics for the generic ops; the fused ops define their meaning
here (see each function's docstring) — lowering and the simulator must agree with them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from wsecc.ir.arrays import is_uniform
from wsecc.ir.core import DType, IRError, Op, TensorType


def _erf(x: Any) -> Any:
    """scipy.special.erf, imported on first use (scipy.special takes a fifth of a second to
    import, and a compile that folds no Erf, Gelu or Sigmoid never needs it)."""
    import scipy.special

    return scipy.special.erf(x)


def _expit(x: Any) -> Any:
    """scipy.special.expit (the logistic sigmoid), imported on first use (see `_erf`)."""
    import scipy.special

    return scipy.special.expit(x)


Arrays = Sequence[np.ndarray]
Attrs = dict[str, Any]
Vjp = Callable[[Arrays, Arrays, Arrays, Attrs], list["np.ndarray | None"]]
"""(inputs, outputs, output cotangents, attrs) -> one cotangent per input, shaped like it; None
for an operand that is not differentiated (indices, masks, conditions). Every output has a
cotangent (zeros where nothing flows back into it)."""


@dataclass(frozen=True)
class Rule:
    min_inputs: int
    max_inputs: int
    infer: Callable[[Sequence[TensorType], Attrs], list[TensorType]]
    impl: Callable[[Arrays, Attrs], list[np.ndarray]]
    vjp: Vjp | None = None  # None: the op is not differentiable (wsecc.ir.grad refuses it)


# ---------------------------------------------------------------- helpers


def _bcast(types: Sequence[TensorType]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*(t.shape for t in types)))
    except ValueError as e:
        raise IRError(f"shapes do not broadcast: {[t.shape for t in types]}") from e


def _same_dtype(types: Sequence[TensorType]) -> DType:
    dts = {t.dtype for t in types}
    if len(dts) != 1:
        raise IRError(f"operand dtypes differ: {sorted(d.value for d in dts)}")
    return dts.pop()


def _binary(
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
    boolean_out: bool = False,
    vjp: Vjp | None = None,
) -> Rule:
    def infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
        dt = _same_dtype(ts)
        return [TensorType(DType.BOOL if boolean_out else dt, _bcast(ts))]

    def impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
        out = fn(xs[0], xs[1])
        return [np.asarray(out, dtype=bool if boolean_out else xs[0].dtype)]

    return Rule(2, 2, infer, impl, vjp)


def _unary(
    fn: Callable[[np.ndarray], np.ndarray],
    out_dtype: DType | None = None,
    vjp: Vjp | None = None,
) -> Rule:
    def infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
        return [TensorType(out_dtype or ts[0].dtype, ts[0].shape)]

    def impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
        x = xs[0]
        return [np.asarray(fn(x), dtype=out_dtype.numpy if out_dtype else x.dtype)]

    return Rule(1, 1, infer, impl, vjp)


def _float_unary(fn: Callable[[np.ndarray], np.ndarray], vjp: Vjp | None = None) -> Rule:
    """Elementwise math evaluated in float64 and rounded to the operand's dtype."""
    return _unary(lambda x: fn(x.astype(np.float64)), vjp=vjp)


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise IRError(f"axis {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        return np.trunc(a / b).astype(a.dtype)  # ONNX integer Div truncates
    return a / b


def _mod(a: np.ndarray, b: np.ndarray, fmod: bool) -> np.ndarray:
    return np.fmod(a, b) if fmod else np.mod(a, b)


def _same(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    return [ts[0]]


# ---------------------------------------------------------------- casts and where


def _cast_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    return [TensorType(DType(a["to"]), ts[0].shape)]


def _cast_impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    to = DType(a["to"])
    x = xs[0]
    if to is DType.BOOL:
        return [x != 0]
    if x.dtype.kind == "f" and not to.is_float:
        with np.errstate(invalid="ignore"):
            return [np.trunc(x).astype(to.numpy)]
    return [x.astype(to.numpy)]


def _where_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    if ts[0].dtype is not DType.BOOL:
        raise IRError("where condition must be bool")
    return [TensorType(_same_dtype(ts[1:]), _bcast(ts))]


# ---------------------------------------------------------------- contraction


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if len(a) == 0 or len(b) == 0:
        raise IRError("matmul operands must have rank >= 1")
    a2 = a if len(a) > 1 else (1, a[0])
    b2 = b if len(b) > 1 else (b[0], 1)
    if a2[-1] != b2[-2]:
        raise IRError(f"matmul inner dims differ: {a} x {b}")
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    return [TensorType(_same_dtype(ts), _matmul_shape(ts[0].shape, ts[1].shape))]


def _matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """float32 matmul with float32 accumulation, as onnxruntime's MLAS does it. A uniform matrix
    w (a weight without data, `wsecc.ir.arrays.placeholder`: every element the same) is not
    expanded: each output is the row sum of x times that element."""
    if w.ndim == 2 and x.ndim >= 2 and is_uniform(w):
        rows = x.sum(axis=-1, keepdims=True, dtype=np.float32) * w.reshape(-1)[0]
        return np.broadcast_to(rows, (*x.shape[:-1], w.shape[1])).copy()
    return np.matmul(x, w)


def _gemm_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    sa, sb = ts[0].shape, ts[1].shape
    if len(sa) != 2 or len(sb) != 2:
        raise IRError("gemm operands must be rank 2")
    m, k = sa[::-1] if a.get("trans_a") else sa
    k2, n = sb[::-1] if a.get("trans_b") else sb
    if k != k2:
        raise IRError(f"gemm inner dims differ: {sa} x {sb}")
    if len(ts) == 3:
        _bcast([TensorType(ts[2].dtype, (m, n)), ts[2]])
    return [TensorType(_same_dtype(ts), (m, n))]


def _gemm_impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    x = xs[0].T if a.get("trans_a") else xs[0]
    w = xs[1].T if a.get("trans_b") else xs[1]
    y = _matmul(x, w) * np.asarray(a.get("alpha", 1.0), x.dtype)
    if len(xs) == 3:
        y = y + np.asarray(a.get("beta", 1.0), x.dtype) * xs[2]
    return [y.astype(xs[0].dtype)]


def _einsum_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    dummies = [np.empty(t.shape, dtype=np.bool_) for t in ts]
    try:
        out = np.einsum(a["equation"], *dummies)
    except ValueError as e:
        raise IRError(f"einsum {a['equation']!r}: {e}") from e
    return [TensorType(_same_dtype(ts), tuple(np.shape(out)))]


# ---------------------------------------------------------------- layout


def _reshape_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    shape = tuple(int(d) for d in a["shape"])
    if int(np.prod(shape, dtype=np.int64)) != ts[0].size:
        raise IRError(f"reshape {ts[0].shape} -> {shape} changes the element count")
    return [TensorType(ts[0].dtype, shape)]


def _transpose_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    perm = tuple(a["perm"])
    if sorted(perm) != list(range(ts[0].rank)):
        raise IRError(f"transpose perm {perm} does not fit rank {ts[0].rank}")
    return [TensorType(ts[0].dtype, tuple(ts[0].shape[p] for p in perm))]


def _expand_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    shape = tuple(a["shape"])
    return [TensorType(ts[0].dtype, _bcast([ts[0], TensorType(ts[0].dtype, shape)]))]


def _concat_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    ax = _axis(a["axis"], ts[0].rank)
    for t in ts[1:]:
        if t.rank != ts[0].rank or any(
            d1 != d2 for i, (d1, d2) in enumerate(zip(t.shape, ts[0].shape, strict=True)) if i != ax
        ):
            raise IRError(f"concat shapes differ off axis {ax}: {[t.shape for t in ts]}")
    shape = list(ts[0].shape)
    shape[ax] = sum(t.shape[ax] for t in ts)
    return [TensorType(_same_dtype(ts), tuple(shape))]


def _slice_index(shape: tuple[int, ...], a: Attrs) -> tuple[slice, ...]:
    index = [slice(None)] * len(shape)
    for s, e, ax, st in zip(a["starts"], a["ends"], a["axes"], a["steps"], strict=True):
        index[_axis(ax, len(shape))] = slice(*slice(s, e, st).indices(shape[_axis(ax, len(shape))]))
    return tuple(index)


def _slice_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    shape = ts[0].shape
    out = np.empty(shape, dtype=np.bool_)[_slice_index(shape, a)].shape
    return [TensorType(ts[0].dtype, tuple(out))]


def _split_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    ax = _axis(a["axis"], ts[0].rank)
    sizes = tuple(a["sizes"])
    if sum(sizes) != ts[0].shape[ax]:
        raise IRError(f"split sizes {sizes} do not sum to dim {ts[0].shape[ax]}")
    outs = []
    for s in sizes:
        shape = list(ts[0].shape)
        shape[ax] = s
        outs.append(TensorType(ts[0].dtype, tuple(shape)))
    return outs


def _split_impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    ax = _axis(a["axis"], xs[0].ndim)
    return list(np.split(xs[0], np.cumsum(a["sizes"])[:-1], axis=ax))


def _gather_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    data, idx = ts
    if idx.dtype not in (DType.INT64, DType.INT32):
        raise IRError("gather indices must be int32/int64")
    ax = _axis(a["axis"], data.rank)
    return [TensorType(data.dtype, data.shape[:ax] + idx.shape + data.shape[ax + 1 :])]


def _wrap_indices(idx: np.ndarray, n: int, what: str) -> np.ndarray:
    """ONNX indices in [-n, n) as [0, n); out of range is an error, not a silent clip."""
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IRError(f"{what} index out of range [{-n}, {n})")
    return np.where(idx < 0, idx + n, idx)


def _gather_impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    data, idx = xs
    ax = _axis(a["axis"], data.ndim)
    return [np.take(data, _wrap_indices(idx, data.shape[ax], "gather"), axis=ax)]


def _gather_nd_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    data, idx = ts
    b = a.get("batch_dims", 0)
    k = idx.shape[-1]
    return [TensorType(data.dtype, idx.shape[:-1] + data.shape[b + k :])]


def _gather_nd_impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    data, idx = xs
    b = a.get("batch_dims", 0)
    if b != 0:
        raise IRError("gather_nd with batch_dims != 0 is not supported")
    k = idx.shape[-1]
    flat = idx.reshape(-1, k)
    shape = np.array(data.shape[:k])
    flat = np.where(flat < 0, flat + shape, flat)
    if flat.size and ((flat < 0).any() or (flat >= shape).any()):
        raise IRError("gather_nd index out of range")
    out = data[tuple(flat.T)]
    return [out.reshape(idx.shape[:-1] + data.shape[k:])]


def _gather_elements_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    data, idx = ts
    if data.rank != idx.rank:
        raise IRError("gather_elements operands must have the same rank")
    return [TensorType(data.dtype, idx.shape)]


def _gather_elements_impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    data, idx = xs
    ax = _axis(a["axis"], data.ndim)
    return [
        np.take_along_axis(data, _wrap_indices(idx, data.shape[ax], "gather_elements"), axis=ax)
    ]


def _scatter_elements_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    data, idx, upd = ts
    if not data.rank == idx.rank == upd.rank or idx.shape != upd.shape:
        raise IRError(
            f"scatter_elements expects data and indices of one rank, updates of the indices' "
            f"shape, got {data.shape}, {idx.shape}, {upd.shape}"
        )
    if upd.dtype != data.dtype:
        raise IRError("scatter_elements updates must have the data's dtype")
    return [TensorType(data.dtype, data.shape)]


def _scatter_elements_impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    """ONNX ScatterElements without reduction: a copy of data with updates written at the
    indices along `axis` (Llama 4's router writes its top-k logits into a row of -inf)."""
    data, idx, upd = xs
    ax = _axis(a["axis"], data.ndim)
    out = data.copy()
    np.put_along_axis(out, _wrap_indices(idx, data.shape[ax], "scatter_elements"), upd, axis=ax)
    return [out]


def _tile_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    return [
        TensorType(
            ts[0].dtype, tuple(d * r for d, r in zip(ts[0].shape, a["repeats"], strict=True))
        )
    ]


# ---------------------------------------------------------------- reductions


def _reduce_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    axes = {_axis(x, ts[0].rank) for x in a["axes"]} if a["axes"] else set(range(ts[0].rank))
    keep = a.get("keepdims", True)
    shape = tuple(
        (1 if i in axes else d) for i, d in enumerate(ts[0].shape) if keep or i not in axes
    )
    return [TensorType(ts[0].dtype, shape)]


def _reduce(fn: Callable[..., np.ndarray], vjp: Vjp) -> Rule:
    def impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
        x = xs[0]
        axes = tuple(_axis(ax, x.ndim) for ax in a["axes"]) if a["axes"] else None
        return [np.asarray(fn(x, axis=axes, keepdims=a.get("keepdims", True)), dtype=x.dtype)]

    return Rule(1, 1, _reduce_infer, impl, vjp)


def _cumsum_impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    ax = _axis(a["axis"], x.ndim)
    if a.get("reverse"):
        x = np.flip(x, ax)
    y = np.cumsum(x, axis=ax, dtype=x.dtype)
    if a.get("exclusive"):
        y = y - x
    if a.get("reverse"):
        y = np.flip(y, ax)
    return [y]


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - m)
        return e / np.sum(e, axis=axis, keepdims=True)


# ---------------------------------------------------------------- fused ops

GELU_TANH_C = math.sqrt(2.0 / math.pi)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """GELU: exact `0.5·x·(1 + erf(x/√2))`, or `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`."""
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * x64 * (1.0 + np.tanh(GELU_TANH_C * (x64 + 0.044715 * x64**3)))
    else:
        y = 0.5 * x64 * (1.0 + _erf(x64 / math.sqrt(2.0)))
    return y.astype(x.dtype)


def _activation(y: np.ndarray, act: str) -> np.ndarray:
    if act == "none":
        return y
    if act == "relu":
        return np.maximum(y, 0)
    if act == "tanh":
        return np.tanh(y.astype(np.float64)).astype(y.dtype)
    if act in ("gelu", "gelu_tanh"):
        return gelu(y, "tanh" if act == "gelu_tanh" else "none")
    raise IRError(f"unknown activation {act!r}")


ACTIVATIONS = ("none", "relu", "tanh", "gelu", "gelu_tanh")


def _linear_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    x, w = ts[0], ts[1]
    if w.rank != 2 or x.rank < 1 or x.shape[-1] != w.shape[0]:
        raise IRError(f"linear expects x[..., K] and W[K, N], got {x.shape} and {w.shape}")
    if a["has_bias"] != (len(ts) == 3):
        raise IRError("linear has_bias disagrees with its operand count")
    if len(ts) == 3 and ts[2].shape != (w.shape[1],):
        raise IRError(f"linear bias must be [N={w.shape[1]}], got {ts[2].shape}")
    if a["activation"] not in ACTIVATIONS:
        raise IRError(f"linear activation must be one of {ACTIVATIONS}")
    if a.get("softcap", 0.0) and (a["activation"] != "none" or a["softcap"] < 0):
        raise IRError("linear softcap needs no activation and a positive cap")
    return [TensorType(_same_dtype(ts), x.shape[:-1] + (w.shape[1],))]


def linear(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    """y = act(x @ W + b); W is [K, N]; soft-capped to c·tanh(y / c) with `softcap` c (an LM
    head's: Gemma 2's final_logit_softcapping)."""
    y = _matmul(xs[0], xs[1])
    if len(xs) == 3:
        y = y + xs[2]
    return [softcap(_activation(y, a["activation"]), a).astype(xs[0].dtype)]


MAX_SKIPS = 3
"""Skip operands a norm sums into its input: one residual; two in a parallel block (GPT-J,
GPT-NeoX, Falcon, CodeGen: x + attention + MLP)."""


def _check_skips(op: str, ts: Sequence[TensorType], params: int, skip: bool) -> None:
    skips = len(ts) - 1 - params
    if skips != 0 if not skip else not 1 <= skips <= MAX_SKIPS:
        raise IRError(f"{op} takes (x, [skip, ...], {'gamma' if params == 1 else 'gamma, beta'})")
    for t in ts[1 : 1 + skips]:
        if _bcast([ts[0], t]) != ts[0].shape:
            raise IRError(f"{op} skip must broadcast to x")


def norm_input(xs: Arrays, a: Attrs, params: int) -> np.ndarray:
    """s = x + (skip_1 + skip_2 + …): the skips summed in order, then added to x (a parallel
    block's attention and MLP outputs, then the residual stream); x alone without skips."""
    if not a["has_skip"]:
        return xs[0]
    skips = xs[1 : len(xs) - params]
    total = skips[0]
    for r in skips[1:]:
        total = total + r
    return xs[0] + total


def _layer_norm_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    _check_skips("layer_norm", ts, 2, a["has_skip"])
    x = ts[0]
    d = x.shape[-1]
    if ts[-2].shape != (d,) or ts[-1].shape != (d,):
        raise IRError(f"layer_norm gamma/beta must be [{d}]")
    outs = [TensorType(x.dtype, x.shape)]
    return outs + ([TensorType(x.dtype, x.shape)] if a.get("emit_sum") else [])


def layer_norm(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    """s = x (+ skips, `norm_input`); y = (s − mean(s)) / √(var(s) + ε) · γ + β over the last
    axis.

    Outputs y, and s too when `emit_sum` (the residual stream continues from s)."""
    s = norm_input(xs, a, 2)
    gamma, beta = xs[-2], xs[-1]
    mean = s.mean(axis=-1, keepdims=True)
    d = s - mean
    var = (d * d).mean(axis=-1, keepdims=True)
    y = (d / np.sqrt(var + np.asarray(a["epsilon"], s.dtype)) * gamma + beta).astype(s.dtype)
    return [y, s] if a.get("emit_sum") else [y]


def _rms_norm_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    _check_skips("rms_norm", ts, 1, a["has_skip"])
    x = ts[0]
    if ts[-1].shape != (x.shape[-1],):
        raise IRError(f"rms_norm gamma must be [{x.shape[-1]}]")
    return [TensorType(x.dtype, x.shape)] * (2 if a.get("emit_sum") else 1)


def rms_norm(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    """s = x (+ skips, `norm_input`); y = s / √(mean(s²) + ε) · γ over the last axis (Llama's
    RMSNorm, T5's LayerNorm). Outputs y, and s too when `emit_sum`."""
    s = norm_input(xs, a, 1)
    ms = (s * s).mean(axis=-1, keepdims=True)
    y = (s / np.sqrt(ms + np.asarray(a["epsilon"], s.dtype)) * xs[-1]).astype(s.dtype)
    return [y, s] if a.get("emit_sum") else [y]


def _top_k_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    x = ts[0]
    ax = _axis(a["axis"], x.rank)
    if not 0 <= a["k"] <= x.shape[ax]:
        raise IRError(f"top_k k={a['k']} is outside [0, {x.shape[ax]}]")
    shape = x.shape[:ax] + (a["k"],) + x.shape[ax + 1 :]
    return [TensorType(x.dtype, shape), TensorType(DType.INT64, shape)]


def top_k_indices(x: np.ndarray, k: int, axis: int, largest: bool = True) -> np.ndarray:
    """The indices of the k largest (or smallest) entries along `axis`, best first; equal
    values in index order, as ONNX TopK specifies."""
    key = -x if largest else x
    return np.argsort(key, axis=axis, kind="stable").take(np.arange(k), axis=axis)


def _top_k_impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    ax = _axis(a["axis"], x.ndim)
    idx = top_k_indices(x, a["k"], ax, a["largest"])
    return [np.take_along_axis(x, idx, axis=ax), idx.astype(np.int64)]


def _top_k_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    """The kept values' cotangents go back to where they were taken from (the choice is
    locally constant)."""
    x, idx = xs[0], ys[1]
    dx = np.zeros_like(x)
    np.put_along_axis(dx, idx, gs[0], axis=_axis(a["axis"], x.ndim))
    return [dx]


MOE_ROUTERS = ("softmax", "sigmoid")
"""How `moe` scores the experts before choosing its top k: softmax over all E, or a sigmoid
each."""


MOE_ACTIVATIONS = ("silu", "clamped_silu")
"""A `moe` expert's gate: SwiGLU's silu(g)·u, or gpt-oss's clamped variant with its `alpha` and
`limit`: g' = min(g, limit), u' = clip(u, -limit, limit), g'·σ(alpha g')·(u' + 1)."""


MOE_SCALES = ("output", "input")
"""What a `moe` block's router weight w_j scales: the chosen expert's output (Mixtral, Qwen,
gpt-oss), or its input, y_j = expert(w_j · x) (Llama 4's experts read x times the sigmoid of
their logit)."""


MOE_SHARED = ("none", "plain", "sigmoid")
"""A `moe` block's shared expert: none; one every token goes through, added to the routed sum;
or that, scaled per token by sigmoid(x·w_shared_gate) (Qwen2-MoE)."""


def _moe_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    x, wr, wg, wu, wd = ts[:5]
    h = x.shape[-1] if x.rank else 0
    e, i = (wg.shape[0], wg.shape[2]) if wg.rank == 3 else (0, 0)
    r = wr.shape[-1] if wr.rank == 2 else 0
    if wr.shape != (h, r) or wg.shape != (e, h, i) or wu != wg or wd.shape != (e, i, h):
        raise IRError(
            f"moe expects x[..., H], W_router[H, E], W_gate and W_up [E, H, I], W_down [E, I, H], "
            f"got {x.shape}, {wr.shape}, {wg.shape}, {wu.shape}, {wd.shape}"
        )
    first = int(a.get("first", 0))
    if not 0 <= first <= r - e:
        raise IRError(
            f"moe holds experts {first} to {first + e - 1} of its router's {r}: a shard's "
            "experts must lie within the router's"
        )
    if a.get("accumulate", False) and ts[-1].shape != x.shape:
        raise IRError(f"moe's running sum must be x's shape {x.shape}, got {ts[-1].shape}")
    if a["router"] not in MOE_ROUTERS or a["activation"] not in MOE_ACTIVATIONS:
        raise IRError(
            f"moe router must be one of {MOE_ROUTERS}, activation one of {MOE_ACTIVATIONS}"
        )
    if a.get("scale", "output") not in MOE_SCALES:
        raise IRError(f"moe scale must be one of {MOE_SCALES}")
    if a["activation"] == "clamped_silu" and not float(a.get("limit", 0.0)) > 0:
        raise IRError("moe's clamped_silu needs a positive limit")
    if not 1 <= a["k"] <= r:
        raise IRError(f"moe chooses k={a['k']} of {r} experts")
    shared = a.get("shared", "none")
    want = moe_bias_start(a) + 4 * int(bool(a.get("bias", False)))
    want += int(bool(a.get("accumulate", False)))
    if want != len(ts):
        raise IRError(f"moe shared {shared!r} takes {want} operands, got {len(ts)}")
    if a.get("bias", False):
        start = moe_bias_start(a)
        got = tuple(t.shape for t in ts[start : start + 4])
        if got != ((r,), (e, i), (e, i), (e, h)):
            raise IRError(
                f"moe's biases expect b_router [E], b_gate and b_up [E, I], b_down [E, H], "
                f"got {got}"
            )
    if shared != "none":
        sg, su, sd = ts[5:8]
        s_ = sg.shape[-1] if sg.rank == 2 else 0
        if sg.shape != (h, s_) or su != sg or sd.shape != (s_, h):
            raise IRError(
                f"moe's shared expert expects W_gate, W_up [H, S], W_down [S, H], got "
                f"{sg.shape}, {su.shape}, {sd.shape}"
            )
        if shared == "sigmoid" and ts[8].shape != (h, 1):
            raise IRError(f"moe's shared expert gate must be [H, 1], got {ts[8].shape}")
    return [TensorType(_same_dtype(ts), x.shape)]


def moe_bias_start(a: Attrs) -> int:
    """The index of a `moe` op's first bias operand (b_router, b_gate, b_up, b_down follow the
    weights and the shared expert's when `bias`)."""
    return {"none": 5, "plain": 8, "sigmoid": 9}.get(a.get("shared", "none"), 5)


def moe_gate(g: np.ndarray, u: np.ndarray, a: Attrs) -> np.ndarray:
    """An expert's hidden units from its gate and up projections (`MOE_ACTIVATIONS`), in
    float64 rounded to g's dtype."""
    if a["activation"] != "clamped_silu":
        return (silu(g) * u).astype(g.dtype)
    lim = float(a["limit"])
    g64 = np.minimum(g.astype(np.float64), lim)
    u64 = np.clip(u.astype(np.float64), -lim, lim)
    return (g64 * _expit(float(a["alpha"]) * g64) * (u64 + 1)).astype(g.dtype)


def moe_routing(
    x2: np.ndarray, wr: np.ndarray, a: Attrs, br: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The router of `moe` on tokens x2[T, H]: the chosen experts [T, k] (best first, ties to
    the lower index, as ONNX TopK) and their weights [T, k] (renormalised to sum 1 when
    `normalize`). `br`, the router's bias, is added to the logits. A softmax renormalised over
    the kept k is the softmax of the k largest logits (gpt-oss's router)."""
    logits = _matmul(x2, wr)
    if br is not None:
        logits = (logits + br).astype(x2.dtype)
    if a["router"] == "softmax":
        scores = softmax(logits, -1).astype(x2.dtype)
    else:
        scores = _expit(logits.astype(np.float64)).astype(x2.dtype)
    # a sigmoid router chooses by the logits: the sigmoid's order, without the ties its float32
    # saturation makes past |logit| ~ 17 (Llama 4 takes the top-k of the logits)
    idx = top_k_indices(scores if a["router"] == "softmax" else logits, a["k"], 1)
    w = np.take_along_axis(scores, idx, axis=1)
    if a["normalize"]:
        w = (w / w.sum(axis=1, keepdims=True)).astype(x2.dtype)
    return idx, w


def moe(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    """A mixture-of-experts block (Mixtral's, Qwen2-MoE's, Qwen3-MoE's):
    scores = softmax(x·W_router) (or sigmoid), the k best experts per token with their scores
    as weights (divided by their sum when `normalize`), and
    y = Σ_j w_j · (silu(x·W_gate[e_j]) · (x·W_up[e_j]))·W_down[e_j] over the k chosen e_j,
    summed in choice order (best first), as the exporters' combine sums them; then, with a
    shared expert (`shared`), y + s·(silu(x·S_gate) · (x·S_up))·S_down, s = 1 or, "sigmoid",
    sigmoid(x·w_shared_gate). With `bias` (gpt-oss) the router's logits and each expert's
    gate, up and down projections add their biases; `activation` "clamped_silu" is gpt-oss's
    gate (`moe_gate`). With `scale` "input" (Llama 4) each w_j scales the expert's input, not
    its output: y = Σ_j expert_{e_j}(w_j · x) (`MOE_SCALES`).

    A shard of a block (`split-moe`): W_router keeps all R of the block's experts and the
    top k is chosen over all R, but the op holds only experts `first` .. `first` + E - 1 and
    adds only the choices that fall among them; with `accumulate`, the last operand is the
    running sum of the shards before, which the op's sum is added to."""
    x, wr, wg, wu, wd = xs[:5]
    x2 = x.reshape(-1, x.shape[-1])
    start = moe_bias_start(a)
    br, bg, bu, bd = xs[start : start + 4] if a.get("bias", False) else (None,) * 4
    idx, w = moe_routing(x2, wr, a, br)
    y = np.zeros((a["k"],) + x2.shape, x.dtype)
    on_input = a.get("scale", "output") == "input"
    first = int(a.get("first", 0))
    for e in range(wg.shape[0]):
        rows, slot = np.nonzero(idx == first + e)
        if rows.size:
            xe = (x2[rows] * w[rows, slot, None]).astype(x.dtype) if on_input else x2[rows]
            zg, zu = _matmul(xe, wg[e]), _matmul(xe, wu[e])
            if bg is not None and bu is not None:
                zg, zu = (zg + bg[e]).astype(x.dtype), (zu + bu[e]).astype(x.dtype)
            ye = _matmul(moe_gate(zg, zu, a), wd[e])
            if bd is not None:
                ye = (ye + bd[e]).astype(x.dtype)
            y[slot, rows] = ye if on_input else ye * w[rows, slot, None]
    out = y.sum(axis=0).astype(x.dtype)
    if a.get("shared", "none") != "none":
        hs = silu(_matmul(x2, xs[5])) * _matmul(x2, xs[6])
        ys = _matmul(hs.astype(x.dtype), xs[7])
        if a["shared"] == "sigmoid":
            ys = ys * _expit(_matmul(x2, xs[8]).astype(np.float64)).astype(x.dtype)
        out = (out + ys).astype(x.dtype)
    if a.get("accumulate", False):
        out = (xs[-1].reshape(x2.shape) + out).astype(x.dtype)
    return [out.reshape(x.shape)]


def _moe_gate_grads(
    g: np.ndarray, u: np.ndarray, a: Attrs
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An expert's hidden units h (`moe_gate`) and dh/dg, dh/du, elementwise in float64.
    silu: h = silu(g)·u. clamped_silu: with g' = min(g, limit), u' = clip(u, -limit, limit) and
    s = σ(alpha·g'), h = g'·s·(u' + 1); a clamp passes the gradient inside its bounds (bounds
    included, as torch's clamp) and stops it outside."""
    g, u = g.astype(np.float64), u.astype(np.float64)
    if a["activation"] != "clamped_silu":
        s = _expit(g)
        return g * s * u, s * (1 + g * (1 - s)) * u, g * s
    lim, alpha = float(a["limit"]), float(a["alpha"])
    gc, uc = np.minimum(g, lim), np.clip(u, -lim, lim)
    s = _expit(alpha * gc)
    dg = (g <= lim) * (s + alpha * gc * s * (1 - s)) * (uc + 1)
    du = (np.abs(u) <= lim) * gc * s
    return gc * s * (uc + 1), dg, du


@dataclass(frozen=True)
class _SwigluGrads:
    """One SwiGLU MLP's backward on z[T, H] (`_swiglu_vjp`): its output y (before any scale,
    down bias included), dz and the weights' and biases' gradients (float64)."""

    y: np.ndarray
    dz: np.ndarray
    dw_gate: np.ndarray
    dw_up: np.ndarray
    dw_down: np.ndarray
    db_gate: np.ndarray
    db_up: np.ndarray
    db_down: np.ndarray


def _swiglu_vjp(
    z: np.ndarray,
    dy: np.ndarray,
    w: tuple[np.ndarray, np.ndarray, np.ndarray],
    b: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    a: Attrs,
) -> _SwigluGrads:
    """y = gate(z·W_gate + b_gate, z·W_up + b_up)·W_down + b_down (an expert, `moe_gate`'s
    activation) and its vjp for dy: dh = dy·W_downᵀ, dz_gate = dh·∂h/∂g, dz_up = dh·∂h/∂u,
    dz = dz_gate·W_gateᵀ + dz_up·W_upᵀ, dW = (its input)ᵀ·(its output's cotangent),
    db = Σ over tokens. float64 throughout."""
    wg, wu, wd = (m.astype(np.float64) for m in w)
    zg, zu = z @ wg, z @ wu
    if b is not None:
        zg, zu = zg + b[0], zu + b[1]
    h, dhdg, dhdu = _moe_gate_grads(zg, zu, a)
    y = h @ wd + (b[2] if b is not None else 0.0)
    dh = dy @ wd.T
    dzg, dzu = dh * dhdg, dh * dhdu
    return _SwigluGrads(
        y=y,
        dz=dzg @ wg.T + dzu @ wu.T,
        dw_gate=z.T @ dzg,
        dw_up=z.T @ dzu,
        dw_down=h.T @ dy,
        db_gate=dzg.sum(axis=0),
        db_up=dzu.sum(axis=0),
        db_down=dy.sum(axis=0),
    )


def _moe_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    """`moe`'s vjp with the router's choice held (locally constant, as TopK's: a perturbation
    small enough not to change any token's top k leaves it unchanged), in float64.

    Per token, with w_j the kept weight of its j-th choice e_j and y_j that expert's output:
    - scale "output" (y = Σ_j w_j·y_j): the expert gets dy_j = w_j·dy, and dw_j = dy·y_j;
      scale "input" (y = Σ_j expert(w_j·x)): the expert gets dy, its input's cotangent dz_j
      goes to x as w_j·dz_j, and dw_j = x·dz_j;
    - the experts backward (`_swiglu_vjp`); an expert no token chose gets zero gradients;
    - the kept weights back to the scores of the chosen experts: renormalised (w = s/Σs over
      the kept), ds_j = (dw_j − Σ_i dw_i w_i)/Σs, else ds_j = dw_j; the others' ds is 0;
    - the scores back to the logits l: softmax over all E, dl = s·(ds − Σ ds·s); sigmoid,
      dl = ds·s·(1 − s). gpt-oss's softmax of the kept logits is the renormalised softmax,
      the same rule; the router's bias gets Σ dl;
    - dW_router = xᵀ·dl, and x gets dl·W_routerᵀ besides the experts';
    - a shared expert: its own backward on x, scaled by σ(x·w_gate) when "sigmoid", whose gate
      gets dq = Σ_H dy·y_shared, dl_q = dq·q·(1 − q), dw_gate = xᵀ·dl_q, dx += dl_q·w_gateᵀ;
    - a shard (`split-moe`): only the choices among its experts, its router copy getting their
      part of dl; with `accumulate`, the running sum's cotangent is dy.
    """
    x, wr, wg, wu, wd = xs[:5]
    x64 = x.reshape(-1, x.shape[-1]).astype(np.float64)
    dy = gs[0].reshape(x64.shape).astype(np.float64)
    bias = bool(a.get("bias", False))
    start = moe_bias_start(a)
    br, bg, bu, bd = xs[start : start + 4] if bias else (None,) * 4
    idx, _ = moe_routing(x.reshape(x64.shape), wr, a, br)  # the forward's choice, exactly
    logits = x64 @ wr.astype(np.float64) + (0.0 if br is None else br.astype(np.float64))
    scores = softmax(logits, 1) if a["router"] == "softmax" else _expit(logits)
    kept = np.take_along_axis(scores, idx, axis=1)
    total = kept.sum(axis=1, keepdims=True)
    w = kept / total if a["normalize"] else kept
    on_input = a.get("scale", "output") == "input"
    dx = np.zeros_like(x64)
    dw = np.zeros_like(w)
    dwg, dwu, dwd = (np.zeros(m.shape, np.float64) for m in (wg, wu, wd))
    dbg, dbu, dbd = np.zeros(wg.shape[::2]), np.zeros(wg.shape[::2]), np.zeros(wd.shape[::2])
    first = int(a.get("first", 0))  # a shard's experts (`split-moe`): first .. first + E - 1
    for ex in range(wg.shape[0]):
        rows, slot = np.nonzero(idx == first + ex)
        if not rows.size:
            continue
        wj = w[rows, slot, None]
        z = x64[rows] * wj if on_input else x64[rows]
        b = None if bg is None or bu is None or bd is None else (bg[ex], bu[ex], bd[ex])
        r = _swiglu_vjp(z, dy[rows] if on_input else dy[rows] * wj, (wg[ex], wu[ex], wd[ex]), b, a)
        if on_input:
            dw[rows, slot] = np.sum(r.dz * x64[rows], axis=1)
            np.add.at(dx, rows, r.dz * wj)
        else:
            dw[rows, slot] = np.sum(dy[rows] * r.y, axis=1)
            np.add.at(dx, rows, r.dz)
        dwg[ex], dwu[ex], dwd[ex] = r.dw_gate, r.dw_up, r.dw_down
        dbg[ex], dbu[ex], dbd[ex] = r.db_gate, r.db_up, r.db_down
    dkept = (dw - np.sum(dw * w, axis=1, keepdims=True)) / total if a["normalize"] else dw
    ds = np.zeros_like(scores)
    np.put_along_axis(ds, idx, dkept, axis=1)
    if a["router"] == "softmax":
        dl = scores * (ds - np.sum(ds * scores, axis=1, keepdims=True))
    else:
        dl = ds * scores * (1 - scores)
    dx += dl @ wr.astype(np.float64).T
    out: list[np.ndarray | None] = [dx, x64.T @ dl, dwg, dwu, dwd]
    shared = a.get("shared", "none")
    if shared != "none":
        q = _expit(x64 @ xs[8].astype(np.float64)) if shared == "sigmoid" else None
        ws = (xs[5], xs[6], xs[7])
        r = _swiglu_vjp(x64, dy if q is None else dy * q, ws, None, a | {"activation": "silu"})
        dx += r.dz
        out += [r.dw_gate, r.dw_up, r.dw_down]
        if q is not None:  # r.y: the shared expert's output before the gate
            dlq = np.sum(dy * r.y, axis=1, keepdims=True) * q * (1 - q)
            dx += dlq @ xs[8].astype(np.float64).T
            out.append(x64.T @ dlq)
    if bias:
        out += [dl.sum(axis=0), dbg, dbu, dbd]
    if a.get("accumulate", False):  # the running sum of the shards before passes through
        out.append(dy.reshape(xs[-1].shape))
    out[0] = dx.reshape(x.shape)
    return [None if d is None else d.astype(s.dtype) for d, s in zip(out, xs, strict=True)]


def _gated_linear_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    x, wg, wu = ts[0], ts[1], ts[2]
    if wg.rank != 2 or wg != wu or x.shape[-1] != wg.shape[0]:
        raise IRError(
            f"gated_linear expects x[..., K] and W_gate, W_up [K, N], got {x.shape}, "
            f"{wg.shape} and {wu.shape}"
        )
    if a["has_bias"] != (len(ts) == 5):
        raise IRError("gated_linear has_bias disagrees with its operand count")
    if len(ts) == 5 and (ts[3].shape != (wg.shape[1],) or ts[4].shape != (wg.shape[1],)):
        raise IRError(f"gated_linear biases must be [N={wg.shape[1]}]")
    if a["activation"] not in GATES:
        raise IRError(f"gated_linear activation must be one of {GATES}")
    return [TensorType(_same_dtype(ts), x.shape[:-1] + (wg.shape[1],))]


GATES = ("silu", "gelu", "gelu_tanh")
"""Gate activations of `gated_linear`: SwiGLU's SiLU; GeGLU's exact (erf) or tanh GELU (Gemma,
ModernBERT)."""


def _gate(z: np.ndarray, act: str) -> np.ndarray:
    return silu(z) if act == "silu" else gelu(z, "tanh" if act == "gelu_tanh" else "none")


def _gate_grad(z: np.ndarray, act: str) -> np.ndarray:
    """d gate(z) / dz in float64: σ(z)·(1 + z·(1 − σ(z))) for SiLU, else GELU's."""
    if act != "silu":
        return gelu_grad(z, "tanh" if act == "gelu_tanh" else "none").astype(np.float64)
    s = _expit(z.astype(np.float64))
    return s * (1 + z * (1 - s))


def _gated_parts(xs: Arrays) -> tuple[np.ndarray, np.ndarray]:
    """z_gate = x·W_gate (+ b_gate), z_up = x·W_up (+ b_up)."""
    zg, zu = _matmul(xs[0], xs[1]), _matmul(xs[0], xs[2])
    if len(xs) == 5:
        zg, zu = zg + xs[3], zu + xs[4]
    return zg, zu


def silu(z: np.ndarray) -> np.ndarray:
    """z·σ(z), in float64, rounded to z's dtype."""
    z64 = z.astype(np.float64)
    return (z64 * _expit(z64)).astype(z.dtype)


def gated_linear(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    """y = act(x·W_gate + b_gate) · (x·W_up + b_up): the gated half of a SwiGLU (act SiLU) or
    GeGLU (act GELU) MLP (its down projection is a Linear)."""
    zg, zu = _gated_parts(xs)
    return [(_gate(zg, a["activation"]) * zu).astype(xs[0].dtype)]


def _gated_linear_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    """dz_up = g·silu(z_gate); dz_gate = g·z_up·σ(z_gate)·(1 + z_gate·(1 − σ(z_gate))); then
    each as a Linear's: dx sums both, dW = xᵀ·dz, db = Σ dz."""
    x, wg, wu, g = xs[0], xs[1], xs[2], gs[0]
    zg, zu = _gated_parts(xs)
    act = a["activation"]
    dzu = (g * _gate(zg, act)).astype(g.dtype)
    dzg = (g * zu * _gate_grad(zg, act)).astype(g.dtype)
    k, n = wg.shape
    x2 = x.reshape(-1, k).T
    dzg2, dzu2 = dzg.reshape(-1, n), dzu.reshape(-1, n)
    out: list[np.ndarray | None] = [
        _matmul(dzg, wg.T) + _matmul(dzu, wu.T),
        _matmul(x2, dzg2),
        _matmul(x2, dzu2),
    ]
    return out + ([dzg2.sum(axis=0), dzu2.sum(axis=0)] if len(xs) == 5 else [])


def _rms_norm_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    """With r = 1/√(mean(s²) + ε), x̂ = s·r: dγ = Σ g·x̂ and ds = r·(ĝ − x̂·mean(ĝ·x̂)) with
    ĝ = g·γ, plus the emitted sum's own cotangent."""
    s = norm_input(xs, a, 1)
    gamma, g = xs[-1], gs[0]
    r = 1 / np.sqrt((s * s).mean(axis=-1, keepdims=True) + np.asarray(a["epsilon"], s.dtype))
    xhat = s * r
    gh = g * gamma
    ds = r * (gh - xhat * (gh * xhat).mean(axis=-1, keepdims=True))
    if a.get("emit_sum"):
        ds = ds + gs[1]
    dgamma = (g * xhat).reshape(-1, gamma.shape[0]).sum(axis=0)
    parts = xs[:-1]  # x and the skips
    return [_unbroadcast(ds, x.shape) for x in parts] + [dgamma]


ATTENTION_MASKS = ("none", "key_padding", "key_length", "full")
"""Attention mask kinds, by their operand: none; key_padding [B, S_kv] (mask[b, key] == 0 drops
the key); key_length [B] (keys at or past len[b] dropped); full [B, S_q, S_kv] (mask[b, query,
key] == 0 drops the pair: Megatron's per-query mask, a 4-D mask_index sliced to the sequence).
Whatever the kind, `has_bias` adds a constant bias operand [H, S_q, S_kv] after the mask operand
(`attention_bias_operand`): MPNet's relative position bias, added to the scaled scores."""

ROTARY = ("none", "half", "interleaved")
"""Rotary position embedding forms: none; rotate-half (Llama, GPT-NeoX: the two halves of the
rotated dims pair up); interleaved (GPT-J: neighbours 2i, 2i+1 pair up)."""


def _attention_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    h, dh = a["num_heads"], a["head_dim"]
    kvh = int(a["kv_heads"]) if "kv_heads" in a else int(h)
    if kvh < 1 or h % kvh:
        raise IRError(f"attention kv_heads {kvh} does not divide num_heads {h}")
    q, k, v = ts[0], ts[1], ts[2]
    for t, off, n in ((q, a["q_offset"], h), (k, a["k_offset"], kvh), (v, a["v_offset"], kvh)):
        if t.rank != 3 or t.shape[-1] < off + n * dh:
            raise IRError(f"attention operand {t.shape} has no {n}x{dh} columns at offset {off}")
    mask = a["mask"]
    if mask not in ATTENTION_MASKS:
        raise IRError(f"attention mask kind {mask!r} unknown")
    rotary = a.get("rotary", "none")
    if rotary not in ROTARY:
        raise IRError(f"attention rotary form {rotary!r} unknown")
    has_bias = bool(a.get("has_bias", False))
    if len(ts) != 3 + (mask != "none") + has_bias + 2 * (rotary != "none"):
        raise IRError("attention mask kind, bias or rotary form disagrees with its operand count")
    if mask == "key_padding" and ts[3].shape != (q.shape[0], k.shape[1]):
        raise IRError(f"attention key_padding mask must be [B, S_kv], got {ts[3].shape}")
    if mask == "key_length" and ts[3].shape != (q.shape[0],):
        raise IRError(f"attention key_length mask must be [B], got {ts[3].shape}")
    if mask == "full" and ts[3].shape != (q.shape[0], q.shape[1], k.shape[1]):
        raise IRError(f"attention full mask must be [B, S_q, S_kv], got {ts[3].shape}")
    bias = ts[3 + (mask != "none")] if has_bias else None
    if bias is not None and bias.shape != (h, q.shape[1], k.shape[1]):
        raise IRError(f"attention bias must be [H, S_q, S_kv] with H = {h}, got {bias.shape}")
    if a.get("softcap", 0.0) < 0:
        raise IRError(f"attention softcap {a['softcap']} is negative")
    if int(a.get("chunk", 0)) < 0:
        raise IRError(f"attention chunk {a['chunk']} is negative")
    if len(a.get("alibi", ())) not in (0, h):
        raise IRError(f"attention alibi has {len(a['alibi'])} slopes for {h} heads")
    if len(a.get("sinks", ())) not in (0, h):
        raise IRError(f"attention sinks has {len(a['sinks'])} logits for {h} heads")
    if rotary != "none":
        rd = a["rotary_dim"]
        if rd < 2 or rd % 2 or rd > dh:
            raise IRError(f"attention rotary_dim {rd} is not even and within head_dim {dh}")
        for t in ts[-2:]:
            if t.shape != (q.shape[1], dh):
                raise IRError(f"attention rotary tables must be [S, head_dim], got {t.shape}")
    return [TensorType(q.dtype, (q.shape[0], q.shape[1], h * dh))]


def attention_mask_operand(xs: Sequence[Any], a: Attrs) -> Any:
    """The mask operand of an attention's inputs (q, k, v, [mask], [bias], [cos, sin]), or
    None."""
    return xs[3] if a["mask"] != "none" else None


def attention_bias_operand(xs: Sequence[Any], a: Attrs) -> Any:
    """The bias operand [H, S_q, S_kv] of an attention's inputs (q, k, v, [mask], [bias],
    [cos, sin]), or None without `has_bias`."""
    return xs[3 + (a["mask"] != "none")] if a.get("has_bias") else None


def rotate(x: np.ndarray, form: str, rd: int) -> np.ndarray:
    """The rotary partner of each of the first `rd` features of x[..., dh], signed (zero beyond
    rd): rotate-half (-x2, x1) over the halves of x[..., :rd]; interleaved (-x[2i+1], x[2i])."""
    out = np.zeros_like(x)
    r = x[..., :rd]
    if form == "half":
        out[..., : rd // 2] = -r[..., rd // 2 :]
        out[..., rd // 2 : rd] = r[..., : rd // 2]
    else:
        out[..., 0:rd:2] = -r[..., 1::2]
        out[..., 1:rd:2] = r[..., 0::2]
    return out


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, form: str, rd: int) -> np.ndarray:
    """Rotary embedding of x[B, h, S, dh] with tables [S, dh]: x·cos + rotate(x)·sin (the
    exporters' order of operations; cos is 1 and sin 0 on dims beyond rotary_dim)."""
    return x * cos + rotate(x, form, rd) * sin


def _rope_vjp(g: np.ndarray, cos: np.ndarray, sin: np.ndarray, form: str, rd: int) -> np.ndarray:
    """rotate is a rotation by 90 degrees in each pair, so its transpose is -rotate."""
    return g * cos - rotate(g * sin, form, rd)


def attention_keep(a: Attrs, b: int, sq: int, sk: int, mask: np.ndarray | None) -> np.ndarray:
    """Boolean [B, 1, Sq, Sk]: which (query, key) pairs are attended."""
    keep = np.ones((b, 1, sq, sk), dtype=bool)
    if a["causal"]:
        keep &= np.tril(np.ones((sq, sk), dtype=bool), k=sk - sq)[None, None]
    if a.get("window", 0):
        keep &= np.triu(np.ones((sq, sk), dtype=bool), k=sk - sq - a["window"] + 1)[None, None]
    if a.get("chunk", 0):  # Llama 4's chunked local attention: query and key in one chunk
        keep &= _same_chunk(a, b, sq, sk, mask)
    if a["mask"] == "none":
        return keep
    if mask is None:
        raise IRError(f"attention with mask {a['mask']!r} needs a mask input")
    if a["mask"] == "key_padding":
        keep &= np.not_equal(mask, 0)[:, None, None, :]
    elif a["mask"] == "key_length":
        keep &= (np.arange(sk)[None, :] < mask[:, None])[:, None, None, :]
    elif a["mask"] == "full":
        keep &= np.not_equal(mask, 0)[:, None]
    return keep


def _same_chunk(a: Attrs, b: int, sq: int, sk: int, mask: np.ndarray | None) -> np.ndarray:
    """[B | 1, 1, Sq, Sk]: query and key in one chunk of `chunk` positions, the chunks counted
    from a row's first kept key under a key-padding mask (transformers' chunked mask: left
    padding shifts the chunks), from position 0 otherwise."""
    c = int(a["chunk"])
    lead = np.zeros((1, 1, 1, 1), np.int64)
    if a["mask"] == "key_padding" and mask is not None:
        lead = (np.cumsum(np.not_equal(mask, 0), axis=-1) == 0).sum(axis=-1)[:, None, None, None]
    query = np.arange(sk - sq, sk)[:, None] - lead
    key = np.arange(sk)[None, :] - lead
    return np.asarray(query // c == key // c)


def alibi_positions(mask: np.ndarray) -> np.ndarray:
    """[B, Sk] ALiBi key positions from a key-padding mask: the kept keys before each key
    (BLOOM's cumsum of the mask, minus 1), its index when nothing is padded."""
    return np.cumsum(np.not_equal(mask, 0), axis=-1) - 1


def attention_bias(
    a: Attrs, b: int, sk: int, mask: np.ndarray | None, table: np.ndarray | None = None
) -> np.ndarray | None:
    """Float32 [B | 1, h, 1 | Sq, Sk], what is added to the scaled scores: ALiBi's slope_h ×
    the key's position (`alibi_positions`; [B, h, 1, Sk]) plus the bias operand `table`
    [h, Sq, Sk] (`attention_bias_operand`; [1, h, Sq, Sk]); None with neither."""
    slopes = a.get("alibi", ())
    out = None
    if slopes:
        if a["mask"] == "key_padding" and mask is not None:
            pos = alibi_positions(mask)
        else:
            pos = np.broadcast_to(np.arange(sk), (b, sk))
        out = np.asarray(slopes, np.float32)[None, :, None, None] * pos[:, None, None, :].astype(
            np.float32
        )
    if table is not None:
        rows = np.asarray(table, np.float32)[None]
        out = rows if out is None else out + rows
    return out


def split_heads(x: np.ndarray, offset: int, h: int, dh: int) -> np.ndarray:
    """[B, S, ≥offset+h·dh] columns [offset, offset+h·dh) -> [B, h, S, dh]."""
    b, s, _ = x.shape
    return x[:, :, offset : offset + h * dh].reshape(b, s, h, dh).transpose(0, 2, 1, 3)


def attention(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    """Multi-head attention over per-head column blocks of q/k/v sources.

    q = heads(q_src[..., q_offset:]), likewise k and v; scores = scale·q·kᵀ, soft-capped to
    c·tanh(scores / c) with `softcap` c (Gemma 2; `softcap`), (+ ALiBi's
    slope_h × key position with `alibi`, + the bias operand with `has_bias`: `attention_bias`);
    positions not kept (causal: key > query; window w: key ≤ query − w, GPT-Neo's local attention;
    chunk c: key // c ≠ query // c, Llama 4's chunked local attention, positions counted from
    the first kept key of a key-padding mask;
    key_padding: mask[b, key] == 0; key_length: key ≥ len[b]; full: mask[b, query, key] == 0)
    are *replaced* by `fill` (exporters' −∞, finfo.min or −10000); p = softmax(scores), with
    `sinks` (gpt-oss's attention sinks) over the scores and one more logit per head, sink_h,
    whose probability is dropped (`with_sinks`); with `nan_to_zero`, NaN rows (all keys masked
    with −∞) become 0; out = merge_heads(p·v).
    """
    _, _, v, _, p = _attention_probs(xs, a)
    return [merge_heads(_matmul(p, v))]


def _attention_probs(
    xs: Arrays, a: Attrs
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-head q, k, v [B, h, S, dh] (rotated, K/V heads repeated to h), the kept pairs
    [B, 1, Sq, Sk] and the probabilities."""
    q, k, v = attention_heads_of(xs, a)
    scores = softcap(_matmul(q, k.transpose(0, 1, 3, 2)) * np.asarray(a["scale"], q.dtype), a)
    mask = attention_mask_operand(xs, a)
    bias = attention_bias(a, q.shape[0], k.shape[2], mask, attention_bias_operand(xs, a))
    if bias is not None:
        scores = scores + bias.astype(q.dtype)
    keep = attention_keep(a, q.shape[0], q.shape[2], k.shape[2], mask)
    scores = np.where(keep, scores, np.asarray(a["fill"], q.dtype))
    p = softmax(with_sinks(scores, a), axis=-1).astype(q.dtype)[..., : scores.shape[-1]]
    if a.get("nan_to_zero"):
        p = np.where(np.isnan(p), np.zeros((), p.dtype), p)
    return q, k, v, keep, p


def softcap(scores: np.ndarray, a: Attrs) -> np.ndarray:
    """c·tanh(scores / c) with the attention's `softcap` c (Gemma 2's attn_logit_softcapping,
    as its exports compute it: divided, tanh, multiplied), the scores themselves without."""
    c = a.get("softcap", 0.0)
    if not c:
        return scores
    cap = np.asarray(c, scores.dtype)
    return (np.tanh(scores / cap) * cap).astype(scores.dtype)


def with_sinks(scores: np.ndarray, a: Attrs) -> np.ndarray:
    """scores [B, h, Sq, Sk] with one more key per head whose score is sink_h (`sinks`), as
    gpt-oss concatenates its sinks before the softmax; the scores themselves without sinks."""
    sinks = a.get("sinks", ())
    if not sinks:
        return scores
    column = np.asarray(sinks, scores.dtype)[None, :, None, None]
    return np.concatenate([scores, np.broadcast_to(column, (*scores.shape[:3], 1))], axis=-1)


def attention_heads_of(
    xs: Sequence[np.ndarray], a: Attrs
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, k, v [B, h, S, dh] as the scores use them: split into heads, q and k rotated (when
    `rotary`), each of the kv_heads K/V heads repeated for its h / kv_heads query heads."""
    h, dh = a["num_heads"], a["head_dim"]
    kvh = int(a["kv_heads"]) if "kv_heads" in a else int(h)
    q = split_heads(xs[0], a["q_offset"], h, dh)
    k = split_heads(xs[1], a["k_offset"], kvh, dh)
    v = split_heads(xs[2], a["v_offset"], kvh, dh)
    if a.get("rotary", "none") != "none":
        cos, sin = xs[-2], xs[-1]
        q = rope(q, cos, sin, a["rotary"], a["rotary_dim"])
        k = rope(k, cos, sin, a["rotary"], a["rotary_dim"])
    if kvh != h:
        k, v = np.repeat(k, h // kvh, axis=1), np.repeat(v, h // kvh, axis=1)
    return q, k, v


def merge_heads(o: np.ndarray) -> np.ndarray:
    """[B, h, S, dh] -> [B, S, h·dh] (the inverse of `split_heads`' reshape)."""
    b, h, s, dh = o.shape
    return o.transpose(0, 2, 1, 3).reshape(b, s, h * dh)


def _embedding_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    if len(ts) % 2:
        raise IRError("embedding takes (ids, table) pairs")
    shapes = []
    for ids, table in zip(ts[0::2], ts[1::2], strict=True):
        if table.rank != 2 or ids.dtype not in (DType.INT64, DType.INT32):
            raise IRError("embedding needs int ids and a 2-D table")
        shapes.append(TensorType(table.dtype, ids.shape + (table.shape[1],)))
    return [TensorType(_same_dtype(shapes), _bcast(shapes))]


def padded_positions(ids: np.ndarray, pad: int) -> np.ndarray:
    """RoBERTa's position ids from the token ids: the tokens that are not `pad` numbered
    pad + 1, pad + 2, ... along the sequence (the last axis), a pad token at `pad`."""
    keep = (ids != pad).astype(np.int64)
    return np.cumsum(keep, axis=-1) * keep + pad


def embedding_ids(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    """The ids each table is looked up at: its operand, or for the pair `padded_positions`
    names, (pair, pad), the positions its operand's token ids give (`padded_positions`)."""
    ids = list(xs[0::2])
    pair = a.get("padded_positions")
    if pair:
        ids[pair[0]] = padded_positions(ids[pair[0]], pair[1])
    return ids


def embedding(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    """Σ_i table_i[ids_i] — token (+ position, + token type) embeddings, summed in order; the
    ids of one pair may be positions derived from token ids (`embedding_ids`); the sum times
    `scale` when there is one (Gemma's √d)."""
    out = None
    for ids, table in zip(embedding_ids(xs, a), xs[1::2], strict=True):
        g = _gather_impl([table, ids], {"axis": 0})[0]
        out = g if out is None else out + g
    assert out is not None
    if "scale" in a:
        out = (out * np.asarray(a["scale"], out.dtype)).astype(out.dtype)
    return [out]


def _gelu_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    if a["approximate"] not in ("none", "tanh"):
        raise IRError("gelu approximate must be 'none' or 'tanh'")
    return [ts[0]]


# ---------------------------------------------------------------- gradients (vjp)
# Each takes (inputs, outputs, output cotangents, attrs) and returns a cotangent per input, or
# None for an operand that is not differentiated. Broadcast operands get their cotangent summed
# back to their own shape (`_unbroadcast`).


def _unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum `g` over the axes numpy broadcasting added or stretched to reach g's shape."""
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead))) if lead else g
    stretched = tuple(i for i, d in enumerate(shape) if d == 1 and g.shape[i] != 1)
    return g.sum(axis=stretched, keepdims=True) if stretched else g


def _binary_vjp(
    da: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    db: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray],
) -> Vjp:
    """The vjp of y = f(a, b) from ∂y/∂a·g and ∂y/∂b·g, each given (a, b, y, g)."""

    def vjp(xs: Arrays, ys: Arrays, gs: Arrays, attrs: Attrs) -> list[np.ndarray | None]:
        a, b, y, g = xs[0], xs[1], ys[0], gs[0]
        return [_unbroadcast(da(a, b, y, g), a.shape), _unbroadcast(db(a, b, y, g), b.shape)]

    return vjp


def _unary_vjp(dx: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]) -> Vjp:
    """The vjp of y = f(x) from ∂y/∂x·g, given (x, y, g)."""

    def vjp(xs: Arrays, ys: Arrays, gs: Arrays, attrs: Attrs) -> list[np.ndarray | None]:
        return [dx(xs[0], ys[0], gs[0])]

    return vjp


def _pass_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    return [gs[0]]


def _pow_da(a: np.ndarray, b: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
    return g * b * _pow(a, b - np.ones((), b.dtype))


def _pow_db(a: np.ndarray, b: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
    return g * y * np.log(a.astype(np.float64))  # nan for a < 0, as the derivative is


def _cast_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    x = xs[0]
    float_to_float = x.dtype.kind == "f" and DType(a["to"]).is_float
    return [gs[0].astype(x.dtype) if float_to_float else None]


def _where_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    c, g = xs[0], gs[0]
    zero = np.zeros((), g.dtype)
    return [
        None,
        _unbroadcast(np.where(c, g, zero), xs[1].shape),
        _unbroadcast(np.where(c, zero, g), xs[2].shape),
    ]


def _matmul_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    """dx = g·wᵀ, dw = xᵀ·g, batch axes summed back; a rank-1 operand is a row (x) or a column
    (w), as in `_matmul_shape`."""
    x, w, g = xs[0], xs[1], gs[0]
    x2 = x if x.ndim > 1 else x[None, :]
    w2 = w if w.ndim > 1 else w[:, None]
    if w.ndim == 1:  # w's dim first: a scalar g needs both, in this order
        g = np.expand_dims(g, -1)
    if x.ndim == 1:
        g = np.expand_dims(g, -2)
    dx = _matmul(g, np.swapaxes(w2, -1, -2))
    dw = _matmul(np.swapaxes(x2, -1, -2), g)
    return [
        _unbroadcast(dx, x2.shape).reshape(x.shape),
        _unbroadcast(dw, w2.shape).reshape(w.shape),
    ]


def _gemm_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    x = xs[0].T if a.get("trans_a") else xs[0]
    w = xs[1].T if a.get("trans_b") else xs[1]
    g = gs[0]
    alpha = np.asarray(a.get("alpha", 1.0), g.dtype)
    dx, dw = alpha * _matmul(g, w.T), alpha * _matmul(x.T, g)
    out: list[np.ndarray | None] = [
        dx.T if a.get("trans_a") else dx,
        dw.T if a.get("trans_b") else dw,
    ]
    if len(xs) == 3:
        out.append(_unbroadcast(np.asarray(a.get("beta", 1.0), g.dtype) * g, xs[2].shape))
    return out


def _tile_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    shape = xs[0].shape
    split = [d for r, n in zip(a["repeats"], shape, strict=True) for d in (r, n)]
    return [gs[0].reshape(split).sum(axis=tuple(range(0, 2 * len(shape), 2)))]


def _concat_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    ax = _axis(a["axis"], xs[0].ndim)
    cuts = np.cumsum([x.shape[ax] for x in xs])[:-1]
    return list(np.split(gs[0], cuts, axis=ax))


def _slice_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    dx = np.zeros(xs[0].shape, gs[0].dtype)
    dx[_slice_index(xs[0].shape, a)] = gs[0]
    return [dx]


def _split_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    return [np.concatenate(gs, axis=_axis(a["axis"], xs[0].ndim))]


def _scatter_rows(table: np.ndarray, ids: np.ndarray, g: np.ndarray, axis: int) -> np.ndarray:
    """Zeros shaped like `table` with g added at `take(table, ids, axis)`'s places (repeated
    ids add up): the cotangent of a gather."""
    n = table.shape[axis]
    idx = _wrap_indices(ids, n, "gather")
    dt = np.zeros(table.shape, g.dtype)
    # g is pre + idx + post; bring idx's axes first to match moveaxis(dt, axis, 0)[idx]
    order = (
        list(range(axis, axis + idx.ndim))
        + list(range(axis))
        + list(range(axis + idx.ndim, g.ndim))
    )
    np.add.at(np.moveaxis(dt, axis, 0), idx, np.transpose(g, order))
    return dt


def _gather_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    data, ids = xs
    return [_scatter_rows(data, ids, gs[0], _axis(a["axis"], data.ndim)), None]


def _gather_elements_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    data, ids = xs
    ax = _axis(a["axis"], data.ndim)
    where: list[np.ndarray] = list(np.indices(ids.shape, sparse=True))
    where[ax] = _wrap_indices(ids, data.shape[ax], "gather_elements")
    dx = np.zeros(data.shape, gs[0].dtype)
    np.add.at(dx, tuple(where), gs[0])
    return [dx, None]


def _reduced_axes(x: np.ndarray, a: Attrs) -> tuple[int, ...]:
    return tuple(_axis(ax, x.ndim) for ax in a["axes"]) if a["axes"] else tuple(range(x.ndim))


def _reduce_vjp(kind: str) -> Vjp:
    """sum: g spread back over the reduced axes; mean: and divided by their count; max: g to
    the maxima, shared equally between ties."""

    def vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
        x = xs[0]
        axes = _reduced_axes(x, a)
        kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        g = gs[0].reshape(kept)
        if kind == "mean":
            g = g / np.asarray(math.prod(x.shape[i] for i in axes), g.dtype)
        if kind == "max":
            hit = x == ys[0].reshape(kept)
            g = g * hit / hit.sum(axis=axes, keepdims=True)
        return [np.broadcast_to(g, x.shape).astype(gs[0].dtype)]

    return vjp


def _cumsum_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    """x_j reaches every y_i that sums it: the cumulative sum of g the other way round."""
    return [_cumsum_impl([gs[0]], {**a, "reverse": not a.get("reverse")})[0]]


def _softmax_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    y, g = ys[0], gs[0]
    ax = _axis(a["axis"], y.ndim)
    return [y * (g - (g * y).sum(axis=ax, keepdims=True))]


def gelu_grad(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """d gelu(x) / dx (in float64, rounded to x's dtype): exact Φ(x) + x·φ(x); tanh form
    ½(1 + t) + ½·x·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²) with t = tanh(√(2/π)·(x + 0.044715·x³))."""
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        t = np.tanh(GELU_TANH_C * (x64 + 0.044715 * x64**3))
        d = 0.5 * (1 + t) + 0.5 * x64 * (1 - t * t) * GELU_TANH_C * (1 + 3 * 0.044715 * x64**2)
    else:
        d = 0.5 * (1 + _erf(x64 / math.sqrt(2.0))) + x64 * np.exp(-0.5 * x64 * x64) / (
            math.sqrt(2.0 * math.pi)
        )
    return d.astype(x.dtype)


def _activation_grad(z: np.ndarray, act: str) -> np.ndarray:
    """d act(z) / dz for each of ACTIVATIONS but "none"."""
    if act == "relu":
        return (z > 0).astype(z.dtype)
    if act == "tanh":
        t = np.tanh(z.astype(np.float64))
        return (1 - t * t).astype(z.dtype)
    return gelu_grad(z, "tanh" if act == "gelu_tanh" else "none")


def _linear_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    """Through the activation (its derivative at z = x·W + b, recomputed), then dx = dz·Wᵀ,
    dW = xᵀ·dz and db = Σ dz over the leading axes."""
    x, w, g = xs[0], xs[1], gs[0]
    if a["activation"] != "none" or a.get("softcap"):
        z = _matmul(x, w) + (xs[2] if len(xs) == 3 else np.zeros((), x.dtype))
        if a.get("softcap"):  # d(c·tanh(z / c))/dz = 1 - tanh²(z / c); no activation with it
            t = np.tanh(z / np.asarray(a["softcap"], z.dtype))
            g = g * (1 - t * t)
        else:
            g = g * _activation_grad(z, a["activation"])
    k, n = w.shape
    g2 = g.reshape(-1, n)
    out: list[np.ndarray | None] = [_matmul(g, w.T), _matmul(x.reshape(-1, k).T, g2)]
    return out + ([g2.sum(axis=0)] if len(xs) == 3 else [])


def _layer_norm_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    """With x̂ = (s − μ)/σ: dβ = Σ g, dγ = Σ g·x̂, and ds = (ĝ − mean(ĝ) − x̂·mean(ĝ·x̂))/σ with
    ĝ = g·γ, plus the emitted sum's own cotangent; x and skip each get ds summed to their
    shape."""
    s = norm_input(xs, a, 2)
    gamma, g = xs[-2], gs[0]
    d = s - s.mean(axis=-1, keepdims=True)
    rstd = 1 / np.sqrt((d * d).mean(axis=-1, keepdims=True) + np.asarray(a["epsilon"], s.dtype))
    xhat = d * rstd
    gh = g * gamma
    ds = rstd * (gh - gh.mean(axis=-1, keepdims=True) - xhat * (gh * xhat).mean(-1, keepdims=True))
    if a.get("emit_sum"):
        ds = ds + gs[1]
    n = gamma.shape[0]
    dgamma = (g * xhat).reshape(-1, n).sum(axis=0)
    dbeta = g.reshape(-1, n).sum(axis=0)
    parts = xs[:-2]  # x and the skips
    return [_unbroadcast(ds, x.shape) for x in parts] + [dgamma, dbeta]


def _attention_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    """dV = pᵀ·dO; dp = dO·Vᵀ; d scores = p·(dp − Σ dp·p), zero where a pair is not kept (the
    fill is a constant) and where `nan_to_zero` zeroed p, times 1 − tanh²(s / c) below a
    `softcap` c; dQ = scale·d scores·K and
    dK = scale·d scoresᵀ·Q. Repeated K/V heads sum back into their K/V head, rotated q and k
    rotate back (`_rope_vjp`). Each lands in its source's columns; the mask gets None, the bias
    operand d bias = Σ d scores over the batch (it is added unscaled), the rotary tables
    d cos = Σ dq'·q + dk'·k and d sin = Σ dq'·rotate(q) + dk'·rotate(k) over batch and heads
    (dq', dk' the cotangents of the rotated q and k)."""
    q, k, v, keep, p = _attention_probs(xs, a)
    h, dh = a["num_heads"], a["head_dim"]
    kvh = int(a["kv_heads"]) if "kv_heads" in a else int(h)
    b, s, _ = gs[0].shape
    do = gs[0].reshape(b, s, h, dh).transpose(0, 2, 1, 3)
    dv = _matmul(p.transpose(0, 1, 3, 2), do)
    dp = _matmul(do, v.transpose(0, 1, 3, 2))
    dscores = np.where(keep, p * (dp - (dp * p).sum(axis=-1, keepdims=True)), 0)
    dadded = dscores  # the bias is added after the soft-cap
    if a.get("softcap"):  # d(c·tanh(s / c))/ds = 1 - tanh²(s / c)
        c = np.asarray(a["softcap"], q.dtype)
        t = np.tanh(_matmul(q, k.transpose(0, 1, 3, 2)) * np.asarray(a["scale"], q.dtype) / c)
        dscores = dscores * (1 - t * t)
    scale = np.asarray(a["scale"], dscores.dtype)
    dq = _matmul(dscores, k) * scale
    dk = _matmul(dscores.transpose(0, 1, 3, 2), q) * scale
    if kvh != h:
        dk = dk.reshape(b, kvh, h // kvh, *dk.shape[2:]).sum(axis=2)
        dv = dv.reshape(b, kvh, h // kvh, *dv.shape[2:]).sum(axis=2)
    rotary = a.get("rotary", "none")
    tables: list[np.ndarray | None] = []
    if rotary != "none":
        cos, sin, rd = xs[-2], xs[-1], a["rotary_dim"]
        q0 = split_heads(xs[0], a["q_offset"], h, dh)  # before rotation
        k0 = split_heads(xs[1], a["k_offset"], kvh, dh)
        tables = [
            (dq * q0).sum(axis=(0, 1)) + (dk * k0).sum(axis=(0, 1)),
            (dq * rotate(q0, rotary, rd)).sum(axis=(0, 1))
            + (dk * rotate(k0, rotary, rd)).sum(axis=(0, 1)),
        ]
        dq = _rope_vjp(dq, cos, sin, rotary, rd)
        dk = _rope_vjp(dk, cos, sin, rotary, rd)
    out: list[np.ndarray | None] = []
    for src, off, heads in (
        (xs[0], "q_offset", dq),
        (xs[1], "k_offset", dk),
        (xs[2], "v_offset", dv),
    ):
        d = np.zeros(src.shape, heads.dtype)
        d[:, :, a[off] : a[off] + heads.shape[1] * dh] = merge_heads(heads)
        out.append(d)
    if a.get("has_bias"):
        tables = [dadded.sum(axis=0), *tables]
    return out + [None] * (len(xs) - 3 - len(tables)) + tables


def _embedding_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    """Each table gets the rows of g (summed back to its lookup's shape) added at its ids."""
    out: list[np.ndarray | None] = []
    scaled = gs[0] * np.asarray(a["scale"], gs[0].dtype) if "scale" in a else gs[0]
    for ids, table in zip(embedding_ids(xs, a), xs[1::2], strict=True):
        g = _unbroadcast(scaled, ids.shape + table.shape[1:])
        out += [None, _scatter_rows(table, ids, g, 0)]
    return out


def _gelu_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    return [gs[0] * gelu_grad(xs[0], a["approximate"])]


def _max_min_vjp(xs: Arrays, ys: Arrays, gs: Arrays, a: Attrs) -> list[np.ndarray | None]:
    """g to the operand that was chosen; a tie goes to the first."""
    x0, x1, y, g = xs[0], xs[1], ys[0], gs[0]
    first = x0 == y
    zero = np.zeros((), g.dtype)
    return [
        _unbroadcast(np.where(first, g, zero), x0.shape),
        _unbroadcast(np.where(first, zero, g), x1.shape),
    ]


# ---------------------------------------------------------------- the table


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.floating):
        return np.power(a.astype(np.float64), b).astype(a.dtype)
    return np.power(a, b)


RULES: dict[Op, Rule] = {
    Op.ADD: _binary(np.add, vjp=_binary_vjp(lambda a, b, y, g: g, lambda a, b, y, g: g)),
    Op.SUB: _binary(np.subtract, vjp=_binary_vjp(lambda a, b, y, g: g, lambda a, b, y, g: -g)),
    Op.MUL: _binary(
        np.multiply, vjp=_binary_vjp(lambda a, b, y, g: g * b, lambda a, b, y, g: g * a)
    ),
    Op.DIV: _binary(_div, vjp=_binary_vjp(lambda a, b, y, g: g / b, lambda a, b, y, g: -g * y / b)),
    Op.POW: Rule(
        2,
        2,
        lambda ts, a: [TensorType(ts[0].dtype, _bcast(ts))],
        lambda xs, a: [_pow(xs[0], xs[1])],
        _binary_vjp(_pow_da, _pow_db),
    ),
    Op.MAX: _binary(np.maximum, vjp=_max_min_vjp),
    Op.MIN: _binary(np.minimum, vjp=_max_min_vjp),
    Op.MOD: Rule(
        2,
        2,
        lambda ts, a: [TensorType(_same_dtype(ts), _bcast(ts))],
        lambda xs, a: [_mod(xs[0], xs[1], a.get("fmod", False))],
    ),
    Op.AND: _binary(np.logical_and, boolean_out=True),
    Op.OR: _binary(np.logical_or, boolean_out=True),
    Op.XOR: _binary(np.logical_xor, boolean_out=True),
    Op.EQUAL: _binary(np.equal, boolean_out=True),
    Op.LESS: _binary(np.less, boolean_out=True),
    Op.LESS_EQUAL: _binary(np.less_equal, boolean_out=True),
    Op.GREATER: _binary(np.greater, boolean_out=True),
    Op.GREATER_EQUAL: _binary(np.greater_equal, boolean_out=True),
    Op.NEG: _unary(np.negative, vjp=_unary_vjp(lambda x, y, g: -g)),
    Op.ABS: _unary(np.abs, vjp=_unary_vjp(lambda x, y, g: g * np.sign(x))),
    Op.SQRT: _float_unary(np.sqrt, _unary_vjp(lambda x, y, g: g / (2 * y))),
    Op.RECIPROCAL: _float_unary(lambda x: 1.0 / x, _unary_vjp(lambda x, y, g: -g * y * y)),
    Op.EXP: _float_unary(np.exp, _unary_vjp(lambda x, y, g: g * y)),
    Op.LOG: _float_unary(np.log, _unary_vjp(lambda x, y, g: g / x)),
    Op.ERF: _float_unary(
        _erf,
        _unary_vjp(
            lambda x, y, g: g * (2 / math.sqrt(math.pi)) * np.exp(-(x.astype(np.float64) ** 2))
        ),
    ),
    Op.TANH: _float_unary(np.tanh, _unary_vjp(lambda x, y, g: g * (1 - y * y))),
    Op.SIGMOID: _float_unary(_expit, _unary_vjp(lambda x, y, g: g * y * (1 - y))),
    Op.RELU: _unary(lambda x: np.maximum(x, 0), vjp=_unary_vjp(lambda x, y, g: g * (x > 0))),
    Op.NOT: _unary(np.logical_not, DType.BOOL),
    Op.ISNAN: _unary(np.isnan, DType.BOOL),
    Op.ISINF: _unary(np.isinf, DType.BOOL),
    Op.CAST: Rule(1, 1, _cast_infer, _cast_impl, _cast_vjp),
    Op.IDENTITY: Rule(1, 1, _same, lambda xs, a: [xs[0]], _pass_vjp),
    Op.DROPOUT: Rule(1, 1, _same, lambda xs, a: [xs[0]], _pass_vjp),  # inference: identity
    Op.WHERE: Rule(3, 3, _where_infer, lambda xs, a: [np.where(xs[0], xs[1], xs[2])], _where_vjp),
    Op.MATMUL: Rule(2, 2, _matmul_infer, lambda xs, a: [_matmul(xs[0], xs[1])], _matmul_vjp),
    Op.GEMM: Rule(2, 3, _gemm_infer, _gemm_impl, _gemm_vjp),
    Op.EINSUM: Rule(
        1, 8, _einsum_infer, lambda xs, a: [np.einsum(a["equation"], *xs).astype(xs[0].dtype)]
    ),
    Op.RESHAPE: Rule(
        1,
        1,
        _reshape_infer,
        lambda xs, a: [xs[0].reshape(a["shape"])],
        lambda xs, ys, gs, a: [gs[0].reshape(xs[0].shape)],
    ),
    Op.TRANSPOSE: Rule(
        1,
        1,
        _transpose_infer,
        lambda xs, a: [np.transpose(xs[0], a["perm"])],
        lambda xs, ys, gs, a: [np.transpose(gs[0], np.argsort(a["perm"]))],
    ),
    Op.EXPAND: Rule(
        1,
        1,
        _expand_infer,
        lambda xs, a: [np.broadcast_to(xs[0], np.broadcast_shapes(xs[0].shape, a["shape"])).copy()],
        lambda xs, ys, gs, a: [_unbroadcast(gs[0], xs[0].shape)],
    ),
    Op.CONCAT: Rule(
        1,
        1 << 16,
        _concat_infer,
        lambda xs, a: [np.concatenate(xs, axis=_axis(a["axis"], xs[0].ndim))],
        _concat_vjp,
    ),
    Op.SLICE: Rule(
        1, 1, _slice_infer, lambda xs, a: [xs[0][_slice_index(xs[0].shape, a)]], _slice_vjp
    ),
    Op.SPLIT: Rule(1, 1, _split_infer, _split_impl, _split_vjp),
    Op.GATHER: Rule(2, 2, _gather_infer, _gather_impl, _gather_vjp),
    Op.GATHER_ND: Rule(2, 2, _gather_nd_infer, _gather_nd_impl),
    Op.GATHER_ELEMENTS: Rule(
        2, 2, _gather_elements_infer, _gather_elements_impl, _gather_elements_vjp
    ),
    Op.SCATTER_ELEMENTS: Rule(3, 3, _scatter_elements_infer, _scatter_elements_impl),
    Op.TILE: Rule(1, 1, _tile_infer, lambda xs, a: [np.tile(xs[0], a["repeats"])], _tile_vjp),
    Op.REDUCE_MEAN: _reduce(np.mean, _reduce_vjp("mean")),
    Op.REDUCE_SUM: _reduce(np.sum, _reduce_vjp("sum")),
    Op.REDUCE_MAX: _reduce(np.max, _reduce_vjp("max")),
    Op.CUMSUM: Rule(1, 1, _same, _cumsum_impl, _cumsum_vjp),
    Op.SOFTMAX: Rule(
        1,
        1,
        _same,
        lambda xs, a: [softmax(xs[0], _axis(a["axis"], xs[0].ndim)).astype(xs[0].dtype)],
        _softmax_vjp,
    ),
    Op.TOP_K: Rule(1, 1, _top_k_infer, _top_k_impl, _top_k_vjp),
    Op.MOE: Rule(5, 14, _moe_infer, moe, _moe_vjp),
    Op.LINEAR: Rule(2, 3, _linear_infer, linear, _linear_vjp),
    Op.LM_HEAD: Rule(2, 3, _linear_infer, linear, _linear_vjp),
    Op.LAYER_NORM: Rule(3, 3 + MAX_SKIPS, _layer_norm_infer, layer_norm, _layer_norm_vjp),
    Op.GELU: Rule(1, 1, _gelu_infer, lambda xs, a: [gelu(xs[0], a["approximate"])], _gelu_vjp),
    Op.RMS_NORM: Rule(2, 2 + MAX_SKIPS, _rms_norm_infer, rms_norm, _rms_norm_vjp),
    Op.GATED_LINEAR: Rule(3, 5, _gated_linear_infer, gated_linear, _gated_linear_vjp),
    Op.ATTENTION: Rule(3, 6, _attention_infer, attention, _attention_vjp),
    Op.EMBEDDING: Rule(2, 16, _embedding_infer, embedding, _embedding_vjp),
}


def infer_types(op: Op, inputs: Sequence[TensorType], attrs: Attrs) -> list[TensorType]:
    rule = RULES.get(op)
    if rule is None:
        raise IRError(f"no rule for op {op.name}")
    if not rule.min_inputs <= len(inputs) <= rule.max_inputs:
        raise IRError(
            f"{op.name} takes {rule.min_inputs}..{rule.max_inputs} operands, got {len(inputs)}"
        )
    return rule.infer(inputs, attrs)


def evaluate_op(op: Op, inputs: Arrays, attrs: Attrs) -> list[np.ndarray]:
    """The op's reference result. IEEE special values are results, not errors, as in ONNX and
    onnxruntime: sqrt(-1) is nan, 1/0 is inf, exp(1000) overflows to inf (folding and the
    fusions' probes meet them on purpose), so numpy's floating-point warnings are off here."""
    with np.errstate(all="ignore"):
        return RULES[op].impl(inputs, attrs)
