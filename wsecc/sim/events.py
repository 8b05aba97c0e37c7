"""L1 event-level performance: chunks of tokens moving through kernels and links, with link
contention, finite buffers and back-pressure; invariants checked on every run; a Perfetto trace.

The stages and edges are L0's (`wsecc.sim.perf.build_pipeline`): host-in, kernels, routed flows,
host-out. `samples` samples stream back to back, each as n chunks of `chunk_tokens` tokens, so the
run is a sequence of S x n chunks g (sample g // n, chunk g % n) through every stage.

A stage starts chunk g when
    - it has finished chunk g - 1 (a stage works on one chunk at a time);
    - every input edge holds chunk g (a *barrier* edge, the K/V and mask of a non-causal
      attention, the whole of sample g // n);
    - every output edge has a free slot (credit-based flow control: the slot is taken when the
      producer starts the chunk and freed when the consumer finishes it). A producer whose
      edge has no free slot stalls: back-pressure.
A kernel takes its L0 per-chunk time (cycles_per_sample / n), except where its chunks differ in
work: a causal attention's chunk k attends to every key up to its own queries, so its time is its
share of the sample's (query, key) pairs of the compute cycles, at least its share of the link
time (`wsecc.sim.perf.Stage.chunk_cycles`): early chunks are quick, late ones slow, and the
stages around it see the unevenness L0's average hides. A flow takes its L0 per-chunk time
when alone on its links; lanes of different flows that share a link direction share its bandwidth
equally (processor sharing: a transfer's speed is re-evaluated whenever a transfer on a shared link
starts or ends; a flow moves at the pace of its most shared lane). A flow's chunk reaches its
consumer `latency_cycles` (hops and ramps) after the transfer ends.

Buffers. Each edge holds `buffer_chunks` chunks (double buffering, as the cost models assume) plus:
    - a flow's lanes, the whole chunks they hold in flight at the flow's rate:
      floor(latency_cycles / its chunk time). The fabric stores what is on a lane, not the
      consumer: a hop takes a cycle and every link carries a wavelet a cycle (wafer-facts §5.1),
      so a lane streams at its rate however long it is, stalling hop by hop when its consumer
      stops taking. These slots are not SRAM. (Counted against the consumer's buffer, a flow
      whose latency is a few chunk times throttled its chain: −62% on the bundled BERT at
      seq 64 on WSE-3 with greedy's placement, −11% with them.)
    - barrier edges 2 n more: a whole sample's K/V while the next streams in (the cost model's
      kv_sets = 2);
    - with `skew_buffers` (default), delay-matching chunks on reconvergent edges: an edge whose
      consumer's other inputs arrive later (a residual around a layer) must hold the chunks that
      arrive meanwhile, ceil((phase_consumer - phase_edge) / period) of them, from the steady-state
      phases (chunk 0's trip at each stage's own speed; period = the slowest stage's chunk time).
      The cost models do not budget these bytes: `EventResult.skew_buffers` lists them, each
      charged to its consumer's PEs, and the SRAM map adds them to the budget check
      (`buffer_bytes_per_pe`). Without them the pipeline throttles to the skip buffer's depth,
      or deadlocks around a barrier.

Invariants, checked over fixed windows of `window_cycles` on every run (InvariantError names the
offender and the windows): no kernel (its PEs), memory port, host channel or link direction is
more than 100% busy in any window; every edge's bytes sent equal its bytes received. Fault hooks
(`Faults`) break the model on purpose, to show the checks catch it.

Links. A flow's lanes carry its bytes equally, and every link of a lane carries the lane's
rate, so links are aggregated per flow: a link used by one lane of one flow has that flow's lane
utilization; only links shared by several lanes are tracked on their own (grouped by who shares
them). This keeps GPT-2 small (≈ 190 stages, 128 chunks per sample) to seconds.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from wsecc.core.program import Program
from wsecc.errors import SimulationError
from wsecc.route.problem import STEPS
from wsecc.sim.perf import (
    FLOW,
    HOST_IN,
    HOST_OUT,
    KERNEL,
    Edge,
    PerfResult,
    Pipeline,
    build_pipeline,
    flow_name,
    l0_result,
)
from wsecc.vocab import Precision

DIRS = tuple(STEPS)  # link directions, indexed in link ids
TRACE_SAMPLES = 2  # samples written to the trace: enough to see the fill and the steady state
MAX_TRACE_EVENTS = 250_000  # keeps a trace file to a few tens of MB
EPS = 1e-6  # relative slack of the window checks (floating-point sums of intervals)


class InvariantError(SimulationError):
    """A simulated resource above 100% busy, or bytes not conserved; names the resource."""


@dataclass(frozen=True)
class Faults:
    """Deliberate model breakages, for testing the invariant checks."""

    drop_chunk: tuple[str, int] | None = None  # (flow stage, chunk g): sent, never delivered
    ignore_contention: bool = False  # flows sharing a link each take its full bandwidth


@dataclass(frozen=True)
class LinkUse:
    """Links with the same users: one link used by one flow's lane, or shared ones."""

    link: tuple[int, int, str]  # a representative link: router (x, y) and outgoing direction
    links: int  # links in this group
    flows: tuple[str, ...]
    peak: float  # busiest window's utilization
    mean: float  # per sample over the steady-state period


