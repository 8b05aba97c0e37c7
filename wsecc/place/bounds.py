"""Lower bounds on the placement objective, from the region sizes alone (no solver).

The objective is Σ_f b_f · |c_src − c_dst|₁ over flows f, c the rectangle centres
(`problem.weighted_wirelength`). Every bound here is a number ≤ that sum for *every* legal
placement, so it is ≤ the optimum, and (objective − bound) / objective is a true gap.

**separation** (`separation_bound`). Two disjoint rectangles are apart in x or in y:
|dx| ≥ (w_i + w_j)/2 or |dy| ≥ (h_i + h_j)/2, so |dx| + |dy| ≥ min(w_i + w_j, h_i + h_j)/2 for
the shapes they took; the bound takes the least over the pair's allowed shapes. Exact for a chain
of equal squares on a strip one square high.

**star** (`star_bound`). Split each flow's bytes between its two endpoints (β to one, b − β to
the other; every split is valid, `POLICIES` tries three). Kernel v's *star* is the flows
attributed to it, each with weight β_u towards a neighbour u. For any placement,
Σ_v Σ_{u∈star(v)} β_u d(v, u) = Σ_f b_f d_f, so Σ_v (a lower bound on v's star in *any*
placement of v and its neighbours) ≤ the objective. A star's bound:

1. *Sides.* u is disjoint from v, so u lies wholly east, west, north or south of v (a half-plane
   beyond one of v's edges; pick one when several hold). The bound is the least, over every
   assignment of the neighbours to sides, of the sum of per-side bounds; a side's bound
   ignores the other sides' neighbours (fewer constraints: still a lower bound).
2. *One side*, say east, edge at X₀ = x_v + w_v, q = (X₀, cy_v). For u there,
   d(v, u) = w_v/2 + (cx_u − X₀) + |cy_u − cy_v|, and two lower bounds on the last two terms
   summed over the side's neighbours S hold; the side takes the larger:
   - *floor*: cx_u − X₀ ≥ w_u/2 (u is beyond the edge), |dy| ≥ 0: Σ_S β_u w_u/2;
   - *bathtub*: for α ∈ (0, 1], let φ(p) = (p_x − X₀) + α|p_y − cy_v|. The mean of φ over u is
     (cx_u − X₀) + α·mean|p_y − cy_v| ≤ (cx_u − X₀) + α|cy_u − cy_v| + α·h_u/4 (|·| is
     1-Lipschitz and a segment of length h has mean distance h/4 to its centre), so
     Σ_S β_u[(cx_u − X₀) + |dy_u|] ≥ Σ_S β_u mean_u φ − α Σ_S β_u h_u/4. The neighbours are
     disjoint sets in the half-plane, so Σ_S β_u mean_u φ = ∫ ρφ with density ρ = β_u/a_u on
     u is at least the rearrangement that puts the densest neighbours where φ is least
     (bathtub principle): {φ ≤ t} is a triangle of area t²/α, so filling areas a_1, a_2, … in
     order of falling density costs Σ_k ρ_k · (2/(3α))(t_k³ − t_{k−1}³), t_k = √(α A_k),
     A_k = a_1 + … + a_k. Using each neighbour's least area and its longest along-edge extent
     only lowers the value (a subset of u of the least area has a smaller mean φ).
3. *Shapes.* With alternative shapes, v's bound is the least over v's shapes; a neighbour's
   floor uses its least depth, its bathtub its least area and largest along-edge extent.
4. *Size.* Only the `STAR_MAX` heaviest neighbours enter the side assignment (3^k work); the
   others count their separation bound, which holds whatever the sides.

Every side's bound is at least its floor, which is at least the separation bound of each of its
flows, so star ≥ separation whatever the split. The fabric's edges are ignored (a relaxation).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wsecc.place.problem import PlacementProblem, kernel_shapes

Shape = tuple[int, int]

STAR_MAX = 7  # neighbours per star in the side assignment (3^k subsets per orientation)
ALPHAS = (1.0, 0.7, 0.5, 0.35, 0.25, 0.18, 0.12, 0.08)


@dataclass(frozen=True)
class LowerBound:
    """A proven lower bound on the weighted wirelength, and which bound gave it."""

    value: float
    kind: str  # "separation" | "star"


def pair_key(a: str, b: str) -> tuple[str, str]:
    """An unordered kernel pair, as `pair_bytes` keys it: the smaller name first."""
    return (a, b) if a < b else (b, a)


def pair_bytes(problem: PlacementProblem) -> dict[tuple[str, str], float]:
    """Flow bytes merged per unordered kernel pair (self-flows dropped)."""
    merged: dict[tuple[str, str], float] = {}
    for f in problem.flows:
        if f.src != f.dst:
            key = pair_key(f.src, f.dst)
            merged[key] = merged.get(key, 0.0) + f.bytes_per_sample
    return merged


def _pinned_distance(problem: PlacementProblem, a: str, b: str) -> float | None:
    """Exact centre distance when both kernels are pinned, else None."""
    if a in problem.pins and b in problem.pins:
        (ax, ay), (bx, by) = problem.pins[a].center2(), problem.pins[b].center2()
        return (abs(ax - bx) + abs(ay - by)) / 2
    return None


def min_separation(si: Sequence[Shape], sj: Sequence[Shape]) -> float:
    """Least centre distance of two disjoint rectangles with shapes from si and sj."""
    return min(min(wi + wj, hi + hj) for wi, hi in si for wj, hj in sj) / 2


def separation_bound(problem: PlacementProblem) -> float:
    """Σ_pairs bytes × min_separation (exact distance for two pinned kernels)."""
    total = 0.0
    for (a, b), w in pair_bytes(problem).items():
        pinned = _pinned_distance(problem, a, b)
        sep = min_separation(kernel_shapes(problem, a), kernel_shapes(problem, b))
        total += w * (pinned if pinned is not None else sep)
    return total


@dataclass(frozen=True)
class Neighbour:
    """A neighbour in a star: the bytes attributed to its flow with the hub, its shapes."""

    weight: float
    shapes: tuple[Shape, ...]


def _bathtub(items: list[tuple[float, float]], alpha: float) -> float:
    """Least Σ β mean φ over disjoint areas: items (β, area), φ-sublevel area t²/α."""
    total, cum, t_prev = 0.0, 0.0, 0.0
    for beta, area in sorted(items, key=lambda it: -it[0] / it[1]):
        cum += area
        t = math.sqrt(alpha * cum)
        total += beta / area * (2.0 / (3.0 * alpha)) * (t**3 - t_prev**3)
        t_prev = t
    return total


def _side_costs(nbrs: list[Neighbour], offset: float, axis: int) -> list[float]:
    """Lower bound on Σ_{u∈S} β_u d(v, u) for each subset S (bitmask) of `nbrs` on one side.

    axis 0: east/west sides (depth along x: a shape's w; along-edge extent: its h);
    axis 1: north/south (depth h, extent w). `offset` is v's half-extent across the edge.
    """
    k = len(nbrs)
    depth = [min(s[axis] for s in n.shapes) / 2 for n in nbrs]
    extent = [max(s[1 - axis] for s in n.shapes) for n in nbrs]
    area = [float(min(w * h for w, h in n.shapes)) for n in nbrs]
    costs = [0.0] * (1 << k)
    for mask in range(1, 1 << k):
        members = [i for i in range(k) if mask >> i & 1]
        floor = sum(nbrs[i].weight * depth[i] for i in members)
        items = [(nbrs[i].weight, area[i]) for i in members]
        spread = sum(nbrs[i].weight * extent[i] for i in members) / 4
        tub = max(_bathtub(items, a) - a * spread for a in ALPHAS)
        costs[mask] = sum(nbrs[i].weight for i in members) * offset + max(floor, tub)
    return costs


def _two_sides(costs: list[float], k: int) -> list[float]:
    """best[T] = least costs[S] + costs[T \\ S] over S ⊆ T (the two opposite sides)."""
    best = [0.0] * (1 << k)
    for t in range(1, 1 << k):
        s, b = t, costs[t]  # S = T, opposite side empty
        while s:
            s = (s - 1) & t
            b = min(b, costs[s] + costs[t ^ s])
        best[t] = b
    return best


def star_value(v_shapes: Sequence[Shape], nbrs: Sequence[Neighbour]) -> float:
    """Lower bound on Σ_u β_u d(v, u) over placements of v and its neighbours (module doc)."""
    return _star_value(tuple(v_shapes), tuple(sorted(nbrs, key=lambda n: (-n.weight, n.shapes))))


@functools.lru_cache(maxsize=4096)  # a transformer's layers repeat the same stars
def _star_value(v_shapes: tuple[Shape, ...], nbrs: tuple[Neighbour, ...]) -> float:
    if len(nbrs) == 1:  # one neighbour touching v at its centre: the separation is exact
        return nbrs[0].weight * min_separation(v_shapes, nbrs[0].shapes)
    heavy = list(nbrs[:STAR_MAX])  # nbrs come heaviest first
    rest = sum(n.weight * min_separation(v_shapes, n.shapes) for n in nbrs[STAR_MAX:])
    k, full = len(heavy), (1 << len(heavy)) - 1
    best = math.inf
    for wv, hv in v_shapes:
        ew = _two_sides(_side_costs(heavy, wv / 2, 0), k)
        ns = _two_sides(_side_costs(heavy, hv / 2, 1), k)
        best = min(best, min(ew[t] + ns[full ^ t] for t in range(full + 1)))
    return best + rest


Policy = Callable[[PlacementProblem, str, str], float]


def _smaller_area(problem: PlacementProblem, a: str, b: str) -> float:
    """Share of the pair (a, b) that goes to a's star: all of it if a is the smaller region."""
    area = {n: min(w * h for w, h in kernel_shapes(problem, n)) for n in (a, b)}
    return 1.0 if area[a] <= area[b] else 0.0


POLICIES: dict[str, Policy] = {
    "half": lambda p, a, b: 0.5,
    "smaller": _smaller_area,
    "larger": lambda p, a, b: 1.0 - _smaller_area(p, a, b),
}


def star_bound(problem: PlacementProblem, policy: str = "half") -> float:
    """Σ_v star_value(v) with each pair's bytes split by `policy` (module doc)."""
    share = POLICIES[policy]
    stars: dict[str, list[Neighbour]] = {}
    total = 0.0
    for (a, b), w in pair_bytes(problem).items():
        pinned = _pinned_distance(problem, a, b)
        if pinned is not None:
            total += w * pinned
            continue
        beta = share(problem, a, b) * w
        for v, u, wt in ((a, b, beta), (b, a, w - beta)):
            if wt > 0:
                stars.setdefault(v, []).append(Neighbour(wt, kernel_shapes(problem, u)))
    for v, nbrs in stars.items():
        total += star_value(kernel_shapes(problem, v), nbrs)
    return total


def lower_bound(problem: PlacementProblem) -> LowerBound:
    """The best of the bounds above: separation, or star under the best split policy."""
    best = LowerBound(separation_bound(problem), "separation")
    for policy in POLICIES:
        value = star_bound(problem, policy)
        if value > best.value * (1 + 1e-12):
            best = LowerBound(value, "star")
    return best
