"""Per-op rules, in one table keyed by `Op`: arity, type inference and the numpy reference.

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
from scipy import special

from wsecc.ir.core import DType, IRError, Op, TensorType

Arrays = Sequence[np.ndarray]
Attrs = dict[str, Any]


@dataclass(frozen=True)
class Rule:
    min_inputs: int
    max_inputs: int
    infer: Callable[[Sequence[TensorType], Attrs], list[TensorType]]
    impl: Callable[[Arrays, Attrs], list[np.ndarray]]


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


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], boolean_out: bool = False) -> Rule:
    def infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
        dt = _same_dtype(ts)
        return [TensorType(DType.BOOL if boolean_out else dt, _bcast(ts))]

    def impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
        out = fn(xs[0], xs[1])
        return [np.asarray(out, dtype=bool if boolean_out else xs[0].dtype)]

    return Rule(2, 2, infer, impl)


def _unary(fn: Callable[[np.ndarray], np.ndarray], out_dtype: DType | None = None) -> Rule:
    def infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
        return [TensorType(out_dtype or ts[0].dtype, ts[0].shape)]

    def impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
        x = xs[0]
        return [np.asarray(fn(x), dtype=out_dtype.numpy if out_dtype else x.dtype)]

    return Rule(1, 1, infer, impl)


def _float_unary(fn: Callable[[np.ndarray], np.ndarray]) -> Rule:
    """Elementwise math evaluated in float64 and rounded to the operand's dtype."""
    return _unary(lambda x: fn(x.astype(np.float64)))


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
    """float32 matmul with float32 accumulation, as onnxruntime's MLAS does it."""
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
    return [np.take_along_axis(data, _wrap_indices(idx, data.shape[ax], "gather_elements"), axis=ax)]


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


def _reduce(fn: Callable[..., np.ndarray]) -> Rule:
    def impl(xs: Arrays, a: Attrs) -> list[np.ndarray]:
        x = xs[0]
        axes = tuple(_axis(ax, x.ndim) for ax in a["axes"]) if a["axes"] else None
        return [np.asarray(fn(x, axis=axes, keepdims=a.get("keepdims", True)), dtype=x.dtype)]

    return Rule(1, 1, _reduce_infer, impl)


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
        y = 0.5 * x64 * (1.0 + special.erf(x64 / math.sqrt(2.0)))
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
    return [TensorType(_same_dtype(ts), x.shape[:-1] + (w.shape[1],))]


