"""Layers in full-width bands (`wsecc.core.bands`): the exact layout placement falls back to
when no fill packs a run of layers (issue 30: Llama 3.1 70B's groups of 16-17 layers)."""

from __future__ import annotations

from wsecc.targets import load_target

from wsecc.core.bands import band_layout, narrowest
from wsecc.kernels import Kernel, KernelGraph, KernelKind
from wsecc.kernels.costs import CostContext, cost_at
from wsecc.vocab import Precision

MIXED = Precision.MIXED
T = 2048  # generate mode binds the 70B's graph at its 2,048-token context


def _layer(i: int) -> list[Kernel]:
    """One Llama 3.1 70B layer as its export lowers (hidden 8,192, 64 heads, 8 K/V heads,
    FFN 28,672), the kernels named by layer."""

    def linear(name: str, K: int, N: int) -> Kernel:
        params = {"tokens": T, "K": K, "N": N, "has_bias": False, "activation": "",
                  "residual": False}  # fmt: skip
        return Kernel(f"{name}{i}", KernelKind.LINEAR, params)

    def norm(name: str) -> Kernel:
        params = {"rows": T, "dim": 8192, "has_residual": True}
        return Kernel(f"{name}{i}", KernelKind.RMSNORM, params)

    attention = {"seq": T, "heads": 64, "kv_heads": 8, "head_dim": 128, "rotary_dim": 128,
                 "causal": True, "padding_mask": True}  # fmt: skip
    gated = {"tokens": T, "K": 8192, "N": 28672, "has_bias": False, "activation": "silu"}
    return [
        norm("n1."), linear("q", 8192, 8192), linear("k", 8192, 1024), linear("v", 8192, 1024),
        Kernel(f"a{i}", KernelKind.ATTENTION, attention), linear("o", 8192, 8192), norm("n2."),
        Kernel(f"g{i}", KernelKind.GATED_LINEAR, gated), linear("d", 28672, 8192),
    ]  # fmt: skip


def _group(layers: int) -> KernelGraph:
    kernels = tuple(k for i in range(layers) for k in _layer(i))
    return KernelGraph("group", T, kernels, ())


def test_gate_and_up_narrowest_at_68_rows_by_hand() -> None:
    """At 68 rows the 70B's gate and up projections hold W[121 rows, 2 x cdiv(28,672, w)]
    a PE: at 359 columns 2 x 80 columns, 38,720 B of weights, 484 + 1,280 B of double-buffered
    input and partials (one token a chunk) and the 8,192 B reserve, 48,676 B; at 358, 2 x 81
    columns: 39,204 + 1,780 + 8,192 = 49,176 B, over 49,152."""
    ctx = CostContext(load_target("wse3"), MIXED, 1)
    gated = _layer(0)[7]
    assert narrowest(gated, 68, ctx, 755) == 359
    assert cost_at(gated, 68, 359, ctx).sram.total == 48_676
    assert cost_at(gated, 68, 358, ctx).sram.total == 49_176


def test_seventeen_layers_in_bands_of_68_rows() -> None:
    """A group of 17 of the 70B's layers (what sizing at 85% did not fit and no placer packed at
    90%): 1,170 // 17 = 68 rows a band, each layer's nine kernels side by side in 675 of the 755
    columns, serpentine; every region inside the program rectangle, none overlapping, each
    fitting its PE's SRAM."""
    target = load_target("wse3")
    ctx = CostContext(target, MIXED, 1)
    kg = _group(17)
    rects = band_layout(kg, ctx)
    assert rects is not None and len(rects) == 17 * 9
    assert {r.h for r in rects.values()} == {68}
    assert sorted({r.y for r in rects.values()}) == [68 * i for i in range(17)]
    widths = [rects[k.name].w for k in _layer(0)]
    assert widths == [4, 51, 7, 7, 13, 51, 4, 359, 179] and sum(widths) == 675
    assert rects["n1.0"].x == 0 and rects["d1"].x == 0  # layer 1 runs right to left
    assert rects["d0"].x + rects["d0"].w == 675 == rects["n1.1"].x + rects["n1.1"].w
    ordered = sorted(rects.values(), key=lambda r: (r.y, r.x))
    for a, b in zip(ordered, ordered[1:], strict=False):
        assert a.y != b.y or a.x + a.w <= b.x
    assert all(r.x + r.w <= 755 and r.y + r.h <= 1170 for r in rects.values())
    for k in kg.kernels:
        r = rects[k.name]
        assert cost_at(k, r.h, r.w, ctx).sram.total <= 49_152


