"""Sizing: breakpoints, the frontier against brute force, the contest kinds in the shared
cost-model table and sizing, the area lower bound."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from conftest import ISPD_CORPUS

from wsecc.ispd2020.generate import conv_list, render
from wsecc.ispd2020.kgraph import parse_kgraph, read_kgraph
from wsecc.ispd2020.perf import Conv, ExecParams, KernelSpec, kernel_graph
from wsecc.ispd2020.size import PRECISION, contest_target
from wsecc.ispd2020.solve import Instance
from wsecc.kernels import KINDS, Kernel, KernelKind, kernel_cost, size_regions
from wsecc.kernels.conv import breakpoints, frontier


def test_breakpoints() -> None:
    assert breakpoints(7).tolist() == [1, 2, 3, 4, 7]  # ceil(7/q) for q = 7..1
    for n in (1, 14, 56, 112):
        bp = set(breakpoints(n).tolist())
        # every p has a breakpoint b ≤ p with the same ceil(n/b)
        for p in range(1, n + 1):
            assert any(b <= p and -(-n // b) == -(-n // p) for b in bp)


def _brute_force(spec: KernelSpec, dt: int, memlimit: int) -> dict[int, int]:
    """height -> least width over every parameter choice (not only breakpoints)."""
    best: dict[int, int] = {}
    ranges = [range(1, spec.H + 1), range(1, spec.W + 1)]
    ranges += [range(1, c.C + 1) for c in spec.convs] + [range(1, c.K + 1) for c in spec.convs]
    n = len(spec.convs)
    for t in itertools.product(*ranges):
        p = ExecParams(t[0], t[1], t[2 : 2 + n], t[2 + n :])
        perf = spec.perf(p)
        if perf.time <= dt and perf.memory <= memlimit:
            best[perf.height] = min(best.get(perf.height, perf.width), perf.width)
    return best


SMALL = [
    KernelSpec("c", "conv", (), (Conv(6, 5, 3, 3, 6, 5),)),
    KernelSpec("s", "conv", (), (Conv(6, 6, 1, 1, 5, 7, 2, 2),)),
    KernelSpec("b", "dblock", (), (Conv(4, 4, 1, 1, 4, 2), Conv(4, 4, 3, 3, 2, 2))),
]


@pytest.mark.parametrize("spec", SMALL, ids=lambda s: s.name)
@pytest.mark.parametrize("dt", [12, 40, 200])
@pytest.mark.parametrize("memlimit", [60, 10_000])
def test_frontier_against_brute_force(spec: KernelSpec, dt: int, memlimit: int) -> None:
    spec = KernelSpec(spec.name, spec.kind, (spec.convs[0].H, spec.convs[0].W), spec.convs)
    brute = _brute_force(spec, dt, memlimit)
    front = frontier(spec.convs, spec.H, spec.W, dt, memlimit, (10_000, 10_000))
    # every frontier shape is a legal choice with the stated size
    for s in front:
        perf = spec.perf(s.params)
        assert (perf.height, perf.width, perf.time) == (s.height, s.width, s.time)
        assert s.time <= dt and perf.memory <= memlimit and not spec.param_errors(s.params)
    pareto, low = [], None
    for h in sorted(brute):
        if low is None or brute[h] < low:
            pareto.append((h, brute[h]))
            low = brute[h]
    if memlimit == 10_000:  # memory never binds: breakpoints are exact
        assert [(s.height, s.width) for s in front] == pareto
    else:  # binding memory: an off-breakpoint h', w' or c' can do better (documented)
        assert all(any(h <= s.height and w <= s.width for h, w in pareto) for s in front)
        assert bool(front) == bool(pareto)


TWO_CONVS = """(*
width=30
height=30
memlimit=10000
wdeltat=1
wlength=1
wadapter=0
*)
input[0] n=[8 8 8] name='k0'
conv[1] H=8 W=8 R=1 S=1 C=8 K=8 T=1 U=1 name='k1'
conv[2] H=8 W=8 R=1 S=1 C=8 K=8 T=1 U=1 name='k2'
output[3] n=[8 8 8] name='k3'
input[0]:y -> conv[1]:x, shape:[8][8][8]
conv[1]:y -> conv[2]:x, shape:[8][8][8]
conv[2]:y -> output[3]:x, shape:[8][8][8]
"""


def _min_area(sizer, spec, dt: int) -> int | None:
    front = sizer.frontier(spec, dt)
    return min(s.area for s in front) if front else None


def test_area_lower_bound_is_tight_at_the_step() -> None:
    inst = Instance.of(parse_kgraph(TWO_CONVS))
    sizer = inst.sizer()
    lb = sizer.area_lower_bound()
    at = [_min_area(sizer, s, lb) for s in inst.specs]
    below = [_min_area(sizer, s, lb - 1) for s in inst.specs]
    assert None not in at and sum(at) <= 900
    assert None in below or sum(below) > 900


def test_contest_kinds_are_shared_cost_models() -> None:
    """conv/dblock/cblock are kinds of the shared table; at a fixed region the model picks the fastest
    parameters whose rectangle fits it (checked by brute force on a small conv)."""
    assert {KernelKind.CONV, KernelKind.DBLOCK, KernelKind.CBLOCK} <= set(KINDS)
    graph = parse_kgraph(TWO_CONVS)
    target = contest_target(graph)
    conv = Conv(8, 8, 1, 1, 8, 8)
    kernel = Kernel(
        "k", KernelKind.CONV, dict(zip("HWRSCKTU", (8, 8, 1, 1, 8, 8, 1, 1), strict=True))
    )
    for h, w in [(2, 3), (10, 12), (30, 6), (18, 24)]:
        best = None
        for hp, wp, cp, kp in itertools.product(range(1, 9), repeat=4):
            spec = KernelSpec("k", "conv", (8, 8), (conv,))
            perf = spec.perf(ExecParams(hp, wp, (cp,), (kp,)))
            fits = (perf.height <= h and perf.width <= w) or (perf.width <= h and perf.height <= w)
            if fits and perf.memory <= 10_000 and (best is None or perf.time < best):
                best = perf.time
        cost = kernel_cost(kernel, h, w, PRECISION, target)
        assert cost.compute_cycles == best, (h, w)
        assert cost.h <= h and cost.w <= w and cost.sram.total <= 20_000
    with pytest.raises(ValueError, match="fit a 1x1 region"):
        kernel_cost(kernel, 1, 1, PRECISION, target)


def test_shared_sizing_balances_a_contest_graph() -> None:
    """`size_regions` — the transformer sizing — sizes a kgraph: every kernel within Δt and
    memlimit, the regions within the fabric."""
    graph = read_kgraph(ISPD_CORPUS / "A.kgraph")
    kg, target = kernel_graph(graph), contest_target(graph)
    sizing = size_regions(kg, target, PRECISION, fill=0.9)
    assert len(sizing.kernels) == len(graph.kernels)
    assert sizing.pes_used <= 0.9 * 633 * 633
    assert all(k.sram.total <= 2 * graph.memlimit for k in sizing.kernels)
    assert sizing.stage_cycles >= Instance.of(graph).sizer().area_lower_bound()


@pytest.mark.parametrize(("bench", "bound"), [("A", 33152), ("B", 62181), ("D", 32256)])
def test_area_lower_bound_of_the_benchmarks(bench: str, bound: int) -> None:
    """The bound RESULTS.md reports (the contest sizer's own search gave the same numbers)."""
    assert (
        Instance.of(read_kgraph(ISPD_CORPUS / f"{bench}.kgraph")).sizer().area_lower_bound()
        == bound
    )


def test_a_cycle_is_a_clear_error() -> None:
    text = TWO_CONVS.replace(
        "conv[2]:y -> output[3]:x",
        "conv[2]:y -> conv[1]:x, shape:[8][8][8]\nconv[2]:y -> output[3]:x",
    )
    with pytest.raises(ValueError, match=r":\d+: edge conv\[2\] -> conv\[1\] closes a cycle"):
        kernel_graph(parse_kgraph(text))


def _best_score(inst: Instance, memlimit: int) -> float:
    """Two kernels, one edge: the least score over every parameter choice (not only the
    frontier's), orientation and integer position, by enumeration."""
    g = inst.graph
    fab_w, fab_h = inst.fabric
    shapes = []
    for spec in inst.specs:
        seen = {}
        conv = spec.convs[0]
        for t in itertools.product(*(range(1, n + 1) for n in (conv.H, conv.W, conv.C, conv.K))):
            perf = spec.perf(ExecParams(t[0], t[1], (t[2],), (t[3],)))
            if perf.memory <= memlimit:
                for w, h in ((perf.width, perf.height), (perf.height, perf.width)):
                    if w <= fab_w and h <= fab_h:
                        seen[(w, h)] = min(seen.get((w, h), perf.time), perf.time)
        shapes.append(seen)
    best = float("inf")
    for (w1, h1), t1 in shapes[0].items():
        for (w2, h2), t2 in shapes[1].items():
            for x1, y1, x2, y2 in itertools.product(
                range(fab_w - w1 + 1),
                range(fab_h - h1 + 1),
                range(fab_w - w2 + 1),
                range(fab_h - h2 + 1),
            ):
                if x1 + w1 <= x2 or x2 + w2 <= x1 or y1 + h1 <= y2 or y2 + h2 <= y1:
                    wl = abs(2 * x1 + w1 - 2 * x2 - w2) + abs(2 * y1 + h1 - 2 * y2 - h2)
                    best = min(best, g.wdeltat * max(t1, t2) + g.wlength * wl / 2)
    return best


@pytest.mark.parametrize("wlength", [1, 20, 400])
@pytest.mark.parametrize("memlimit", [20, 10_000])
def test_score_lower_bound_against_brute_force(wlength: int, memlimit: int) -> None:
    chain = conv_list([(2, 1, 2, 3, 1), (2, 3, 2, 2, 1)], width=9, height=8, memlimit=memlimit)
    inst = Instance.of(parse_kgraph(render(replace(chain, wlength=wlength))))
    sizer = inst.sizer()
    lower = sizer.area_lower_bound()
    bound = sizer.score_lower_bound(inst.specs, inst.edges, (1, wlength), lower, 4 * lower)
    best = _best_score(inst, memlimit)
    assert bound <= best
    assert bound >= lower  # never below the Δt bound alone
