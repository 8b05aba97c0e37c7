"""A lower bound that places the flow graph's short cycles exactly (`cluster_bound`).

Why: the star bound (`wsecc.place.bounds`) lets each kernel's neighbours crowd round it as if
they had no other flows, and short cycles of flows break that. A BERT layernorm's three Q/K/V
linears must also lie against the attention they feed. The MLP's layernorm, FC1, FC2 and the
next layernorm close a cycle through the residual. Placed exactly, one BERT-large layer's
cycles cost 1.24–1.54× their star bound (bench/RESULTS.md, "Bounds worth reading": the
cluster bound).

The bound. Split the flow pairs into pieces: clusters, each a short cycle's kernels with the
pairs among them that no earlier cluster took, and the rest. In any legal placement each piece's
flows cost at least the piece's own lower bound, so the sum over the pieces is a lower bound:
- A cluster's kernels, taken out of any placement, are disjoint rectangles in the plane. So its
  flows cost at least the least cost over placements in the whole plane (no fabric): the
  injected `solve` proves it (`wsecc.place.cpsat.cluster_values`, CP-SAT; when it runs out of
  time, its proven objective bound). A cluster never counts less than its own star bound.
- The rest costs at least `bounds.lower_bound` of the problem with the rest's flows only.

What makes the plane problem small enough to prove (`cluster_values`' model, doubled centres,
so every coordinate is an integer):
- Translation: the largest kernel (the hub) has its centre at the origin; one solve per hub
  shape.
- Reflection: mirroring the plane in x or in y through the hub's centre keeps a placement legal
  and its cost. So one other kernel (the anchor) has cx ≥ 0 and cy ≥ 0.
- Twins: kernels with the same shapes and the same flows to every other kernel are ordered by
  cx (swapping two keeps the cost). The anchor is not a twin.
- Room: some optimal placement has every centre within Σ (largest width) of the hub's in x,
  and within Σ (largest height) in y. Proof: if the kernels' x-extents fall into two groups with
  a gap between them, move the group without the hub rigidly across the gap. Every pair between
  the groups stays apart in x, and no flow between them gets longer, since they all cross the
  gap the same way. Repeat until the union of the x-extents is one interval, at most Σ widths
  long; it holds the hub's centre. Then do the same in y, which leaves x alone.
- Positions: doubled centres may be any integer, so a region may sit at half-PE positions. That
  relaxes the fabric's whole-PE grid, so the value is still a lower bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wsecc.place.bounds import LowerBound, lower_bound, pair_bytes, pair_key
from wsecc.place.problem import PlaceFlow, PlaceKernel, PlacementProblem, kernel_shapes

Shape = tuple[int, int]
CYCLE_MAX = 5  # kernels per cluster: the longest cycles looked for


@dataclass(frozen=True)
class Cluster:
    """Kernels (a cycle, in order) by their shapes, and the flow pairs among them as
    (i, j, bytes), i < j."""

    shapes: tuple[tuple[Shape, ...], ...]
    pairs: tuple[tuple[int, int, float], ...]

    def twins(self, hub: int) -> list[tuple[int, int]]:
        """Pairs (a, b), a < b, neither `hub`, with the same shapes and the same flows to every
        other kernel: swapping two keeps every placement's cost (the relation is transitive,
        so a class may be sorted)."""
        n = len(self.shapes)
        weight = {(i, j): b for i, j, b in self.pairs}

        def flow(i: int, k: int) -> float:
            return weight.get((min(i, k), max(i, k)), 0.0)

        return [
            (a, b)
            for a in range(n)
            for b in range(a + 1, n)
            if hub not in (a, b)
            and self.shapes[a] == self.shapes[b]
            and all(flow(a, k) == flow(b, k) for k in range(n) if k not in (a, b))
        ]

    def problem(self, width: int, height: int) -> PlacementProblem:
        """The cluster as a placement problem (kernels k0, k1, …) on a width × height fabric."""
        kernels = tuple(PlaceKernel(f"k{i}", s) for i, s in enumerate(self.shapes))
        flows = tuple(PlaceFlow(f"k{i}", f"k{j}", b) for i, j, b in self.pairs)
        return PlacementProblem(width, height, kernels, flows)


Solve = Callable[[Sequence[Cluster]], list[float]]  # a lower bound per cluster (plane problem)


def cycles(problem: PlacementProblem, max_len: int = CYCLE_MAX) -> list[list[str]]:
    """Every simple cycle of 3 to `max_len` kernels in the (undirected) flow graph, once each:
    it starts at its smallest name and its second kernel is smaller than its last."""
    adj: dict[str, set[str]] = {}
    for a, b in pair_bytes(problem):
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set()).add(a)
    out: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for nxt in sorted(adj[path[-1]]):
            if nxt == path[0] and len(path) >= 3 and path[1] < path[-1]:
                out.append(list(path))
            elif nxt > path[0] and nxt not in path and len(path) < max_len:
                walk([*path, nxt])

    for start in sorted(adj):
        walk([start])
    return out


def clusters(
    problem: PlacementProblem, max_len: int = CYCLE_MAX
) -> list[tuple[list[str], list[tuple[str, str]]]]:
    """The clusters, heaviest first: each a cycle of 3 to `max_len` kernels none of whose ring
    pairs an earlier cluster took, with every pair among its kernels not taken before."""
    pairs = pair_bytes(problem)

    def inside(cycle: list[str]) -> list[tuple[str, str]]:
        s = set(cycle)
        return [e for e in pairs if e[0] in s and e[1] in s]

    found = cycles(problem, max_len)
    found.sort(key=lambda c: (-sum(pairs[e] for e in inside(c)), len(c), c))
    taken: set[tuple[str, str]] = set()
    out = []
    for c in found:
        ring = {pair_key(c[i], c[(i + 1) % len(c)]) for i in range(len(c))}
        if ring & taken:
            continue
        mine = [e for e in inside(c) if e not in taken]
        taken.update(mine)
        out.append((c, mine))
    return out


def cluster_bound(problem: PlacementProblem, solve: Solve, max_len: int = CYCLE_MAX) -> LowerBound:
    """The better of `bounds.lower_bound` and Σ clusters + the rest's own bound (module doc);
    kind "cluster" when the clusters win. Clusters the same up to rotation and direction (every
    layer of a transformer) are solved once. Pinned kernels: `lower_bound` alone."""
    plain = lower_bound(problem)
    if problem.pins:
        return plain
    pieces = clusters(problem, max_len)
    if not pieces:
        return plain
    pairs = pair_bytes(problem)
    found = [_canonical(problem, pairs, c, mine) for c, mine in pieces]
    distinct = list(dict.fromkeys(found))
    W, H = problem.width, problem.height
    value = {  # never less than the cluster's own star bound
        c: max(v, lower_bound(c.problem(W, H)).value)
        for c, v in zip(distinct, solve(distinct), strict=True)
    }
    total = sum(value[cluster] for cluster in found)
    taken = {e for _, mine in pieces for e in mine}
    rest = tuple(PlaceFlow(a, b, w) for (a, b), w in pairs.items() if (a, b) not in taken)
    total += lower_bound(
        PlacementProblem(problem.width, problem.height, problem.kernels, rest)
    ).value
    return LowerBound(total, "cluster") if total > plain.value * (1 + 1e-12) else plain


def _canonical(
    problem: PlacementProblem,
    pairs: dict[tuple[str, str], float],
    cycle: list[str],
    mine: list[tuple[str, str]],
) -> Cluster:
    """The cluster in the rotation and direction of its cycle that sorts first (`pairs`: the
    problem's bytes per kernel pair, `bounds.pair_bytes`)."""
    best: Cluster | None = None
    k = len(cycle)
    for step in (1, -1):
        for start in range(k):
            order = [cycle[(start + step * i) % k] for i in range(k)]
            at = {n: i for i, n in enumerate(order)}
            c = Cluster(
                tuple(kernel_shapes(problem, n) for n in order),
                tuple(
                    sorted((min(at[a], at[b]), max(at[a], at[b]), pairs[(a, b)]) for a, b in mine)
                ),
            )
            if best is None or (c.shapes, c.pairs) < (best.shapes, best.pairs):
                best = c
    assert best is not None
    return best
