"""The functional simulator's inner loops, compiled with numba: rounding to fp16 and the fp16
running sum; the linear kernel's column blocks, the attention kernel's heads and the layernorm
kernel's rows, each in the fabric's order (`wsecc.sim.functional` states the orders).

The loops release the GIL (`nogil`), so `wsecc.sim.functional` splits a kernel's blocks, heads
or rows over several threads; each one's arithmetic is fixed, so the thread count never changes
a result. Each loop has one signature, compiled when this module is first imported after an
install (about 6 s) and cached in the user's cache directory
(`wsecc.compiled_cache.cache_dir`), never inside the installed package (files pip did not
install would outlive an uninstall and leave a `site-packages/wsecc/` that shadows the next
install): later imports load it in a fraction of a second.

Rounding to fp16 is the IEEE conversion, float32 to half and back (`_f16`: LLVM's fptrunc and
fpext, which x86's F16C and Arm's fcvt do in hardware, many lanes an instruction): round to
nearest, ties to even, subnormals kept, past the largest finite value to inf. Bit-identical to
numpy's x.astype(float16).astype(float32) except for a nan's payload bits (tests/sim try every
float32 of fp16's range and sample the rest). A sum of two fp16 values is formed in float32 and
rounded once (`_f16_sum`): the correctly rounded fp16 sum (tests/sim check every pair of fp16
numbers).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import config, njit, types
from numba.extending import get_cython_function_address, intrinsic

from wsecc.compiled_cache import use_for_numba

use_for_numba(config)

# scipy's BLAS sgemm (the library scipy.linalg.blas calls), by a symbol name that cached machine
# code can find again in a later process
llvm.add_symbol("wsecc_sgemm", get_cython_function_address("scipy.linalg.cython_blas", "sgemm"))
_sgemm = types.ExternalFunction("wsecc_sgemm", types.void(*[types.voidptr] * 13))


def _arrays(dtype: types.Type, ndim: int) -> tuple[types.Array, types.Array]:
    """C-contiguous arrays read-only (a writable one passes too) and writable: the exported
    loops are compiled once, for these types, not once per flag combination met."""
    return types.Array(dtype, ndim, "C", readonly=True), types.Array(dtype, ndim, "C")


_IN1, _OUT1 = _arrays(types.float32, 1)
_IN2, _OUT2 = _arrays(types.float32, 2)
_IN3, _ = _arrays(types.float32, 3)
_IN4, _OUT4 = _arrays(types.float32, 4)
_KEEP, _ = _arrays(types.boolean, 3)
_KEEP2, _ = _arrays(types.boolean, 2)
_INT1, _ = _arrays(types.int64, 1)
_INT2, _ = _arrays(types.int64, 2)
_f32, _i64, _bool = types.float32, types.int64, types.boolean


@intrinsic
def _f16(typingctx, v):  # type: ignore[no-untyped-def]
    """float32 v rounded to the nearest fp16, as float32."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.fpext(builder.fptrunc(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.float32), codegen


@njit(inline="always")
def _f16_sum(x, y):  # type: ignore[no-untyped-def]
    """fp16 x + fp16 y, rounded to fp16."""
    return _f16(x + y)


@njit(types.void(_IN1, _OUT1), nogil=True, cache=True)
def round_f16_into(src, dst):  # type: ignore[no-untyped-def]
    """dst = `_f16`(src), 1-D float32 arrays of one size (dst may be src)."""
    for i in range(src.size):
        dst[i] = _f16(src[i])


@njit(types.void(_IN2, _OUT1), nogil=True, cache=True)
def chain_f16(partials, out):  # type: ignore[no-untyped-def]
    """out = the fp16 chain of partials[P, L]: each partial rounded to fp16 and added to the
    running sum, itself rounded to fp16 after each addition, partial 0 first."""
    for j in range(partials.shape[1]):
        out[j] = _f16(partials[0, j])
    for i in range(1, partials.shape[0]):
        for j in range(partials.shape[1]):
            out[j] = _f16_sum(out[j], _f16(partials[i, j]))


