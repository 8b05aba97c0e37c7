"""The `wsecc.report/1` dictionary (docs/report-schema.md), a function of a stage value.

`report(stage)` reads the chain that led to `stage` (`wsecc.core.stages`): the model and its
bindings from the frontend (or, for a compile reloaded from its folder, from the saved
report), the passes, the kernels and sizing, the placement and routing, and the performance
result and check of the mode (`wsecc.report.results`: one interface for every mode).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wsecc.analysis import fused_ops
from wsecc.check.checks import numerics_skipped
from wsecc.core.partition import crossing_latency_s
from wsecc.core.replicas import host_samples_per_s
from wsecc.core.stages import Fused, Job, Loaded, Placed, Simulated, Sized, Stage
from wsecc.limits import Limits
from wsecc.report.results import InferPerformance, Performance, TrainPerformance
from wsecc.version import __version__

REPORT_SCHEMA = "wsecc.report/1"
UNREPORTED_OPTIONS = (
    "print_after_all", "dump_dir", "check_each_pass", "explain", "inject_fault", "png",
)  # fmt: skip
"""Options that change what is printed or checked, not what is compiled."""
TIMING_KEYS = frozenset({"seconds", "stage_seconds", "l1_seconds", "wall_seconds"})


@dataclasses.dataclass(frozen=True)
class Trail:
    """The stage values that led to a stage (None where the chain has not reached, or a reloaded
    compile does not have, that stage)."""

    job: Job
    loaded: Loaded | None = None
    fused: Fused | None = None
    sized: Sized | None = None
    placed: Placed | None = None
    simulated: Simulated | None = None

    @classmethod
    def of(cls, stage: Stage) -> Trail:
        if isinstance(stage, Job):
            return cls(stage)
        if isinstance(stage, Loaded):
            return cls(stage.job, stage)
        if isinstance(stage, Fused):
            return cls(stage.job, stage.loaded, stage)
        simulated = stage if isinstance(stage, Simulated) else None
        at = stage.placed if isinstance(stage, Simulated) else stage
        placed = at if isinstance(at, Placed) else None
        sized = at.sized if isinstance(at, Placed) else at
        fused = sized.fused
        loaded = fused.loaded if fused is not None else None
        return cls(sized.job, loaded, fused, sized, placed, simulated)

    @property
    def copies(self) -> int:
        """Copies of the program on the wafer (`wsecc.core.replicas`); 1 before placement."""
        return self.placed.program.replicas.k if self.placed is not None else 1

    @property
    def sizing(self) -> Any:
        """Sizing's regions; after placement, the program's (costed at the placed shapes)."""
        if self.placed is not None:
            return self.placed.program.sizing
        return self.sized.sizing if self.sized is not None else None

    @property
    def performance(self) -> Performance | None:
        """The mode's performance result: the simulation's, or a training step's cost from its
        sizing on (it is known before placement)."""
        if self.simulated is not None:
            return self.simulated.performance
        if self.sized is not None and self.sized.training is not None:
            return TrainPerformance(self.sized.training)
        return None

    @property
    def check(self) -> Any:
        if self.simulated is not None:
            return self.simulated.check
        return self.sized.check if self.sized is not None else None

    @property
    def title(self) -> str:
        """ "MODEL on TARGET", and how a training step runs."""
        title = f"{self.job.model_path.name} on {self.job.target.name}"
        t = self.sized.training if self.sized is not None else None
        if t is None:
            return title
        if t.execution.value == "pipelined":
            return f"{title}: training, pipelined"
        return f"{title}: training, weight streaming ({t.layout.name.split(':')[-1]} on the wafer)"


def model_facts(trail: Trail) -> dict[str, Any]:
    """The report's `model` object: the file, its hash, parameters and FLOPs per sample (known
    once the passes have fused the graph)."""
    if trail.fused is not None:
        loaded, params = trail.fused.loaded, trail.fused.params
        flops: int | None = trail.fused.flops_per_sample
    elif trail.loaded is not None:
        loaded, params, flops = trail.loaded, trail.loaded.params, None
    else:
        return dict((trail.job.saved or {})["model"])
    facts = {
        "path": str(trail.job.model_path),
        "sha256": loaded.sha256.result(),
        "params": params,
        "flops_per_sample": flops,
    }
    if loaded.info.widened:
        facts["widened"] = list(loaded.info.widened)
    return facts


def report(stage: Stage, *, timings: bool = True) -> dict[str, Any]:
    """The `wsecc.report/1` dictionary of `stage` (docs/report-schema.md).

    With `timings=False` every wall-clock field is left out, so two compiles of the same
    inputs and options (deterministic placement) give equal reports.
    """
    t = Trail.of(stage)
    o, saved = t.job.options, t.job.saved or {}
    rep: dict[str, Any] = {"schema": REPORT_SCHEMA, "wsecc": __version__}
    rep["mode"] = o.mode.value
    rep["model"] = model_facts(t)
    target = t.job.target
    rep["target"] = {
        "name": target.name,
        "fabric": {"width": target.fabric.program_width, "height": target.fabric.program_height},
    }
    rep["options"] = {k: v for k, v in dataclasses.asdict(o).items() if k not in UNREPORTED_OPTIONS}
    if t.loaded is not None:
        info = t.loaded.info
        rep["bindings"] = dict(info.bindings)
        records = t.fused.records if t.fused is not None else ()
        rep["passes"] = [{"name": r.name, "seconds": r.seconds} for r in records]
        if info.generation is not None:
            rep["generation"] = dataclasses.asdict(info.generation)
    else:
        rep["bindings"], rep["passes"] = saved.get("bindings", {}), saved.get("passes", [])
        if "generation" in saved:
            rep["generation"] = saved["generation"]
    if t.fused is not None:
        rep["ops_after"] = t.fused.graph.op_histogram()
        rep["fused"] = fused_ops(t.fused.graph)
    elif saved:
        rep["ops_after"], rep["fused"] = saved.get("ops_after", {}), saved.get("fused", [])
    rep["precision"] = o.precision
    if t.sizing is not None:
        rep["kernels"] = kernel_rows(t)
        rep["sizing"] = sizing_json(t)
    if t.placed is not None:
        placed = t.placed
        p, r = placed.program.placement, placed.program.routing
        rep["placement"] = {
            "placer": o.placer, "objective": p.objective, "bound": p.bound,
            "bound_kind": p.bound_kind, "gap": p.gap, "status": p.status, "seconds": p.seconds,
            "pool_shapes": placed.pool_shapes,
        }  # fmt: skip
        if p.search is not None:  # what CP-SAT's search added to its start, why it stopped
            rep["placement"]["search"] = {**dataclasses.asdict(p.search), "gain": p.search.gain}
        rep["routing"] = {
            "flows": len(placed.problem.flows), "lanes": len(r.lanes),
            "colors_max": r.colors_used_max, "color_budget": r.color_budget,
            "color_lower_bound": r.color_lower_bound, "link_load_max": r.link_load_max,
            "total_length": r.total_length,
        }  # fmt: skip
        rep["replicas"] = replicas_json(t)
    sim = t.simulated
    if sim is not None and sim.perf is not None and sim.sram is not None:
        rep["routing"]["link_util_max"] = link_util_max(sim)
        sm = sim.sram
        counts, edges = sm.histogram()
        rep["sram"] = {
            "budget_bytes": sm.sram_bytes_per_pe,
            "max_bytes": sm.max_bytes,
            "mean_bytes": sm.mean_used_bytes,
            "mean_fabric_bytes": sm.mean_fabric_bytes,
            "pes_used": sm.pes_used,
            "histogram": {"bin_bytes": int(edges[1] - edges[0]), "counts": counts.tolist()},
        }
    performance = t.performance
    if performance is not None:
        rep["performance"] = performance.to_json()
        if rows := performance.systems_json():
            rep["systems"] = rows
            if t.placed is not None and t.placed.sized.systems is not None:
                sized = t.placed.sized.systems
                rep["partition"] = {
                    "split": sized.partition.split,
                    "why": sized.partition.why,
                    "count_why": sized.why,
                    "crossings": [dataclasses.asdict(c) for c in t.placed.systems.crossings],
                    "crossing_latency_s": _crossing_latency(t),
                }
        check = t.check
        rep["numerics"] = check.to_json() if check is not None else None
        if rep["numerics"] is None:
            graph = t.loaded.graph if t.loaded is not None else None
            why = numerics_skipped(t.job, graph)
            if why is not None:
                rep["numerics_skipped"] = why
    rep["stage_seconds"] = dict(_seconds(stage))
    if not timings:
        drop_timings(rep)
    return rep


def _crossing_latency(t: Trail) -> float:
    return crossing_latency_s(t.job.target)


def _seconds(stage: Stage) -> Any:
    return {} if isinstance(stage, Job) else stage.seconds


def kernel_rows(t: Trail) -> list[dict[str, Any]]:
    """The report's `kernels`: each kernel's region, SRAM and cycles (the simulation's once
    it ran), and the ONNX nodes it came from."""
    assert t.sized is not None
    kg, sizing = t.sized.kernel_graph, t.sizing
    sim = t.simulated
    rows = []
    for ks in sizing.kernels:  # weight streaming: the unit on the wafer
        k = kg.kernel(ks.name)
        row: dict[str, Any] = {"name": k.name, "kind": k.kind.value}
        w, h = ks.w, ks.h
        if t.placed is not None:  # the placer may pick one of sizing's alternatives
            rect = t.placed.program.placement.rects[k.name]
            w, h = rect.w, rect.h
            row["region"] = {"x": rect.x, "y": rect.y, "w": w, "h": h}
        else:
            row["region"] = {"w": w, "h": h}
        row |= {
            "pes": w * h,
            "sram_bytes_per_pe_max": ks.sram.total,
            "sram": ks.sram.as_dict(),
            "cycles_per_sample": ks.cycles_per_sample,
        }
        if sim is not None and sim.perf is not None and sim.sram is not None:
            kp = sim.perf.kernel(k.name)
            row["sram_bytes_per_pe_max"] = sim.sram.kernel_max[k.name]
            row["cycles_per_sample"] = kp.cycles_per_sample
            row["bound"] = kp.bound
        row["onnx_nodes"] = list(k.provenance)
        rows.append(row)
    return rows


def sizing_json(t: Trail) -> dict[str, Any]:
    """The report's `sizing` object: the PEs of every copy, the rest one copy's."""
    s, k = t.sizing, t.copies
    return {
        "bottleneck": s.bottleneck,
        "balance": s.balance,
        "pes_used": k * s.pes_used,
        "fabric_fraction": k * s.fabric_fraction,
        "max_sram_bytes_per_pe": s.max_sram_per_pe,
        "samples_per_s": s.samples_per_s,
        "tokens_per_s": s.tokens_per_s,
        "ceiling_samples_per_s": s.ceiling_samples_per_s,
        "chunk_tokens": s.chunk_tokens,
    }


def replicas_json(t: Trail) -> dict[str, Any]:
    """The report's `replicas` object: how many copies, why no more (`wsecc.core.replicas`), their
    tiles, and (once the fabric is simulated) a copy's throughput, the total and the host I/O
    bound the copies share."""
    assert t.placed is not None
    reps = t.placed.program.replicas
    rep = reps.to_json()
    sim = t.simulated
    if sim is not None and sim.perf is not None:
        total = InferPerformance(sim.perf, sim.events, reps.k).to_json()["samples_per_s"]
        bound = host_samples_per_s(sim.perf, t.job.target.io.offwafer_bytes_per_s)
        rep |= {
            "per_copy_samples_per_s": total / reps.k,
            "samples_per_s": total,
            "host_io_samples_per_s": None if math.isinf(bound) else bound,
        }
    return rep


def link_util_max(sim: Simulated) -> float:
    if sim.events is not None and sim.events.links:
        return max(u.peak for u in sim.events.links)
    flows = [f for f in sim.perf.flows if f.kind != "host"] if sim.perf else []
    return max((f.busy for f in flows), default=0.0)


def limits(stage: Stage) -> Limits | None:
    """What limits the throughput, as the summary, the viewer and the PNG state it
    (`wsecc.limits`): the mode's performance result when known, else sizing's."""
    t = Trail.of(stage)
    rep: dict[str, Any] = {"replicas": {"k": t.copies}}
    if t.sizing is not None:
        rep["sizing"] = sizing_json(t)
    if t.performance is not None:
        rep["performance"] = t.performance.to_json()
    return Limits.from_report(rep)


def drop_timings(obj: Any) -> None:
    """Remove every wall-clock field (`TIMING_KEYS`) from a report, in place."""
    if isinstance(obj, dict):
        for k in [k for k in obj if k in TIMING_KEYS]:
            del obj[k]
        for v in obj.values():
            drop_timings(v)
    elif isinstance(obj, list):
        for v in obj:
            drop_timings(v)