def test_a_head_goes_below_the_bands() -> None:
    """Fifteen layers, the final norm and the 70B's head (8,192 x 128,256): the bands shrink
    until the rows below them hold the head, side by side with the norm."""
    target = load_target("wse3")
    ctx = CostContext(target, MIXED, 1)
    norm = Kernel("norm", KernelKind.RMSNORM, {"rows": T, "dim": 8192, "has_residual": True})
    head = Kernel("head", KernelKind.LM_HEAD, {"rows": T, "K": 8192, "vocab": 128256,
                                               "tied": False})  # fmt: skip
    layers = _group(15).kernels
    rects = band_layout(KernelGraph("last", T, (*layers, norm, head), ()), ctx)
    assert rects is not None
    h = rects["q0"].h
    assert rects["head"].y == rects["norm"].y == 15 * h and rects["head"].h == 1170 - 15 * h
    assert rects["head"].x == rects["norm"].w
    assert cost_at(head, rects["head"].h, rects["head"].w, ctx).sram.total <= 49_152


def test_no_band_for_one_layer_or_too_many() -> None:
    """One layer is no run to band; 200 of the 70B's layers leave 5 rows a band, where no
    kernel of theirs fits."""
    ctx = CostContext(load_target("wse3"), MIXED, 1)
    assert band_layout(_group(1), ctx) is None
    assert band_layout(_group(200), ctx) is None


def test_a_bands_free_columns_shorten_the_decode_step() -> None:
    """With a batch, the 80 columns each band of 17 layers leaves free go to the kernels whose
    decode step they shorten most: every band then spans all 755 columns, no kernel is narrower
    than its narrowest, and a layer's decode step (the sum of its kernels') is shorter."""
    ctx = CostContext(load_target("wse3"), MIXED, 1)
    kg = _group(17)
    narrow, wide = band_layout(kg, ctx), band_layout(kg, ctx, 1)
    assert narrow is not None and wide is not None
    layer = _layer(0)

    def step(rects: dict) -> int:
        return sum(
            k.spec.decode(k.params, rects[k.name].h, rects[k.name].w, ctx, 1).latency for k in layer
        )

    assert sum(wide[k.name].w for k in layer) == 755
    assert all(wide[k.name].w >= narrow[k.name].w for k in layer)
    assert step(wide) < step(narrow)


def test_placement_falls_back_to_bands_when_no_fill_packs(monkeypatch) -> None:
    """When the placer packs the regions at no fill, `place_and_route` lays the layers out in
    bands (the sample in generate mode: its two layers in bands, the embedding, final norm and
    head below them), sized at the bands' shapes and routed as any placement."""
    from conftest import SAMPLES

    from wsecc.core import chain, flow
    from wsecc.core.flow import ForDecode, lower, place_and_route
    from wsecc.place.problem import PlacementError

    job = chain.job(SAMPLES / "llama_dynamo.onnx", mode="generate", seq=64, prompt=16)
    kg = lower(chain.fuse(chain.load(job)).graph)
    target = load_target("wse3")
    sizing = ForDecode(1).size(kg, target, MIXED, 0.85, 8)

    def never(problem, search):
        raise PlacementError("does not pack (test)")

    monkeypatch.setattr(flow, "_place_in", never)
    said: list[str] = []
    placed = place_and_route(
        kg, sizing, target, MIXED, placer="greedy", time_budget_s=5.0, rule=ForDecode(1),
        say=lambda stage, s: said.append(s),
    )  # fmt: skip
    want = band_layout(kg, sizing.context(target), 1)
    assert want is not None
    assert dict(placed.program.placement.rects) == want
    assert {(k.name, k.h, k.w) for k in placed.program.sizing.kernels} == {
        (n, r.h, r.w) for n, r in want.items()
    }
    assert any("bands of layers across the fabric" in s for s in said)
    assert placed.program.routing.lanes
