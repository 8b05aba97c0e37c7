"""Sizing: GPT-2-small shapes fit WSE-2 and beat work-proportional areas; impossible models fail
with one line naming the kernel."""

from __future__ import annotations

import json
import math

import pytest
from wsecc.targets import load_target

from wsecc.core.flow import pool_shapes
from wsecc.kernels import (
    KernelGraphError,
    KernelSizing,
    Sizing,
    SizingError,
    kernel_cost,
    size_regions,
    work_proportional_sizing,
)
from wsecc.place.problem import Placement, Rect
from wsecc.vocab import Precision

WSE2 = load_target("wse2")


@pytest.fixture(scope="module")
def gpt2_small(gpt2_graph):
    return gpt2_graph(layers=12, d=768, heads=12, seq=1024, vocab=50257, name="gpt2-small")


@pytest.fixture(scope="module")
def sized(gpt2_small) -> Sizing:
    return size_regions(gpt2_small, WSE2, "mixed")


def test_gpt2_small_fits_wse2(gpt2_small, sized: Sizing) -> None:
    assert len(sized.kernels) == len(gpt2_small.kernels) == 87
    for k in sized.kernels:
        assert k.sram.total <= WSE2.sram.bytes_per_pe, k.name
        assert k.h <= WSE2.fabric.program_height and k.w <= WSE2.fabric.program_width, k.name
    assert sized.pes_used <= 0.85 * WSE2.usable_pes
    assert sized.max_sram_per_pe <= 49152
    assert sized.kernel(sized.bottleneck).cycles_per_sample == sized.stage_cycles
    assert 1.0 <= sized.balance < 1.2


def test_reported_costs_are_the_cost_models(gpt2_small, sized: Sizing) -> None:
    """Every shape and alternative re-costs to what the sizing reports and stays within bounds."""
    for ks in sized.kernels[:9] + sized.kernels[-2:]:
        kernel = gpt2_small.kernel(ks.name)
        c = kernel_cost(kernel, ks.h, ks.w, "mixed", WSE2)
        assert (c.sram, c.compute_cycles, c.link_cycles) == (
            ks.sram,
            ks.compute_cycles,
            ks.link_cycles,
        )
        for h, w in ks.alternatives + ks.pool:
            alt = kernel_cost(kernel, h, w, "mixed", WSE2)
            assert alt.cycles_per_sample <= sized.stage_cycles
            assert alt.sram.total <= WSE2.sram.bytes_per_pe
            assert ks.pes <= h * w <= ks.pes * 1.05


def test_the_pool_holds_the_shapes_past_the_alternatives(sized: Sizing) -> None:
    """A linear of GPT-2 small has dozens of shapes as good for the stage time: four are the
    placer's menu, the others its pool, none twice, aspect ratios at least 10% apart."""
    ks = next(k for k in sized.kernels if k.kind == "linear" and k.pes > 1000)
    assert len(ks.alternatives) == 4 and len(ks.pool) >= 8
    shapes = [(ks.h, ks.w), *ks.alternatives, *ks.pool]
    logs = sorted(math.log(h / w) for h, w in shapes)
    assert min(b - a for a, b in zip(logs, logs[1:], strict=False)) > math.log(1.1)
    assert KernelSizing.from_json(ks.to_json()) == ks


def test_the_report_counts_the_kernels_placed_in_pool_shapes(sized: Sizing) -> None:
    a, b = [k for k in sized.kernels if k.pool][:2]
    (ah, aw), (bh, bw) = a.pool[0], b.alternatives[0]
    rects = {a.name: Rect(0, 0, aw, ah), b.name: Rect(0, 0, bw, bh)}
    placement = Placement(rects, "test", 0.0, 0.0, 0.0, "", 0.0, 0)
    assert pool_shapes(sized, placement) == 1  # b took an alternative: not from the pool


def test_beats_work_proportional(gpt2_small, sized: Sizing) -> None:
    baseline = work_proportional_sizing(gpt2_small, WSE2, "mixed")
    assert baseline.strategy == "work-proportional"
    assert sized.stage_cycles < baseline.stage_cycles
    assert sized.samples_per_s > baseline.samples_per_s


