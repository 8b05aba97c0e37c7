"""Functional simulation: the fabric-order program against onnxruntime, and its arithmetic.

Every sample and every corpus graph that compiles runs at batch 2 (the corpus graphs have a
fixed batch of 1) with a padded attention mask, in fp32 and mixed, against onnxruntime on the
original file. A hand-worked linear on a 4x4 region pins the tiling, the fabric's reduction
order and the two faults; the faults also fail the verdict of a real sample.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from conftest import ORT_CORPUS, SAMPLES
from test_models import CORPUS as CORPUS_FP32_TOLERANCE
from ulps import assert_within_fp16_ulps
from wsecc.passes import DEFAULT_PIPELINE
from wsecc.passes.lower import kernel_names, lower_to_kernels
from wsecc.targets import load_target

import wsecc.sim.functional as functional
from wsecc.check.numerics import TOLERANCE, make_inputs
from wsecc.compiled_cache import cache_dir
from wsecc.core.flow import lower_and_size
from wsecc.frontend.onnx import import_model
from wsecc.interp import run as interp_run
from wsecc.ir.core import DType, Graph, Node, Op, TensorType, Value, make_attrs
from wsecc.ir.printer import parse_graph
from wsecc.ir.rules import attention_bias, attention_keep
from wsecc.kernels import (
    Flow,
    Kernel,
    KernelGraph,
    KernelKind,
    Port,
    Sizing,
    size_regions,
)
from wsecc.pm import PassManager
from wsecc.sim.compiled import attention_heads, chain_f16, layernorm_rows
from wsecc.sim.functional import (
    SimulationError,
    _chain,
    load_npz,
    round_to_f16,
    save_npz,
    simulate_functional,
    validate,
    verdict,
)

SAMPLE_FILES = sorted(p.name for p in SAMPLES.glob("*.onnx"))
PRECISIONS = ("fp32", "mixed")


@cache
def fused_model(path: str) -> tuple[Graph, dict[str, np.ndarray]]:
    graph, _ = import_model(path, batch=2, seq=16)  # fixed-shape corpus graphs keep theirs
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    return fused, make_inputs(graph, seed=7, padded=True)


@cache
def products(path: str, precision: str) -> tuple[KernelGraph, Sizing]:
    return lower_and_size(fused_model(path)[0], load_target("wse2"), precision)


def check(path: str, precision: str, fp32_tolerance: float = 1e-5) -> None:
    fused, feeds = fused_model(path)
    kg, sizing = products(path, precision)
    result = validate(path, fused, kg, sizing, precision, feeds)
    assert [o.name for o in result.outputs] == [v.name for v in fused.outputs]
    for o in result.outputs:
        if precision == "fp32":
            assert o.max_rel_err <= fp32_tolerance, o
        else:
            assert o.passed and o.pcc >= 0.999, o
            assert o.max_rel_err <= TOLERANCE[precision]["max_rel_err"], o


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", SAMPLE_FILES)
def test_samples_match_onnxruntime(name, precision):
    check(str(SAMPLES / name), precision)
    fused, feeds = fused_model(str(SAMPLES / name))
    if "nomask" not in name:  # a generation export called without a mask has none
        assert feeds["attention_mask"][-1, -1] == 0  # the last row is padded


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", sorted(CORPUS_FP32_TOLERANCE))
def test_corpus_matches_onnxruntime(name, precision):
    """fp32 within test_models' bound for the graph: onnxruntime's own contrib SkipLayerNorm
    rounding differs from exact by ~1.3e-5 on two of them (the simulator matches the reference
    interpreter bit for bit there)."""
    path = ORT_CORPUS / name
    check(str(path), precision, CORPUS_FP32_TOLERANCE[name])


@pytest.mark.parametrize("name", ["gpt2_legacy_op14.onnx", "bert_dynamo.onnx"])
def test_fp16_passes_its_documented_tolerance(name):
    path = str(SAMPLES / name)
    fused, feeds = fused_model(path)
    result = validate(path, fused, *products(path, "fp16"), "fp16", feeds)
    assert result.passed, result


@pytest.mark.parametrize("precision", ["fp32", "mixed", "fp16"])
@pytest.mark.parametrize("fault", functional.FAULTS)
@pytest.mark.parametrize("name", ["gpt2_legacy_op14.onnx", "bert_dynamo.onnx"])
def test_every_fault_fails_the_verdict_in_every_precision(name, fault, precision):
    """A lost partial sum or a misplaced tile moves BERT's output by 3.6e-5 to 6.2e-5 and
    GPT-2's by 3e-3: within mixed's and fp16's tolerance (the precision check passes them), but
    the structure check (the same program in fp32 against the reference interpreter) fails."""
    path = str(SAMPLES / name)
    fused, feeds = fused_model(path)
    kg, sizing = products(path, precision)
    clean = validate(path, fused, kg, sizing, precision, feeds)
    assert clean.passed and clean.structure_passed, clean.summary()
    faulty = validate(path, fused, kg, sizing, precision, feeds, fault=fault)
    assert not faulty.passed and not faulty.structure_passed, faulty.summary()
    assert faulty.fault == fault and f"fault {fault} injected" in faulty.summary()
    # what float32 loses here (<= 4.7e-7 on the samples) leaves fp32's tolerance where it is
    assert all(o.fp32_noise is None for o in (*faulty.outputs, *faulty.structure))


def test_result_json_has_the_report_fields():
    path = str(SAMPLES / "bert_dynamo.onnx")
    fused, feeds = fused_model(path)
    d = validate(path, fused, *products(path, "mixed"), "mixed", feeds).to_json()
    assert d["reference"].startswith("onnxruntime ") and d["precision"] == "mixed"
    assert set(d) == {
        "reference",
        "precision",
        "outputs",
        "passed",
        "precision_passed",
        "structure",
        "fault",
        "fused",
    }
    assert d["structure"]["precision"] == "fp32" and d["structure"]["passed"]
    assert d["fused"]["precision"] == "fp32" and d["fused"]["passed"]
    assert d["fused"]["reference"] == d["reference"]
    assert [set(o) for o in d["outputs"]] == [
        {"name", "max_abs_err", "max_rel_err", "pcc", "passed", "fp32_noise"}
    ]
    assert d["outputs"][0]["fp32_noise"] is None  # passed plainly: no noise measured
    json.dumps(d)


def test_fully_masked_rows_match_the_reference_interpreter():
    """A row whose keys are all masked: every score is the fill, as in the reference."""
    path = str(SAMPLES / "bert_dynamo.onnx")
    fused, feeds = fused_model(path)
    feeds = dict(feeds, attention_mask=np.zeros_like(feeds["attention_mask"]))
    got = simulate_functional(fused, *products(path, "fp32"), "fp32", feeds)
    ref = interp_run(fused, feeds)
    for name, r in ref.items():
        np.testing.assert_allclose(got[name], r, rtol=0, atol=1e-5 * np.abs(r).max())


def test_kernel_names_are_lowerings_names():
    fused, _ = fused_model(str(SAMPLES / "gpt2_dynamo.onnx"))
    assert list(kernel_names(fused).values()) == [k.name for k in lower_to_kernels(fused).kernels]


# --- a hand-worked linear on a 4x4 region ----------------------------------------------------


def linear_program(
    W: np.ndarray, b: np.ndarray, M: int, h: int = 4, w: int = 4, activation: str = "none"
):
    """y = activation(x W + b) as one Linear node; its kernel sized to an h x w region."""
    K, N = W.shape
    x = Value("x", TensorType(DType.FLOAT32, (M, K)))
    y = Value("y", TensorType(DType.FLOAT32, (M, N)))
    attrs = make_attrs({"activation": activation, "has_bias": True})
    node = Node(
        Op.LINEAR, (x, Value.constant("W", W), Value.constant("b", b)), (y,), attrs, "y", ("mm",)
    )
    graph = Graph((x,), (y,), (node,), "hand")
    kg = lower_to_kernels(graph)
    sizing = size_regions(kg, load_target("wse2"), "fp32")
    return graph, kg, replace(sizing, kernels=(replace(sizing.kernels[0], h=h, w=w),))


@pytest.fixture(params=["one block", "narrow blocks"])
def path_(request, monkeypatch):
    """A linear's column blocks: one, as these small kernels get, or three columns each, so
    that several run on the threads and a PE's tile or a dropped partial spans blocks."""
    if request.param == "narrow blocks":
        monkeypatch.setattr(functional, "_BLOCK_ELEMS", 1)
        monkeypatch.setattr(functional, "_MIN_BLOCK_COLUMNS", 3)
        monkeypatch.setattr(functional, "_THREADS", 2)
        monkeypatch.setattr(functional, "_THREAD_WORK", 0)
    return request.param


