"""The functional simulator's inner loops, compiled with numba: rounding to fp16, the fp16 running
sum, and one column block of a linear kernel in the fabric's order.

The loops release the GIL (`nogil`), so `wsecc.sim.functional` runs a kernel's column blocks on
several threads; each block's arithmetic is fixed, so the thread count never changes a result.
numba compiles them on first use (a few seconds) and caches the machine code beside this file
(or in its user cache directory when this one is read-only).

Rounding to fp16 is the IEEE conversion, float32 to half and back (`_f16`: LLVM's fptrunc and
fpext, which x86's F16C and Arm's fcvt do in hardware, many lanes an instruction): round to
nearest, ties to even, subnormals kept, past the largest finite value to inf. Bit-identical to
numpy's x.astype(float16).astype(float32) except for a nan's payload bits (tests/sim try every
float32 of fp16's range and sample the rest). A sum of two fp16 values is formed in float32 and
rounded once (`_f16_sum`): the correctly rounded fp16 sum (tests/sim check every pair of fp16
numbers).
"""

from __future__ import annotations

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import njit, types
from numba.extending import get_cython_function_address, intrinsic

# scipy's BLAS sgemm (the library scipy.linalg.blas calls), by a symbol name that cached machine
# code can find again in a later process
llvm.add_symbol("wsecc_sgemm", get_cython_function_address("scipy.linalg.cython_blas", "sgemm"))
_sgemm = types.ExternalFunction("wsecc_sgemm", types.void(*[types.voidptr] * 13))


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


@njit(nogil=True, cache=True)
def round_f16_into(src, dst):  # type: ignore[no-untyped-def]
    """dst = `_f16`(src), 1-D float32 arrays of one size (dst may be src)."""
    for i in range(src.size):
        dst[i] = _f16(src[i])


@njit(nogil=True, cache=True)
def chain_f16(partials, out):  # type: ignore[no-untyped-def]
    """out = the fp16 chain of partials[P, L]: each partial rounded to fp16 and added to the
    running sum, itself rounded to fp16 after each addition, partial 0 first."""
    for j in range(partials.shape[1]):
        out[j] = _f16(partials[0, j])
    for i in range(1, partials.shape[0]):
        for j in range(partials.shape[1]):
            out[j] = _f16_sum(out[j], _f16(partials[i, j]))


@njit(nogil=True, cache=True)
def column_blocks(xt, tiles, half, drop0, drop1, y, b0, b1):  # type: ignore[no-untyped-def]
    """`_column_block` for blocks b0 .. b1 - 1."""
    for b in range(b0, b1):
        _column_block(xt, tiles, half, drop0, drop1, y, b)


@njit
def _column_block(xt, tiles, half, drop0, drop1, y, b):  # type: ignore[no-untyped-def]
    """Columns b cw .. of y[M, N] = x W in the fabric's order. xt[h, M, kh]: x's columns as PE
    rows hold them; tiles[blocks, h, kh, cw]: W's column blocks, zero-padded. PE row i's
    partial x_i W_i, then the running sum from row i - 1 plus it (row 0 starts the sum). A
    partial of one product (kh = 1) is that product; longer ones are BLAS's sgemm. `half`: the
    partial and every running sum rounded to fp16 (`_f16`, `_f16_sum`), else float32 throughout
    (sgemm adds the partial in: acc = 1 * (x_i W_i) + acc, the product formed first). Columns
    drop0 .. drop1 - 1 of y lose row 0's partial (the drop_partial fault; drop0 = drop1: none)."""
    h, M, kh = xt.shape
    cw = tiles.shape[3]
    c0 = b * cw
    n = min(y.shape[1] - c0, cw)
    d0, d1 = max(drop0 - c0, 0), min(max(drop1 - c0, 0), n)
    acc = np.empty((M, cw), np.float32)  # C order [M, cw] is Fortran's [cw, M]
    if kh == 1:
        for i in range(h):
            w = tiles[b, i, 0]
            for m in range(M):
                xv = xt[i, m, 0]
                if i == 0:
                    for j in range(n):
                        acc[m, j] = _f16(xv * w[j]) if half else xv * w[j]
                    acc[m, d0:d1] = 0
                elif half:
                    for j in range(n):
                        acc[m, j] = _f16_sum(acc[m, j], _f16(xv * w[j]))
                else:
                    for j in range(n):
                        acc[m, j] = acc[m, j] + xv * w[j]
        y[:, c0 : c0 + n] = acc[:, :n]
        return
    # Fortran sgemm: C[n, M] = alpha A[n, kh] B[kh, M] + beta C, A = W_i's block (C order
    # [kh, cw]: lda = cw), B = x_i (C order [M, kh]: ldb = kh), C = acc or p (ldc = cw)
    trans = np.array([78], np.uint8)  # 'N'
    dims = np.array([n, M, kh, cw, kh, cw], np.int32)
    scalars = np.array([1.0, 0.0, 1.0], np.float32)  # alpha, then beta 0 or 1
    p = np.empty((M, cw), np.float32) if half else acc
    for i in range(h):
        beta = scalars[1:] if (i == 0 or half) else scalars[2:]
        _sgemm(
            trans.ctypes, trans.ctypes, dims[0:].ctypes, dims[1:].ctypes, dims[2:].ctypes,
            scalars.ctypes, tiles[b, i].ctypes, dims[3:].ctypes, xt[i].ctypes,
            dims[4:].ctypes, beta.ctypes, p.ctypes, dims[5:].ctypes,
        )  # fmt: skip
        if i == 0:
            p[:, d0:d1] = 0
        if half:
            for m in range(M):
                if i == 0:
                    for j in range(n):
                        acc[m, j] = _f16(p[m, j])
                else:
                    for j in range(n):
                        acc[m, j] = _f16_sum(acc[m, j], _f16(p[m, j]))
    y[:, c0 : c0 + n] = acc[:, :n]


