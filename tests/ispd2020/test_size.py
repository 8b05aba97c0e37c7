"""Sizing: breakpoints, the frontier against brute force, the area lower bound."""

from __future__ import annotations

import itertools

import pytest

from wsecc.ispd2020.perf import Conv, ExecParams, KernelSpec
from wsecc.ispd2020.size import Sizer, breakpoints, frontier


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
    front = frontier(spec, dt, memlimit, (10_000, 10_000))
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


def test_area_lower_bound_is_tight_at_the_step() -> None:
    spec = KernelSpec("c", "conv", (8, 8), (Conv(8, 8, 1, 1, 8, 8),))
    sizer = Sizer((spec, spec), memlimit=10_000, fabric=(30, 30))
    lb = sizer.area_lower_bound()
    assert sizer.fits_area(lb) and not sizer.fits_area(lb - 1)
    areas = sizer.min_areas(lb)
    assert areas is not None and sum(areas) <= 900