@njit(inline="always")
def _add_partial(acc, m, j, p, dropped, step, half):  # type: ignore[no-untyped-def]
    """acc[m, j] takes the next partial `p` of its chain (step 0 starts it; `dropped`: the
    drop_partial fault loses it), in fp16 (`half`: partial and sum rounded) or float32."""
    if dropped:
        p = np.float32(0)
    if step == 0:
        acc[m, j] = _f16(p) if half else p
    elif half:
        acc[m, j] = _f16_sum(acc[m, j], _f16(p))
    else:
        acc[m, j] = acc[m, j] + p


@njit
def _column_sums(xt, tiles, cols, first, drop, half, b):  # type: ignore[no-untyped-def]
    """Block b of x W as [M, cw], each column's partials summed in the reduce-scatter order of
    the cost model (`wsecc.kernels.kinds.matmul.matmul_cost`): the block's columns share one
    output segment s, whose chain starts on PE row `first[b]` = (s + 1) mod h and runs down
    the rows cyclically, ending on row s, where the sum is finished. xt[h, M, kh]: x's columns
    as the PE rows hold them; tiles[blocks, h, kh, cw]: the block's columns of W, zero-padded;
    cols[b, j]: output column of block column j (-1: padding). A partial of one product
    (kh = 1) is that product; longer ones are BLAS's sgemm. `half`: the partial and every
    running sum rounded to fp16 (`_f16`, `_f16_sum`), else float32 throughout (sgemm adds the
    partial in: acc = 1 * (x_i W_i) + acc, the product formed first). drop[b, j]: column j
    loses PE row 0's partial (the drop_partial fault)."""
    h, M, kh = xt.shape
    cw = tiles.shape[3]
    n = 0
    while n < cw and cols[b, n] >= 0:
        n += 1
    dropping = False
    for j in range(n):
        dropping = dropping or drop[b, j]
    acc = np.empty((M, cw), np.float32)  # C order [M, cw] is Fortran's [cw, M]
    if kh == 1:
        for step in range(h):
            i = (first[b] + step) % h
            w = tiles[b, i, 0]
            for m in range(M):
                xv = xt[i, m, 0]
                for j in range(n):
                    _add_partial(acc, m, j, xv * w[j], i == 0 and drop[b, j], step, half)
        return acc
    # Fortran sgemm: C[n, M] = alpha A[n, kh] B[kh, M] + beta C, A = W_i's block (C order
    # [kh, cw]: lda = cw), B = x_i (C order [M, kh]: ldb = kh), C = acc or p (ldc = cw)
    trans = np.array([78], np.uint8)  # 'N'
    dims = np.array([n, M, kh, cw, kh, cw], np.int32)
    scalars = np.array([1.0, 0.0, 1.0], np.float32)  # alpha, then beta 0 or 1
    fused = not half and not dropping  # sgemm adds each partial into the running sum
    p = acc if fused else np.empty((M, cw), np.float32)
    for step in range(h):
        i = (first[b] + step) % h
        beta = scalars[1:] if (step == 0 or not fused) else scalars[2:]
        _sgemm(
            trans.ctypes, trans.ctypes, dims[0:].ctypes, dims[1:].ctypes, dims[2:].ctypes,
            scalars.ctypes, tiles[b, i].ctypes, dims[3:].ctypes, xt[i].ctypes,
            dims[4:].ctypes, beta.ctypes, p.ctypes, dims[5:].ctypes,
        )  # fmt: skip
        if fused:
            continue
        for m in range(M):
            for j in range(n):
                _add_partial(acc, m, j, p[m, j], i == 0 and drop[b, j], step, half)
    return acc


@njit(
    types.void(_IN3, _IN4, _INT2, _INT1, _KEEP2, _bool, _IN1, _i64, _bool, _OUT2, _i64, _i64),
    nogil=True,
    cache=True,
)
def column_blocks(xt, tiles, cols, first, drop, half, bias, act, store_half, y, b0, b1):  # type: ignore[no-untyped-def]  # noqa: E501
    """Blocks b0 .. b1 - 1 of a linear kernel: `_column_sums`, then the epilogue on each
    column sum, in float32 and rounded to fp16 after each stage when `half`: + bias (if
    `bias` has any elements), the activation `act` (0 none, 1 relu, 2 gelu: the erf form),
    and the result rounded to fp16 when `store_half`, into y's column cols[b, j]. (A tanh
    activation is numpy's to apply after: libm's tanhf, which numba calls, is one element at a
    time, numpy's is vectorized.)"""
    c_half, one, rsqrt2 = np.float32(0.5), np.float32(1), np.float32(1 / np.sqrt(2))
    for b in range(b0, b1):
        acc = _column_sums(xt, tiles, cols, first, drop, half, b)
        for m in range(acc.shape[0]):
            for j in range(acc.shape[1]):
                c = cols[b, j]
                if c < 0:
                    break
                v = acc[m, j]
                if bias.size:
                    v = v + bias[c]
                    v = _f16(v) if half else v
                if act:
                    if act == 1:
                        v = max(v, np.float32(0))
                    else:
                        v = c_half * v * (one + np.float32(math.erf(v * rsqrt2)))
                    v = _f16(v) if half else v
                y[m, c] = _f16(v) if store_half else v


