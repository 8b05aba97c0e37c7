"""One performance-result interface for every mode, and the verdict every check gives.

A simulated compile holds one `Performance` whatever its mode (`wsecc.core.stages.Simulated`):

- `InferPerformance`: L0 (and L1) of a layer-pipelined program, its k copies on the wafer;
- `TrainPerformance`: a training step's cost (`wsecc.modes.train`);
- `GeneratePerformance`: prefill and decode figures (`wsecc.modes.generate`).

Each writes the report's `performance` object (docs/report-schema.md: `samples_per_s`,
`tokens_per_s`, `latency_s`, `utilization`, `bottleneck` and the mode's own keys) and the line
the progress display shows; the report, the summary, the viewer's limits and a sweep's row read
them through this interface, never by mode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from wsecc.core.layers import find_layers
from wsecc.core.partition import resident_bytes
from wsecc.kernels import KernelGraph, KernelKind

if TYPE_CHECKING:
    from wsecc.core.stages import Placed
    from wsecc.modes.generate import GenerationPerf
    from wsecc.modes.train import TrainResult
    from wsecc.sim.events import EventResult
    from wsecc.sim.perf import PerfResult


class Performance(Protocol):
    """What a simulated compile achieves, in its mode's terms."""

    def to_json(self) -> dict[str, Any]:
        """The report's `performance` object."""
        ...

    def summary(self) -> str:
        """One line for the progress display."""
        ...

    def figures(self, title: str) -> dict[str, Callable[[Path], None]]:
        """The mode's own figures for the output folder: file name -> a function drawing it."""
        ...

    def systems_json(self) -> list[dict[str, Any]]:
        """The report's top-level `systems`: a row per system the program spans (empty when
        the mode's systems are not a split of the program: training's are data parallel)."""
        ...


class Check(Protocol):
    """A verdict against onnxruntime: numerics, gradients or a generation."""

    @property
    def passed(self) -> bool: ...

    def to_json(self) -> dict[str, Any]: ...

    def summary(self) -> str: ...


@dataclass(frozen=True)
class SystemRow:
    """One system of a program (`wsecc.core.partition`): its layers (first and last, "L" numbers),
    kernels and PEs, the bytes it keeps resident, its fullest PE, its time (a decode step's, or
    a sample's latency through it) and that time's share of the systems' sum, the system whose
    placement it uses, the bytes per sample crossing into it from earlier systems, and the
    shards of split mixture-of-experts blocks it holds (their kernels' names, "L3.moe.e0-63":
    `wsecc.passes.split_moe`)."""

    system: int
    first_layer: int
    last_layer: int
    kernels: int
    pes: int
    resident_bytes: int
    sram_max_bytes_per_pe: int
    seconds: float
    share: float
    placed_as: int
    crossing_in_bytes: float
    expert_shards: tuple[str, ...] = ()  # the moe shards it holds (`wsecc.core.experts`)

    def to_json(self) -> dict[str, Any]:
        shards = {"expert_shards": list(self.expert_shards)} if self.expert_shards else {}
        return shards | {
            "system": self.system, "layers": self.last_layer - self.first_layer + 1,
            "first_layer": self.first_layer, "last_layer": self.last_layer,
            "kernels": self.kernels, "pes": self.pes, "resident_bytes": self.resident_bytes,
            "sram_max_bytes_per_pe": self.sram_max_bytes_per_pe, "seconds": self.seconds,
            "time_share": self.share, "placed_as": self.placed_as,
            "crossing_in_bytes": self.crossing_in_bytes,
        }  # fmt: skip


def system_rows(placed: Placed, seconds: Sequence[float]) -> tuple[SystemRow, ...]:
    """A row per system of a program split over systems (`placed.sized.systems`), system i
    taking `seconds[i]`."""
    sized = placed.sized.systems
    assert sized is not None
    systems, precision = placed.systems, placed.job.options.precision
    total = sum(seconds) or 1.0
    rows = []
    for part, t in zip(sized.partition.parts, seconds, strict=True):
        program = systems.programs[part.index]
        crossing = sum(c.bytes_per_sample for c in systems.crossings if c.dst_system == part.index)
        rows.append(
            SystemRow(
                part.index,
                part.first,
                part.last,
                len(part.graph.kernels),
                sum(r.h * r.w for r in program.placement.rects.values()),
                sum(resident_bytes(part.graph, precision)),
                program.sizing.max_sram_per_pe,
                t,
                t / total,
                systems.placed(part.index),
                crossing,
                expert_shards(part.graph),
            )  # fmt: skip
        )
    return tuple(rows)


