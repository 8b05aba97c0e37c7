"""How long a flow takes through a region's edge: the one formula sizing, the router and L0 share.

A flow between two regions leaves its source by PEs of one edge and enters its destination by
PEs of another; each PE of an edge starts (or ends) one *lane*, a path of PE-to-PE links, and a
link direction moves L = `target.link_bytes_per_cycle` bytes per cycle (docs/hardware.md §5.1).
So a flow of B bytes per sample over n lanes needs

    edge_cycles(B, n, L) = cdiv(B, n L)                 cycles per sample

and the fewest lanes that carry it within a stage time of T cycles, each lane moving
lane_bytes(T, L) = T L bytes in that time, are

    lanes_within(B, T L) = max(1, ceil(B / (T L)))      (edge_cycles(B, lanes, L) <= T)

Flows that share an edge of n PEs take whole lanes each (`wsecc.route.problem.edge_shares`),
so together they need `shared_edge_cycles`: the least T at which their lanes_within fit in n.

Who uses it: sizing charges a region the cycles its flows need through its shortest side
(`wsecc.kernels.sizing`: whichever side the placer turns toward a neighbour, it is at least that
long); the router gives a flow lanes_within(B, lane_bytes(stage cycles, L)) lanes
(`wsecc.core.flow.lane_bytes_per_sample`, `wsecc.route.problem.make_routing_problem`); L0 charges a
routed flow edge_cycles(B, its lanes, L) (`wsecc.sim.perf`), and so does L1 (it runs L0's
pipeline).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from wsecc.check.bisection import least_true


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def edge_cycles(bytes_per_sample: float, lanes: int, link_bytes_per_cycle: int) -> int:
    """Cycles per sample a flow of `bytes_per_sample` needs over `lanes` lanes (one per PE of
    the edge it leaves or enters by)."""
    if lanes < 1:
        raise ValueError(f"a flow needs at least one lane, got {lanes}")
    return cdiv(int(bytes_per_sample), lanes * link_bytes_per_cycle)


def lane_bytes(cycles: int, link_bytes_per_cycle: int) -> int:
    """Bytes one lane moves in `cycles`."""
    return cycles * link_bytes_per_cycle


def lanes_within(bytes_per_sample: float, bytes_per_lane: float) -> int:
    """The fewest lanes (at least 1) that move `bytes_per_sample` when each moves
    `bytes_per_lane` (= lane_bytes(T, L) in a stage time T): the inverse of `edge_cycles`, for
    edge_cycles(B, lanes_within(B, lane_bytes(T, L)), L) <= T."""
    if bytes_per_lane <= 0:
        return 1
    if float(bytes_per_sample).is_integer() and float(bytes_per_lane).is_integer():
        return max(1, cdiv(int(bytes_per_sample), int(bytes_per_lane)))  # exact for big sizes
    return max(1, math.ceil(bytes_per_sample / bytes_per_lane))


def shared_edge_cycles(
    flow_bytes: Sequence[float], edge_pes: int, link_bytes_per_cycle: int
) -> int:
    """Cycles per sample for flows sharing an edge of `edge_pes` PEs, each on whole lanes: the
    least T with sum_f lanes_within(B_f, T, L) <= edge_pes. With more flows than PEs, the PEs
    are shared round-robin (as the router does) and the busiest carries the largest flows of its
    turn, one after the other. 0 when there are no flows."""
    sizes = tuple(sorted((int(b) for b in flow_bytes if b > 0), reverse=True))
    return _shared_edge_cycles(sizes, edge_pes, link_bytes_per_cycle)


@functools.lru_cache(maxsize=1 << 14)
def _shared_edge_cycles(sizes: tuple[int, ...], edge_pes: int, link_bytes_per_cycle: int) -> int:
    if not sizes:
        return 0
    if edge_pes < 1:
        raise ValueError(f"an edge has at least one PE, got {edge_pes}")
    L = link_bytes_per_cycle
    if len(sizes) > edge_pes:
        per_pe = cdiv(len(sizes), edge_pes)
        return cdiv(sum(sizes[:per_pe]), L)

    def fits(t: int) -> bool:
        return sum(lanes_within(b, lane_bytes(t, L)) for b in sizes) <= edge_pes

    # all bytes spread over every PE is the least it could take; one lane each always fits
    lo, hi = edge_cycles(sum(sizes), edge_pes, L) - 1, cdiv(sizes[0], L)
    return lo + 1 if fits(lo + 1) else least_true(fits, lo, hi)