_QUERY_BLOCK = 128
"""Queries an attention head scores at once (their scores, Sk each, stay in cache)."""
_EXP_ZERO = np.float32(-104)  # exp(-104) = 6.8e-46 < 2^-150: float32's exp is 0 below


@njit(
    types.void(
        _IN4, _IN4, _IN4, _KEEP, _IN4, _f32, _f32, _i64, _bool, _bool, _bool, _OUT4, _i64, _i64
    ),
    nogil=True,
    cache=True,
    error_model="numpy",  # x / 0 is inf or nan, as in numpy
)
def attention_heads(  # type: ignore[no-untyped-def]
    q, k, v, keep, bias, fill, softcap, rows, half, store_half, nan_to_zero, out, t0, t1
):
    """Heads t0 .. t1 - 1 (t = batch H + head) of an attention kernel in the fabric's order
    (`wsecc.sim.functional._attention` states it). q[B, H, Sq, d] (scaled, in storage), k and
    v [B, H, Sk, d], keep[B, Sq, Sk], bias[B | 1, H, 1 | Sq, Sk] added to each kept score
    (ALiBi's per key, a bias operand's per query and key; empty without), after a kept score s
    is soft-capped to c tanh(s / c) when `softcap` c > 0 (Gemma 2: divided, tanh, multiplied,
    in float32); writes out[B, Sq, H, d]. Scores q k^T are BLAS's, for a
    block of queries at a time. PE row r holds keys r, r + rows, ...: its max m_r, and, in key
    order, its sum l_r of e = exp(s - m_r) and its sum of e v (each product formed, then
    added; a zero e is skipped when the head's v is finite, which changes no sum that starts
    from +0). `half`: scores, e, l_r, the e v sums and every merge step rounded to fp16;
    `store_half`: the output rounded to fp16."""
    B, H, Sq, d = q.shape
    Sk = k.shape[2]
    ninf, zero = np.float32(-np.inf), np.float32(0)
    kT = np.empty((d, Sk), np.float32)
    m = np.empty(rows, np.float32)
    lsum = np.empty(rows, np.float32)
    pv = np.empty((rows, d), np.float32)
    acc = np.empty(d, np.float32)
    for t in range(t0, t1):
        b, hh = t // H, t % H
        bb = b if bias.shape[0] > 1 else 0  # a bias operand is the same for every sample
        kT[:, :] = k[b, hh].T
        vh = v[b, hh]
        v_finite = True
        for key in range(Sk):
            for j in range(d):
                v_finite = v_finite and np.isfinite(vh[key, j])
        for q0 in range(0, Sq, _QUERY_BLOCK):
            nq = min(Sq, q0 + _QUERY_BLOCK) - q0
            s = np.dot(q[b, hh, q0 : q0 + nq], kT)  # [nq, Sk]
            for i in range(nq):
                si = s[i]
                m[:] = ninf
                r = 0  # key % rows
                for key in range(Sk):
                    if not keep[b, q0 + i, key]:
                        si[key] = fill
                    else:
                        if softcap > zero:
                            x = np.float32(math.tanh(np.float32(si[key] / softcap)))
                            si[key] = _f16(x * softcap) if half else x * softcap
                        if bias.size:
                            bq = q0 + i if bias.shape[2] > 1 else 0
                            si[key] = si[key] + bias[bb, hh, bq, key]
                        if half:
                            si[key] = _f16(si[key])
                    m[r] = max(m[r], si[key])
                    r = r + 1 if r + 1 < rows else 0
                lsum[:] = zero
                pv[:, :] = zero
                r = 0
                for key in range(Sk):
                    x = si[key] - m[r]
                    # exp(x) < 2^-150 rounds to 0 below -103.98: skip the call (masked pairs)
                    e = zero if m[r] == ninf or x < _EXP_ZERO else np.float32(np.exp(x))
                    e = _f16(e) if half else e
                    lsum[r] += e
                    if e != zero or not v_finite:
                        for j in range(d):
                            pv[r, j] = pv[r, j] + e * vh[key, j]
                    r = r + 1 if r + 1 < rows else 0
                if half:
                    for r in range(rows):
                        lsum[r] = _f16(lsum[r])
                        for j in range(d):
                            pv[r, j] = _f16(pv[r, j])
                # merge down the column: the running (max, sum, acc) rescaled at each row
                m_run, l_run = m[0], lsum[0]
                acc[:] = pv[0]
                for r in range(1, rows):
                    before = m_run
                    m_run = max(m_run, m[r])
                    c_run = zero if before == ninf else np.float32(np.exp(before - m_run))
                    c_pe = zero if m[r] == ninf else np.float32(np.exp(m[r] - m_run))
                    l_run = l_run * c_run + lsum[r] * c_pe
                    l_run = _f16(l_run) if half else l_run
                    for j in range(d):
                        a = acc[j] * c_run + pv[r, j] * c_pe
                        acc[j] = _f16(a) if half else a
                for j in range(d):
                    o = acc[j] / l_run
                    if nan_to_zero and o != o:
                        o = zero
                    out[b, q0 + i, hh, j] = _f16(o) if store_half else o