@pytest.fixture(params=[4, 8], ids=["kh=2", "kh=1"])
def rows(request):
    """Region rows for K = 8: two products per partial (BLAS forms it), or one (the product)."""
    return request.param


def small_ints(shape, seed):
    return np.random.default_rng(seed).integers(-4, 5, shape).astype(np.float32)


def test_tiled_linear_equals_x_w_plus_b(path_, rows):
    """Integers: every order gives the exact result, so the tiling alone is checked."""
    W, b, x = small_ints((8, 8), 0), small_ints(8, 1), small_ints((1, 8), 2)
    graph, kg, sizing = linear_program(W, b, 1, rows)
    for precision in ("fp32", "mixed", "fp16"):
        got = simulate_functional(graph, kg, sizing, precision, {"x": x})["y"]
        np.testing.assert_array_equal(got, x @ W + b)


@pytest.mark.parametrize("activation", ["relu", "tanh", "gelu", "gelu_tanh"])
def test_the_epilogue_applies_the_bias_then_the_activation(path_, activation):
    """Against the reference rule (float64) on the same x W + b: float32 evaluation only."""
    rng = np.random.default_rng(1)
    W, b = small_ints((8, 8), 0) / 4, small_ints(8, 1) / 4
    x = rng.standard_normal((3, 8)).astype(np.float32)
    graph, kg, sizing = linear_program(W, b, 3, activation=activation)
    got = simulate_functional(graph, kg, sizing, "fp32", {"x": x})["y"]
    np.testing.assert_allclose(got, interp_run(graph, {"x": x})["y"], rtol=2e-6, atol=1e-6)


