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
@pytest.mark.pictures  # draws its PNG for real (tests/conftest.py)
def test_map_agrees_with_sizing(compiled, sample, tmp_path):
    prog = compiled(sample)
    m = sram_map(prog)
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
    """A: K = 10 over 4 rows in blocks of 3 -> 3, 3, 3, 1; N = 6 over 4 columns in blocks of 2
    -> 2, 2, 2, 0 (the last column idle). PE (i, j) holds W[k_i, n_j] and one bias element
    (own = cdiv(n_j, 4) = 1): weights (k n + 1) x 2 B; buffers 2 c k 2 B + 2 c n 4 B with c = 8
    tokens. B: dim = 3 over 4 columns -> 1, 1, 1, 0."""
    p = tiles(build)
    m = sram_map(p)
    k = np.array([3, 3, 3, 1])[:, None]
    n = np.array([2, 2, 2, 0])[None, :]
    busy = n > 0
    assert (m.weights[1:5, 2:6] == np.where(busy, (k * n + 1) * 2, 0)).all()
    assert (m.buffers[1:5, 2:6] == np.where(busy, 32 * k + 64 * n, 0)).all()
    assert (m.reserve[1:5, 2:6] == RESERVE).all() and (m.kv == 0).all()
    assert m.kernel_max["A"] == RESERVE + (3 * 2 + 1) * 2 + 32 * 3 + 64 * 2
    # layernorm: gamma and beta (2 x 1 x 2 B), chunks in and out (2 x 8 x 1 x 2 B x 2), stats
    # (8 x 2 x 4 B) on the three used columns; the fourth holds only the reserve
    assert m.total[6, 2:6].tolist() == [RESERVE + 4 + 64 + 64] * 3 + [RESERVE]
    assert m.at(5, 6) == {"kernel": "B", "weights": 0, "buffers": 0, "kv": 0, "reserve": RESERVE}
    assert m.at(0, 0)["kernel"] is None and m.pes_used == 20


def test_disagreeing_with_sizing_is_an_error(build):
    p = tiles(build)
    sizing = p.sizing
    ks = sizing.kernel("A")
    wrong = replace(ks, sram=SramBreakdown(ks.sram.weights + 2, ks.sram.buffers, 0, RESERVE))
    bad = replace(sizing, kernels=tuple(wrong if k.name == "A" else k for k in sizing.kernels))
    with pytest.raises(
        SramError, match=r"disagrees with the sizing on 1 kernels: 'A': map 8,430 B, sizing 8,432 B"
    ):
        sram_map(replace(p, sizing=bad))


def test_a_pe_over_its_sram_is_an_error(build):
    text = (resources.files("wsecc.targets") / "tiny32.toml").read_text()
    small = parse_target(text.replace("bytes_per_pe = 49152", "bytes_per_pe = 8400"), "s.toml")
    p = tiles(build)
    with pytest.raises(SramError, match=r"9 PEs exceed 8,400 B: 'A' at \(2, 1\) 8,430 B"):
        sram_map(replace(p, target=small))


def test_the_map_holds_the_functional_simulators_tiles(build):
    """The map's weights are the weight tiles the functional simulator loads on each PE (its
    `_MatmulTiles`: the real entries of W each PE holds, zero-padding aside), plus the bias
    entries the cost model gives it: the two read one tiling."""
    from wsecc.sim.functional import _MatmulTiles

    p = tiles(build)
    m = sram_map(p)
    a, rect = p.kg.kernel("A"), p.placement.rects["A"]
    K, N = a.params["K"], a.params["N"]
    t = _MatmulTiles.of(np.ones((K, N), np.float32), rect.h, rect.w, 8, None)
    nw = -(-N // rect.w)
    held = np.zeros((rect.h, rect.w), np.int64)  # real W entries per PE, from the tiles
    for b in range(t.tiles.shape[0]):
        for j, c in enumerate(t.cols[b]):
            if c >= 0:
                held[:, c // nw] += t.tiles[b, :, :, j].sum(axis=1).astype(np.int64)
    assert held.sum() == K * N
    bias = (held > 0).astype(np.int64)  # own = cdiv(2, 4) = 1 bias entry on each busy PE
    region = m.weights[rect.y : rect.y + rect.h, rect.x : rect.x + rect.w]
    np.testing.assert_array_equal(region, (held + bias) * 2)


def test_skew_buffers_count_against_the_budget(build):
    """L1's skew buffers are SRAM too: charged to every PE of their kernel's region, they fail
    the map when they do not fit, naming the kernel and the buffer."""
    p = tiles(build)
    base = sram_map(p)
    room = p.target.sram.bytes_per_pe - base.kernel_max["B"]
    fits = sram_map(p, extra_buffers={"B": room})
    assert (
        fits.kernel_max["B"] == p.target.sram.bytes_per_pe
        and fits.max_bytes == fits.kernel_max["B"]
    )
    assert (fits.buffers[6, 2:6] == base.buffers[6, 2:6] + room).all()
    with pytest.raises(SramError, match=r"'B' at \(2, 6\) .*skew buffers: 'B' "):
        sram_map(p, extra_buffers={"B": room + 1})