@njit(inline="always")
def _row_sum(x, dw, half, square=False):  # type: ignore[no-untyped-def]
    """Sum of x (or of x * x) as a region row forms it: each PE sums its dw features in order,
    and the per-PE sums are added in column order (in fp16 each rounded, and the running sum
    after each addition)."""
    total = np.float32(0)
    for c0 in range(0, x.size, dw):
        p = np.float32(0)
        for j in range(c0, min(x.size, c0 + dw)):
            p += x[j] * x[j] if square else x[j]
        if c0 == 0:
            total = _f16(p) if half else p
        else:
            total = _f16_sum(total, _f16(p)) if half else total + p
    return total


@njit(
    types.void(_IN2, _IN2, _IN1, _IN1, _f32, _i64, _bool, _bool, _OUT2, _OUT2, _i64, _i64),
    nogil=True,
    cache=True,
)
def layernorm_rows(x, skip, gamma, beta, eps, cols, half, store_half, y, s_out, r0, r1):  # type: ignore[no-untyped-def]  # noqa: E501
    """Rows r0 .. r1 - 1 of a layernorm kernel (`wsecc.sim.functional._layernorm` states it):
    s = x + skip when `skip` has elements (its rounded copy into `s_out` when that has any),
    then y = (s - mean) / sqrt(var + eps) * gamma + beta with the mean and the variance each a
    sum of per-PE sums (each PE its cdiv(D, cols) features in order) chained in column order.
    `half`: every stage rounded to fp16 (the chain: each per-PE sum and each running sum);
    `store_half`: y and s_out rounded to fp16."""
    D = x.shape[1]
    dw = (D + cols - 1) // cols
    s = np.empty(D, np.float32)
    d = np.empty(D, np.float32)
    for row in range(r0, r1):
        for j in range(D):
            v = x[row, j] + skip[row, j] if skip.size else x[row, j]
            s[j] = _f16(v) if half and skip.size else v
            if s_out.size:
                s_out[row, j] = _f16(s[j]) if store_half else s[j]
        mean = _row_sum(s, dw, half) / np.float32(D)
        mean = _f16(mean) if half else mean
        for j in range(D):
            v = s[j] - mean
            d[j] = _f16(v) if half else v
        var = _row_sum(d, dw, half, True) / np.float32(D)
        var = _f16(var) if half else var
        rstd = np.float32(1) / np.sqrt(var + eps)
        rstd = _f16(rstd) if half else rstd
        for j in range(D):
            v = d[j] * rstd
            v = (_f16(v) if half else v) * gamma[j] + beta[j]
            y[row, j] = _f16(v) if store_half else v
