"""The compile's stages as frozen values, each made from the one before (`wsecc.core.chain`):

    Job ─load─▶ Loaded ─fuse─▶ Fused ─size─▶ Sized ─place─▶ Placed ─simulate─▶ Simulated

A stage value holds its own products and the value it was made from, never anything a later
stage fills in; `wsecc.report.build.report(stage)` is the report of any of them, and
`wsecc.report.artifacts.folder_files(stage)` its output folder. Every value also carries `seconds`,
the wall-clock time of each stage that led to it (in order), for the report's
`stage_seconds`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wsecc.analysis import flops_per_sample, param_count

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


@dataclass(frozen=True)
class Job:
    """What is compiled, how, and for which target; `saved` is the report.json of an output
    folder the later stages were reloaded from (`wsecc.core.chain.reload`), else None."""

    model_path: Path
    options: Options
    target: Target
    saved: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, eq=False)
class Loaded:
    """The ONNX file loaded, bound and imported (folded, in the wsecc IR)."""

    job: Job
    graph: Graph
    info: ModelInfo
    sha256: Future[str] = field(repr=False)  # the file's, hashed beside the frontend
    seconds: Seconds = field(default_factory=dict, repr=False)

    @cached_property
    def params(self) -> int:
        return param_count(self.graph)


@dataclass(frozen=True, eq=False)
class Fused:
    """The pass pipeline's product: the canonical, fused graph."""

    loaded: Loaded
    graph: Graph
    records: tuple[PassRecord, ...]
    seconds: Seconds = field(default_factory=dict, repr=False)

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
class Sized:
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
    seconds: Seconds = field(default_factory=dict, repr=False)
    # infer and generate modes over several systems (`wsecc.core.partition`): each system's kernel
    # graph and sizing; `kernel_graph` and `sizing` are then system 0's
    systems: SizedSystems | None = None


@dataclass(frozen=True, eq=False)
class Placed:
    """The placed and routed program over its systems (`wsecc.core.program.Systems`);
    `problem` is the placement problem of system 0's (one copy's) program, `pool_shapes` the
    kernels the placer put in a shape from sizing's pool."""

    sized: Sized
    problem: PlacementProblem
    systems: Systems
    pool_shapes: int = 0
    seconds: Seconds = field(default_factory=dict, repr=False)

    @property
    def job(self) -> Job:
        return self.sized.job

    @property
    def program(self) -> Program:
        """System 0's program (the only one unless the compile spans several systems)."""
        return self.systems.programs[0]


@dataclass(frozen=True, eq=False)
class Simulated:
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
    seconds: Seconds = field(default_factory=dict, repr=False)

    @property
    def job(self) -> Job:
        return self.placed.job


Stage = Job | Loaded | Fused | Sized | Placed | Simulated
"""Any stage value (`Job`: nothing run yet)."""


@contextmanager
def timed(say: Callable[[str, str], None], name: str, into: dict[str, float]) -> Iterator[None]:
    """Announce stage `name` (`say(name, "")`) and add its wall-clock seconds to `into`."""
    say(name, "")
    t0 = time.perf_counter()
    try:
        yield
    finally:
        into[name] = into.get(name, 0.0) + time.perf_counter() - t0