def expert_shards(kg: KernelGraph) -> tuple[str, ...]:
    """The moe kernels of `kg` that hold part of a block's experts (a router over more experts
    than the kernel holds: `wsecc.passes.split_moe`), by name."""
    return tuple(
        k.name for k in kg.kernels
        if k.kind == KernelKind.MOE and k.params["R"] != k.params["E"]
    )  # fmt: skip


def one_system(placed: Placed, seconds: Sequence[float]) -> tuple[SystemRow, ...]:
    """The one row of a program on one system (every layer, no crossings), taking
    `seconds[0]`."""
    program = placed.program
    layers = find_layers([k.kind for k in program.kg.kernels])
    row = SystemRow(
        0, 0, max(0, len(layers) - 1) if layers is not None else 0, len(program.kg.kernels),
        sum(r.h * r.w for r in program.placement.rects.values()),
        sum(resident_bytes(program.kg, program.precision)), program.sizing.max_sram_per_pe,
        seconds[0], 1.0, 0, 0.0, expert_shards(program.kg),
    )  # fmt: skip
    return (row,)


@dataclass(frozen=True)
class InferPerformance:
    """L1's figures when L1 ran, L0's otherwise: the throughput and utilization of every copy
    together (`copies`); latency, the bottleneck and the on-wafer figures are one copy's."""

    perf: PerfResult
    events: EventResult | None
    copies: int = 1
    systems: tuple[SystemRow, ...] = ()

    def systems_json(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.systems]

    def to_json(self) -> dict[str, Any]:
        l0, k = self.perf, self.copies
        rep: dict[str, Any] = {
            "model": "l0",
            "systems": 1,
            "samples_per_s": k * l0.samples_per_s,
            "tokens_per_s": k * l0.tokens_per_s,
            "latency_s": l0.latency_s,
            "batch_latency_s": l0.batch_latency_s,
            "utilization": k * l0.utilization,
            "utilization_of_pes_used": l0.utilization_used,
            "bottleneck": l0.bottleneck,
            "bottleneck_kind": l0.bottleneck_kind,
            "on_wafer_bottleneck": l0.wafer_bottleneck,
            "on_wafer_bottleneck_kind": l0.wafer_bottleneck_kind,
            "on_wafer_samples_per_s": l0.wafer_samples_per_s,
            "stage_cycles": l0.stage_cycles,
        }
        ev = self.events
        if ev is not None:
            scale = ev.samples_per_s / l0.samples_per_s if l0.samples_per_s else 0.0
            rep |= {
                "model": "l1",
                "samples_per_s": k * ev.samples_per_s,
                "tokens_per_s": k * ev.tokens_per_s,
                "latency_s": ev.latency_s,
                "mean_latency_s": ev.mean_latency_s,
                "utilization": min(1.0, k * l0.utilization * scale),
                "l0": {"samples_per_s": k * l0.samples_per_s, "latency_s": l0.latency_s},
                "l1_vs_l0": {
                    "throughput_rel_diff": ev.throughput_rel_diff,
                    "latency_rel_diff": ev.latency_rel_diff,
                },
                "l1_samples": ev.samples,
                "l1_seconds": ev.seconds,
                "skew_buffers": {
                    "edges": len(ev.skew_buffers),
                    "bytes": sum(b.bytes for b in ev.skew_buffers),
                    "cut_by_sram": sorted(b.edge for b in ev.skew_buffers if b.chunks < b.wanted),
                },
            }
        return rep

    def summary(self) -> str:
        perf, ev = self.to_json(), self.events
        level = "l1" if ev is not None else "l0"
        return (
            f"{level}: {perf['samples_per_s']:,.1f} samples/s, latency {perf['latency_s'] * 1e6:,.1f} us, "
            f"utilization {100 * perf['utilization']:.1f}%, bottleneck {perf['bottleneck']}"
            + (
                f" (L1 vs L0: throughput {100 * ev.throughput_rel_diff:+.1f}%, "
                f"latency {100 * ev.latency_rel_diff:+.1f}%)"
                if ev
                else ""
            )
        )

    def figures(self, title: str) -> dict[str, Callable[[Path], None]]:
        return {}


