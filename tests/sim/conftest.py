"""Programs to simulate: hand-built (kernels placed and lanes routed by hand) and compiled samples.

`program(...)` builds the four products from kernels, flows, rectangles and lane paths, with a
Sizing whose shapes are the rectangles' (each kernel's cost at its rectangle, as sizing would
record it). `chain(...)` is a row of elementwise kernels joined by straight one-lane flows.
`compiled(sample, seq)` runs the real flow (import -> passes -> lower and size -> greedy place
and route) once per session.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
from wsecc.targets import Target, load_target

from wsecc.core.program import Program
from wsecc.kernels import (
    DEFAULT_CHUNK_TOKENS,
    Flow,
    Kernel,
    KernelGraph,
    KernelKind,
    KernelSizing,
    Port,
    kernel_cost,
    size_regions,
)
from wsecc.place.problem import Placement, Rect
from wsecc.route.problem import RoutedLane, Routing

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
Path_ = tuple[tuple[int, int], ...]


def program(
    target: Target,
    kernels: Sequence[Kernel],
    flows: Sequence[Flow],
    rects: Mapping[str, Rect],
    lanes: Mapping[str, Sequence[Path_]],
    *,
    tokens: int,
    inputs: Sequence[Port] = (),
    outputs: Sequence[Port] = (),
    precision: str = "mixed",
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
) -> Program:
    kg = KernelGraph("test", tokens, tuple(kernels), tuple(flows), tuple(inputs), tuple(outputs))
    kg.verify()
    base = size_regions(kg, target, precision, chunk_tokens=chunk_tokens)
    sized = []
    for k in kernels:
        r = rects[k.name]
        c = kernel_cost(k, r.h, r.w, precision, target, chunk_tokens=base.chunk_tokens)
        sized.append(
            KernelSizing(k.name, k.kind.value, r.h, r.w, c.sram, c.compute_cycles, c.link_cycles)
        )
    sizing = replace(base, kernels=tuple(sized))
    placement = Placement(dict(rects), "manual", 0.0, 0.0, 0.0, "test", 0.0, 0)
    routed = [
        RoutedLane(name, i, tuple(p), 0)
        for name, paths in lanes.items()
        for i, p in enumerate(paths)
    ]
    return Program(kg, sizing, placement, Routing.of(routed, target.color_budget, 0), target)


def elementwise(name: str, tokens: int, dim: int, op: str = "copy", inputs: int = 1) -> Kernel:
    return Kernel(
        name, KernelKind.ELEMENTWISE, {"rows": tokens, "dim": dim, "op": op, "inputs": inputs}
    )


def straight(x0: int, x1: int, y: int) -> Path_:
    return tuple((x, y) for x in range(x0, x1 + 1))


def chain(widths: Sequence[int], ops: Sequence[str], *, tokens: int = 32, dim: int = 64) -> Program:
    """Kernels k0..k{n-1} (1 x w_i regions) in a row on tiny32, k_i -> k_{i+1} by one straight
    lane from k_i's east edge to k_{i+1}'s west edge; x -> k0, k{n-1} -> y."""
    target = load_target("tiny32")
    kernels = [elementwise(f"k{i}", tokens, dim, op) for i, op in enumerate(ops)]
    x_in, y_out = Port("x", tokens * dim), Port("y", tokens * dim)
    flows = [Flow.between(x_in, kernels[0], tokens * dim)]
    rects, lanes, x = {}, {}, 0
    for k, w in zip(kernels, widths, strict=True):
        rects[k.name] = Rect(x, 0, w, 1)
        x += w + 1
    for a, b in zip(kernels, kernels[1:], strict=False):
        flows.append(Flow.between(a, b, tokens * dim))
        ra, rb = rects[a.name], rects[b.name]
        lanes[f"{a.name}->{b.name}"] = [straight(ra.x + ra.w - 1, rb.x, 0)]
    flows.append(Flow.between(kernels[-1], y_out, tokens * dim))
    return program(
        target, kernels, flows, rects, lanes, tokens=tokens, inputs=[x_in], outputs=[y_out]
    )


@cache
def _compiled(sample: str, seq: int, target_name: str) -> Program:
    from wsecc.passes import DEFAULT_PIPELINE

    from wsecc.core.flow import lower_and_size, place_and_route
    from wsecc.frontend.onnx import import_model
    from wsecc.pm import PassManager

    target = load_target(target_name)
    graph, _ = import_model(str(SAMPLES / sample), batch=1, seq=seq)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    kg, sizing = lower_and_size(fused, target, "mixed")
    return place_and_route(kg, sizing, target, "mixed", placer="greedy", time_budget_s=10).program


@pytest.fixture(scope="session")
def compiled():
    """compiled(sample file, seq, target='tiny32') -> Program, compiled once per session."""

    def get(sample: str, seq: int = 32, target: str = "tiny32") -> Program:
        return _compiled(sample, seq, target)

    return get


@pytest.fixture(scope="session")
def build():
    """The builders of this module: build.program, build.chain, build.elementwise,
    build.straight."""
    from types import SimpleNamespace

    return SimpleNamespace(program=program, chain=chain, elementwise=elementwise, straight=straight)