def linear(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    """y = act(x @ W + b); W is [K, N]."""
    y = _matmul(xs[0], xs[1])
    if len(xs) == 3:
        y = y + xs[2]
    return [_activation(y, a["activation"]).astype(xs[0].dtype)]


def _layer_norm_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    skip = a["has_skip"]
    if len(ts) != (4 if skip else 3):
        raise IRError("layer_norm takes (x, [skip], gamma, beta)")
    x = ts[0]
    d = x.shape[-1]
    if ts[-2].shape != (d,) or ts[-1].shape != (d,):
        raise IRError(f"layer_norm gamma/beta must be [{d}]")
    if skip:
        _bcast([ts[0], ts[1]])
        if _bcast([ts[0], ts[1]]) != x.shape:
            raise IRError("layer_norm skip must broadcast to x")
    outs = [TensorType(x.dtype, x.shape)]
    return outs + ([TensorType(x.dtype, x.shape)] if a.get("emit_sum") else [])


def layer_norm(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    """s = x (+ skip); y = (s − mean(s)) / √(var(s) + ε) · γ + β over the last axis.

    Outputs y, and s too when `emit_sum` (the residual stream continues from s)."""
    s = xs[0] + xs[1] if a["has_skip"] else xs[0]
    gamma, beta = xs[-2], xs[-1]
    mean = s.mean(axis=-1, keepdims=True)
    d = s - mean
    var = (d * d).mean(axis=-1, keepdims=True)
    y = (d / np.sqrt(var + np.asarray(a["epsilon"], s.dtype)) * gamma + beta).astype(s.dtype)
    return [y, s] if a.get("emit_sum") else [y]


def _attention_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    h, dh = a["num_heads"], a["head_dim"]
    q, k, v = ts[0], ts[1], ts[2]
    for t, off in ((q, a["q_offset"]), (k, a["k_offset"]), (v, a["v_offset"])):
        if t.rank != 3 or t.shape[-1] < off + h * dh:
            raise IRError(f"attention operand {t.shape} has no {h}x{dh} columns at offset {off}")
    mask = a["mask"]
    if mask not in ("none", "key_padding", "key_length"):
        raise IRError(f"attention mask kind {mask!r} unknown")
    if (mask != "none") != (len(ts) == 4):
        raise IRError("attention mask kind disagrees with its operand count")
    if mask == "key_padding" and ts[3].shape != (q.shape[0], k.shape[1]):
        raise IRError(f"attention key_padding mask must be [B, S_kv], got {ts[3].shape}")
    if mask == "key_length" and ts[3].shape != (q.shape[0],):
        raise IRError(f"attention key_length mask must be [B], got {ts[3].shape}")
    return [TensorType(q.dtype, (q.shape[0], q.shape[1], h * dh))]


def attention_keep(a: Attrs, b: int, sq: int, sk: int, mask: np.ndarray | None) -> np.ndarray:
    """Boolean [B, 1, Sq, Sk]: which (query, key) pairs are attended."""
    keep = np.ones((b, 1, sq, sk), dtype=bool)
    if a["causal"]:
        keep &= np.tril(np.ones((sq, sk), dtype=bool), k=sk - sq)[None, None]
    if a.get("window", 0):
        keep &= np.triu(np.ones((sq, sk), dtype=bool), k=sk - sq - a["window"] + 1)[None, None]
    if a["mask"] == "none":
        return keep
    if mask is None:
        raise IRError(f"attention with mask {a['mask']!r} needs a mask input")
    if a["mask"] == "key_padding":
        keep &= np.not_equal(mask, 0)[:, None, None, :]
    elif a["mask"] == "key_length":
        keep &= (np.arange(sk)[None, :] < mask[:, None])[:, None, None, :]
    return keep


def split_heads(x: np.ndarray, offset: int, h: int, dh: int) -> np.ndarray:
    """[B, S, ≥offset+h·dh] columns [offset, offset+h·dh) -> [B, h, S, dh]."""
    b, s, _ = x.shape
    return x[:, :, offset : offset + h * dh].reshape(b, s, h, dh).transpose(0, 2, 1, 3)


def attention(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    """Multi-head attention over per-head column blocks of q/k/v sources.

    q = heads(q_src[..., q_offset:]), likewise k and v; scores = scale·q·kᵀ; positions not
    kept (causal: key > query; window w: key ≤ query − w, GPT-Neo's local attention;
    key_padding: mask[b, key] == 0; key_length: key ≥ len[b]) are
    *replaced* by `fill` (exporters' −∞, finfo.min or −10000); p = softmax(scores); with
    `nan_to_zero`, NaN rows (all keys masked with −∞) become 0; out = merge_heads(p·v).
    """
    h, dh = a["num_heads"], a["head_dim"]
    q = split_heads(xs[0], a["q_offset"], h, dh)
    k = split_heads(xs[1], a["k_offset"], h, dh)
    v = split_heads(xs[2], a["v_offset"], h, dh)
    scores = _matmul(q, k.transpose(0, 1, 3, 2)) * np.asarray(a["scale"], q.dtype)
    keep = attention_keep(a, q.shape[0], q.shape[2], k.shape[2], xs[3] if len(xs) == 4 else None)
    scores = np.where(keep, scores, np.asarray(a["fill"], q.dtype))
    p = softmax(scores, axis=-1).astype(q.dtype)
    if a.get("nan_to_zero"):
        p = np.where(np.isnan(p), np.zeros((), p.dtype), p)
    o = _matmul(p, v)
    b, _, s, _ = o.shape
    return [o.transpose(0, 2, 1, 3).reshape(b, s, h * dh)]


def _embedding_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    if len(ts) % 2:
        raise IRError("embedding takes (ids, table) pairs")
    shapes = []
    for ids, table in zip(ts[0::2], ts[1::2], strict=True):
        if table.rank != 2 or ids.dtype not in (DType.INT64, DType.INT32):
            raise IRError("embedding needs int ids and a 2-D table")
        shapes.append(TensorType(table.dtype, ids.shape + (table.shape[1],)))
    return [TensorType(_same_dtype(shapes), _bcast(shapes))]


def embedding(xs: Arrays, a: Attrs) -> list[np.ndarray]:
    """Σ_i table_i[ids_i] — token (+ position, + token type) embeddings, summed in order."""
    out = None
    for ids, table in zip(xs[0::2], xs[1::2], strict=True):
        g = _gather_impl([table, ids], {"axis": 0})[0]
        out = g if out is None else out + g
    assert out is not None
    return [out]


def _gelu_infer(ts: Sequence[TensorType], a: Attrs) -> list[TensorType]:
    if a["approximate"] not in ("none", "tanh"):
        raise IRError("gelu approximate must be 'none' or 'tanh'")
    return [ts[0]]


# ---------------------------------------------------------------- the table


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.floating):
        return np.power(a.astype(np.float64), b).astype(a.dtype)
    return np.power(a, b)


RULES: dict[Op, Rule] = {
    Op.ADD: _binary(np.add),
    Op.SUB: _binary(np.subtract),
    Op.MUL: _binary(np.multiply),
    Op.DIV: _binary(_div),
    Op.POW: Rule(
        2,
        2,
        lambda ts, a: [TensorType(ts[0].dtype, _bcast(ts))],
        lambda xs, a: [_pow(xs[0], xs[1])],
    ),
    Op.MAX: _binary(np.maximum),
    Op.MIN: _binary(np.minimum),
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
    Op.NEG: _unary(np.negative),
    Op.ABS: _unary(np.abs),
    Op.SQRT: _float_unary(np.sqrt),
    Op.RECIPROCAL: _float_unary(lambda x: 1.0 / x),
    Op.EXP: _float_unary(np.exp),
    Op.LOG: _float_unary(np.log),
    Op.ERF: _float_unary(special.erf),
    Op.TANH: _float_unary(np.tanh),
    Op.SIGMOID: _float_unary(special.expit),
    Op.RELU: _unary(lambda x: np.maximum(x, 0)),
    Op.NOT: _unary(np.logical_not, DType.BOOL),
    Op.ISNAN: _unary(np.isnan, DType.BOOL),
    Op.ISINF: _unary(np.isinf, DType.BOOL),
    Op.CAST: Rule(1, 1, _cast_infer, _cast_impl),
    Op.IDENTITY: Rule(1, 1, _same, lambda xs, a: [xs[0]]),
    Op.DROPOUT: Rule(1, 1, _same, lambda xs, a: [xs[0]]),
    Op.WHERE: Rule(3, 3, _where_infer, lambda xs, a: [np.where(xs[0], xs[1], xs[2])]),
    Op.MATMUL: Rule(2, 2, _matmul_infer, lambda xs, a: [_matmul(xs[0], xs[1])]),
    Op.GEMM: Rule(2, 3, _gemm_infer, _gemm_impl),
    Op.EINSUM: Rule(
        1, 8, _einsum_infer, lambda xs, a: [np.einsum(a["equation"], *xs).astype(xs[0].dtype)]
    ),
    Op.RESHAPE: Rule(1, 1, _reshape_infer, lambda xs, a: [xs[0].reshape(a["shape"])]),
    Op.TRANSPOSE: Rule(1, 1, _transpose_infer, lambda xs, a: [np.transpose(xs[0], a["perm"])]),
    Op.EXPAND: Rule(
        1,
        1,
        _expand_infer,
        lambda xs, a: [np.broadcast_to(xs[0], np.broadcast_shapes(xs[0].shape, a["shape"])).copy()],
    ),
    Op.CONCAT: Rule(
        1,
        1 << 16,
        _concat_infer,
        lambda xs, a: [np.concatenate(xs, axis=_axis(a["axis"], xs[0].ndim))],
    ),
    Op.SLICE: Rule(1, 1, _slice_infer, lambda xs, a: [xs[0][_slice_index(xs[0].shape, a)]]),
    Op.SPLIT: Rule(1, 1, _split_infer, _split_impl),
    Op.GATHER: Rule(2, 2, _gather_infer, _gather_impl),
    Op.GATHER_ND: Rule(2, 2, _gather_nd_infer, _gather_nd_impl),
    Op.GATHER_ELEMENTS: Rule(2, 2, _gather_elements_infer, _gather_elements_impl),
    Op.TILE: Rule(1, 1, _tile_infer, lambda xs, a: [np.tile(xs[0], a["repeats"])]),
    Op.REDUCE_MEAN: _reduce(np.mean),
    Op.REDUCE_SUM: _reduce(np.sum),
    Op.REDUCE_MAX: _reduce(np.max),
    Op.CUMSUM: Rule(1, 1, _same, _cumsum_impl),
    Op.SOFTMAX: Rule(
        1,
        1,
        _same,
        lambda xs, a: [softmax(xs[0], _axis(a["axis"], xs[0].ndim)).astype(xs[0].dtype)],
    ),
    Op.LINEAR: Rule(2, 3, _linear_infer, linear),
    Op.LM_HEAD: Rule(2, 3, _linear_infer, linear),
    Op.LAYER_NORM: Rule(3, 4, _layer_norm_infer, layer_norm),
    Op.GELU: Rule(1, 1, _gelu_infer, lambda xs, a: [gelu(xs[0], a["approximate"])]),
    Op.ATTENTION: Rule(3, 4, _attention_infer, attention),
    Op.EMBEDDING: Rule(2, 16, _embedding_infer, embedding),
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
