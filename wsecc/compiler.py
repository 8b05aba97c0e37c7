"""The compile as a Python API: `wsecc.compile(path, ...)` returns a `Compilation`.

    load ─▶ fuse ─▶ lower + size ─▶ place + route ─▶ simulate ─▶ write

The stages are the pure functions of `wsecc.core.chain` over the frozen values of `wsecc.core.stages`;
a `Compilation` is a thin façade over them: it holds the latest stage value and advances it
one stage per method (`Compilation.load(path, ...)`, then `.fuse()`, `.lower_and_size()`,
`.place_and_route()`, `.simulate()`), so a script can stop after any stage, look at its
product, or re-run a later stage with other options. `report()` is the `wsecc.report/1`
dictionary the CLI writes as report.json (docs/report-schema.md, `wsecc.report.build`); `write(out_dir)`
writes the whole output folder atomically (`wsecc.report.artifacts`).

Example::

    import wsecc
    c = wsecc.compile("samples/gpt2_legacy_op17.onnx", seq=32, placer="greedy")
    print(c.sizing.summary(), c.placement.objective)
    c.write("gpt2.wsecc")
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wsecc.check.checks import NUMERICS_SKIPPED_WEIGHTLESS, VALIDATE_AUTO_MAX_PARAMS
from wsecc.core import chain
from wsecc.core.stages import Fused, Job, Loaded, Placed, Simulated, Sized, Stage
from wsecc.errors import WseccError
from wsecc.hashing import sha256_beside, sha256_of
from wsecc.options import Options
from wsecc.report import artifacts
from wsecc.report.build import Trail, limits, report
from wsecc.report.results import GeneratePerformance, InferPerformance, SystemsInferPerformance

if TYPE_CHECKING:
    import numpy as np

    from wsecc.core.program import Program
    from wsecc.frontend.onnx import ModelInfo
    from wsecc.ir.core import Graph
    from wsecc.kernels import KernelGraph, Sizing
    from wsecc.limits import Limits
    from wsecc.modes.generate import GenerationPerf
    from wsecc.modes.train import TrainResult
    from wsecc.place.problem import Placement, PlacementProblem
    from wsecc.pm import PassRecord
    from wsecc.report.results import Check
    from wsecc.route.problem import Routing
    from wsecc.sim.events import EventResult
    from wsecc.sim.perf import PerfResult
    from wsecc.sim.sram import SramMap
    from wsecc.targets import Target

__all__ = [
    "NUMERICS_SKIPPED_WEIGHTLESS", "VALIDATE_AUTO_MAX_PARAMS", "Compilation", "Options",
    "compile", "sha256_beside", "sha256_of",
]  # fmt: skip

Progress = Callable[[str, str], None]  # (stage, message)


def _quiet(stage: str, message: str) -> None:
    pass


class Compilation:
    """The latest stage value of one compile (`stage`), advanced in place by the stage
    methods; every product is read from it (None until its stage ran). Options never change
    (`with_options` and `fork` give a new Compilation)."""

    def __init__(self, stage: Stage, progress: Progress = _quiet) -> None:
        self.stage: Stage = stage
        self.progress = progress

    def __repr__(self) -> str:
        return f"Compilation({type(self.stage).__name__}: {self.model_path})"

    # --- stages ------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        options: Options | None = None,
        progress: Progress = _quiet,
    ) -> Compilation:
        """Stage 1: load, bind and import the ONNX file (folded, into the wsecc IR)."""
        return cls(chain.load(chain.job(path, options), progress), progress)

    @classmethod
    def from_outdir(
        cls, folder: str | os.PathLike[str], progress: Progress = _quiet
    ) -> Compilation:
        """A saved compile (its output folder) with its placement and routing, ready for
        `simulate()`. The model is re-imported only when numerics are asked for."""
        return cls(chain.reload(folder), progress)

    def with_options(self, **changes: Any) -> Compilation:
        """A copy with some options changed (keywords are `Options` fields), not simulated:
        another precision re-costs the placed program in it (no re-placing). `wsecc simulate`
        re-simulates a saved compile this way."""
        return Compilation(chain.with_options(self._placed(), **changes),
                           self.progress)  # fmt: skip

    def fork(self, options: Options) -> Compilation:
        """A new compilation of this one's fused graph under `options` (another target,
        precision, placer, ...): the frontend and pass products are shared, the later stages
        not run. The bindings (batch, seq, dims) must be this compilation's, except the batch of
        a graph bound at `per_sample_batch` 1 when `options` run no numerics."""
        return Compilation(chain.fork(self._at(Fused, "fuse"), options), self.progress)

    def fuse(self) -> Compilation:
        """Stage 2: the pass pipeline (canonicalize and fuse) on the imported graph."""
        self.stage = chain.fuse(self._at(Loaded, "load"), self.progress)
        return self

    def lower_and_size(self) -> Compilation:
        """Stage 3: lower the fused graph to kernels and size each kernel's region (in train
        mode: cost the training step, `train`)."""
        self.stage = chain.size(self._at(Fused, "fuse"), self.progress)
        return self

    train = lower_and_size

    def place_and_route(self) -> Compilation:
        """Stage 4: place the regions (re-sizing at lower fill if they do not pack) and route
        what the mode lays out (in train mode the training layout, to show and check it)."""
        self.stage = chain.place(self._at(Sized, "lower_and_size"), self.progress)
        return self

    def simulate(self) -> Compilation:
        """Stage 5: what the placed program achieves as the mode simulates it, and the check
        against onnxruntime (when `options.validate`, or auto). To simulate at another level
        or precision, `with_options(...)` first."""
        self.stage = chain.simulate(self._placed(), self.progress)
        return self

    def run(self) -> Compilation:
        """Every later stage: fuse, lower and size, place and route, simulate."""
        if isinstance(self.stage, Loaded):
            self.fuse()
        self.stage = chain.run(self._at(Fused, "fuse"), self.progress)
        return self

    def _placed(self) -> Placed:
        """The placed stage (of a simulated one too: it may be simulated again)."""
        placed = self._trail.placed
        if placed is None:
            raise WseccError(f"{self.model_path}: run the place_and_route stage first")
        return placed

    def _at(self, kind: type, stage: str) -> Any:
        if not isinstance(self.stage, kind):
            raise WseccError(f"{self.model_path}: run the {stage} stage first")
        return self.stage

    # --- products ----------------------------------------------------------------------------

    @property
    def _trail(self) -> Trail:
        return Trail.of(self.stage)

    @property
    def model_path(self) -> Path:
        return self._trail.job.model_path

    @property
    def options(self) -> Options:
        return self._trail.job.options

    @property
    def target(self) -> Target:
        return self._trail.job.target

    @property
    def job(self) -> Job:
        return self._trail.job

    @property
    def graph(self) -> Graph | None:
        """The imported, folded graph."""
        t = self._trail
        return t.loaded.graph if t.loaded is not None else None

    @property
    def import_info(self) -> ModelInfo | None:
        t = self._trail
        return t.loaded.info if t.loaded is not None else None

    @property
    def fused(self) -> Graph | None:
        t = self._trail
        return t.fused.graph if t.fused is not None else None

    @property
    def pass_records(self) -> list[PassRecord]:
        t = self._trail
        return list(t.fused.records) if t.fused is not None else []

    @property
    def kernel_graph(self) -> KernelGraph | None:
        t = self._trail
        return t.sized.kernel_graph if t.sized is not None else None

    @property
    def sizing(self) -> Sizing | None:
        """Sizing's; after placement, the program's (costed at the placed shapes)."""
        sizing: Sizing | None = self._trail.sizing
        return sizing

    @property
    def training(self) -> TrainResult | None:
        t = self._trail
        return t.sized.training if t.sized is not None else None

    @property
    def problem(self) -> PlacementProblem | None:
        t = self._trail
        return t.placed.problem if t.placed is not None else None

    @property
    def program(self) -> Program | None:
        t = self._trail
        return t.placed.program if t.placed is not None else None

    @property
    def placement(self) -> Placement | None:
        return self.program.placement if self.program is not None else None

    @property
    def routing(self) -> Routing | None:
        return self.program.routing if self.program is not None else None

    @property
    def pool_shapes(self) -> int:
        t = self._trail
        return t.placed.pool_shapes if t.placed is not None else 0

    @property
    def copies(self) -> int:
        """Copies of the program on the wafer (`wsecc.core.replicas`); 1 before placement."""
        return self._trail.copies

    @property
    def simulated(self) -> Simulated | None:
        return self._trail.simulated

    @property
    def sram(self) -> SramMap | None:
        s = self.simulated
        return s.sram if s is not None else None

    @property
    def perf(self) -> PerfResult | None:
        """L0's result (None in train mode, which costs a step rather than simulate)."""
        s = self.simulated
        return s.perf if s is not None else None

    @property
    def events(self) -> EventResult | None:
        s = self.simulated
        return s.events if s is not None else None

    @property
    def check(self) -> Check | None:
        """The mode's check against onnxruntime, when it ran: numerics, gradients or a
        generation."""
        check: Check | None = self._trail.check
        return check

    @property
    def numerics(self) -> Any:
        """Inference's numerics verdict (`wsecc.sim.functional.NumericsResult`)."""
        s = self.simulated
        infer = (InferPerformance, SystemsInferPerformance)
        return s.check if s is not None and isinstance(s.performance, infer) else None

    @property
    def gradients(self) -> Any:
        """Train mode's gradient check (`wsecc.modes.gradcheck.GradCheck`)."""
        t = self._trail
        return t.sized.check if t.sized is not None else None

    @property
    def generation(self) -> GenerationPerf | None:
        s = self.simulated
        if s is not None and isinstance(s.performance, GeneratePerformance):
            return s.performance.generation
        return None

    @property
    def generation_check(self) -> Any:
        """Generate mode's verdict (`wsecc.sim.generate.GenerationResult`)."""
        s = self.simulated
        gen = s is not None and isinstance(s.performance, GeneratePerformance)
        return s.check if gen and s is not None else None

    @property
    def generated(self) -> dict[str, np.ndarray] | None:
        return self._arrays("generated.npz")

    @property
    def sim_inputs(self) -> dict[str, np.ndarray] | None:
        """The inputs the numerics ran on (what `--save-outputs` writes as inputs.npz)."""
        return self._arrays("inputs.npz")

    @property
    def sim_outputs(self) -> dict[str, np.ndarray] | None:
        """The functional simulation's outputs (outputs.npz)."""
        return self._arrays("outputs.npz")

    def _arrays(self, name: str) -> dict[str, np.ndarray] | None:
        s = self.simulated
        arrays = s.arrays.get(name) if s is not None else None
        return dict(arrays) if arrays is not None else None

    @property
    def saved_report(self) -> dict[str, Any] | None:
        saved = self._trail.job.saved
        return dict(saved) if saved is not None else None

    @property
    def seconds(self) -> dict[str, float]:
        """Wall-clock seconds per stage."""
        return dict(report(self.stage)["stage_seconds"])

    @property
    def title(self) -> str:
        return self._trail.title

    # --- reports -----------------------------------------------------------------------------

    def report(self, *, timings: bool = True) -> dict[str, Any]:
        """The `wsecc.report/1` dictionary (docs/report-schema.md) of the stages run so far.

        With `timings=False` every wall-clock field is left out, so two compiles of the same
        inputs and options (deterministic placement) give equal reports.
        """
        return report(self.stage, timings=timings)

    def limits(self) -> Limits | None:
        """What limits the throughput (`wsecc.report.build.limits`)."""
        return limits(self.stage)

    def viewer_html(self) -> str:
        """viewer.html: the placed, routed compile, self-contained (wsecc.view)."""
        self._placed()
        return artifacts.viewer_html(self.stage)

    def write(self, out_dir: str | os.PathLike[str], *, keep: bool = False) -> Path:
        """Write the output folder atomically (a temporary sibling renamed into place).

        `keep=True` carries over the files of an existing `out_dir` that this compilation does
        not produce again (a re-simulation keeps fused.ir.txt, say)."""
        return artifacts.write(self.stage, out_dir, keep=keep)


def compile(  # noqa: A001 - the verb users expect: wsecc.compile(...)
    path: str | os.PathLike[str],
    *,
    progress: Progress = _quiet,
    **options: Any,
) -> Compilation:
    """Run every stage on an ONNX file; keyword options are `Options` fields.

    Raises WseccError (and the stage errors: TargetError, SizingError, PlacementError,
    RoutingError) with a one-line message on bad input or a model that does not fit.
    """
    try:
        opts = Options(**options)
    except TypeError as e:
        raise WseccError(f"wsecc.compile: {e}") from None
    return Compilation.load(path, opts, progress).run()
