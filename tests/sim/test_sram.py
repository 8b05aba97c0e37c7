"""The SRAM map: per-PE tiles, agreement with sizing, the per-PE limit, the histogram."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources

import numpy as np
import pytest
from wsecc.targets import load_target, parse_target

from wsecc.kernels import Flow, Kernel, KernelKind, Port, SramBreakdown
from wsecc.place.problem import Rect
from wsecc.sim.sram import SramError, sram_map
from wsecc.view.png import write_sram_png

RESERVE = 8192  # tiny32's sram.reserved_bytes


@pytest.mark.parametrize("sample", ["gpt2_dynamo.onnx", "bert_dynamo.onnx"])
def test_map_agrees_with_sizing(compiled, sample, tmp_path):
    prog = compiled(sample)
    m = sram_map(prog.kg, prog.sizing, prog.placement, prog.target, "mixed")
    for k in prog.kg.kernels:
        ks, r = prog.sizing.kernel(k.name), prog.placement.rects[k.name]
        if (r.h, r.w) == (ks.h, ks.w):
            assert m.kernel_max[k.name] == ks.sram.total, k.name
        region = m.total[r.y : r.y + r.h, r.x : r.x + r.w]
        assert region.max() == m.kernel_max[k.name] and region.min() >= RESERVE
    counts, edges = m.histogram()
    area = sum(r.area for r in prog.placement.rects.values())
    assert counts.sum() == m.pes_used == area
    assert edges[-1] == 49152 and m.max_bytes == max(m.kernel_max.values()) <= 49152
    assert m.mean_fabric_bytes == pytest.approx(m.mean_used_bytes * area / 1024)
    json.dumps(m.to_json())
    write_sram_png(tmp_path / "sram.png", m)
    assert (tmp_path / "sram.png").read_bytes()[:4] == b"\x89PNG"


def tiles(build):
    """A: linear K=10, N=6 with bias on 4 x 4 PEs; B: layernorm dim=3 on 1 x 4 (one idle column)."""
    target = load_target("tiny32")
    a = Kernel(
        "A",
        KernelKind.LINEAR,
        dict(tokens=8, K=10, N=6, has_bias=True, activation="", residual=False),
    )
    b = Kernel("B", KernelKind.LAYERNORM, dict(rows=8, dim=3, has_residual=False))
    x, y = Port("x", 80), Port("y", 24)
    flows = [Flow.between(x, a, 80), Flow.between(a, b, 48), Flow.between(b, y, 24)]
    rects = {"A": Rect(2, 1, 4, 4), "B": Rect(2, 6, 4, 1)}
    lanes = {"A->B": [((3, 4), (3, 5), (3, 6))]}
    return build.program(target, [a, b], flows, rects, lanes, tokens=8, inputs=[x], outputs=[y])


def test_per_pe_tiles(build):
    """A: K = 10 over 4 rows -> 3, 3, 2, 2; N = 6 over 4 columns -> 2, 2, 1, 1. PE (i, j) holds
    W[k_i, n_j] and one bias element (own = cdiv(n_j, 4) = 1): weights (k n + 1) x 2 B; buffers
    2 c k 2 B + 2 c n 4 B with c = 8 tokens. B: dim = 3 over 4 columns -> 1, 1, 1, 0."""
    p = tiles(build)
    m = sram_map(p.kg, p.sizing, p.placement, load_target("tiny32"), "mixed")
    k = np.array([3, 3, 2, 2])[:, None]
    n = np.array([2, 2, 1, 1])[None, :]
    assert (m.weights[1:5, 2:6] == (k * n + 1) * 2).all()
    assert (m.buffers[1:5, 2:6] == 32 * k + 64 * n).all()
    assert (m.reserve[1:5, 2:6] == RESERVE).all() and (m.kv == 0).all()
    assert m.kernel_max["A"] == RESERVE + (3 * 2 + 1) * 2 + 32 * 3 + 64 * 2
    # layernorm: gamma and beta (2 x 1 x 2 B), chunks in and out (2 x 8 x 1 x 2 B x 2), stats
    # (8 x 2 x 4 B) on the three used columns; the fourth holds only the reserve
    assert m.total[6, 2:6].tolist() == [RESERVE + 4 + 64 + 64] * 3 + [RESERVE]
    assert m.at(5, 6) == {"kernel": "B", "weights": 0, "buffers": 0, "kv": 0, "reserve": RESERVE}
    assert m.at(0, 0)["kernel"] is None and m.pes_used == 20


def test_disagreeing_with_sizing_is_an_error(build):
    p = tiles(build)
    kg, sizing, placement, target = p.kg, p.sizing, p.placement, p.target
    ks = sizing.kernel("A")
    wrong = replace(ks, sram=SramBreakdown(ks.sram.weights + 2, ks.sram.buffers, 0, RESERVE))
    bad = replace(sizing, kernels=tuple(wrong if k.name == "A" else k for k in sizing.kernels))
    with pytest.raises(
        SramError, match=r"disagrees with the sizing on 1 kernels: 'A': map 8,430 B, sizing 8,432 B"
    ):
        sram_map(kg, bad, placement, target, "mixed")


def test_a_pe_over_its_sram_is_an_error(build):
    text = (resources.files("wsecc.targets") / "tiny32.toml").read_text()
    small = parse_target(text.replace("bytes_per_pe = 49152", "bytes_per_pe = 8400"), "s.toml")
    p = tiles(build)
    kg, sizing, placement = p.kg, p.sizing, p.placement
    with pytest.raises(SramError, match=r"4 PEs exceed 8,400 B: 'A' at \(2, 1\) 8,430 B"):
        sram_map(kg, sizing, placement, small, "mixed")