_QUERY_BLOCK = 128
"""Queries an attention head scores at once (their scores, Sk each, stay in cache)."""
_EXP_ZERO = np.float32(-104)  # exp(-104) = 6.8e-46 < 2^-150: float32's exp is 0 below


@njit(nogil=True, cache=True, error_model="numpy")  # x / 0 is inf or nan, as in numpy
def attention_heads(q, k, v, keep, fill, rows, half, store_half, nan_to_zero, out, t0, t1):  # type: ignore[no-untyped-def]  # noqa: E501
    """Heads t0 .. t1 - 1 (t = batch H + head) of an attention kernel in the fabric's order
    (`wsecc.sim.functional._attention` states it). q[B, H, Sq, d] (scaled, in storage), k and
    v [B, H, Sk, d], keep[B, Sq, Sk]; writes out[B, Sq, H, d]. Scores q k^T are BLAS's, for
    a block of queries at a time. PE row r holds keys r, r + rows, ...: its max m_r, its sum
    l_r of e = exp(s - m_r) in key order, and its e v (BLAS again, over its keys). `half`:
    scores, e, l_r, the e v sums and every merge step rounded to fp16; `store_half`: the
    output rounded to fp16."""
    B, H, Sq, d = q.shape
    Sk = k.shape[2]
    ninf, zero = np.float32(-np.inf), np.float32(0)
    kT = np.empty((d, Sk), np.float32)
    m = np.empty((_QUERY_BLOCK, rows), np.float32)
    lsum = np.empty((_QUERY_BLOCK, rows), np.float32)
    pv = np.empty((rows, _QUERY_BLOCK, d), np.float32)
    acc = np.empty(d, np.float32)
    for t in range(t0, t1):
        b, hh = t // H, t % H
        kT[:, :] = k[b, hh].T
        for q0 in range(0, Sq, _QUERY_BLOCK):
            nq = min(Sq, q0 + _QUERY_BLOCK) - q0
            s = np.dot(q[b, hh, q0 : q0 + nq], kT)  # [nq, Sk]
            for i in range(nq):
                m[i, :] = ninf
                lsum[i, :] = zero
                r = 0  # key % rows
                for key in range(Sk):
                    if not keep[b, q0 + i, key]:
                        s[i, key] = fill
                    elif half:
                        s[i, key] = _f16(s[i, key])
                    m[i, r] = max(m[i, r], s[i, key])
                    r = r + 1 if r + 1 < rows else 0
                r = 0
                for key in range(Sk):  # s becomes e
                    x = s[i, key] - m[i, r]
                    # exp(x) < 2^-150 rounds to 0 below -103.98: skip the call (masked pairs)
                    e = zero if m[i, r] == ninf or x < _EXP_ZERO else np.float32(np.exp(x))
                    e = _f16(e) if half else e
                    s[i, key] = e
                    lsum[i, r] += e
                    r = r + 1 if r + 1 < rows else 0
                if half:
                    for r in range(rows):
                        lsum[i, r] = _f16(lsum[i, r])
            for r in range(rows):
                n = len(range(r, Sk, rows))
                if n == 0:
                    pv[r, :nq] = zero
                    continue
                e_row = np.empty((nq, n), np.float32)
                v_row = np.empty((n, d), np.float32)
                for j in range(n):
                    e_row[:, j] = s[:, r + j * rows]
                    v_row[j, :] = v[b, hh, r + j * rows]
                pv[r, :nq] = np.dot(e_row, v_row)
            for i in range(nq):
                # merge down the column: the running (max, sum, acc) rescaled at each row
                m_run, l_run = m[i, 0], lsum[i, 0]
                acc[:] = pv[0, i]
                if half:
                    for j in range(d):
                        acc[j] = _f16(acc[j])
                for r in range(1, rows):
                    before = m_run
                    m_run = max(m_run, m[i, r])
                    c_run = zero if before == ninf else np.float32(np.exp(before - m_run))
                    c_pe = zero if m[i, r] == ninf else np.float32(np.exp(m[i, r] - m_run))
                    l_run = l_run * c_run + lsum[i, r] * c_pe
                    l_run = _f16(l_run) if half else l_run
                    for j in range(d):
                        p = _f16(pv[r, i, j]) if half else pv[r, i, j]
                        a = acc[j] * c_run + p * c_pe
                        acc[j] = _f16(a) if half else a
                for j in range(d):
                    o = acc[j] / l_run
                    if nan_to_zero and o != o:
                        o = zero
                    out[b, q0 + i, hh, j] = _f16(o) if store_half else o