def test_partials_are_summed_in_the_cost_models_reduce_scatter_order(path_, rows):
    """K = 8 over 4 rows (kh = 2; over 8 rows, a zero partial between each), N = 8 over 4
    columns: nw = 2 outputs a column, own = 1 a row, so output 0 (segment 0) is finished on row
    0 and its chain starts on row 1: p1 + p2 + ... + p0. Column 0's partials 1, 2^24, 1, -2^24
    (rows 0, 1, 2, 3 of 4) give ((2^24 + 1) - 2^24) + 1 = 1 in float32 (2^24 + 1 rounds to
    2^24), where row 0 first gives 0 and the exact sum 2. Output 1 (segment 1, chain from row
    2: p2 + p3 + p0 + p1) with partials -2^24, 1, 2^24, 1 gives 1, where row 0 first gives 2.
    In fp16 the same happens one binade lower (2048): 1 with fp16 running sums, the exact 2
    with fp32 ones (mixed)."""
    x = np.ones((1, 8), np.float32)
    b = np.zeros(8, np.float32)
    for big, expected in ((2.0**24, {"fp32": 1.0}), (2048.0, {"mixed": 2.0, "fp16": 1.0})):
        W = np.zeros((8, 8), np.float32)
        W[[0, 2, 4, 6], 0] = [1, big, 1, -big]
        W[[0, 2, 4, 6], 1] = [-big, 1, big, 1]
        graph, kg, sizing = linear_program(W, b, 1, rows)
        for precision, want in expected.items():
            got = simulate_functional(graph, kg, sizing, precision, {"x": x})["y"]
            assert got[0, 0] == want, precision
            if rows == 4:
                assert got[0, 1] == want, precision


def test_a_pe_forms_its_partial_before_adding_the_incoming_sum(path_):
    """Row 0 sends 2^24; row 1 holds two products of 1. Partial first: 2^24 + (1 + 1) =
    2^24 + 2 exactly. Adding each product to the incoming sum would give 2^24 (twice a tie)."""
    W = np.zeros((8, 8), np.float32)
    W[[0, 2, 3], 0] = [2.0**24, 1, 1]
    graph, kg, sizing = linear_program(W, np.zeros(8, np.float32), 1)
    got = simulate_functional(graph, kg, sizing, "fp32", {"x": np.ones((1, 8), np.float32)})
    assert got["y"][0, 0] == 2.0**24 + 2


