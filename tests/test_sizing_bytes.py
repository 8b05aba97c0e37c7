"""Where a model's SRAM goes at its kernels' smallest shapes (`wsecc.core.sizing_bytes`): the
bytes that decide how many systems it needs (issue 30: Llama 3.1 70B's 4, 5 or 6)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import SAMPLES
from wsecc.targets import load_target

from wsecc.core.partition import resident_bytes, sram_at_smallest
from wsecc.core.sizing_bytes import PARTS, sram_bytes
from wsecc.kernels import Flow, Kernel, KernelGraph, KernelKind, Port
from wsecc.kernels.sizing import smallest_costs
from wsecc.vocab import Precision

MIXED = Precision.MIXED


def _one(kernel: Kernel, tokens: int, elems_in: int, elems_out: int) -> KernelGraph:
    ports = (Port("x", elems_in), Port("y", elems_out))
    flows = (Flow.between(ports[0], kernel, elems_in), Flow.between(kernel, ports[1], elems_out))
    return KernelGraph("hand", tokens, (kernel,), flows, ports[:1], ports[1:])


def _llama_70b_layer_mlp() -> KernelGraph:
    """Llama 3.1 70B's gate and up projections (8,192 -> 2 x 28,672), as its export lowers them
    in generate mode at context 2,048."""
    params = {"tokens": 2048, "K": 8192, "N": 28672, "has_bias": False, "activation": "silu"}
    return _one(Kernel("gated_linear", KernelKind.GATED_LINEAR, params), 2048, 8192, 28672)


def test_llama_70b_gate_and_up_at_one_token_per_chunk_by_hand() -> None:
    """The 70B's gated linear at its smallest wse3 shape, one token per chunk: 51 x 471 PEs
    (24,021), each the tile W[161 rows, 2 x 61 columns] = 39,284 B of weights, and at one token
    per chunk its double-buffered input (2 x 161 x 2 B) and partial sums (2 x 122 x 4 B) = 1,620
    B, beside the 8,192 B reserve: 49,096 of 49,152 B. Its 939,524,096 B of weights take
    24,021 x 39,284 B, so 4,116,868 B are tile rounding (28,672 / 471 is 60.9, not 61); 56 B a
    PE are free. Over 80 layers its buffers are 3.11 GB, the most of any kind."""
    kg, target = _llama_70b_layer_mlp(), load_target("wse3")
    (c,) = smallest_costs(kg, target, MIXED, chunk_tokens=1)
    assert (c.h, c.w) == (51, 471)
    assert (c.sram.weights, c.sram.buffers, c.sram.reserve) == (39_284, 1_620, 8_192)
    got = sram_bytes(kg, [c], resident_bytes(kg, MIXED), target, MIXED, 1)
    (k,) = got.kinds
    area = 51 * 471
    assert k.resident == 2 * 8192 * 28672 * 2 == 939_524_096
    assert k.reserve == area * 8_192
    assert k.buffers == area * 1_620 and 80 * k.buffers == 3_113_121_600
    assert k.rounding == area * 39_284 - 939_524_096 == 4_116_868
    assert k.unused == area * 56 and k.tables == 0
    assert k.total == got.total == area * 49_152
    # the verdict: against one system's PEs, and were a system only as large as the region,
    # or smaller
    assert got.line(1).endswith("to spare at 85% fill")
    same = replace(got, usable_pes=area).line(1)
    assert same.endswith("0 B to spare only at 100% fill: short by 0.18 GB at 85%")  # 0.15 x area
    assert replace(got, usable_pes=area - 1).line(1).endswith("short by 49,152 B even at 100% fill")


def test_attention_holds_its_rotary_tables_per_pe_by_hand() -> None:
    """An attention kernel has no weight elements: what its PEs hold as weights (the cos and sin
    rows of its cached keys, 2 sh rd sb a PE) is counted as tables, not rounding, and its
    resident bytes are its K/V cache (2,048 positions x (2 x 8 x 128 + the mask's 1) x 2 B)."""
    params = {
        "seq": 2048, "heads": 64, "kv_heads": 8, "head_dim": 128, "rotary_dim": 128,
        "causal": True, "padding_mask": True,
    }  # fmt: skip
    kg = _one(Kernel("attention", KernelKind.ATTENTION, params), 2048, 2048 * 80 * 128, 2048 * 8192)
    target = load_target("wse3")
    (c,) = smallest_costs(kg, target, MIXED, chunk_tokens=1)
    sh = -(-2048 // c.h)
    assert c.sram.weights == 2 * sh * 128 * 2
    (k,) = sram_bytes(kg, [c], resident_bytes(kg, MIXED), target, MIXED, 1).kinds
    assert k.resident == 2048 * (2 * 8 * 128 + 1) * 2
    assert k.tables == c.h * c.w * c.sram.weights
    assert k.rounding == c.h * c.w * c.sram.kv - k.resident


@pytest.mark.parametrize("chunk", [1, 8])
def test_the_parts_add_up_to_the_regions_sram(chunk: int) -> None:
    """On the bundled Llama sample (2 layers, rotary, GQA) in generate mode: for every kind and
    in all, resident + reserve + buffers + tables + rounding + unused = PEs x bytes per PE, the
    PEs those `fit_bounds` sums; fewer systems than the regions need are short, more spare."""
    from wsecc.core import chain
    from wsecc.core.flow import lower
    from wsecc.kernels import fit_bounds

    job = chain.job(SAMPLES / "llama_dynamo.onnx", mode="generate", seq=64, prompt=16)
    kg = lower(chain.fuse(chain.load(job)).graph)
    target = load_target("wse3")
    got = sram_at_smallest(kg, target, MIXED, chunk)
    assert got.pes == fit_bounds(kg, target, MIXED, chunk_tokens=chunk).min_pes
    for k in got.kinds:
        assert k.total == k.pes * 49_152
    assert sum(got.part(p) for p in PARTS) == got.total == got.pes * 49_152
    assert got.part("resident") == sum(resident_bytes(kg, MIXED))
    assert got.part("reserve") == got.pes * 8_192
    assert got.part("tables") > 0  # its rotary attention's
    line = got.line(1)
    assert "\n" not in line and "to spare" in line and "buffers (" in line


def test_auto_says_in_bytes_why_not_one_system_fewer() -> None:
    """The fewest count auto takes (`size_over_systems`) names what one fewer lacks, in the
    bytes line of the host-held graph (the embedding on the host) at one fewer; at two
    systems one fewer is one wafer, which keeps its embedding, so nothing is added."""
    from wsecc.core import chain
    from wsecc.core.flow import lower
    from wsecc.core.partition import _fewer, host_lookups

    job = chain.job(SAMPLES / "llama_dynamo.onnx", mode="generate", seq=64, prompt=16)
    graph = host_lookups(lower(chain.fuse(chain.load(job)).graph), MIXED).graph
    target = load_target("wse3")
    want = sram_at_smallest(graph, target, MIXED, 1).line(2)
    assert _fewer(graph, 3, target, MIXED, 1, False) == f"; at 2: {want}"
    assert "2 systems' 2 x 883,350 PEs x 49,152 B = 86.8 GB of SRAM" in want
    assert _fewer(graph, 2, target, MIXED, 1, False) == ""


def test_single_buffered_holds_one_chunk_a_stream_by_hand() -> None:
    """Single-buffered (a decode step's one token a stream), the 70B's gate and up projections
    at 51 x 471 hold one input chunk (161 x 2 B) and one set of partial sums (122 x 4 B): 810
    B, half the double-buffered 1,620; nothing overlaps, so a chunk's compute cycles are its
    compute and its link cycles added. Its smallest shape then needs fewer PEs."""
    from wsecc.kernels.costs import CostContext, cost_at

    kg, target = _llama_70b_layer_mlp(), load_target("wse3")
    (k,) = kg.kernels
    double = cost_at(k, 51, 471, CostContext(target, MIXED, 1))
    single = cost_at(k, 51, 471, CostContext(target, MIXED, 1, single_buffered=True))
    assert (double.sram.buffers, single.sram.buffers) == (1_620, 810)
    assert single.sram.weights == double.sram.weights
    assert single.link_cycles == double.link_cycles
    assert single.compute_cycles == double.compute_cycles + double.link_cycles
    (one,) = smallest_costs(kg, target, MIXED, chunk_tokens=1, single_buffered=True)
    assert one.area < 51 * 471 and one.sram.buffers < 1_620


def test_a_split_that_fits_only_single_buffered(tmp_path) -> None:
    """On 10 x 10 PEs of 2,048 B of data SRAM the sample's two groups fit neither at 8 tokens
    per chunk nor at one double-buffered; single-buffered (a decode step holds one token a
    stream) they size, and the why says so; the sizings carry it, so placement's re-sizing,
    the SRAM map and L0 cost the regions alike."""
    from test_partition import GEN, LLAMA, _small

    from wsecc.core import chain
    from wsecc.core.flow import ForDecode, lower
    from wsecc.core.partition import size_over_systems

    kg = lower(chain.fuse(chain.load(chain.job(LLAMA, **GEN))).graph)
    target = load_target(_small(tmp_path, 10, 2048))
    over = size_over_systems(kg, target, MIXED, ForDecode(1), 8, None)
    assert over.count == 2
    assert [(s.chunk_tokens, s.single_buffered) for s in over.sizings] == [(1, True), (1, True)]
    assert "single-buffered (a decode step's one chunk a stream" in over.why
    assert over.sizings[0].to_json()["single_buffered"] is True
    double = ForDecode(1).size(over.partition.parts[0].graph, target, MIXED, 0.85, 1)
    assert "single_buffered" not in double.to_json()


def test_a_single_buffered_split_places_and_costs_alike() -> None:
    """The sample over two wse3 systems sized single-buffered: each system's placed program
    keeps it (placement re-costs its regions single-buffered), and its SRAM map and L0 pipeline
    cost every region as its sizing did (they refuse a region whose cost differs)."""
    from test_partition import GEN, LLAMA

    from wsecc.core import chain
    from wsecc.core.flow import FILL_STEPS, ForDecode, lower
    from wsecc.core.partition import place_systems, size_over_systems
    from wsecc.kernels.costs import CostContext, cost_at
    from wsecc.sim.perf import simulate_l0
    from wsecc.sim.sram import sram_map

    kg = lower(chain.fuse(chain.load(chain.job(LLAMA, **GEN))).graph)
    target = load_target("wse3")
    rule = ForDecode(1)
    over = size_over_systems(kg, target, MIXED, rule, 1, 2)
    singles = tuple(
        rule.size(p.graph, target, MIXED, FILL_STEPS[0], 1, single_buffered=True)
        for p in over.partition.parts
    )
    over = replace(over, sizings=singles)
    assert [s.single_buffered for s in over.sizings] == [True, True]
    _, systems = place_systems(
        over, target, MIXED, placer="greedy", time_budget_s=5.0, rule=ForDecode(1)
    )
    single = CostContext(target, MIXED, 1, single_buffered=True)
    for program in systems.programs:
        assert program.sizing.single_buffered
        for ks in program.sizing.kernels:
            rect = program.placement.rects[ks.name]
            want = cost_at(program.kg.kernel(ks.name), rect.h, rect.w, single)
            assert ks.sram == want.sram
        sram_map(program)
        assert simulate_l0(program).tokens_per_s > 0


def test_bytes_text_plain_and_fine() -> None:
    """One formatter: plain (a model's bytes) from whole units; fine (the SRAM line's parts and
    margins) from a tenth of a unit, two decimals below 10 GB."""
    from wsecc.core.sizing_bytes import bytes_text

    plain = [bytes_text(n) for n in (999_999, 1e6, 999_999_999, 1e9, 1.234e10)]
    assert plain == ["999,999 B", "1.0 MB", "1,000.0 MB", "1.0 GB", "12.3 GB"]
    fine = [bytes_text(n, fine=True) for n in (99_999, 1e5, 99_999_999, 1e8, 9.87e9, 1.234e10)]
    assert fine == ["99,999 B", "0.1 MB", "100.0 MB", "0.10 GB", "9.87 GB", "12.3 GB"]
    assert bytes_text(-1.8e8, fine=True) == "-0.18 GB"  # a shortfall's sign is kept


def test_placement_sizes_again_single_buffered_as_the_sizing_was(tmp_path) -> None:
    """On 10 x 10 PEs of 2,048 B of data SRAM the sample's first group, sized single-buffered
    at 90% fill, does not pack; placement sizes it again at lower fills, single-buffered still:
    the sizing says so, not the rule (`SizingRule.size`'s argument, as the chunk is)."""
    from test_partition import GEN, LLAMA, _small

    from wsecc.core import chain
    from wsecc.core.flow import ForDecode, lower, place_and_route
    from wsecc.core.partition import size_over_systems

    kg = lower(chain.fuse(chain.load(chain.job(LLAMA, **GEN))).graph)
    target = load_target(_small(tmp_path, 10, 2048))
    over = size_over_systems(kg, target, MIXED, ForDecode(1), 8, None)
    first = over.sizings[0]
    assert (first.single_buffered, first.fill) == (True, 0.9)
    placed = place_and_route(
        over.partition.parts[0].graph, first, target, MIXED, placer="greedy",
        time_budget_s=5.0, deterministic=True, rule=ForDecode(1),
    )  # fmt: skip
    sizing = placed.program.sizing
    assert sizing.fill < first.fill and sizing.single_buffered and sizing.chunk_tokens == 1
