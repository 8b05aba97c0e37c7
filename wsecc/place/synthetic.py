"""Synthetic placement problems for tests and benchmarks (seeded, deterministic).

- `chain_problem`: a pipeline chain with transformer-like residual skips, random rectangles.
- `transformer_problem`: repeated LN→QKV→Attention→Proj→LN→FC1→FC2 layers with residual flows,
  kernel areas proportional to their FLOPs, like a layer-pipelined GPT on the wafer.
"""

from __future__ import annotations

import math
import random

from wsecc.place.problem import PlaceFlow, PlaceKernel, PlacementProblem

WSE2_USABLE = (750, 994)


def _shape(area: float, aspect: float, width: int, height: int) -> tuple[int, int]:
    """Integer (w, h) with w·h ≈ area and w/h ≈ aspect, clamped to the fabric."""
    w = max(1, min(width, round(math.sqrt(area * aspect))))
    h = max(1, min(height, round(area / w)))
    return w, h


def _scaled_shapes(
    areas: list[float], aspects: list[float], fill: float, width: int, height: int
) -> list[tuple[int, int]]:
    scale = fill * width * height / sum(areas)
    return [_shape(a * scale, r, width, height) for a, r in zip(areas, aspects, strict=True)]


def chain_problem(
    n: int,
    *,
    width: int = 200,
    height: int = 200,
    fill: float = 0.6,
    seed: int = 0,
    alt_shapes: bool = False,
) -> PlacementProblem:
    """n kernels k0..k{n-1}: chain flows k_i→k_{i+1} plus residual flows k_i→k_{i+s}, s∈[2,6].

    Areas are log-uniform in [0.5, 2]× the mean, aspects log-uniform in [0.5, 2], scaled so the
    total area is `fill` of the fabric. Residual flows start every ~4 kernels and carry half the
    chain's bytes. With `alt_shapes`, every third kernel may also take its transposed shape.
    """
    rng = random.Random(seed)
    areas = [math.exp(rng.uniform(math.log(0.5), math.log(2))) for _ in range(n)]
    aspects = [math.exp(rng.uniform(math.log(0.5), math.log(2))) for _ in range(n)]
    shapes = _scaled_shapes(areas, aspects, fill, width, height)
    kernels = tuple(
        PlaceKernel(
            name=f"k{i}",
            shapes=((w, h), (h, w)) if alt_shapes and i % 3 == 0 and w != h else ((w, h),),
            onnx_nodes=(f"node_{i}",),
            kind="chain",
        )
        for i, (w, h) in enumerate(shapes)
    )
    flows = [
        PlaceFlow(f"k{i}", f"k{i + 1}", float(rng.randint(8, 16) * 1024)) for i in range(n - 1)
    ]
    i = rng.randint(0, 3)
    while i < n:
        j = i + rng.randint(2, 6)
        if j < n:
            flows.append(PlaceFlow(f"k{i}", f"k{j}", float(rng.randint(4, 8) * 1024)))
        i += rng.randint(3, 5)
    return PlacementProblem(width, height, kernels, tuple(flows))


# kind, relative FLOPs per token (d=768, seq=1024), output bytes as multiples of d·seq·2
_LAYER = (
    ("layernorm", 0.01, 1),
    ("linear_qkv", 6.0, 3),
    ("attention", 5.3, 1),
    ("linear_proj", 2.0, 1),
    ("layernorm", 0.01, 1),
    ("linear_fc1", 8.0, 4),
    ("linear_fc2", 8.0, 1),
)
# (from offset, to offset) within the repeating pattern, besides the chain edge: residuals
_RESIDUALS = ((0, 4), (4, 7))


