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
def column_block(xt, tiles, half, drop0, drop1, y, b):  # type: ignore[no-untyped-def]
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