@dataclass(frozen=True)
class SystemsInferPerformance:
    """Infer mode over several systems (`wsecc.core.partition`): a pipeline of the systems' own
    pipelines (`perfs[i]` system i's L0, `events[i]` its L1 when L1 ran), so the throughput is
    the slowest system's (each one's simulation already charges the bytes crossing in and out
    to its system I/O), and a sample's latency is every system's plus `crossing_s` per
    crossing. Utilization is of every system's PEs together. With L1, the figures are L1's and
    L0's pipeline of the same systems stands beside them (`l0`, `l1_vs_l0`)."""

    perfs: tuple[PerfResult, ...]
    crossing_s: float
    systems: tuple[SystemRow, ...]
    events: tuple[EventResult, ...] | None = None

    def systems_json(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.systems]

    def _pipeline(self, rates: list[float], latencies: list[float]) -> tuple[int, float, float]:
        """The slowest system, the pipeline's rate and a sample's latency through it."""
        i = min(range(len(rates)), key=rates.__getitem__)
        return i, rates[i], sum(latencies) + (len(rates) - 1) * self.crossing_s

    def to_json(self) -> dict[str, Any]:
        n, perfs = len(self.perfs), self.perfs
        crossings = (n - 1) * self.crossing_s
        i, rate, latency = self._pipeline(
            [p.samples_per_s for p in perfs], [p.latency_s for p in perfs]
        )
        slow = perfs[i]
        rep: dict[str, Any] = {
            "model": "l0",
            "systems": n,
            "samples_per_s": rate,
            "tokens_per_s": slow.tokens_per_s,
            "latency_s": latency,
            "batch_latency_s": sum(p.batch_latency_s for p in perfs) + crossings,
            "crossing_latency_s": self.crossing_s,
            "utilization": sum(p.utilization * rate / p.samples_per_s for p in perfs) / n,
            "bottleneck": f"s{i}/{slow.bottleneck}",
            "bottleneck_kind": slow.bottleneck_kind,
            "on_wafer_bottleneck": f"s{i}/{slow.wafer_bottleneck}",
            "on_wafer_bottleneck_kind": slow.wafer_bottleneck_kind,
            "on_wafer_samples_per_s": min(p.wafer_samples_per_s for p in perfs),
            "stage_cycles": slow.stage_cycles,
        }
        evs = self.events
        if evs is None:
            return rep
        j, ev_rate, ev_latency = self._pipeline(
            [e.samples_per_s for e in evs], [e.latency_s for e in evs]
        )
        slow_ev = evs[j]
        return rep | {
            "model": "l1",
            "samples_per_s": ev_rate,
            "tokens_per_s": slow_ev.tokens_per_s,
            "latency_s": ev_latency,
            "mean_latency_s": sum(e.mean_latency_s for e in evs) + crossings,
            "utilization": min(
                1.0, sum(p.utilization * ev_rate / p.samples_per_s for p in perfs) / n
            ),
            "bottleneck": f"s{j}/{perfs[j].bottleneck}",
            "bottleneck_kind": perfs[j].bottleneck_kind,
            "l0": {"samples_per_s": rate, "latency_s": latency},
            "l1_vs_l0": {
                "throughput_rel_diff": ev_rate / rate - 1,
                "latency_rel_diff": ev_latency / latency - 1,
            },
            "l1_samples": min(e.samples for e in evs),
            "l1_seconds": sum(e.seconds for e in evs),
            "skew_buffers": {
                "edges": sum(len(e.skew_buffers) for e in evs),
                "bytes": sum(b.bytes for e in evs for b in e.skew_buffers),
                "cut_by_sram": sorted(
                    f"s{k}/{b.edge}"
                    for k, e in enumerate(evs)
                    for b in e.skew_buffers
                    if b.chunks < b.wanted
                ),
            },
        }

    def summary(self) -> str:
        perf = self.to_json()
        return (
            f"{perf['model']} over {len(self.perfs)} systems: {perf['samples_per_s']:,.1f} "
            f"samples/s, latency {perf['latency_s'] * 1e6:,.1f} us ({len(self.perfs) - 1} "
            f"crossings of {self.crossing_s * 1e6:,.0f} us), bottleneck {perf['bottleneck']}"
            + (
                f" (L1 vs L0: throughput {100 * perf['l1_vs_l0']['throughput_rel_diff']:+.1f}%, "
                f"latency {100 * perf['l1_vs_l0']['latency_rel_diff']:+.1f}%)"
                if self.events is not None
                else ""
            )
        )

    def figures(self, title: str) -> dict[str, Callable[[Path], None]]:
        return {}


