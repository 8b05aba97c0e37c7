"""Generate mode (`wsecc.modes.generate`): prefill and decode figures of a placed decoder, the K/V cache
in SRAM, and the decode-step models of the kinds (`wsecc.kernels.decode`)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from wsecc.targets import load_target

import wsecc
from wsecc.errors import WseccError
from wsecc.kernels import Kernel, KernelKind
from wsecc.kernels.costs import CostContext, cdiv, cost_at
from wsecc.kernels.decode import chain, multicast, relay
from wsecc.kernels.kinds.matmul import linear_decode
from wsecc.modes.generate import DECODE_PHASES, at_tokens, kv_cache_bytes, max_context

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
LLAMA = SAMPLES / "llama_legacy_op17.onnx"
GPT2 = SAMPLES / "gpt2_legacy_op17.onnx"


def _generate(path: Path = LLAMA, **kw: object) -> wsecc.Compilation:
    opts = {"mode": "generate", "seq": 64, "prompt": 16, "placer": "greedy", "validate": False}
    return wsecc.compile(path, **(opts | kw))


@pytest.fixture(scope="module")
def llama() -> wsecc.Compilation:
    return _generate()


def test_decode_step_is_the_longest_path_and_the_rates_follow(llama: wsecc.Compilation) -> None:
    g = llama.generation
    assert g is not None
    critical = [s for s in g.stages if s.critical]
    # the path runs from host-in to host-out through every layer's attention
    assert critical[0].name == "host-in" and critical[-1].name == "host-out"
    assert {s.name for s in critical if s.kernel_kind == "attention"} == {
        k.name for k in llama.kernel_graph.kernels if k.kind is KernelKind.ATTENTION
    }
    assert g.decode_cycles == sum(s.total for s in critical)
    # no stage off the path finishes later than the path does
    assert all(s.total <= g.decode_cycles for s in g.stages)
    assert g.tokens_per_s_per_sequence == pytest.approx(g.clock_hz / g.decode_cycles)
    assert g.tokens_per_s == pytest.approx(g.batch * g.tokens_per_s_per_sequence)
    assert sum(g.phases().values()) == g.decode_cycles
    assert sum(sum(row.values()) for _, row in g.layers()) == g.decode_cycles
    assert set(g.phases()) == set(DECODE_PHASES)
    assert g.ttft_s > 0 and g.prompt == 16 and g.context == 64


def test_report_is_schema_valid_and_says_what_the_summary_says(
    llama: wsecc.Compilation,
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(wsecc.__file__).parent / "report" / "report.schema.json").read_text())
    rep = llama.report()
    jsonschema.validate(rep, schema)
    perf = rep["performance"]
    assert rep["mode"] == "generate" and perf["model"] == "generate"
    assert perf["tokens_per_s"] == pytest.approx(perf["decode"]["tokens_per_s"])
    assert perf["latency_s"] == pytest.approx(perf["decode"]["latency_s"])
    assert perf["bottleneck"] == perf["decode"]["bound"]
    from wsecc.progress import summary_rows

    rows = dict(summary_rows(rep))
    assert "time to first token" not in rows  # the row is "first token"
    assert rows["decode"].startswith(f"{perf['decode']['tokens_per_s_per_sequence']:,.0f}")
    assert "largest context that fits" in rows["K/V cache"]


def test_kv_cache_bytes_by_hand_and_per_sequence(llama: wsecc.Compilation) -> None:
    """Two layers, 2 K/V heads of 16 dims (the sample's config: samples/make_samples.py), 64
    positions, mixed precision (2 bytes): K and V, and the padding mask's element per position,
    2 layers x 64 x (2 x 2 x 16 + 1) x 2 B per sequence."""
    att = [k for k in llama.kernel_graph.kernels if k.kind is KernelKind.ATTENTION]
    p = att[0].params
    assert (len(att), p["kv_heads"], p["head_dim"], p["seq"], p["padding_mask"]) == (
        2, 2, 16, 64, True,
    )  # fmt: skip
    assert llama.generation.kv_cache_bytes == kv_cache_bytes(llama.kernel_graph, "mixed")
    assert llama.generation.kv_cache_bytes == 2 * 64 * (2 * 2 * 16 + 1) * 2
    two = _generate(batch=2)
    assert two.generation.kv_cache_bytes == 2 * llama.generation.kv_cache_bytes
    assert all(
        k.params["cache_sequences"] == 2
        for k in two.kernel_graph.kernels
        if k.kind is KernelKind.ATTENTION
    )
    # the cache is in the SRAM the regions are sized with: kv bytes double at the same shape
    kv1 = {k.name: k.sram.kv for k in llama.sizing.kernels if k.sram.kv}
    kv2 = {k.name: k.sram.kv for k in two.sizing.kernels if k.sram.kv}
    assert set(kv1) == set(kv2) == {k.name for k in att}
    ctx = CostContext(load_target("wse2"), "mixed")
    for k in two.kernel_graph.kernels:
        if k.kind is KernelKind.ATTENTION:
            one = Kernel(k.name, k.kind, {**k.params, "cache_sequences": 1})
            assert cost_at(k, 4, 2, ctx).sram.kv == 2 * cost_at(one, 4, 2, ctx).sram.kv > 0
    assert two.generation.tokens_per_s > two.generation.tokens_per_s_per_sequence


def test_the_largest_context_fits_and_one_more_does_not(llama: wsecc.Compilation) -> None:
    program = llama.program
    best = max_context(program)
    assert llama.generation.max_context == best > 64
    ctx = CostContext(program.target, program.precision, program.chunk_tokens)
    budget = program.target.sram.bytes_per_pe

    def worst(seq: int) -> int:
        out = 0
        for k in program.kg.kernels:
            if k.kind is KernelKind.ATTENTION:
                r = program.placement.rects[k.name]
                at = Kernel(k.name, k.kind, {**k.params, "seq": seq})
                out = max(out, cost_at(at, r.h, r.w, ctx).sram.total)
        return out

    assert worst(best) <= budget < worst(best + 1)


def test_prefill_recosts_every_kernel_at_the_prompts_tokens(llama: wsecc.Compilation) -> None:
    kg = at_tokens(llama.kernel_graph, 16)
    assert kg.tokens_per_sample == 16
    for k, k16 in zip(llama.kernel_graph.kernels, kg.kernels, strict=True):
        assert k16.params[k.spec.tokens] == 16
    for f, f16 in zip(llama.kernel_graph.flows, kg.flows, strict=True):
        assert f16.elems_per_sample * 64 == f.elems_per_sample * 16


def test_linear_decode_by_hand() -> None:
    """K 64 x N 32 on 4 x 2 PEs of wse2 in mixed precision: kh 16, nw 16, own 4 outputs per PE;
    f = 4 flops/cycle (2 FMAs), v = 1, L = 4 B/cycle, relay = 2 ramp (2) + hop (1) = 5."""
    t = load_target("wse2")
    ctx = CostContext(t, "mixed")
    assert relay(ctx) == 5
    p = {"tokens": 8, "K": 64, "N": 32, "has_bias": True, "activation": "", "residual": False}
    d = linear_decode(p, 4, 2, ctx, 1)
    weights = 16 * 16 * 2  # bytes of the PE's tile, read once
    assert d.compute == max(cdiv(2 * 16 * 16, 4), cdiv(weights, 2 * 64 // 8)) + 4 * 1  # + bias
    assert d.reduction == 3 * 5 + cdiv(16 * 4, 4) == chain(ctx, 4, 16 * 4)
    assert (
        d.broadcast
        == (1 + cdiv(16 * 2, 4)) + (3 + cdiv(4 * 2, 4))
        == multicast(ctx, 2, 16 * 2) + multicast(ctx, 4, 4 * 2)
    )
    assert d.bytes_read == weights
    assert d.latency == d.compute + d.reduction + d.broadcast
    # two sequences: twice the multiply-adds, the weights still read once
    d2 = linear_decode(p, 4, 2, ctx, 2)
    assert d2.compute > d.compute and d2.bytes_read == d.bytes_read


def test_a_taller_region_trades_multiply_adds_for_reduction_hops() -> None:
    ctx = CostContext(load_target("wse3"), "mixed")
    p = {"tokens": 1, "K": 4096, "N": 4096, "has_bias": False, "activation": "", "residual": False}
    small, tall = linear_decode(p, 32, 64, ctx, 1), linear_decode(p, 256, 64, ctx, 1)
    assert tall.compute < small.compute and tall.reduction > small.reduction
    assert tall.bound == "reduction"


def test_generate_mode_refuses_what_it_cannot_generate(tmp_path: Path) -> None:
    with pytest.raises(WseccError, match="causal decoder.*--mode infer"):
        _generate(SAMPLES / "bert_legacy_op17.onnx")
    with pytest.raises(WseccError, match="generate-mode options"):
        wsecc.compile(GPT2, seq=32, prompt=8, placer="greedy", validate=False)
    with pytest.raises(WseccError, match="shorter than the context"):
        _generate(seq=32, prompt=32)


def test_cli_generate_summary_and_a_cache_that_does_not_fit(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    run = subprocess.run(
        [sys.executable, "-m", "wsecc.cli", "compile", str(LLAMA), "--mode", "generate",
         "--context", "64", "--prompt", "16", "--placer", "greedy", "--no-validate", "-o", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    for label in ("first token", "decode", "token latency", "decode bound", "K/V cache"):
        assert f"\n  {label} " in run.stdout
    assert json.loads((out / "report.json").read_text())["mode"] == "generate"
    assert (out / "decode_roofline.png").read_bytes()[:4] == b"\x89PNG"
    # a saved generate compile re-simulates to the same decode figures
    before = json.loads((out / "report.json").read_text())["performance"]["decode"]
    run = subprocess.run([sys.executable, "-m", "wsecc.cli", "simulate", str(out), "--no-validate"],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    after = json.loads((out / "report.json").read_text())["performance"]["decode"]
    assert after["latency_s"] == pytest.approx(before["latency_s"])
    # a batch whose caches cannot fit the wafer: one line, exit 2, no folder
    big = tmp_path / "big"
    run = subprocess.run(
        [sys.executable, "-m", "wsecc.cli", "compile", str(GPT2), "--mode", "generate",
         "--context", "64", "--batch", "5000", "--placer", "greedy", "--no-validate",
         "-o", str(big)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 2
    error = run.stderr.strip().splitlines()[-1]  # after the stages' progress lines
    assert error.startswith("wsecc: error:") and "at batch 5000; lower --batch" in error
    assert not big.exists()
    run = subprocess.run(
        [sys.executable, "-m", "wsecc.cli", "compile", str(LLAMA), "--context", "64", "--seq", "32",
         "--mode", "generate"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 2 and "disagree" in run.stderr


def test_a_cache_too_long_for_any_region_names_the_largest_context(
    llama: wsecc.Compilation,
) -> None:
    """One sequence of 2^22 positions: cdiv(S, h) keys per PE, h at most the program's 994 rows
    of wse2, is far beyond a PE's SRAM; the error names the largest context that fits (and it
    does fit)."""
    import re

    from wsecc.kernels import fits_a_region
    from wsecc.modes.generate import generation_kernels

    t = load_target("wse2")
    long = dataclasses.replace(
        llama.kernel_graph,
        kernels=tuple(
            Kernel(k.name, k.kind, {**k.params, "seq": 1 << 22}, k.provenance)
            if k.kind is KernelKind.ATTENTION
            else k
            for k in llama.kernel_graph.kernels
        ),
    )
    with pytest.raises(WseccError, match="largest context that fits at batch 1 is") as e:
        generation_kernels(long, 1, t, "mixed")
    largest = int(re.search(r"is ([\d,]+):", str(e.value)).group(1).replace(",", ""))
    att = next(k for k in long.kernels if k.kind is KernelKind.ATTENTION)
    at = {**att.params, "cache_sequences": 1}
    assert fits_a_region(Kernel("a", att.kind, {**at, "seq": largest}), t, "mixed")
    assert not fits_a_region(Kernel("a", att.kind, {**at, "seq": largest + 1}), t, "mixed")


def test_weights_that_do_not_fit_one_wafer_name_the_wafers_needed(
    llama: wsecc.Compilation,
) -> None:
    """Generation keeps every weight resident: the sample's 125,760 mixed-precision parameters
    (251,520 B) on a 2 x 2 program rectangle of 40 KiB of data SRAM each need 2 wafers."""
    from wsecc.modes.generate import generation_kernels

    t = load_target("wse2")
    tiny = dataclasses.replace(
        t, fabric=dataclasses.replace(t.fabric, program_width=2, program_height=2)
    )
    with pytest.raises(WseccError, match=r"at least 2 systems: compile it with --systems auto"):
        generation_kernels(llama.kernel_graph, 1, tiny, "mixed")


LLAMA_PAST = SAMPLES / "llama_optimum_past.onnx"  # optimum's decoder with past (GQA, rotary)


def test_validate_generates_as_onnxruntime_and_a_broken_rotary_rule_fails(
    tmp_path: Path,
) -> None:
    """`--validate` on a with-past export: the simulator's greedy generation (prefill, then
    decode on its K/V cache) equals onnxruntime's step by step; generated.npz holds the prompt,
    the ids and the logits; the rotary_position fault makes the verdict fail (exit 1)."""
    out = tmp_path / "gen"
    base = [sys.executable, "-m", "wsecc.cli", "compile", str(LLAMA_PAST), "--mode", "generate",
            "--context", "32", "--prompt", "8", "--new-tokens", "8", "--placer", "greedy"]  # fmt: skip
    run = subprocess.run([*base, "--validate", "--save-outputs", "-o", str(out)],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    rep = json.loads((out / "report.json").read_text())
    n = rep["numerics"]
    assert n["passed"] and n["ids_equal"] and n["generated"] == 8 and n["structure"]["passed"]
    assert "PASS: generation mixed PASS, 8 tokens, ids identical" in run.stdout
    import numpy as np

    saved = np.load(out / "generated.npz")
    vocab = saved["logits"].shape[-1]
    assert saved["prompt_ids"].shape == (1, 8) and saved["generated_ids"].shape == (1, 8)
    assert saved["logits"].shape == (1, 8, vocab)
    assert (saved["logits"].argmax(-1) == saved["generated_ids"]).all()
    run = subprocess.run([*base, "--inject-fault", "rotary_position", "-o", str(tmp_path / "f")],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert "FAIL: generation" in run.stdout and "fault rotary_position injected" in run.stdout


def test_a_float16_export_generates_as_onnxruntime_runs_its_float32_model(
    tmp_path: Path,
) -> None:
    """A with-past export in float16 (its past inputs too) is read as float32, by the
    frontend and by onnxruntime stepping through the generation: the check passes, the fp32
    structure check within 1e-5 (measured 3.8e-7). Not GPT-2 here: fuse-gelu gives its GELU
    the exact tanh constants where the file holds them rounded to float16 (0.044708 for
    0.044715), which moves the logits by 1.0e-5 to 1.5e-5 from onnxruntime's (prompt 8)."""
    from half_exports import save_half

    path = save_half(LLAMA_PAST, tmp_path / "llama_past_float16.onnx")
    c = _generate(path, seq=32, prompt=8, new_tokens=4, validate=True)
    check = c.generation_check
    assert check is not None and check.passed and check.ids_equal, check.summary()
    assert c.report()["model"]["widened"] == ["float16"]