def test_drop_partial_drops_pe_0_0(path_, rows):
    """PE (0, 0) holds W[0:kh, 0:2] (nw = 2): without its partial, columns 0-1 miss
    x[:, 0:kh] W[0:kh, 0:2]; the other columns are untouched."""
    W, b, x = small_ints((8, 8), 3), small_ints(8, 4), small_ints((3, 8), 5)
    graph, kg, sizing = linear_program(W, b, 3, rows)
    got = simulate_functional(graph, kg, sizing, "fp32", {"x": x}, fault="drop_partial")["y"]
    W_dropped = W.copy()
    W_dropped[0 : 8 // rows, 0:2] = 0
    np.testing.assert_array_equal(got, x @ W_dropped + b)


def test_misplace_tile_swaps_pe_0_0_and_0_1(path_, rows):
    W, b, x = small_ints((8, 8), 6), small_ints(8, 7), small_ints((3, 8), 8)
    graph, kg, sizing = linear_program(W, b, 3, rows)
    got = simulate_functional(graph, kg, sizing, "fp32", {"x": x}, fault="misplace_tile")["y"]
    W_swapped, kh = W.copy(), 8 // rows
    W_swapped[0:kh, 0:2], W_swapped[0:kh, 2:4] = W[0:kh, 2:4], W[0:kh, 0:2]
    np.testing.assert_array_equal(got, x @ W_swapped + b)


def test_misplace_tile_needs_two_pes():
    graph, kg, sizing = linear_program(
        np.ones((2, 2), np.float32), np.zeros(2, np.float32), 1, 1, 1
    )
    with pytest.raises(
        SimulationError,
        match=r"^kernel 'linear' \(linear, node 'y'\): misplace_tile needs two PEs, the region is 1x1$",
    ):
        simulate_functional(
            graph, kg, sizing, "fp32", {"x": np.ones((1, 2), np.float32)}, fault="misplace_tile"
        )


# --- fp16 against its rounding, step by step --------------------------------------------------


def to_f16(a):
    """numpy's own conversion, one rounding per call: the reference for the fp16 arithmetic."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


def reference_f16_linear(x, W, b, h, w, drop_partial=False):
    """The fp16 linear written out: PE row i's partial x[:, K_i] W[K_i, :] rounded to fp16, added
    to the running sum, which is rounded to fp16 after each addition; output c's chain starts
    on row s + 1 and ends on row s, s = its segment ((c mod nw) // cdiv(nw, h)); then the bias.
    The partials are formed exactly (float64), so the data must keep them exact in float32."""
    kh, N = -(-W.shape[0] // h), W.shape[1]
    nw = -(-N // w)
    own = -(-nw // h)
    P = np.stack(
        [
            (x[:, i * kh : (i + 1) * kh].astype(np.float64) @ W[i * kh : (i + 1) * kh]).astype(
                np.float32
            )
            for i in range(h)
        ]
    )  # [h, M, N]
    if drop_partial:
        P[0, :, :nw] = 0
    out = np.empty(P.shape[1:], np.float32)
    for c in range(N):
        s = (c % nw) // own
        acc = None
        for step in range(h):
            p = P[(s + 1 + step) % h, :, c]
            with np.errstate(invalid="ignore"):  # inf - inf
                acc = to_f16(p) if acc is None else to_f16(acc + to_f16(p))
        out[:, c] = acc
    return to_f16(out + b)


@pytest.mark.parametrize("scale", [-13, -6, 3])  # fp16 subnormals; ordinary; beyond 65504
@pytest.mark.parametrize("drop_partial", [False, True])
@pytest.mark.parametrize("h", [5, 40], ids=["kh=8", "kh=1"])
def test_fp16_linear_rounds_every_partial_and_running_sum(path_, scale, drop_partial, h):
    """x and W hold multiples of 2^scale with 6 significant bits: every partial (kh <= 8
    products of 12 bits) is exact in float32, whatever order BLAS adds in, and rounding it to
    fp16 is not. The result must match the per-step reference bit for bit."""
    rng = np.random.default_rng(scale + 20 + 40 * drop_partial)
    M, K, N, w = 5, 40, 70, 3
    x = rng.integers(-63, 64, (M, K)).astype(np.float32) * np.float32(2.0**scale)
    W = rng.integers(-63, 64, (K, N)).astype(np.float32) * np.float32(2.0**scale)
    b = to_f16(rng.standard_normal(N))
    graph, kg, sizing = linear_program(W, b, M, h, w)
    fault = "drop_partial" if drop_partial else None
    got = simulate_functional(graph, kg, sizing, "fp16", {"x": x}, fault=fault)["y"]
    want = reference_f16_linear(x, W, b, h, w, drop_partial)
    assert (~np.isfinite(want)).any() == (scale == 3)  # inf, and inf - inf in long chains
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_fp16_chain_matches_the_per_step_reference():
    """`_chain` (the softmax kernel's row sums) on fp16-rounded partials of
    every magnitude, with infinities and nans among them."""
    rng = np.random.default_rng(0)
    ar = functional.Arithmetic.of("fp16")
    for h, n in [(1, 3), (2, 1), (7, 33), (16, 3000)]:
        exps = rng.integers(-30, 17, (h, n))
        partials = (rng.standard_normal((h, n)) * 2.0**exps).astype(np.float32)
        partials[rng.integers(0, h), : min(n, 4)] = [np.inf, -np.inf, np.nan, -0.0][: min(n, 4)]
        want = to_f16(partials[0])
        for p in partials[1:]:
            with np.errstate(invalid="ignore"):
                want = to_f16(want + to_f16(p))
        got = _chain(partials, ar)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def check_fp16_addition(every: int) -> None:
    """The fp16 running sum (`chain_f16` of two partials) against numpy's rounding of a + b,
    for every `every`-th finite fp16 number a and every finite fp16 number b (sums beyond
    65504 included)."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    b = halves[np.isfinite(halves)].astype(np.float32)
    pair, got = np.empty((2, b.size), np.float32), np.empty_like(b)
    pair[1] = b
    for a in b[::every]:
        pair[0] = a
        want = to_f16(a + b)
        chain_f16(pair, got)
        assert (got.view(np.uint32) == want.view(np.uint32)).all(), a


def test_fp16_addition_is_exact_for_a_sample_of_pairs():
    check_fp16_addition(every=97)


@pytest.mark.slow
def test_fp16_addition_is_exact_for_every_pair():
    check_fp16_addition(every=1)


# --- the attention kernel against its row-merge reference -----------------------------------


def reference_attention(qs, k, v, keep, fill, rows, ar, bias=None, softcap=0.0):
    """The attention kernel's order written out with numpy, one PE row at a time: keys dealt
    cyclically (key t on row t mod rows), each row's max, sum of e = exp(s - max) and e v, then
    the rows merged in order, rescaled by exp of the running max's change. [B, Sq, H, d]. The
    scores soft-capped to c tanh(s / c) with `softcap` c, then raised by `bias` [B | 1, H,
    1 | Sq, Sk] (ALiBi's, a bias operand's) before they are rounded."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        s = qs @ k.transpose(0, 1, 3, 2)
        if softcap:
            cap = np.float32(softcap)
            s = ar.acc(np.tanh(s / cap) * cap)
        s = s + (np.float32(0) if bias is None else bias)
        s = np.where(keep, ar.acc(s), fill)  # [B, H, Sq, Sk]
        Sk = s.shape[3]
        m, l_pe, pv = [], [], []
        for r in range(rows):
            keys = np.arange(r, Sk, rows)
            sr = s[..., keys]
            mr = sr.max(axis=3) if len(keys) else np.full(s.shape[:3], -np.inf, np.float32)
            e = np.zeros_like(sr) if np.isneginf(mr).all() else np.exp(sr - mr[..., None])
            e = ar.acc(np.where(np.isneginf(mr)[..., None], np.float32(0), e))
            m.append(mr)
            l_pe.append(ar.acc(e.sum(axis=3, dtype=np.float32)))
            pv.append(ar.acc(e @ v[:, :, keys] + np.float32(0)))
        m_run, l_run, acc = m[0], l_pe[0], pv[0]
        for r in range(1, rows):
            before, m_run = m_run, np.maximum(m_run, m[r])
            c_run = np.where(np.isneginf(before), 0, np.exp(before - m_run)).astype(np.float32)
            c_pe = np.where(np.isneginf(m[r]), 0, np.exp(m[r] - m_run)).astype(np.float32)
            l_run = ar.acc(l_run * c_run + l_pe[r] * c_pe)
            acc = ar.acc(acc * c_run[..., None] + pv[r] * c_pe[..., None])
        out = np.where(np.isnan(acc / l_run[..., None]), np.float32(0), acc / l_run[..., None])
    return ar.store(out).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("precision", ["fp32", "mixed", "fp16"])
@pytest.mark.parametrize("rows", [1, 3, 7, 40])  # 40 rows for 33 keys: seven hold none
@pytest.mark.parametrize("fill", [-np.inf, np.finfo(np.float32).min, -10000.0])
@pytest.mark.parametrize("added", ["none", "alibi", "table", "softcap"])
def test_attention_kernel_matches_its_row_merge_reference(precision, rows, fill, added):
    """Causal, with padded keys, and one batch whose keys are all padded (its rows are fully
    masked: the reference's softmax of fills, or nan made 0). Scores spread over 2^±6, so the
    per-row maxima differ and the rescaling matters; with ALiBi slopes, raised by slope × the
    key's position among the kept keys; with a bias operand, by its [H, Sq, Sk] entry; soft-
    capped (Gemma 2) at c = 2, where most scores are well into tanh's bend."""
    rng = np.random.default_rng(rows)
    B, H, Sq, Sk, d = 3, 2, 9, 33, 8
    ar = functional.Arithmetic.of(precision)
    qs = ar.store((rng.standard_normal((B, H, Sq, d)) * 4).astype(np.float32))
    k = ar.store(rng.standard_normal((B, H, Sk, d)).astype(np.float32))
    v = ar.store(rng.standard_normal((B, H, Sk, d)).astype(np.float32))
    mask = np.ones((B, Sk), np.int64)
    mask[0, -5:], mask[2] = 0, 0
    mask[1, :4] = 0  # left padding: ALiBi's positions count from the first kept key
    alibi = (0.5, 0.125) if added == "alibi" else ()
    attrs = {"causal": True, "mask": "key_padding", "alibi": alibi}
    table = rng.standard_normal((H, Sq, Sk)).astype(np.float32) * 2 if added == "table" else None
    keep = attention_keep(attrs, B, Sq, Sk, mask)
    bias = attention_bias(attrs, B, Sk, mask, table)
    held = np.zeros((0, 0, 0, 0), np.float32) if bias is None else bias
    fill = np.float32(fill)
    if ar.half_accum and np.isfinite(fill):
        fill = np.float32(np.finfo(np.float16).min)
    out = np.empty((B, Sq, H, d), np.float32)
    cap = np.float32(2.0 if added == "softcap" else 0.0)
    attention_heads(
        qs, k, v, np.ascontiguousarray(keep[:, 0]), np.ascontiguousarray(held), fill, cap,
        rows, ar.half_accum, ar.store is round_to_f16, True, out, 0, B * H,
    )  # fmt: skip
    want = reference_attention(qs, k, v, keep, fill, rows, ar, bias, cap)
    if precision == "mixed":  # float32 throughout, the output rounded to fp16: float32 values
        # a last bit apart (numba's loop and numpy's exp are not the same code) may round one
        # fp16 ulp apart, no more (seen once with a bias operand, at 40 rows): one rounding,
        # the output's own, at each value's magnitude
        assert_within_fp16_ulps(out, want, 1, per_element=True)
    else:
        rtol = {"fp32": 2e-6, "fp16": 2e-3}[precision]
        np.testing.assert_allclose(out, want, rtol=rtol, atol=rtol * np.abs(want).max())
    assert (out[2] == 0).all() == np.isneginf(fill)  # fully masked: nan made 0, else mean of v


def test_alibi_attention_matches_the_reference_interpreter():
    """ALiBi (BLOOM's slopes for 4 heads), causal, a left-padded row and a row with holes: the
    tiled kernel raises each score by slope × key position, the positions counting the kept
    keys, as the interpreter does; without the bias the outputs differ."""
    attrs = (
        "{'alibi': (0.25, 0.0625, 0.015625, 0.00390625,), 'causal': True, "
        "'fill': -3.4028234663852886e+38, 'head_dim': 8, 'k_offset': 32, 'mask': 'key_padding', "
        "'nan_to_zero': False, 'num_heads': 4, 'q_offset': 0, 'scale': 0.3535533845424652, "
        "'v_offset': 64, 'window': 0}"
    )
    text = """graph g(%qkv: f32[2,16,96], %mask: i64[2,16]) {
      %y: f32[2,16,32] = attention(%qkv, %qkv, %qkv, %mask) ATTRS
      return %y
    }"""
    graph = parse_graph(text.replace("ATTRS", attrs))
    kg, sizing = lower_and_size(graph, load_target("wse2"), "fp32")
    mask = np.ones((2, 16), np.int64)
    mask[0, :5], mask[1, [3, 7, 8]] = 0, 0
    qkv = np.random.default_rng(0).standard_normal((2, 16, 96)).astype(np.float32) * 2
    feeds = {"qkv": qkv, "mask": mask}
    got = simulate_functional(graph, kg, sizing, "fp32", feeds)["y"]
    want = interp_run(graph, feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    plain = parse_graph(text.replace("ATTRS", "{" + attrs.split("), ", 1)[1]))
    assert np.abs(interp_run(plain, feeds)["y"] - want).max() > 0.1


def test_a_bias_operand_attention_matches_the_reference_interpreter():
    """A bias operand [H, Sq, Sk] (MPNet's relative position bias), bidirectional, a padded
    row: the tiled kernel holds it and raises each kept score by its entry, as the interpreter
    does, in fp32 and in mixed (where it is held in fp16); without it the outputs differ."""
    rng = np.random.default_rng(4)
    table = (rng.standard_normal((4, 16, 16)) * 3).astype(np.float32)
    attrs = (
        "{'causal': False, 'fill': -3.4028234663852886e+38, 'has_bias': True, 'head_dim': 8, "
        "'k_offset': 32, 'mask': 'key_padding', 'nan_to_zero': False, 'num_heads': 4, "
        "'q_offset': 0, 'scale': 0.3535533845424652, 'v_offset': 64, 'window': 0}"
    )
    text = f"""graph g(%qkv: f32[2,16,96], %mask: i64[2,16]) {{
      %pb = const f32[4,16,16] {table.tolist()}
      %y: f32[2,16,32] = attention(%qkv, %qkv, %qkv, %mask, %pb) {attrs}
      return %y
    }}"""
    graph = parse_graph(text)
    mask = np.ones((2, 16), np.int64)
    mask[1, -4:] = 0
    feeds = {"qkv": rng.standard_normal((2, 16, 96)).astype(np.float32) * 2, "mask": mask}
    want = interp_run(graph, feeds)["y"]
    for precision, tol in (("fp32", 1e-5), ("mixed", 1e-2)):
        kg, sizing = lower_and_size(graph, load_target("wse2"), precision)
        got = simulate_functional(graph, kg, sizing, precision, feeds)["y"]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    plain = text.replace(", %pb)", ")").replace("'has_bias': True, ", "")
    assert np.abs(interp_run(parse_graph(plain), feeds)["y"] - want).max() > 0.1


# --- the layernorm kernel against its per-PE reference ---------------------------------------


def reference_layernorm(x, gamma, beta, eps, cols, half):
    """The layernorm kernel written out, one float32 operation at a time: each PE sums its
    features in order, the per-PE sums are chained in column order (in fp16 each rounded, and
    each running sum), for the mean and then the variance of x - mean."""
    f = to_f16 if half else np.float32

    def row_sum(v):
        dw, total = -(-len(v) // cols), None
        for c0 in range(0, len(v), dw):
            p = np.float32(0)
            for t in v[c0 : c0 + dw]:
                p = np.float32(p + t)
            total = f(p) if total is None else f(total + f(p))
        return total

    out = np.empty_like(x)
    for i, row in enumerate(x):
        mean = f(row_sum(row) / np.float32(len(row)))
        d = f(row - mean)
        var = f(row_sum(d * d) / np.float32(len(row)))
        rstd = f(np.float32(1) / np.sqrt(var + eps))
        out[i] = f(d * rstd) * gamma + beta
    return f(out)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("cols", [1, 3, 4, 16])  # 16 columns for 10 features: six hold none
def test_layernorm_kernel_matches_its_per_pe_reference(precision, cols):
    """Rows whose mean is far from zero (the two-pass variance must not cancel), bit for bit."""
    rng = np.random.default_rng(cols)
    half = precision == "fp16"
    x = to_f16(rng.standard_normal((4, 10)) * 3 + 40) if half else rng.standard_normal((4, 10))
    x = np.asarray(x, np.float32) + np.float32(0 if half else 1000)
    gamma, beta = to_f16(rng.standard_normal(10)), to_f16(rng.standard_normal(10))
    eps = np.float32(1e-5)
    y, none = np.empty_like(x), np.empty((0, 0), np.float32)
    layernorm_rows(x, none, gamma, beta, eps, cols, half, half, y, none, 0, len(x))
    want = reference_layernorm(x, gamma, beta, eps, cols, half)
    np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))


def test_layernorm_sums_per_pe_then_along_the_row():
    """Features 2^24, 1, 1, -2^24: two PEs sum to 2^24 and 1 - 2^24, and their chain to 1; one
    PE alone ends at 0 (2^24 + 1 rounds back to 2^24). The means differ, so do the outputs."""
    x = np.float32([[2.0**24, 1, 1, -(2.0**24)]])
    ones, zeros = np.ones(4, np.float32), np.zeros(4, np.float32)
    none = np.empty((0, 0), np.float32)
    ys = []
    for cols in (1, 2):
        y = np.empty_like(x)
        layernorm_rows(x, none, ones, zeros, np.float32(0), cols, False, False, y, none, 0, 1)
        np.testing.assert_array_equal(y, reference_layernorm(x, ones, zeros, 0, cols, False))
        ys.append(y)
    assert not np.array_equal(*ys)


# --- a softmax kernel, tiled row-wise ----------------------------------------------------------


def test_softmax_kernel_reduces_per_pe_then_along_the_row():
    """Lowering makes a standalone Softmax a generic kernel; a softmax kernel (its own kind)
    splits the feature dim over the columns, here 10 features over 3 columns (4, 4, 2)."""
    x = Value("x", TensorType(DType.FLOAT32, (2, 5, 10)))
    y = Value("y", TensorType(DType.FLOAT32, (2, 5, 10)))
    node = Node(Op.SOFTMAX, (x,), (y,), make_attrs({"axis": -1}), "y")
    graph = Graph((x,), (y,), (node,), "hand")
    kernel = Kernel("softmax", KernelKind.SOFTMAX, {"rows": 5, "dim": 10})
    ports = (Port("x", 50), Port("y", 50))
    flows = (Flow.between(ports[0], kernel, 50), Flow.between(kernel, ports[1], 50))
    kg = KernelGraph("hand", 5, (kernel,), flows, ports[:1], ports[1:])
    sizing = size_regions(kg, load_target("wse2"), "fp32")
    sizing = replace(sizing, kernels=(replace(sizing.kernels[0], h=1, w=3),))
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 5, 10)).astype(np.float32) * 4}
    got = simulate_functional(graph, kg, sizing, "fp32", feeds)["y"]
    np.testing.assert_allclose(got, interp_run(graph, feeds)["y"], rtol=1e-6, atol=1e-7)


# --- arithmetic helpers -------------------------------------------------------------------------


def test_round_to_f16_is_numpys_conversion():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.sort(halves[np.isfinite(halves)].astype(np.float32))
    mids = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    x = np.concatenate(
        [
            bits.view(np.float32),
            finite,
            mids,
            np.nextafter(mids, np.float32(np.inf)),
            np.nextafter(mids, np.float32(-np.inf)),
            np.float32([65504, 65519.996, 65520, 1e9, np.inf, -np.inf, np.nan, -0.0]),
        ]
    )
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    got = round_to_f16(x)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:5]