def transformer_problem(
    n: int,
    *,
    width: int = WSE2_USABLE[0],
    height: int = WSE2_USABLE[1],
    fill: float = 0.6,
    seed: int = 0,
) -> PlacementProblem:
    """n kernels: embed, then the 7-kernel layer pattern repeated (truncated to fit), then head.

    Areas ∝ FLOPs (LayerNorms floored at 5% of the mean so they stay visible), total `fill` of
    the fabric; linears may also take their transposed shape. Flows: the chain, plus residuals
    LN1→LN2 (skips 3 kernels) and LN2→next LN1 (skips 2), bytes ∝ activation size.
    """
    rng = random.Random(seed)
    body = [_LAYER[i % len(_LAYER)] for i in range(n - 2)]
    specs = [("embedding", 2.0, 1), *body, ("lm_head", 8.0, 1)]
    mean = sum(f for _, f, _ in specs) / len(specs)
    areas = [max(f, 0.05 * mean) * rng.uniform(0.9, 1.1) for _, f, _ in specs]
    aspects = [rng.uniform(0.7, 1.4) if k.startswith("linear") else 1.0 for k, _, _ in specs]
    shapes = _scaled_shapes(areas, aspects, fill, width, height)
    kernels = tuple(
        PlaceKernel(
            name=f"{i:03d}_{kind}",
            shapes=((w, h), (h, w)) if kind.startswith("linear") and w != h else ((w, h),),
            onnx_nodes=(f"/layer{(i - 1) // len(_LAYER)}/{kind}",),
            kind=kind,
        )
        for i, ((kind, _, _), (w, h)) in enumerate(zip(specs, shapes, strict=True))
    )
    act = 768 * 1024 * 2.0
    flows = [
        PlaceFlow(kernels[i].name, kernels[i + 1].name, act * specs[i][2]) for i in range(n - 1)
    ]
    for start in range(1, n - 1, len(_LAYER)):
        for a, b in _RESIDUALS:
            if start + b < n - 1:
                flows.append(PlaceFlow(kernels[start + a].name, kernels[start + b].name, act))
    return PlacementProblem(width, height, kernels, tuple(flows))


# GPT-2 small's regions as sized at seq 1024 for WSE-2 in mixed precision (`wsecc compile`):
# kind, shapes (w, h) preferred first, bytes of the flow to the next kernel in units of d·seq·2
_GPT2_SMALL_LAYER = (
    ("layernorm", ((28, 28),), 1),
    ("linear_qkv", ((68, 110), (89, 86), (80, 96), (110, 70), (101, 77)), 9),
    ("attention", ((84, 69),), 1),
    ("linear_proj", ((110, 23), (55, 46), (46, 55), (23, 110), (128, 20)), 1),
    ("layernorm", ((28, 28),), 1),
    ("linear_fc1", ((237, 48), (119, 96), (45, 256), (192, 60), (60, 192)), 4),
    ("linear_fc2", ((55, 181), (256, 39), (110, 91), (128, 79), (46, 220)), 1),
)
_GPT2_SMALL_ENDS = (
    ("embedding", ((70, 28), (48, 41), (43, 46), (86, 23), (55, 36)), 1),
    ("layernorm", ((21, 21),), 1),
    ("lm_head", ((426, 384), (645, 256)), 1),
)


def gpt2_small_problem(
    layers: int = 12, *, width: int = WSE2_USABLE[0], height: int = WSE2_USABLE[1]
) -> PlacementProblem:
    """GPT-2 small's placement problem as compiled at seq 1024 for WSE-2 (84.5% fill with 12
    layers): embedding, `layers` identical layers, final norm, LM head. Flows: the chain, plus
    the residuals of `transformer_problem` (each layer's first norm to its second, the second to
    the next layer's first), bytes as the compile's."""
    embedding, final_norm, head = _GPT2_SMALL_ENDS
    specs = [embedding, *(_GPT2_SMALL_LAYER * layers), final_norm, head]
    kernels = tuple(
        PlaceKernel(name=f"{i:03d}_{kind}", shapes=shapes, kind=kind)
        for i, (kind, shapes, _) in enumerate(specs)
    )
    act = 768 * 1024 * 2.0
    flows = [
        PlaceFlow(kernels[i].name, kernels[i + 1].name, act * specs[i][2])
        for i in range(len(specs) - 1)
    ]
    for start in range(1, len(specs) - 2, len(_GPT2_SMALL_LAYER)):
        for a, b in _RESIDUALS:
            flows.append(PlaceFlow(kernels[start + a].name, kernels[start + b].name, act))
    return PlacementProblem(width, height, kernels, tuple(flows))