def test_validate_needs_a_context_for_the_new_tokens() -> None:
    with pytest.raises(WseccError, match="needs a context of 39, the graph is bound at 32"):
        _generate(LLAMA_PAST, seq=32, prompt=8, new_tokens=32, validate=True)


def test_rmsnorm_and_attention_decode_by_hand() -> None:
    """wse2 mixed: v = 1, f = 4, L = 4 B/cycle, relay 5, sb 2, ab 4.
    RMSNorm of 64 features on 1 x 4 PEs: dw 16, 3 ops each; its one statistic (4 B, 1 cycle on
    a link) reduced along the row and multicast back; the row in and out down a one-row column.
    The reduction takes the two-level tree: 2 groups of 2, a relay (5) within each, then leader
    1 to leader 3 over 2 hops and 2 ramps (6), the statistic streamed twice (2): 13, against the
    chain's 3 relays + 1 = 16.
    Attention over a 64-position cache, 4 heads of 16 dims, 2 K/V heads, on 8 x 4 PEs: one head
    per column, 8 cached keys per PE: 4 d flops per pair at f, 11 score ops at v; the partials
    (d + 2 accumulators, 72 B: 18 cycles) chained down 8 rows, 7 relays + 18 = 53 (the best
    tree, 2 groups of 4: 3 relays + 2 ramps + 4 hops + 2 x 18 = 59, is slower), merged and
    normalised (2 (d + 2) + d ops); the
    query down the column or the new K and V (2 x 2 heads x 16 x 2 B) along the row."""
    from wsecc.kernels.kinds.attention import attention_decode
    from wsecc.kernels.kinds.rowwise import RMSNORM

    ctx = CostContext(load_target("wse2"), "mixed")
    assert RMSNORM.decode is not None
    n = RMSNORM.decode({"rows": 8, "dim": 64, "has_residual": False}, 1, 4, ctx, 1)
    assert (n.compute, n.reduction, n.broadcast) == (48, (5 + (2 * 2 + 2) + 2 * 1) + (3 + 1), 8 + 8)
    p = {"seq": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "rotary_dim": 0,
         "causal": True, "padding_mask": False, "full_mask": False, "alibi": False, "bias": False,
         "cache_sequences": 1}  # fmt: skip
    a = attention_decode(p, 8, 4, ctx, 1)
    assert a.cache == cdiv(4 * 16 * 8, 4) + 11 * 8
    assert a.reduction == (7 * 5 + cdiv(18 * 4, 4)) + (2 * 18 + 16)
    assert a.broadcast == max(7 + cdiv(16 * 2, 4), 3 + cdiv(2 * 2 * 16 * 2, 4))
    assert a.bytes_read == 8 * 2 * 16 * 2
    # twice the context, twice the cached keys per PE to score
    assert attention_decode({**p, "seq": 128}, 8, 4, ctx, 1).cache > 1.9 * a.cache


