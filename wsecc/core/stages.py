"""The compile's stages as frozen values, each made from the one before (`wsecc.core.chain`):

    Job ─load─▶ Loaded ─fuse─▶ Fused ─size─▶ Sized ─place─▶ Placed ─simulate─▶ Simulated

A stage value holds its own products and the value it was made from, never anything a later
stage fills in; `wsecc.report.build.report(stage)` is the report of any of them, and
`wsecc.report.artifacts.folder_files(stage)` its output folder. Every value also carries its
`trace` (`wsecc.core.instrument`): the timings of the stages and passes that led to it and the
files they dumped; `seconds`, the report's `stage_seconds`, is read from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wsecc.analysis import flops_per_sample, param_count
from wsecc.core.instrument import Trace

if TYPE_CHECKING:
    import numpy as np

    from wsecc.core.partition import SizedSystems
    from wsecc.core.program import Program, Systems
    from wsecc.frontend.onnx import ModelInfo
    from wsecc.ir.core import Graph
    from wsecc.kernels import KernelGraph, Sizing
    from wsecc.modes.train import TrainResult
    from wsecc.options import Options
    from wsecc.place.problem import PlacementProblem
    from wsecc.pm import PassRecord
    from wsecc.report.results import Check, Performance
    from wsecc.sim.events import EventResult
    from wsecc.sim.perf import PerfResult
    from wsecc.sim.sram import SramMap
    from wsecc.targets import Target

Seconds = Mapping[str, float]
"""Wall-clock seconds by stage name, in the order the stages ran."""


class _Timed:
    """The `seconds` of a stage value, from its `trace`."""

    trace: Trace

    @property
    def seconds(self) -> Seconds:
        """Wall-clock seconds by stage name, in the order the stages ran."""
        return self.trace.seconds


@dataclass(frozen=True)
class Job:
    """What is compiled, how, and for which target; `saved` is the report.json of an output
    folder the later stages were reloaded from (`wsecc.core.chain.reload`), else None."""

    model_path: Path
    options: Options
    target: Target
    saved: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, eq=False)
class Loaded(_Timed):
    """The ONNX file loaded, bound and imported (folded, in the wsecc IR)."""

    job: Job
    graph: Graph
    info: ModelInfo
    sha256: Future[str] = field(repr=False)  # the file's, hashed beside the frontend
    trace: Trace = field(default_factory=Trace, repr=False)

    @cached_property
    def params(self) -> int:
        return param_count(self.graph)


@dataclass(frozen=True, eq=False)
class Fused(_Timed):
    """The pass pipeline's product: the canonical, fused graph."""

    loaded: Loaded
    graph: Graph
    records: tuple[PassRecord, ...]
    trace: Trace = field(default_factory=Trace, repr=False)

    @property
    def job(self) -> Job:
        return self.loaded.job

    @cached_property
    def params(self) -> int:
        return param_count(self.graph)

    @cached_property
    def flops_per_sample(self) -> int:
        return flops_per_sample(self.graph)


@dataclass(frozen=True, eq=False)
class Sized(_Timed):
    """Kernels and their regions: the lowered kernel graph and its sizing, as the mode sizes
    it (`wsecc.modes.strategy`). In train mode `training` is the step's cost, whose layout is what is
    placed, and `check` the gradient check when it ran. `fused` is None for a compile reloaded
    from its output folder."""

    job: Job
    fused: Fused | None
    kernel_graph: KernelGraph
    sizing: Sizing
    training: TrainResult | None = None
    check: Check | None = None
    trace: Trace = field(default_factory=Trace, repr=False)
    # infer and generate modes over several systems (`wsecc.core.partition`): each system's kernel
    # graph and sizing; `kernel_graph` and `sizing` are then system 0's
    systems: SizedSystems | None = None


@dataclass(frozen=True, eq=False)
class Placed(_Timed):
    """The placed and routed program over its systems (`wsecc.core.program.Systems`);
    `problem` is the placement problem of system 0's (one copy's) program, `pool_shapes` the
    kernels the placer put in a shape from sizing's pool."""

    sized: Sized
    problem: PlacementProblem
    systems: Systems
    pool_shapes: int = 0
    trace: Trace = field(default_factory=Trace, repr=False)

    @property
    def job(self) -> Job:
        return self.sized.job

    @property
    def program(self) -> Program:
        """System 0's program (the only one unless the compile spans several systems)."""
        return self.systems.programs[0]


@dataclass(frozen=True, eq=False)
class Simulated(_Timed):
    """What the placed program achieves (`performance`, one interface for every mode,
    `wsecc.report.results`), with the SRAM map and L0/L1 results where the mode simulates the fabric,
    and the check against onnxruntime when it ran. `arrays` are what `--save-outputs` writes
    (file name -> arrays)."""

    placed: Placed
    performance: Performance
    sram: SramMap | None = None
    perf: PerfResult | None = None
    events: EventResult | None = None
    check: Check | None = None
    arrays: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=dict, repr=False)
    trace: Trace = field(default_factory=Trace, repr=False)

    @property
    def job(self) -> Job:
        return self.placed.job


Stage = Job | Loaded | Fused | Sized | Placed | Simulated
"""Any stage value (`Job`: nothing run yet)."""