@pytest.mark.slow
def test_round_to_f16_is_numpys_conversion_for_every_float32_in_range():
    """Every float32 of magnitude 2^-30 to 65504, both signs: the arithmetic method's domain
    (beyond 65504 every result is 65504, inf or nan, which the test above samples; below 2^-30
    all round to zero as 2^-30 does)."""
    for start in range(0x30800000, 0x477FE001, 1 << 22):
        bits = np.arange(start, min(start + (1 << 22), 0x477FE001), dtype=np.uint32)
        for x in (bits.view(np.float32), -bits.view(np.float32)):
            got = round_to_f16(x)
            assert (got.view(np.uint32) == to_f16(x).view(np.uint32)).all(), start


@pytest.mark.parametrize("shape", [(1,), (2,), (3, 5), (10_000,)])
def test_chain_adds_partials_in_index_order(shape):
    """((2^24 + 1) - 2^24) + 13 ones = 13 in index order (exact: 14); one float32 reduction must
    not reorder it, as numpy's pairwise summation along the innermost axis would."""
    pattern = np.array([2.0**24, 1, -(2.0**24)] + [1] * 13, np.float32)
    partials = np.repeat(pattern, int(np.prod(shape))).reshape(16, *shape)
    ar = functional.Arithmetic.of("fp32")
    np.testing.assert_array_equal(_chain(partials, ar), np.full(shape, 13, np.float32))


