"""One performance-result interface for every mode, and the verdict every check gives.

A simulated compile holds one `Performance` whatever its mode (`wsecc.stages.Simulated`):

- `InferPerformance`: L0 (and L1) of a layer-pipelined program, its k copies on the wafer;
- `TrainPerformance`: a training step's cost (`wsecc.train`);
- `GeneratePerformance`: prefill and decode figures (`wsecc.generate`).

Each writes the report's `performance` object (docs/report-schema.md: `samples_per_s`,
`tokens_per_s`, `latency_s`, `utilization`, `bottleneck` and the mode's own keys) and the line
the progress display shows; the report, the summary, the viewer's limits and a sweep's row read
them through this interface, never by mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from wsecc.generate import GenerationPerf
    from wsecc.sim.events import EventResult
    from wsecc.sim.perf import PerfResult
    from wsecc.train import TrainResult


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


class Check(Protocol):
    """A verdict against onnxruntime: numerics, gradients or a generation."""

    @property
    def passed(self) -> bool: ...

    def to_json(self) -> dict[str, Any]: ...

    def summary(self) -> str: ...


@dataclass(frozen=True)
class InferPerformance:
    """L1's figures when L1 ran, L0's otherwise: the throughput and utilization of every copy
    together (`copies`); latency, the bottleneck and the on-wafer figures are one copy's."""

    perf: PerfResult
    events: EventResult | None
    copies: int = 1

    def to_json(self) -> dict[str, Any]:
        l0, k = self.perf, self.copies
        rep: dict[str, Any] = {
            "model": "l0",
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
class TrainPerformance:
    """A training step's figures (`wsecc.train`); `latency_s` is one optimizer step."""

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


@dataclass(frozen=True)
class GeneratePerformance:
    """Generate mode's figures (`wsecc.generate`): `tokens_per_s` is the aggregate decode rate,
    `latency_s` one token's decode step, `samples_per_s` sequences completed per second when
    each fills the context after its prompt (B / (time to first token + (C - P) token
    latencies)), `utilization` the decode step's work over the program rectangle's peak
    (`peak_flops_per_s`, the target's in the compile's precision)."""

    generation: GenerationPerf
    peak_flops_per_s: float

    def to_json(self) -> dict[str, Any]:
        g = self.generation
        new = g.context - g.prompt
        flops = sum(s.flops for s in g.stages)
        return {
            "model": "generate",
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
        return (
            f"time to first token {g.ttft_s * 1e3:,.3f} ms; decode {g.tokens_per_s_per_sequence:,.0f} "
            f"tokens/s per sequence, {g.tokens_per_s:,.0f} aggregate; bound {g.decode_bound}"
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
