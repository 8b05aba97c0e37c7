"""Where a model's SRAM goes at its kernels' smallest shapes (`wsecc.core.sizing_bytes`): the
bytes that decide how many systems it needs (issue 30: Llama 3.1 70B's 4, 5 or 6)."""

from __future__ import annotations

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
    assert _fewer(graph, 3, target, MIXED, 1) == f"; at 2: {want}"
    assert "2 systems' 2 x 883,350 PEs x 49,152 B = 86.8 GB of SRAM" in want
    assert _fewer(graph, 2, target, MIXED, 1) == ""