def test_ceiling_is_peak_flops_over_work(gpt2_small, sized: Sizing) -> None:
    # 850 MHz x 745,500 PEs x 4 flop/cycle (mixed) / flops per sample
    expected = 850e6 * 745_500 * 4 / gpt2_small.flops_per_sample
    assert sized.ceiling_samples_per_s == pytest.approx(expected)
    assert sized.ceiling_tokens_per_s == pytest.approx(expected * 1024)
    assert 0.5 < sized.efficiency <= 1.0


def test_json_round_trip(sized: Sizing) -> None:
    data = json.loads(json.dumps(sized.to_json()))
    again = Sizing.from_json(data)
    assert again == sized
    assert again.summary() == sized.summary()
    data["kernels"][3]["sram"]["kv"] = 49152
    with pytest.raises(SizingError, match=r"^kernel 'h0\.attn': [0-9,]+ B/PE exceeds 49,152$"):
        Sizing.from_json(data)


def test_loaded_precision_is_the_enum_and_writes_the_same_json(sized: Sizing) -> None:
    text = json.dumps(sized.to_json())
    again = Sizing.from_json(json.loads(text))
    assert again.precision is Precision.MIXED
    assert json.dumps(again.to_json()) == text
    data = json.loads(text)
    data["precision"] = "bf16"
    with pytest.raises(
        ValueError, match=r"^unknown precision 'bf16' \(expected one of fp32, mixed, fp16\)$"
    ):
        Sizing.from_json(data)


def test_smaller_fill_is_respected(gpt2_graph) -> None:
    kg = gpt2_graph(layers=2, d=128, heads=4, seq=64, vocab=1000)
    tiny = load_target("tiny32")
    loose, tight = (size_regions(kg, tiny, "fp16", fill=f) for f in (0.85, 0.4))
    assert tight.pes_used <= 0.4 * 1024 < loose.pes_used
    assert tight.stage_cycles >= loose.stage_cycles


def test_gpt2_xl_at_8192_on_small64_names_attention(gpt2_graph) -> None:
    xl = gpt2_graph(layers=48, d=1600, heads=25, seq=8192, vocab=50257, name="gpt2-xl")
    with pytest.raises(SizingError) as info:
        size_regions(xl, load_target("small64"), "mixed")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("cannot size 'gpt2-xl' on small64 (mixed): no region shape fits")
    # the attention's K/V for 8,192 tokens: 128 keys per PE x 2 x 64 x 2 B = 32,768 B alone
    assert "kernel 'h0.attn' (attention, 47 more like it) needs 51,328 B/PE" in message
    assert "kv 32,768" in message and "a shorter sequence" in message


def test_too_many_kernels_for_the_area_names_the_largest(gpt2_graph) -> None:
    kg = gpt2_graph(layers=24, d=384, heads=6, seq=64, vocab=1000, name="deep")
    with pytest.raises(SizingError) as info:
        size_regions(kg, load_target("tiny32"), "mixed")
    message = str(info.value)
    assert "\n" not in message
    assert "PEs at their smallest fitting shapes but fill 0.85 x 1,024 usable PEs = 870" in message
    assert "(largest: '" in message and "B/PE vs 40,960 B/PE of data SRAM" in message
    # inference: more systems first, then training's weight streaming
    assert "would help: more systems (--systems auto" in message and "--mode train" in message


def test_rejects_bad_inputs(gpt2_graph) -> None:
    kg = gpt2_graph(layers=1, d=64, heads=2, seq=16, vocab=100)
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        size_regions(kg, WSE2, "fp8")
    with pytest.raises(ValueError, match="fill must be in"):
        size_regions(kg, WSE2, "mixed", fill=1.5)
    broken = type(kg)(
        kg.name, kg.tokens_per_sample, kg.kernels, kg.flows[1:], kg.inputs, kg.outputs
    )
    with pytest.raises(KernelGraphError, match="kernel 'embed' \\(embedding\\): no incoming flow"):
        size_regions(broken, WSE2, "mixed")