# --- errors and files ---------------------------------------------------------------------------


def test_the_compiled_loops_cache_in_the_user_cache_never_in_the_package(tmp_path, monkeypatch):
    """The compiled loops cache per user (WSECC_CACHE_DIR, else XDG_CACHE_HOME/wsecc, else
    ~/.cache/wsecc), never beside the installed package (pip would not remove those files);
    with nothing writable, in the temporary directory."""
    import wsecc
    from wsecc.sim import compiled

    package = Path(wsecc.__file__).resolve().parent
    assert package not in Path(compiled.config.CACHE_DIR).resolve().parents
    assert cache_dir({"WSECC_CACHE_DIR": str(tmp_path / "w")}) == tmp_path / "w" / "numba"
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path / "x")}) == tmp_path / "x" / "wsecc" / "numba"
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("HOME", str(blocked))
    assert cache_dir({"WSECC_CACHE_DIR": str(blocked)}).name == "wsecc-numba-cache"


def test_products_of_another_graph_are_refused():
    fused, feeds = fused_model(str(SAMPLES / "gpt2_dynamo.onnx"))
    kg, sizing = products(str(SAMPLES / "bert_dynamo.onnx"), "fp32")
    with pytest.raises(
        SimulationError,
        match=r"^kernel graph 'main_graph' does not match the fused graph 'main_graph': "
        r"\d+ kernels for \d+ kernel nodes$",
    ):
        simulate_functional(fused, kg, sizing, "fp32", feeds)