@dataclass(frozen=True)
class SkewBuffer:
    """Delay-matching chunks an edge holds beyond `buffer_chunks` (not in the cost models), in
    the SRAM of the kernel that consumes it: `bytes` in all, `bytes_per_pe` on each of its PEs,
    spread as its mapping spreads an input chunk (over the rows for the W or E edge; over the
    columns for N or S, and over the rows too for a row-wise kind, which deals whole chunks to
    its rows in turn)."""

    edge: str
    chunks: int
    bytes: int
    kernel: str = ""  # the consumer holding it ("" when the consumer is the host)
    bytes_per_pe: int = 0
    wanted: int = 0  # chunks the edge needs to run at full rate (more than `chunks`: capped)


@dataclass(frozen=True)
class EventResult:
    """L1 figures of one compiled program, with L0's for comparison."""

    graph: str
    target: str
    precision: Precision
    samples: int
    chunk_tokens: int
    n_chunks: int
    buffer_chunks: int
    clock_hz: float
    cycles: float  # simulated span
    window_cycles: float
    windows: int
    samples_per_s: float  # steady state: the later half of the samples
    tokens_per_s: float
    latency_cycles: float  # first sample, empty pipeline (L0's definition)
    latency_s: float
    mean_latency_s: float  # over all samples, under load
    stage_busy: Mapping[str, float]  # busy time per sample / the steady-state period
    links: tuple[LinkUse, ...]  # busiest first
    skew_buffers: tuple[SkewBuffer, ...]
    l0: PerfResult
    throughput_rel_diff: float  # (L1 - L0) / L0
    latency_rel_diff: float
    seconds: float
    trace: tuple[dict[str, Any], ...] = field(repr=False, default=())

    @property
    def kernel_busy(self) -> dict[str, float]:
        names = {k.name for k in self.l0.kernels}
        return {n: b for n, b in self.stage_busy.items() if n in names}

    @property
    def contended_links(self) -> tuple[LinkUse, ...]:
        return tuple(u for u in self.links if len(u.flows) > 1)

    def write_trace(self, path: str | os.PathLike[str]) -> None:
        """Chrome trace event format (opens in Perfetto / chrome://tracing): one thread per
        kernel (process 'kernels') and per flow (process 'links'), one complete event per chunk,
        the first TRACE_SAMPLES samples."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": list(self.trace), "displayTimeUnit": "ns"}, f)

    def to_json(self) -> dict[str, Any]:
        """Every figure, L0's included; not the trace (`write_trace`)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "trace"}
        d["l0"] = self.l0.to_json()
        d["stage_busy"] = dict(self.stage_busy)
        d["links"] = [asdict(u) for u in self.links]
        d["skew_buffers"] = [asdict(b) for b in self.skew_buffers]
        return d

    def summary(self) -> str:
        return (
            f"L1 {self.graph} on {self.target}: {self.samples_per_s:,.2f} samples/s "
            f"({self.throughput_rel_diff:+.1%} vs L0), latency {self.latency_s * 1e6:,.1f} us "
            f"({self.latency_rel_diff:+.1%} vs L0), {self.samples} samples x {self.n_chunks} "
            f"chunks in {self.seconds:.1f} s; {len(self.contended_links)} contended link groups, "
            f"{len(self.skew_buffers)} skew buffers"
            + (f" ({cut} cut to the SRAM left)" if (cut := self.skew_buffers_cut) else "")
        )

    @property
    def skew_buffers_cut(self) -> int:
        """Skew buffers holding fewer chunks than full rate needs (`fit_skew`)."""
        return sum(b.chunks < b.wanted for b in self.skew_buffers)


