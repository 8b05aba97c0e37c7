"""Generation through the tiled functional simulator on its K/V cache (`wsecc.sim.generate`).

Each decoder sample (GPT-2; Llama: grouped K/V heads, rotate-half rotary; GPT-J: interleaved
rotary; legacy and dynamo exports) generates greedily at batch 2, prefill then one window per
token, against onnxruntime recomputing the whole sequence with the sample's no-past file at every
step: ids identical in fp32, logits PCC >= 0.999 at every step in mixed. Prefill-then-decode
equals one window of the whole sequence and the whole-context program (the cache is right); the
rotary_position fault fails the verdict; what cannot be windowed fails with one clear error.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from ulps import assert_within_fp16_ulps
from wsecc.passes.lower import lower_to_kernels
from wsecc.targets import load_target

from wsecc.check.numerics import OutputError, ort_run
from wsecc.compiler import Compilation
from wsecc.core.flow import lower_and_size
from wsecc.errors import SimulationError
from wsecc.ir.printer import parse_graph
from wsecc.kernels import Kernel, KernelKind, size_regions
from wsecc.options import GENERATE_FAULTS, Options
from wsecc.sim.functional import BUILDERS
from wsecc.sim.generate import (
    _FRAMES,
    GenerationResult,
    compile_windowed,
    generate,
    generation_inputs,
    generation_verdict,
    simulate_generation,
)

from .conftest import SAMPLES

B, P, N = 2, 4, 6  # batch, prompt, generated tokens
C = P + N  # the context the graph is bound at
DECODERS = (
    "gpt2_legacy_op17",
    "gpt2_dynamo",
    "llama_legacy_op17",
    "llama_dynamo",
    "gptj_legacy_op17",
    "gptj_dynamo",
)
ROTARY = ("llama_dynamo", "gptj_legacy_op17")


@cache
def _compiled(sample: str, seq: int = C) -> Compilation:
    options = Options(seq=seq, batch=B)
    return Compilation.load(SAMPLES / f"{sample}.onnx", options).fuse().lower_and_size()


def _program(sample: str) -> tuple:
    c = _compiled(sample)
    return c.fused, c.kernel_graph, c.sizing


def _prompt() -> np.ndarray:
    return np.random.default_rng(1).integers(0, 200, (B, P)).astype(np.int64)


def _padded_mask() -> np.ndarray:
    """Key 1 of the second sequence masked (a pad inside its prompt)."""
    mask = np.ones((B, C), np.int64)
    mask[1, 1] = 0
    return mask


@cache
def _reference(sample: str | Path, padded: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """onnxruntime's greedy generation, recomputing the whole sequence with the no-past file
    (its sequence dim is dynamic; a sample's name or a path) at every step: ids [B, N], logits
    [B, N, vocab]."""
    seq, logits = _prompt(), []
    mask = _padded_mask() if padded else np.ones((B, C), np.int64)
    path = sample if isinstance(sample, Path) else SAMPLES / f"{sample}.onnx"
    for _ in range(N):
        feeds = {"input_ids": seq, "attention_mask": mask[:, : seq.shape[1]]}
        out = ort_run(path, feeds)
        last = out["logits"][:, -1]
        logits.append(last)
        seq = np.concatenate([seq, last.argmax(axis=-1)[:, None]], axis=1)
    return seq[:, P:], np.stack(logits, axis=1)


# --- against onnxruntime ----------------------------------------------------------------------


@pytest.mark.parametrize("sample", DECODERS)
@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_generation_matches_onnxruntime_recomputing_the_sequence(sample, precision):
    ids, logits = simulate_generation(*_program(sample), precision, _prompt(), N)
    assert ids.shape == (B, N) and ids.dtype == np.int64
    assert logits.shape == (B, N, _reference(sample)[1].shape[-1]) and logits.dtype == np.float32
    assert np.array_equal(ids, logits.argmax(axis=-1))
    ref_ids, ref_logits = _reference(sample)
    result = generation_verdict(ids, logits, ref_ids, ref_logits, precision)
    assert result.passed, result.summary()
    if precision == "fp32":
        assert np.array_equal(ids, ref_ids)
        assert all(e.max_rel_err <= 1e-5 for e in result.steps)
    else:
        assert len(result.steps) >= 1 and result.min_pcc >= 0.999


def test_generation_in_fp16_matches_onnxruntime():
    ids, logits = simulate_generation(*_program("llama_dynamo"), "fp16", _prompt(), N)
    result = generation_verdict(ids, logits, *_reference("llama_dynamo"), "fp16")
    assert result.passed and result.ids_equal, result.summary()


@pytest.mark.parametrize("sample", ["gpt2_dynamo", "llama_dynamo"])
def test_a_padded_mask_is_read_for_the_cached_keys(sample):
    """extra_inputs' attention mask (key 1 of the second sequence masked) decides which cached
    keys each window's queries see, as in onnxruntime; the first sequence is untouched."""
    mask = _padded_mask()
    ids, logits = simulate_generation(
        *_program(sample), "fp32", _prompt(), N, extra_inputs={"attention_mask": mask}
    )
    result = generation_verdict(ids, logits, *_reference(sample, padded=True), "fp32")
    assert result.passed and result.ids_equal, result.summary()
    plain = simulate_generation(*_program(sample), "fp32", _prompt(), N)[1]
    np.testing.assert_array_equal(logits[0], plain[0])
    assert np.abs(logits[1] - plain[1]).max() > 0.1


@pytest.mark.parametrize("padded", [False, True], ids=["ones", "padded"])
def test_alibi_generation_matches_onnxruntime(padded):
    """BLOOM's ALiBi (a tiny Hugging Face export; skips without torch): each window's queries
    get slope × key position over the cache's keys, the positions counting the kept keys (a
    pad inside the second prompt shifts the keys after it)."""
    from hf_exports import export_path

    path = export_path("bloom", "dynamo")
    c = Compilation.load(path, Options(seq=C, batch=B)).fuse().lower_and_size()
    mask = _padded_mask() if padded else np.ones((B, C), np.int64)
    ids, logits = simulate_generation(
        c.fused, c.kernel_graph, c.sizing, "fp32", _prompt(), N,
        extra_inputs={"attention_mask": mask},
    )  # fmt: skip
    result = generation_verdict(ids, logits, *_reference(path, padded), "fp32")
    assert result.passed and result.ids_equal, result.summary()
    assert all(e.max_rel_err <= 1e-5 for e in result.steps)


# --- the cache ----------------------------------------------------------------------------------


@pytest.mark.parametrize("sample", ["gpt2_dynamo", *ROTARY])
@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_prefill_then_decode_equals_one_window_and_the_whole_program(sample, precision):
    """The cache is right: the logits of prefill and one-token decode windows are those of one
    window over the whole sequence, and those of the whole-context program (no cache)."""
    fused = _compiled(sample).fused
    wp = compile_windowed(*_program(sample), precision)
    ids, logits = generate(wp, _prompt(), N)
    seq = np.concatenate([_prompt(), ids[:, :-1]], axis=1)  # every token the steps fed
    session = wp.session(generation_inputs(fused))
    one = session.step(seq)["logits"][:, P - 1 :]
    feeds = generation_inputs(fused)
    feeds["input_ids"][:, : seq.shape[1]] = seq
    whole = wp.program.run(feeds)["logits"][:, P - 1 : seq.shape[1]]
    for other in (one, whole):
        if precision == "mixed":
            # the paths differ in float32 summation order only: the logits' own fp16 rounding
            # may flip (1 ulp: 9.8e-4 at |logit| 1.44 seen on a loaded machine, issue 32) and
            # a flip upstream may carry one more; 2 ulps at the logits' largest magnitude
            assert_within_fp16_ulps(other, logits, 2)
        else:  # fp32: the same order differences, ~8 float32 ulps at |logit| ~1.4
            np.testing.assert_allclose(other, logits, rtol=1e-6, atol=1e-6)


def test_windows_of_any_size_continue_the_cache():
    """Windows [0, 3), [3, 4), [4, 8), [8, 10) give the rows one window [0, 10) gives."""
    fused, kg, sizing = _program("llama_dynamo")
    wp = compile_windowed(fused, kg, sizing, "fp32")
    seq = np.random.default_rng(2).integers(0, 200, (B, C)).astype(np.int64)
    whole = wp.session(generation_inputs(fused))
    want = whole.step(seq)["logits"]
    parts = wp.session(generation_inputs(fused))
    got = []
    for a, b in [(0, 3), (3, 4), (4, 8), (8, 10)]:
        got.append(parts.step(seq[:, a:b])["logits"])
    np.testing.assert_allclose(np.concatenate(got, axis=1), want, rtol=1e-6, atol=1e-6)


# --- faults -------------------------------------------------------------------------------------


@pytest.mark.parametrize("sample", ROTARY)
def test_rotary_position_fault_fails_the_verdict(sample):
    ref_ids, ref_logits = _reference(sample)
    clean = simulate_generation(*_program(sample), "fp32", _prompt(), N)
    assert generation_verdict(*clean, ref_ids, ref_logits, "fp32").passed
    broken = simulate_generation(*_program(sample), "fp32", _prompt(), N, fault="rotary_position")
    # prefill is untouched: the first token's logits are the clean ones
    np.testing.assert_array_equal(broken[1][:, 0], clean[1][:, 0])
    result = generation_verdict(*broken, ref_ids, ref_logits, "fp32", fault="rotary_position")
    assert not result.passed, result.summary()
    assert result.summary().startswith("FAIL: generation fp32 FAIL, 6 tokens, ")
    assert result.summary().endswith("; fault rotary_position injected")


@pytest.mark.parametrize("sample", ROTARY)
def test_in_mixed_the_structure_check_catches_the_rotary_fault(sample):
    """Mixed precision's PCC lets the broken rotary rule through (0.99998); the same program's
    fp32 generation, judged as fp32, does not."""
    ref = _reference(sample)
    program = _program(sample)

    def verdict(fault):
        mixed = simulate_generation(*program, "mixed", _prompt(), N, fault=fault)
        exact = simulate_generation(*program, "fp32", _prompt(), N, fault=fault)
        return generation_verdict(*mixed, *ref, "mixed", exact=exact, fault=fault)

    clean, broken = verdict(None), verdict("rotary_position")
    assert clean.passed and clean.structure is not None and clean.structure.passed
    assert broken.precision_passed and not broken.structure.passed and not broken.passed
    assert broken.summary().startswith("FAIL: generation mixed PASS, 6 tokens, ids identical")
    assert "; structure fp32 FAIL, 6 tokens, ids identical (worst step" in broken.summary()
    j = broken.to_json()
    assert j["passed"] is False and j["precision_passed"] is True
    assert j["structure"]["precision"] == "fp32" and j["structure"]["passed"] is False


def test_rotary_position_fault_needs_a_rotary_attention():
    assert "rotary_position" in GENERATE_FAULTS
    with pytest.raises(SimulationError, match=r"^unknown fault 'nope' \(expected one of "):
        compile_windowed(*_program("gpt2_dynamo"), "fp32", fault="nope")
    with pytest.raises(SimulationError, match=r"^fault 'rotary_position' needs a rotary attention"):
        compile_windowed(*_program("gpt2_dynamo"), "fp32", fault="rotary_position")


def test_a_functional_fault_reaches_the_generation():
    ref_ids, ref_logits = _reference("gpt2_dynamo")
    broken = simulate_generation(
        *_program("gpt2_dynamo"), "fp32", _prompt(), N, fault="drop_partial"
    )
    assert not generation_verdict(*broken, ref_ids, ref_logits, "fp32").passed


# --- what cannot be windowed --------------------------------------------------------------------


def test_a_window_past_the_context_fails():
    fused, kg, sizing = _program("gpt2_dynamo")
    wp = compile_windowed(fused, kg, sizing, "fp32")
    with pytest.raises(
        SimulationError,
        match=r"^5 steps after a prompt of 7 need a context of 11; the program is bound at seq 10$",
    ):
        generate(wp, np.zeros((B, 7), np.int64), 5)
    generate(wp, np.zeros((B, 7), np.int64), 4)  # 7 + 4 - 1 = 10 positions: fits
    session = wp.session(generation_inputs(fused))
    session.step(np.zeros((B, 8), np.int64))
    with pytest.raises(
        SimulationError,
        match=r"^window \[8, 11\) is outside the context: the program is bound at seq 10, "
        r"8 tokens computed so far$",
    ):
        session.step(np.zeros((B, 3), np.int64))
    assert session.step(np.zeros((B, 2), np.int64))["logits"].shape == (B, 2, 1000)
    with pytest.raises(SimulationError, match=r"^window \[10, 11\) is outside the context"):
        session.step(np.zeros((B, 1), np.int64))


def test_an_encoder_cannot_be_windowed():
    c = (
        Compilation.load(SAMPLES / "bert_dynamo.onnx", Options(seq=8, batch=B))
        .fuse()
        .lower_and_size()
    )
    with pytest.raises(
        SimulationError, match=r"^cannot window node .*attention kernel\): it is not causal"
    ):
        compile_windowed(c.fused, c.kernel_graph, c.sizing, "fp32")


_MIXING = """
graph mixing(%input_ids: i64[2,4]) {{
  %table = const f32[8,4] {table}
  %w = const f32[4,8] {w}
  %x: f32[2,4,4] = embedding(%input_ids, %table)
  {middle}
  %logits: f32[2,4,8] = linear(%y, %w) {{'activation': 'none', 'has_bias': False}}
  return %logits
}}
"""


def _mixing_program(middle: str):
    rng = np.random.default_rng(0)
    text = _MIXING.format(
        table=rng.standard_normal((8, 4)).round(3).tolist(),
        w=rng.standard_normal((4, 8)).round(3).tolist(),
        middle=middle,
    )
    g = parse_graph(text)
    kg, sizing = lower_and_size(g, load_target("wse2"), "fp32")
    return g, kg, sizing


def test_a_view_that_keeps_tokens_windows():
    """Transposing the features of a token ([2, 4, 2, 2] -> [2, 4, 2, 2]) keeps its row."""
    program = _mixing_program(
        "%s: f32[2,4,2,2] = reshape(%x) {'shape': (2, 4, 2, 2,)}\n"
        "  %t: f32[2,4,2,2] = transpose(%s) {'perm': (0, 1, 3, 2,)}\n"
        "  %y: f32[2,4,4] = reshape(%t) {'shape': (2, 4, 4,)}"
    )
    wp = compile_windowed(*program, "fp32")
    ids = np.array([[1, 2, 3, 4], [5, 6, 7, 0]])
    session = wp.session(generation_inputs(program[0]))
    first = session.step(ids[:, :2])["logits"]
    rest = session.step(ids[:, 2:])["logits"]
    whole = wp.program.run({"input_ids": ids})["logits"]
    np.testing.assert_array_equal(np.concatenate([first, rest], axis=1), whole)


def test_a_view_that_mixes_tokens_fails():
    """Swapping the token and feature axes ([2, 4, 4], C = features = 4) keeps the shape of
    token rows, but row 2 of the result is the third feature of every token."""
    program = _mixing_program("%y: f32[2,4,4] = transpose(%x) {'perm': (0, 2, 1,)}")
    with pytest.raises(
        SimulationError,
        match=r"^cannot window node 'y' \(TRANSPOSE\): it mixes tokens \(row 2 of its output "
        r"changes with other rows of its input\)$",
    ):
        compile_windowed(*program, "fp32")


def test_a_kernel_that_mixes_tokens_fails():
    program = _mixing_program("%y: f32[2,4,4] = cumsum(%x) {'axis': 1}")
    with pytest.raises(
        SimulationError,
        match=r"^cannot window node 'y' \(CUMSUM, generic kernel\): it mixes tokens",
    ):
        compile_windowed(*program, "fp32")


def test_a_view_without_token_rows_fails():
    program = _mixing_program(
        "%z: f32[2,16] = reshape(%x) {'shape': (2, 16,)}\n"
        "  %y: f32[2,4,4] = reshape(%z) {'shape': (2, 4, 4,)}"
    )
    with pytest.raises(
        SimulationError,
        match=r"^cannot window node 'z' \(RESHAPE\): output 'z' \(2, 16\) has no token axis "
        r"\(rows \[batch, 4\] or \[8\]\), so it mixes tokens$",
    ):
        compile_windowed(*program, "fp32")


def test_elementwise_generic_and_softmax_kernels_window():
    """A per-position scale (a constant [1, C, 1]: sliced to the window), erf (a generic
    kernel) and a softmax kernel over the features, run in windows of 2, 1 and 1 tokens, give
    the whole-context program's rows; without slicing the constant they would not."""
    rng = np.random.default_rng(0)
    g = parse_graph(
        _MIXING.format(
            table=rng.standard_normal((8, 4)).round(3).tolist(),
            w=rng.standard_normal((4, 8)).round(3).tolist(),
            middle="%p = const f32[1,4,1] [[[0.5], [1.5], [-2.0], [3.0]]]\n"
            "  %s: f32[2,4,4] = mul(%x, %p)\n"
            "  %e: f32[2,4,4] = erf(%s)\n"
            "  %y: f32[2,4,4] = softmax(%e) {'axis': -1}",
        )
    )
    kg = lower_to_kernels(g)  # lowering makes the softmax generic: give it its own kind
    kernels = [
        Kernel(k.name, KernelKind.SOFTMAX, {"rows": 4, "dim": 4})
        if k.params.get("op") == "softmax"
        else k
        for k in kg.kernels
    ]
    kg = replace(kg, kernels=tuple(kernels))
    sizing = size_regions(kg, load_target("wse2"), "fp32")
    kinds = {k.kind for k in kg.kernels}
    assert {KernelKind.ELEMENTWISE, KernelKind.GENERIC, KernelKind.SOFTMAX} <= kinds
    wp = compile_windowed(g, kg, sizing, "fp32")
    ids = np.array([[1, 2, 3, 4], [5, 6, 7, 0]])
    session = wp.session(generation_inputs(g))
    got = [session.step(ids[:, a:b])["logits"] for a, b in [(0, 2), (2, 3), (3, 4)]]
    whole = wp.program.run({"input_ids": ids})["logits"]
    np.testing.assert_allclose(np.concatenate(got, axis=1), whole, rtol=1e-6, atol=1e-7)


def test_every_simulated_kind_has_a_windowing_rule():
    """A new kind the simulator runs needs a windowing rule (or generation fails on it)."""
    simulated = set(BUILDERS)
    assert simulated - {KernelKind.ATTENTION} <= set(_FRAMES)


# --- the verdict ----------------------------------------------------------------------------------


def _logits(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((B, 4, 16)).astype(np.float32)


def test_verdict_compares_up_to_the_first_diverging_step():
    ref = _logits(0)
    ref_ids = ref.argmax(axis=-1)
    sim = ref.copy()
    sim[1, 2] += 0.01 * _logits(1)[1, 2]
    ids = ref_ids.copy()
    ids[1, 2] = (ids[1, 2] + 1) % 16
    ids[0, 3] = (ids[0, 3] + 1) % 16
    r = generation_verdict(ids, sim, ref_ids, ref, "mixed")
    assert r.diverged == 2 and not r.ids_equal
    assert [e.name for e in r.steps] == ["logits[0]", "logits[1]", "logits[2]"]
    assert r.steps[0].max_abs_err == 0.0 and r.steps[2].max_abs_err > 0
    assert r.passed  # mixed: PCC >= 0.999 at every compared step
    assert r.summary().startswith(
        "PASS: generation mixed PASS, 4 tokens, ids diverge at step 2 of 4 "
    )
    j = r.to_json()
    assert j["ids_equal"] is False and j["diverged_at_step"] == 2 and len(j["steps"]) == 3
    assert not generation_verdict(ids, sim, ref_ids, ref, "fp32").passed  # fp32: ids must match


def test_verdict_rules_by_precision():
    ref = _logits(0)
    ids = ref.argmax(axis=-1)
    noisy = ref + 0.3 * _logits(1)  # PCC about 0.96
    assert generation_verdict(ids, ref, ids, ref, "fp32").passed
    assert not generation_verdict(ids, ref + 1e-3, ids, ref, "fp32").passed  # logits off
    # mixed: the same ids pass, whatever the logits; different ids need PCC >= 0.999
    assert generation_verdict(ids, noisy, ids, ref, "mixed").passed
    other = (ids + 1) % 16
    assert not generation_verdict(other, noisy, ids, ref, "mixed").passed
    r = generation_verdict(ids, ref, ids, ref, "mixed")
    assert r.summary() == (
        "PASS: generation mixed PASS, 4 tokens, ids identical (worst step 0: max rel err 0.00e+00, "
        "PCC 1.000000; min PCC 1.000000) vs onnxruntime greedy generation"
    )
    assert isinstance(r, GenerationResult) and all(isinstance(e, OutputError) for e in r.steps)
    with pytest.raises(SimulationError, match=r"^generation shapes differ"):
        generation_verdict(ids[:, :2], ref, ids, ref, "mixed")


def test_teacher_forcing_feeds_the_given_ids_and_the_verdict_compares_every_step():
    """Fed its own greedy ids, the program generates what it generates free; fed other ids,
    the first step (from the prompt alone) is the same and the later ones follow the given
    prefix. A forced verdict compares every step, past the first that diverges."""
    program = _program("llama_dynamo")
    free = simulate_generation(*program, "fp32", _prompt(), N)
    again = simulate_generation(*program, "fp32", _prompt(), N, forced=free[0])
    assert (again[0] == free[0]).all() and np.array_equal(again[1], free[1])
    other = (free[0] + 1) % 200
    led = simulate_generation(*program, "fp32", _prompt(), N, forced=other)
    assert np.array_equal(led[1][:, 0], free[1][:, 0])
    assert not np.allclose(led[1][:, 1:], free[1][:, 1:])
    with pytest.raises(SimulationError, match="forced ids are"):
        simulate_generation(*program, "fp32", _prompt(), N, forced=other[:, :2])
    ref = _logits(0)
    ids = ref.argmax(axis=-1)
    ids[1, 1] = (ids[1, 1] + 1) % 16
    r = generation_verdict(ids, ref, ref.argmax(axis=-1), ref, "mixed", forced=True)
    assert r.diverged == 1 and len(r.steps) == 4 and r.forced
    assert r.to_json()["forced"] and "(fed its ids)" in r.summary()