def test_unknown_fault_and_missing_input_are_refused():
    path = str(SAMPLES / "gpt2_dynamo.onnx")
    fused, feeds = fused_model(path)
    kg, sizing = products(path, "fp32")
    with pytest.raises(
        SimulationError,
        match=r"^unknown fault 'flip' \(expected one of drop_partial, misplace_tile\)$",
    ):
        simulate_functional(fused, kg, sizing, "fp32", feeds, fault="flip")
    with pytest.raises(SimulationError, match=r"^missing input 'attention_mask'$"):
        simulate_functional(fused, kg, sizing, "fp32", {"input_ids": feeds["input_ids"]})


def test_npz_round_trip(tmp_path):
    arrays = {"logits": np.arange(6, dtype=np.float32).reshape(2, 3), "/model/out:0": np.ones(2)}
    save_npz(tmp_path / "outputs.npz", arrays)
    back = load_npz(tmp_path / "outputs.npz")
    assert back.keys() == arrays.keys()
    for k, v in arrays.items():
        np.testing.assert_array_equal(back[k], v)


def _layer_norm_file(path: Path, shape: tuple[int, ...]) -> Path:
    """One ONNX LayerNormalization over the last axis, gamma 1 and beta 0."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "y")]
    weights = [
        numpy_helper.from_array(np.ones(shape[-1], np.float32), "g"),
        numpy_helper.from_array(np.zeros(shape[-1], np.float32), "b"),
    ]
    ln = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)
    graph = helper.make_graph([ln], "ln", io[:1], io[1:], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("precision", PRECISIONS)
def test_an_output_passes_within_what_float32_itself_loses(tmp_path, precision):
    """A layernorm of 4000 + N(0, 1): one float32 ulp of the mean (2.4e-4) is 2.4e-4 of the
    spread, so the interpreter in float32 is 4.7e-5 from float64 and onnxruntime 3.2e-5; the
    exact result, rounded to float32, is that far from both, past fp32's 1e-5 and the
    structure check's 2e-5. It passes within 4 x that noise; off by 10 x the noise, it fails."""
    path = str(_layer_norm_file(tmp_path / "ln.onnx", (2, 8, 64)))
    graph, _ = import_model(path)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    feeds = {"x": (4000 + np.random.default_rng(0).standard_normal((2, 8, 64))).astype(np.float32)}
    exact = {"y": interp_run(fused, feeds, float64=True)["y"].astype(np.float32)}
    result = verdict(path, fused, feeds, exact, precision, exact)
    assert result.passed, result.summary()
    (s,) = result.structure
    assert s.max_rel_err > TOLERANCE["structure"]["max_rel_err"] and s.fp32_noise is not None
    assert 4e-5 < s.fp32_noise < 6e-5 and s.max_rel_err <= 4 * s.fp32_noise
    (o,) = result.outputs
    assert (o.fp32_noise is not None) == (precision == "fp32"), o  # mixed: its own tolerance
    assert "within 4 x the 4.7e-05 float32 itself loses on these inputs" in result.summary()

    off = exact["y"].copy()
    off[0, 0, 0] += 10 * s.fp32_noise * np.abs(exact["y"]).max()
    wrong = verdict(path, fused, feeds, {"y": off}, precision, {"y": off})
    assert not wrong.structure_passed and wrong.precision_passed == (precision == "mixed")
    assert wrong.structure[0].fp32_noise == s.fp32_noise
    assert "structure fp32 FAIL (worst y: max rel err 4.27e-04" in wrong.summary()
    assert "beyond 4 x the 4.7e-05 float32 itself loses" in wrong.summary()