# --- buffers -----------------------------------------------------------------------------------


def buffer_depths(
    pipe: Pipeline, buffer_chunks: int, skew_buffers: bool
) -> tuple[list[int], list[int]]:
    """(depth, skew chunks) per edge (module doc, Buffers)."""
    n, t = pipe.n_chunks, pipe.chunk_cycles()
    period = max(float(t.max()), 1e-12)
    lat = [s.latency_cycles for s in pipe.stages]
    phase = np.zeros(len(pipe.stages))
    arrive = np.zeros(len(pipe.edges))
    for v, ins in enumerate(pipe.inputs()):
        for i in ins:
            e = pipe.edges[i]
            arrive[i] = phase[e.src] + t[e.src] + lat[e.src] + (n - 1) * period * e.barrier
            phase[v] = max(phase[v], arrive[i])
    depth, skew = [], []
    for i, e in enumerate(pipe.edges):
        extra = math.ceil((phase[e.dst] - arrive[i]) / period - 1e-9) if skew_buffers else 0
        skew.append(extra)
        # whole chunks the lanes hold in flight at the flow's rate (module doc, Buffers)
        in_flight = math.floor(lat[e.src] / max(float(t[e.src]), 1e-12) + 1e-9)
        depth.append(buffer_chunks + extra + 2 * n * e.barrier + in_flight)
    return depth, skew


def _skew_buffer(
    program: Program, pipe: Pipeline, e: Edge, chunks: int, wanted: int = 0
) -> SkewBuffer:
    """An edge's skew chunks, charged to the kernel that consumes them (`SkewBuffer`)."""
    total = math.ceil(chunks * e.bytes_per_sample / pipe.n_chunks)
    src, dst = pipe.stages[e.src].name, pipe.stages[e.dst].name
    wanted = max(wanted, chunks)
    if dst not in program.placement.rects:  # the host: its buffers are not on the wafer
        return SkewBuffer(pipe.edge_name(e), chunks, total, wanted=wanted)
    rect, spec = program.placement.rects[dst], program.kg.kernel(dst).spec
    edges = {f.dst_edge for f in program.kg.flows if f.dst == dst and flow_name(f.src, dst) == src}
    side = edges.pop() if len(edges) == 1 else spec.in_edge
    if side in ("W", "E"):  # split over the rows, multicast along each
        receivers = rect.h
    else:  # split over the columns; a row-wise kind deals whole chunks to its rows in turn
        receivers = rect.w * (rect.h if spec.chunks_over_rows else 1)
    return SkewBuffer(
        pipe.edge_name(e), chunks, total, dst, math.ceil(total / receivers), wanted=wanted
    )


def fit_skew(
    program: Program, pipe: Pipeline, skew: list[int], room: Mapping[str, int]
) -> list[int]:
    """`skew` (chunks per edge) capped so that each consumer's skew buffers fit the bytes per
    PE `room` leaves it (the SRAM its fullest PE does not use): the edges into a kernel that
    would overflow keep the same fraction of their chunks, rounded down. The chunks taken away
    show up in L1 as the back-pressure they cause."""
    skew = list(skew)
    into: dict[str, list[int]] = defaultdict(list)
    for i, (e, c) in enumerate(zip(pipe.edges, skew, strict=True)):
        if c > 0 and pipe.stages[e.dst].name in program.placement.rects:
            into[pipe.stages[e.dst].name].append(i)

    def used(edges: list[int]) -> int:
        return sum(_skew_buffer(program, pipe, pipe.edges[i], skew[i]).bytes_per_pe for i in edges)

    for kernel, edges in into.items():
        limit, need = max(0, room.get(kernel, 0)), used(edges)
        if need <= limit:
            continue
        for i in edges:
            skew[i] = skew[i] * limit // need
        while used(edges) > limit:  # per-PE rounding: one chunk fewer on the largest
            j = max(edges, key=lambda i: skew[i])
            skew[j] -= 1
    return skew