@dataclass(frozen=True)
class TrainPerformance:
    """A training step's figures (`wsecc.modes.train`); `latency_s` is one optimizer step."""

    training: TrainResult

    def to_json(self) -> dict[str, Any]:
        t = self.training
        return {
            "model": "train",
            "samples_per_s": t.samples_per_s,
            "tokens_per_s": t.tokens_per_s,
            "latency_s": t.step_s,
            "utilization": t.utilization,
            "bottleneck": t.bound,
            "bottleneck_kind": "step",
            **t.to_json(),
        }

    def summary(self) -> str:
        t = self.training
        return (
            f"{t.execution.value} ({t.why}): batch {t.batch} = {t.systems} system(s) x "
            f"{t.grad_accum} x {t.micro_batch}; {t.samples_per_s:,.1f} samples/s, "
            f"{t.tokens_per_s:,.0f} tokens/s, step {t.step_s * 1e3:,.1f} ms, bound {t.bound}"
        )

    def figures(self, title: str) -> dict[str, Callable[[Path], None]]:
        return {}

    def systems_json(self) -> list[dict[str, Any]]:
        return []  # data parallel: every system runs the whole program


@dataclass(frozen=True)
class GeneratePerformance:
    """Generate mode's figures (`wsecc.modes.generate`): `tokens_per_s` is the aggregate decode rate,
    `latency_s` one token's decode step, `samples_per_s` sequences completed per second when
    each fills the context after its prompt (B / (time to first token + (C - P) token
    latencies)), `utilization` the decode step's work over the program rectangle's peak
    (`peak_flops_per_s`, the target's in the compile's precision)."""

    generation: GenerationPerf
    peak_flops_per_s: float  # every system's together
    systems: tuple[SystemRow, ...] = ()

    def systems_json(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.systems]

    def to_json(self) -> dict[str, Any]:
        g = self.generation
        new = g.context - g.prompt
        flops = sum(s.flops for s in g.stages)
        return {
            "model": "generate",
            "systems": max(1, len(self.systems)),
            "samples_per_s": g.batch / (g.ttft_s + new * g.decode_latency_s),
            "tokens_per_s": g.tokens_per_s,
            "latency_s": g.decode_latency_s,
            "utilization": min(1.0, flops / g.decode_latency_s / self.peak_flops_per_s),
            "bottleneck": g.decode_bound,
            "bottleneck_kind": "decode",
            "on_wafer_bottleneck": g.slowest_kernel,
            "on_wafer_bottleneck_kind": "kernel",
            **g.to_json(),
        }

    def summary(self) -> str:
        g = self.generation
        over = f" over {len(self.systems)} systems" if len(self.systems) > 1 else ""
        return (
            f"time to first token {g.ttft_s * 1e3:,.3f} ms; decode {g.tokens_per_s_per_sequence:,.0f} "
            f"tokens/s per sequence, {g.tokens_per_s:,.0f} aggregate{over}; bound {g.decode_bound}"
        )

    def figures(self, title: str) -> dict[str, Callable[[Path], None]]:
        from wsecc.view.png import write_decode_roofline_png

        g = self.generation
        caption = (
            f"{title}: decode {g.tokens_per_s_per_sequence:,.0f} tokens/s per sequence, "
            f"bound {g.decode_bound}"
        )
        return {
            "decode_roofline.png": lambda path: write_decode_roofline_png(
                path, g.roofline(), caption
            )
        }