def test_a_full_attention_mask_is_one_error_in_generate_mode() -> None:
    """Megatron's per-query mask is a full [S_q, S_kv] mask: the cache keeps one mask element
    per key, so generate mode refuses it in one line, before anything is sized."""
    from conftest import ORT_CORPUS
    from wsecc.passes import DEFAULT_PIPELINE

    from wsecc.core.flow import lower
    from wsecc.frontend.onnx import import_model
    from wsecc.modes.generate import generation_kernels
    from wsecc.pm import PassManager

    graph, _ = import_model(ORT_CORPUS / "gpt2_megatron.onnx", batch=1, seq=16)
    kg = lower(PassManager(DEFAULT_PIPELINE).run(graph)[0])
    with pytest.raises(WseccError, match=r"full \[S_q, S_kv\] attention mask") as e:
        generation_kernels(kg, 1, load_target("wse2"), "mixed")
    assert "\n" not in str(e.value) and "--mode infer" in str(e.value)


def test_a_decode_flow_costs_its_hops_and_its_bytes_over_its_routed_lanes(
    llama: wsecc.Compilation,
) -> None:
    """Every flow of the step, by hand from the routing: its longest lane's hops (1 cycle each)
    and two ramps (2 cycles each: targets/wse3.toml link), then a token's bytes over the lanes
    the router gave it, L = 4 B a cycle per lane (docs/hardware.md §5.1): the decode charges no
    lane that was not routed."""
    g, program = llama.generation, llama.program
    assert g is not None and program is not None
    target, kg = program.target, program.kg
    paths: dict[str, list[int]] = {}
    for ln in program.routing.lanes:
        paths.setdefault(ln.flow, []).append(len(ln.path) - 1)
    flow_bytes: dict[str, int] = {}
    for f in kg.flows:
        flow_bytes[f"{f.src}->{f.dst}"] = flow_bytes.get(f"{f.src}->{f.dst}", 0) + (
            f.bytes_per_sample(program.precision)
        )
    flows = [s for s in g.stages if s.kind == "flow"]
    assert flows and {s.name for s in flows} == set(paths)
    L = target.link_bytes_per_cycle
    assert (L, target.link.hop_latency_cycles, target.link.ramp_latency_cycles) == (4, 1, 2)
    for s in flows:
        lanes, step = paths[s.name], cdiv(g.batch * flow_bytes[s.name], kg.tokens_per_sample)
        assert s.cycles == {"flows": max(lanes) + 2 * 2 + cdiv(step, len(lanes) * L)}