def buffer_bytes_per_pe(result: EventResult) -> dict[str, int]:
    """Kernel name -> the skew-buffer bytes L1 adds on each of its PEs (for
    `wsecc.sim.sram.sram_map`'s `extra_buffers`: the SRAM map charges them to the budget)."""
    out: dict[str, int] = {}
    for b in result.skew_buffers:
        if b.kernel:
            out[b.kernel] = out.get(b.kernel, 0) + b.bytes_per_pe
    return out


# --- links ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _LinkGroups:
    """Which flow stages use which links: per-flow lane counts on shared links."""

    shared: tuple[tuple[tuple[int, int], ...], ...]  # per shared group: ((stage, lanes), ...)
    shared_links: tuple[tuple[tuple[int, int, str], int], ...]  # (representative, count)
    own: dict[int, tuple[tuple[int, int, str], int]]  # stage -> (representative, unshared links)
    flow_groups: dict[int, list[int]]  # stage -> shared groups it is in


def _link_groups(pipe: Pipeline, width: int) -> _LinkGroups:
    ids, owners = [], []
    for v, s in enumerate(pipe.stages):
        if s.kind != FLOW:
            continue
        for path in pipe.flow_lanes[s.name]:
            p = np.asarray(path, dtype=np.int64)
            if len(p) < 2:
                continue
            step = p[1:] - p[:-1]
            d = np.select(
                [step[:, 0] == 1, step[:, 0] == -1, step[:, 1] == 1], [0, 1, 2], default=3
            )
            ids.append((p[:-1, 1] * width + p[:-1, 0]) * 4 + d)
            owners.append(np.full(len(p) - 1, v))
    if not ids:
        return _LinkGroups((), (), {}, {})
    link, owner = np.concatenate(ids), np.concatenate(owners)
    uniq, inverse, counts = np.unique(link, return_inverse=True, return_counts=True)
    is_shared = counts[inverse] > 1

    def decode(i: int) -> tuple[int, int, str]:
        lid = int(i)
        return ((lid // 4) % width, (lid // 4) // width, DIRS[lid % 4])

    own: dict[int, tuple[tuple[int, int, str], int]] = {}
    for v in np.unique(owner[~is_shared]):
        mine = link[(owner == v) & ~is_shared]
        own[int(v)] = (decode(mine[0]), len(mine))
    users: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for lid, v in zip(link[is_shared].tolist(), owner[is_shared].tolist(), strict=True):
        users[lid][v] += 1
    groups: dict[tuple[tuple[int, int], ...], list[int]] = defaultdict(list)
    for lid, per_flow in users.items():
        groups[tuple(sorted(per_flow.items()))].append(lid)
    shared = tuple(groups)
    flow_groups: dict[int, list[int]] = defaultdict(list)
    for gi, who in enumerate(shared):
        for v, _ in who:
            flow_groups[v].append(gi)
    return _LinkGroups(
        shared=shared,
        shared_links=tuple((decode(min(lids)), len(lids)) for lids in groups.values()),
        own=own,
        flow_groups=dict(flow_groups),
    )


# --- the simulation ------------------------------------------------------------------------------


class _Sim:
    """One run's state; `run()` fills the per-stage piece lists and per-sample times."""

    def __init__(
        self,
        pipe: Pipeline,
        groups: _LinkGroups,
        depth: list[int],
        samples: int,
        faults: Faults,
        link_bytes_per_cycle: int,
    ):
        self.pipe, self.groups, self.faults = pipe, groups, faults
        self.n = pipe.n_chunks
        self.total = samples * self.n
        self.t = pipe.chunk_cycles().tolist()
        self.chunk_t = [s.chunk_cycles for s in pipe.stages]  # per chunk where they differ
        self.lat = [s.latency_cycles for s in pipe.stages]
        self.ins = pipe.inputs()
        self.outs = pipe.outputs()
        self.edges = pipe.edges
        self.chunk_bytes = [e.bytes_per_sample / self.n for e in pipe.edges]
        self.depth = depth
        self.avail = [0] * len(pipe.edges)  # contiguous chunks delivered
        self.occupied = [0] * len(pipe.edges)  # slots taken (producer start .. consumer finish)
        self.sent = [0.0] * len(pipe.edges)
        self.received = [0.0] * len(pipe.edges)
        S = len(pipe.stages)
        self.next_g = [0] * S
        self.busy = [False] * S
        self.started = [0.0] * S
        self.pieces: list[list[tuple[float, float, float]]] = [[] for _ in range(S)]
        self.sample_start = [math.nan] * samples
        self.sample_done = [math.nan] * samples
        self.sink = S - 1
        self.heap: list[tuple[float, int, int, int, int]] = []  # (time, seq, kind, a, b)
        self.seq = 0
        self.now = 0.0
        # processor sharing on shared links
        self.shared_flows = set(groups.flow_groups)
        self.group_lanes = [0] * len(groups.shared)  # active lanes per shared group
        self.speed = [1.0] * S
        self.remaining = [0.0] * S  # full-speed cycles left of the current transfer
        self.since = [0.0] * S
        self.version = [0] * S
        self.L = link_bytes_per_cycle
        self.trace: list[dict[str, Any]] = []
        self.trace_chunks = min(samples, TRACE_SAMPLES) * self.n

    # events: 0 finish(stage, version), 1 arrive(edge, g)
    def push(self, at: float, kind: int, a: int, b: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, kind, a, b))

    def run(self) -> None:
        for v in range(len(self.pipe.stages)):
            self.try_start(v)
        while self.heap:
            at, _, kind, a, b = heapq.heappop(self.heap)
            self.now = at
            if kind == 0:
                if b == self.version[a]:
                    self.finish(a)
            else:
                self.arrive(a, b)

    def try_start(self, v: int) -> None:
        g = self.next_g[v]
        if self.busy[v] or g >= self.total:
            return
        n = self.n
        for ei in self.ins[v]:
            need = (g // n + 1) * n if self.edges[ei].barrier else g + 1
            if self.avail[ei] < need:
                return
        for ei in self.outs[v]:
            if self.occupied[ei] >= self.depth[ei]:
                return
        for ei in self.outs[v]:
            self.occupied[ei] += 1
        self.busy[v] = True
        self.started[v] = self.now
        if v == 0 and g % n == 0:
            self.sample_start[g // n] = self.now
        t = self.chunk_t[v][g % n] if self.chunk_t[v] else self.t[v]
        if v in self.shared_flows:
            self.remaining[v] = t
            self.since[v] = self.now
            self.speed[v] = 0.0
            self.reshare(v, +1)
        else:
            self.version[v] += 1
            self.push(self.now + t, 0, v, self.version[v])

    def reshare(self, v: int, delta: int) -> None:
        """Transfer v starts (+1) or ends (-1) on its shared links: bring every affected transfer
        up to now at its old speed, then give each its new speed and finish time."""
        groups = self.groups
        affected = {v}
        for gi in groups.flow_groups[v]:
            for u, lanes in groups.shared[gi]:
                if u == v:
                    self.group_lanes[gi] += delta * lanes
                affected.add(u)
        for u in sorted(affected):
            if not self.busy[u] or (u == v and delta < 0):
                continue
            done = (self.now - self.since[u]) * self.speed[u]
            if self.speed[u] > 0 and self.now > self.since[u]:
                self.record(u, self.since[u], self.now, done)
            self.remaining[u] = max(0.0, self.remaining[u] - done)
            self.since[u] = self.now
            worst = max(self.group_lanes[gi] for gi in groups.flow_groups[u])
            self.speed[u] = 1.0 if self.faults.ignore_contention else 1.0 / max(1, worst)
            self.version[u] += 1
            self.push(self.now + self.remaining[u] / self.speed[u], 0, u, self.version[u])

    def record(self, v: int, t0: float, t1: float, work: float) -> None:
        """A piece of stage v's activity: busy from t0 to t1, `work` full-speed cycles done."""
        self.pieces[v].append((t0, t1, work))

    def finish(self, v: int) -> None:
        n, g = self.n, self.next_g[v]
        if v in self.shared_flows:
            self.record(v, self.since[v], self.now, (self.now - self.since[v]) * self.speed[v])
            self.busy[v] = False
            self.reshare(v, -1)
        else:
            self.record(v, self.started[v], self.now, self.t[v])
            self.busy[v] = False
        self.next_g[v] = g + 1
        if g < self.trace_chunks and len(self.trace) < MAX_TRACE_EVENTS:
            self.trace_event(v, g)
        if v == self.sink and g % n == n - 1:
            self.sample_done[g // n] = self.now
        drop = self.faults.drop_chunk
        for ei in self.outs[v]:
            self.sent[ei] += self.chunk_bytes[ei]
            if drop is not None and drop == (self.pipe.stages[v].name, g):
                continue  # the fault: lost in flight
            if self.lat[v]:
                self.push(self.now + self.lat[v], 1, ei, g)
            else:
                self.arrive(ei, g)
        for ei in self.ins[v]:
            e = self.edges[ei]
            if not e.barrier:
                self.occupied[ei] -= 1
            elif g % n == n - 1:
                self.occupied[ei] -= n
            else:
                continue
            self.try_start(e.src)
        self.try_start(v)

    def arrive(self, ei: int, g: int) -> None:
        self.received[ei] += self.chunk_bytes[ei]
        if g == self.avail[ei]:
            self.avail[ei] += 1
            self.try_start(self.edges[ei].dst)

    def trace_event(self, v: int, g: int) -> None:
        stage, us = self.pipe.stages[v], 1e6 / self.pipe.clock_hz
        self.trace.append(
            {
                "name": f"s{g // self.n} c{g % self.n}",
                "cat": stage.kind,
                "ph": "X",
                "ts": self.started[v] * us,
                "dur": (self.now - self.started[v]) * us,
                "pid": 2 if stage.kind == FLOW else 1,
                "tid": v,
            }
        )

    def stuck(self) -> str:
        """Why the run stopped before every sample finished: the first waiting stages."""
        n, why = self.n, []
        for v, s in enumerate(self.pipe.stages):
            g = self.next_g[v]
            if g >= self.total or self.busy[v]:
                continue
            for ei in self.ins[v]:
                need = (g // n + 1) * n if self.edges[ei].barrier else g + 1
                if self.avail[ei] < need:
                    why.append(
                        f"{s.name} waits for chunk {need - 1} on {self.pipe.edge_name(self.edges[ei])}"
                    )
                    break
            else:
                full = [ei for ei in self.outs[v] if self.occupied[ei] >= self.depth[ei]]
                if full:
                    why.append(
                        f"{s.name} waits for a slot on {self.pipe.edge_name(self.edges[full[0]])} "
                        f"(depth {self.depth[full[0]]})"
                    )
        return "; ".join(why[:4])


# --- checks ------------------------------------------------------------------------------------


def _cumulative(
    pieces: list[tuple[float, float, float]], bounds: np.ndarray, amount: int
) -> np.ndarray:
    """Per window: busy cycles (amount 0) or work done (amount 2) of a stage's pieces, which are
    disjoint and in time order; each piece's work is spread evenly over it."""
    if not pieces:
        return np.zeros(len(bounds) - 1)
    p = np.asarray(pieces)
    knots_t = p[:, :2].reshape(-1)
    step = p[:, 1] - p[:, 0] if amount == 0 else p[:, 2]
    cum = np.cumsum(step)
    knots_c = np.stack([cum - step, cum], axis=1).reshape(-1)
    return np.diff(np.interp(bounds, knots_t, knots_c))


def _windows(flags: np.ndarray) -> str:
    """'3-5, 9' for the windows where flags is set (at most 6 runs)."""
    idx = np.flatnonzero(flags)
    runs: list[list[int]] = []
    for i in idx.tolist():
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:6])
    return text + (", ..." if len(runs) > 6 else "")


_LinkSeries = tuple[tuple[int, int, str], int, tuple[str, ...], np.ndarray]
"""A link group's representative link, its number of links, its flows, its utilization."""


def _series(
    sim: _Sim, groups: _LinkGroups, bounds: np.ndarray
) -> tuple[list[np.ndarray], list[_LinkSeries]]:
    """Between consecutive `bounds`: each stage's busy fraction, and each link group's
    utilization (link, links in the group, flows, series)."""
    pipe, span = sim.pipe, np.diff(bounds)
    busy = [_cumulative(p, bounds, 0) / span for p in sim.pieces]
    lane_use = {}  # bytes per lane per window, as a fraction of one link direction
    for v, s in enumerate(pipe.stages):
        if s.kind == FLOW:
            per_cycle = s.bytes_per_sample / pipe.n_chunks / max(sim.t[v], 1e-12)
            lane_use[v] = _cumulative(sim.pieces[v], bounds, 2) * per_cycle / s.lanes / sim.L / span
    series: list[_LinkSeries] = [
        (link, count, (pipe.stages[v].name,), lane_use[v])
        for v, (link, count) in groups.own.items()
    ]
    for who, (link, count) in zip(groups.shared, groups.shared_links, strict=True):
        use = sum(lanes * lane_use[v] for v, lanes in who)
        series.append((link, count, tuple(pipe.stages[v].name for v, _ in who), use))
    return busy, series


def _check(
    sim: _Sim, groups: _LinkGroups, bounds: np.ndarray, demand: Mapping[str, float]
) -> list[_LinkSeries]:
    """Raise InvariantError for lost bytes, or for a kernel, memory port, host channel or link
    above 100% busy in a window; return the link groups' window series."""
    pipe, W = sim.pipe, bounds[1] - bounds[0]
    lost = [
        f"{pipe.edge_name(e)}: sent {sim.sent[i]:,.0f} B, received {sim.received[i]:,.0f} B"
        for i, e in enumerate(pipe.edges)
        if abs(sim.sent[i] - sim.received[i]) > EPS * max(1.0, sim.sent[i])
    ]
    if lost:
        raise InvariantError("bytes not conserved: " + "; ".join(lost[:4]))
    busy, series = _series(sim, groups, bounds)
    problems = []
    for v, s in enumerate(pipe.stages):
        over = busy[v] > 1 + EPS
        what = {KERNEL: "kernel", FLOW: "flow", "host": "host channel"}[s.kind]
        if over.any():
            problems.append(
                f"{what} {s.name!r} is {busy[v].max():.0%} busy in windows {_windows(over)}"
            )
        port = busy[v] * demand.get(s.name, 0.0)
        if (port > 1 + EPS).any():
            problems.append(
                f"memory ports of kernel {s.name!r} are {port.max():.0%} busy in windows "
                f"{_windows(port > 1 + EPS)}"
            )
    for link, count, flows, use in series:
        over = use > 1 + EPS
        if over.any():
            more = f" and {count - 1} more links with the same users" if count > 1 else ""
            problems.append(
                f"link ({link[0]}, {link[1]}, {link[2]}){more} carrying {', '.join(flows)} is "
                f"{use.max():.0%} busy in windows {_windows(over)}"
            )
    if problems:
        raise InvariantError(
            f"{len(problems)} resources above 100% (windows of {W:,.0f} cycles): "
            + "; ".join(problems[:4])
        )
    return series


def simulate_l1(
    program: Program,
    batch: int = 1,
    *,
    samples: int = 4,
    buffer_chunks: int = 2,
    skew_buffers: bool = True,
    skew_room: Mapping[str, int] | None = None,
    host_io: bool = True,
    window_cycles: float | None = None,
    faults: Faults | None = None,
) -> EventResult:
    """Simulate `samples` samples (module doc); compare with L0 at the same chunking.

    `skew_room`: kernel name -> bytes per PE its skew buffers may take; buffers that would not
    fit are cut to what does (`fit_skew`), and `EventResult.skew_buffers` says which (`chunks`
    below `wanted`). None: as deep as the phases ask.

    Precision and chunking are the program's; `window_cycles` to 4 chunk periods of the slowest stage.
    Raises InvariantError (a resource above 100% in a window, or bytes lost) and SimulationError
    (the run stopped before every sample finished: names the waiting stages).
    """
    if samples < 2:
        raise ValueError(f"samples must be >= 2 (a steady state needs two), got {samples}")
    if buffer_chunks < 1:
        raise ValueError(f"buffer_chunks must be >= 1, got {buffer_chunks}")
    t0 = time.perf_counter()
    faults = faults or Faults()
    pipe = build_pipeline(program, host_io=host_io)
    target = program.target
    l0 = l0_result(pipe, target, batch)
    depth, wanted = buffer_depths(pipe, buffer_chunks, skew_buffers)
    skew = wanted if skew_room is None else fit_skew(program, pipe, wanted, skew_room)
    depth = [d - w + s for d, w, s in zip(depth, wanted, skew, strict=True)]
    groups = _link_groups(pipe, target.fabric.program_width)
    sim = _Sim(pipe, groups, depth, samples, faults, target.link_bytes_per_cycle)
    sim.run()
    period = pipe.chunk_cycles().max()
    W = window_cycles or 4 * max(period, 1.0)
    span = max(sim.now, 1.0)
    bounds = np.arange(math.ceil(span / W) + 1) * W
    demand = {k.name: k.memory_cycles / max(k.cycles_per_sample, 1) for k in pipe.kernels}
    peak_use = _check(sim, groups, bounds, demand)
    if any(math.isnan(d) for d in sim.sample_done):
        raise SimulationError(
            f"deadlock at cycle {sim.now:,.0f}: "
            f"{sum(not math.isnan(d) for d in sim.sample_done)} of {samples} samples done; "
            + sim.stuck()
        )
    done, start = sim.sample_done, sim.sample_start
    k = (samples - 1) // 2
    period = (done[-1] - done[k]) / (samples - 1 - k)  # cycles per sample in the steady state
    samples_per_s = pipe.clock_hz / period
    # busy per sample over the steady period: every stage handles each sample once
    whole, scale = np.array([0.0, span]), span / (samples * period)
    steady_busy, steady_use = _series(sim, groups, whole)
    latency = done[0] - start[0]
    links = sorted(
        (
            LinkUse(link, count, flows, float(use.max(initial=0.0)), float(mean[0] * scale))
            for (link, count, flows, use), (*_, mean) in zip(peak_use, steady_use, strict=True)
        ),
        key=lambda u: (-u.peak, u.flows),
    )
    return EventResult(
        graph=pipe.graph,
        target=pipe.target,
        precision=pipe.precision,
        samples=samples,
        chunk_tokens=pipe.chunk_tokens,
        n_chunks=pipe.n_chunks,
        buffer_chunks=buffer_chunks,
        clock_hz=pipe.clock_hz,
        cycles=sim.now,
        window_cycles=W,
        windows=len(bounds) - 1,
        samples_per_s=samples_per_s,
        tokens_per_s=samples_per_s * pipe.tokens_per_sample,
        latency_cycles=latency,
        latency_s=latency / pipe.clock_hz,
        mean_latency_s=float(np.mean(np.subtract(done, start))) / pipe.clock_hz,
        stage_busy={
            s.name: float(b[0] * scale) for s, b in zip(pipe.stages, steady_busy, strict=True)
        },
        links=tuple(links),
        skew_buffers=tuple(
            _skew_buffer(program, pipe, e, c, w)
            for e, c, w in zip(pipe.edges, skew, wanted, strict=True)
            if w > 0
        ),
        l0=l0,
        throughput_rel_diff=samples_per_s / l0.samples_per_s - 1,
        latency_rel_diff=latency / l0.latency_cycles - 1,
        seconds=time.perf_counter() - t0,
        trace=tuple(_trace_metadata(pipe) + sim.trace),
    )


def systems_trace(
    traces: Sequence[Sequence[dict[str, Any]]], starts_s: Sequence[float]
) -> tuple[dict[str, Any], ...]:
    """One Chrome trace of a pipeline over several systems: system i's L1 trace (`traces[i]`,
    processes 1 kernels and 2 links) becomes processes 2i + 1 and 2i + 2, named "system i:
    kernels" and "system i: links", its events shifted to `starts_s[i]`, when the first sample
    reaches system i (the systems before it and the crossings between)."""
    out: list[dict[str, Any]] = []
    for i, (trace, start) in enumerate(zip(traces, starts_s, strict=True)):
        for e in trace:
            e = {**e, "pid": 2 * i + e["pid"]}
            if e["ph"] == "M" and e["name"] == "process_name":
                e["args"] = {"name": f"system {i}: {e['args']['name']}"}
            elif "ts" in e:
                e["ts"] = e["ts"] + start * 1e6
            out.append(e)
    return tuple(out)


def _trace_metadata(pipe: Pipeline) -> list[dict[str, Any]]:
    meta: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "kernels"}},
        {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "links"}},
    ]
    for v, s in enumerate(pipe.stages):
        meta.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": 2 if s.kind == FLOW else 1,
                "tid": v,
                "args": {"name": s.name},
            }
        )
        meta.append(
            {
                "name": "thread_sort_index",
                "ph": "M",
                "pid": 2 if s.kind == FLOW else 1,
                "tid": v,
                "args": {"sort_index": v},
            }
        )
    return meta


__all__ = [
    "systems_trace",
    "HOST_IN",
    "HOST_OUT",
    "EventResult",
    "Faults",
    "InvariantError",
    "LinkUse",
    "SkewBuffer",
    "buffer_depths",
    "simulate_l1",
]