def test_a_verdict_that_passes_measures_no_float32_noise(monkeypatch):
    """The float64 run costs nothing where every output passes plainly."""

    def refuse(*args: object) -> None:
        raise AssertionError("float32_noise ran")

    monkeypatch.setattr(functional, "float32_noise", refuse)
    path = str(SAMPLES / "bert_dynamo.onnx")
    fused, feeds = fused_model(path)
    assert validate(path, fused, *products(path, "fp32"), "fp32", feeds).passed


def test_an_output_the_simulation_lacks_fails_the_verdict():
    path = str(SAMPLES / "bert_dynamo.onnx")
    fused, feeds = fused_model(path)
    result = verdict(path, fused, feeds, {}, "mixed", {})
    assert not result.passed
    assert [(o.name, o.max_rel_err, o.passed) for o in result.outputs] == [
        ("logits", float("inf"), False)
    ]


def test_a_meaning_both_references_of_the_program_share_is_checked_against_onnxruntime(
    monkeypatch,
):
    """A wrong rule that the simulator and the reference interpreter share (here: the full
    attention mask ignored) passes the structure check, and moves gpt2_megatron's logits by
    2.4e-2, under mixed precision's 3e-2; the fused graph's own check against onnxruntime
    fails it."""
    import wsecc.ir.rules as rules

    path = str(ORT_CORPUS / "gpt2_megatron.onnx")
    fused, feeds = fused_model(path)
    kg, sizing = products(path, "mixed")
    assert validate(path, fused, kg, sizing, "mixed", feeds).passed
    plain = rules.attention_keep

    def no_full_mask(a, b, sq, sk, mask):  # type: ignore[no-untyped-def]
        return plain({**a, "mask": "none"} if a["mask"] == "full" else a, b, sq, sk, mask)

    monkeypatch.setattr(rules, "attention_keep", no_full_mask)  # the interpreter's
    monkeypatch.setattr(functional, "attention_keep", no_full_mask)  # the simulator's
    wrong = validate(path, fused, kg, sizing, "mixed", feeds)
    assert wrong.precision_passed and wrong.structure_passed, wrong.summary()
    assert not wrong.fused_passed and not wrong.passed
    assert "fused graph fp32 FAIL" in wrong.summary()
