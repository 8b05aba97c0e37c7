"""The compile flow as a Python API: `wsecc.compile(path, ...)` returns a `Compilation`.

    load ─▶ fuse ─▶ lower + size ─▶ place + route ─▶ simulate ─▶ write

`compile` runs every stage; each stage is also a method of `Compilation`, callable on its own
(`Compilation.load(path, ...)`, then `.fuse()`, `.lower_and_size()`, `.place_and_route()`,
`.simulate()`), so a script can stop after any stage, look at its product, or re-run a later
stage with other options. `report()` is the `wsecc.report/1` dictionary the CLI writes as
report.json (docs/report-schema.md); `write(out_dir)` writes the whole output folder atomically.

Example::

    import wsecc
    c = wsecc.compile("samples/gpt2_legacy_op17.onnx", seq=32, placer="greedy")
    print(c.sizing.summary(), c.placement.objective)
    c.write("gpt2.wsecc")
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from wsecc.errors import WseccError
from wsecc.frontend.common import MAX_TENSOR_BYTES, widened_text
from wsecc.limits import Limits
from wsecc.options import DEFAULT_NEW_TOKENS, Options, saved_options
from wsecc.outdir import write_folder
from wsecc.replicas import GENERATE_MODE, TRAIN_MODE, Replicas, host_samples_per_s
from wsecc.targets import target_source
from wsecc.version import __version__
from wsecc.vocab import SimLevel

if TYPE_CHECKING:
    import numpy as np

    from wsecc.frontend.onnx import ModelInfo
    from wsecc.generate import GenerationPerf
    from wsecc.gradcheck import GradCheck
    from wsecc.ir.core import Graph
    from wsecc.kernels import KernelGraph, Sizing
    from wsecc.place.problem import Placement, PlacementProblem
    from wsecc.pm import PassRecord
    from wsecc.program import Program
    from wsecc.route.problem import Routing
    from wsecc.sim.events import EventResult
    from wsecc.sim.functional import NumericsResult
    from wsecc.sim.generate import GenerationResult
    from wsecc.sim.perf import PerfResult
    from wsecc.sim.sram import SramMap
    from wsecc.targets import Target
    from wsecc.train import TrainResult

T = TypeVar("T")

REPORT_SCHEMA = "wsecc.report/1"
NUMERICS_SKIPPED_WEIGHTLESS = (
    "skipped: the weights are graph inputs without data (--weights inputs)"
)
"""The report's `numerics_skipped` (and the summary's numerics line) under `--weights inputs`."""
VALIDATE_AUTO_MAX_PARAMS = 50_000_000
"""`validate=None` (auto) runs the numerics when the model has at most this many parameters:
the functional simulation then takes seconds, not minutes."""

GRAD_SAMPLES = 200
"""Coordinates per weight tensor the train-mode gradient check perturbs (`wsecc.gradcheck`)."""

Progress = Callable[[str, str], None]  # (stage, message)


def _quiet(stage: str, message: str) -> None:
    pass


def sha256_of(path: str | os.PathLike[str]) -> str:
    # 16 MiB at a time into one buffer: the GIL is let go for each read and each update, so
    # few, large ones keep a hash on another thread (`sha256_beside`) out of the main one's way
    h = hashlib.sha256()
    buf = bytearray(1 << 24)
    view = memoryview(buf)
    with open(path, "rb") as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def sha256_beside(path: Path) -> Future[str]:
    """`sha256_of(path)` on a thread of its own: hashlib releases the GIL, so the report's hash
    of a large model (0.6 s for GPT-2 small's 650 MB) runs on another core while the frontend
    parses the same file."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wsecc-sha256")
    try:
        return pool.submit(sha256_of, path)
    finally:
        pool.shutdown(wait=False)  # the thread ends when the hash is done


@dataclass
class Compilation:
    """Every product of one compile, filled stage by stage (None until its stage ran). The
    stages themselves are the pure functions of `wsecc.flow`; a method runs one, times it,
    reports progress and keeps its products. Options never change after construction
    (`with_options` gives a new Compilation)."""

    model_path: Path
    options: Options
    target: Target
    progress: Progress = _quiet
    graph: Graph | None = None  # imported, folded
    import_info: ModelInfo | None = None
    fused: Graph | None = None
    pass_records: list[PassRecord] = field(default_factory=list)
    kernel_graph: KernelGraph | None = None
    sizing: Sizing | None = None  # lowering's; after placement, the program's
    problem: PlacementProblem | None = None
    program: Program | None = None  # placed and routed
    pool_shapes: int = 0  # kernels the placer put in a shape from sizing's pool
    sram: SramMap | None = None
    perf: PerfResult | None = None  # L0
    events: EventResult | None = None  # L1 (when options.sim is l1)
    numerics: NumericsResult | None = None  # None when not validated
    training: TrainResult | None = None  # train mode: the step's cost (`wsecc.train`)
    gradients: GradCheck | None = None  # train mode, validated: gradients against onnxruntime
    generation: GenerationPerf | None = None  # generate mode: prefill and decode figures
    generation_check: GenerationResult | None = None  # generate mode, validated: vs onnxruntime
    generated: dict[str, np.ndarray] | None = None  # prompt_ids, generated_ids, logits
    saved_report: dict[str, Any] | None = None  # when reloaded from an output folder
    sim_inputs: dict[str, np.ndarray] | None = None
    sim_outputs: dict[str, np.ndarray] | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # per stage
    _model_facts: tuple[Graph, dict[str, Any]] | None = field(default=None, repr=False)
    _model_sha256: Future[str] | None = field(default=None, repr=False)  # from `load`

    @property
    def placement(self) -> Placement | None:
        return self.program.placement if self.program is not None else None

    @property
    def routing(self) -> Routing | None:
        return self.program.routing if self.program is not None else None

    # --- stages ------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        options: Options | None = None,
        progress: Progress = _quiet,
    ) -> Compilation:
        """Stage 1: load, bind and import the ONNX file (folded, into the wsecc IR)."""
        from wsecc.flow import load
        from wsecc.targets import load_target

        options = options or Options()
        # a bad target fails before the slow stages
        c = cls(Path(path), options, load_target(options.target), progress)
        c._model_sha256 = sha256_beside(c.model_path)
        with c._stage("frontend"):
            c.graph, c.import_info = load(c.model_path, options)
        n, widened = c.import_info.weight_inputs, c.import_info.widened
        c.progress(
            "frontend",
            f"{len(c.graph.nodes)} ops after folding, bindings {c.import_info.describe_bindings()}"
            + (f"; {n} weights from input shapes, no data" if n else "")
            + (f"; {widened_text(widened)}" if widened else ""),
        )
        return c

    @classmethod
    def from_outdir(
        cls, folder: str | os.PathLike[str], progress: Progress = _quiet
    ) -> Compilation:
        """A saved compile (its output folder) with its placement and routing, ready for
        `simulate()`. The model is re-imported only when numerics are asked for."""
        from wsecc.place.from_kernels import placement_problem
        from wsecc.place.problem import tailored
        from wsecc.view import load_outdir

        folder = Path(folder)
        v = load_outdir(folder)
        saved = json.loads((folder / "report.json").read_text())
        opts = saved_options(saved.get("options", {}))
        opts["target"] = (
            str(folder / "target.toml") if (folder / "target.toml").is_file() else v.target.name
        )
        try:
            options = Options(**opts)
        except (TypeError, WseccError) as e:
            raise WseccError(f"{folder / 'report.json'}: unusable options ({e})") from None
        prog = v.program
        c = cls(Path(saved["model"]["path"]), options, prog.target, progress)
        c.kernel_graph, c.sizing, c.program = prog.kg, prog.sizing, prog
        c.problem = tailored(
            placement_problem(prog.kg, prog.sizing, prog.target, prog.precision),
            prog.placement.rects,
        )
        c.pool_shapes = saved.get("placement", {}).get("pool_shapes", 0)
        c.saved_report = saved
        return c

    def with_options(self, **changes: Any) -> Compilation:
        """A copy with some options changed (keywords are `Options` fields) and the stages they
        invalidate cleared: another precision re-costs the placed program in it (no re-placing),
        and every simulation result is dropped. `wsecc simulate` re-simulates a saved compile
        this way."""
        options = dataclasses.replace(self.options, **changes)
        program = self.program
        if program is not None and options.precision != program.precision:
            program = program.in_precision(options.precision)
        return dataclasses.replace(
            self, options=options, program=program,
            sizing=program.sizing if program is not None else self.sizing,
            sram=None, perf=None, events=None, numerics=None, sim_inputs=None, sim_outputs=None,
            seconds={}, _model_facts=None,
        )  # fmt: skip

    def fork(self, options: Options) -> Compilation:
        """A new compilation of this one's fused graph under `options` (another target,
        precision, placer, ...): the frontend and pass products are shared, the later stages
        not run. The bindings (batch, seq, dims) must be this compilation's, except the batch of
        a graph bound at `per_sample_batch` 1 when `options` run no numerics; a sweep compiles
        many points of one binding this way."""
        from wsecc.flow import bound_batch, per_sample_batch
        from wsecc.targets import load_target

        o = self.options
        batch = bound_batch(o)
        if batch == 1 and per_sample_batch(options) == 1:
            batch = bound_batch(options)  # the graph is per sample for these options
        if (bound_batch(options), options.seq, dict(options.dims)) != (batch, o.seq, dict(o.dims)):
            raise ValueError("fork: the bindings (batch, seq, dims) must stay the same")
        self._need(self.fused, "fuse")
        seconds = {k: v for k, v in self.seconds.items() if k in ("frontend", "passes")}
        return dataclasses.replace(
            self, options=options, target=load_target(options.target), kernel_graph=None,
            sizing=None, problem=None, program=None, sram=None, perf=None, events=None,
            numerics=None, sim_inputs=None, sim_outputs=None, seconds=seconds, training=None,
            gradients=None,
        )  # fmt: skip

    def _ensure_fused(self) -> None:
        """Re-import and fuse the model (a compilation reloaded from a folder has no graph)."""
        if self.fused is not None:
            return
        if not self.model_path.is_file():
            raise WseccError(
                f"{self.model_path}: the compiled model is gone; numerics need it (--no-validate)"
            )
        fresh = Compilation.load(self.model_path, self.options, self.progress).fuse()
        self.graph, self.import_info = fresh.graph, fresh.import_info
        self.fused, self.pass_records = fresh.fused, fresh.pass_records
        self._model_sha256 = fresh._model_sha256

    def fuse(self) -> Compilation:
        """Stage 2: the pass pipeline (canonicalize and fuse) on the imported graph."""
        from wsecc.flow import fuse

        graph = self._need(self.graph, "load")
        with self._stage("passes"):
            self.fused, self.pass_records = fuse(graph, self.model_path, self.options)
        for r in self.pass_records:
            self.progress(
                "passes",
                f"{r.name:<15} {r.nodes_before:>5} -> {r.nodes_after:<5} ops ({r.seconds * 1e3:.0f} ms)",
            )
            if self.options.explain:
                for note in r.notes:
                    self.progress("passes", f"  not fused: {note}")
        return self

    def lower_and_size(self) -> Compilation:
        """Stage 3: lower the fused graph to kernels and size each kernel's region."""
        from wsecc.flow import lower_and_size

        fused = self._need(self.fused, "fuse")
        o = self.options
        with self._stage("size"):
            self.kernel_graph, self.sizing = lower_and_size(
                fused, self.target, o.precision, o.chunk_tokens,
                sequences=o.batch if o.mode == "generate" else None,
            )  # fmt: skip
        self.progress(
            "size",
            f"{len(self.kernel_graph.kernels)} kernels, {len(self.kernel_graph.flows)} flows; "
            + self.sizing.summary(),
        )
        return self

    def run(self) -> Compilation:
        """Every later stage of the options' mode: fuse, lower and size, place and route,
        simulate (in generate mode with the generation's figures); in train mode fuse, then
        `train`."""
        if self.options.mode == "train":
            return self.fuse().train().place_and_route()
        return self.fuse().lower_and_size().place_and_route().simulate()

    def train(self) -> Compilation:
        """Stage 3 in train mode: lower the fused graph and cost a training step, pipelined or
        weight-streaming (`wsecc.train`); with `validate`, check the gradients."""
        from wsecc.flow import lower
        from wsecc.train import plan_training

        o = self.options
        fused = self._need(self.fused, "fuse")
        with self._stage("train"):
            self.kernel_graph = lower(fused)
            self.training = plan_training(
                self.kernel_graph, self.target, o.precision, execution=o.execution,
                batch=o.batch, systems=o.systems, chunk_tokens=o.chunk_tokens,
            )  # fmt: skip
        self.sizing = self.training.sizing
        t = self.training
        self.progress(
            "train",
            f"{t.execution.value} ({t.why}): batch {t.batch} = {t.systems} system(s) x "
            f"{t.grad_accum} x {t.micro_batch}; {t.samples_per_s:,.1f} samples/s, "
            f"{t.tokens_per_s:,.0f} tokens/s, step {t.step_s * 1e3:,.1f} ms, bound {t.bound}",
        )
        if self._should_validate():
            self.validate_gradients()
        return self

    def validate_gradients(self) -> Compilation:
        """Train mode: the gradient of the loss for every weight against central finite
        differences of onnxruntime on the original file (`wsecc.gradcheck`), in the options'
        precision (fp32 or mixed)."""
        from wsecc.gradcheck import check_gradients

        o = self.options
        if o.precision == "fp16":
            raise WseccError("the gradient check runs in fp32 or mixed; use --precision mixed")
        self._ensure_fused()
        self._check_numerics_fit()
        with self._stage("numerics"):
            self.sim_inputs = self._model_inputs()
            self.gradients = check_gradients(
                self.model_path, self.fused, self.sim_inputs, o.precision, seed=o.seed,
                fault=o.inject_fault, samples=GRAD_SAMPLES,
            )  # fmt: skip
        self.progress("numerics", self.gradients.summary())
        return self

    def place_and_route(self) -> Compilation:
        """Stage 4: place the regions (re-sizing at lower fill if they do not pack) and route.
        In train mode: the training program (pipelined), or the slowest streamed unit on the
        whole wafer (weight streaming), to show and check its layout; the step's figures stay
        the training stage's."""
        from wsecc.flow import place_and_route

        o = self.options
        kg = self._need(self.kernel_graph, "lower_and_size")
        sizing = self._need(self.sizing, "lower_and_size")
        train, replicas = None, o.replicas
        if self.training is not None:  # the training layout: its program, or one streamed unit
            kg, sizing, train = self.training.layout, self.training.sizing, self.training.costs
            replicas = 1  # training's data parallelism is over systems (`wsecc.train`)
        generate = o.mode == "generate"
        if generate:
            replicas = 1  # the batch's sequences share one placement (`wsecc.generate`)
        with self._stage("place"):
            placed = place_and_route(
                kg, sizing, self.target, o.precision, placer=o.placer,
                time_budget_s=o.time_budget_s, seed=o.seed, deterministic=o.deterministic,
                pins=o.pins, say=self.progress, train=train,
                decode_batch=o.batch if generate else None, replicas=replicas,
            )  # fmt: skip
        self.problem, self.program = placed.problem, placed.program
        self.pool_shapes = placed.pool_shapes
        if self.training is not None or generate:
            why = TRAIN_MODE if self.training is not None else GENERATE_MODE
            self.program = dataclasses.replace(self.program, replicas=Replicas(1, why))
        self.sizing = placed.program.sizing
        p, r = placed.program.placement, placed.program.routing
        self.progress(
            "place",
            f"{o.placer}: weighted wirelength {p.objective:.4g} B·PE, bound {p.bound:.4g} "
            f"({p.bound_kind}), gap {100 * p.gap:.1f}%, {p.status} ({p.seconds:.1f} s), "
            f"{self.pool_shapes} kernels in pool shapes"
            + (f"; {p.search.summary()}" if p.search is not None else ""),
        )
        self.progress(
            "route",
            f"{len(r.lanes)} lanes, colors max {r.colors_used_max}/{r.color_budget} "
            f"(lower bound {r.color_lower_bound}), link load max {r.link_load_max}",
        )
        return self

    def simulate(self) -> Compilation:
        """Stage 5: SRAM map, L0 (and L1) performance, and numerics against onnxruntime (when
        `options.validate`, or auto). Numerics need the fused graph (with its weights): a
        compilation reloaded from a folder re-imports the model. To simulate at another level
        or precision, `with_options(...)` first."""
        from wsecc.flow import simulate

        o = self.options
        program = self._need(self.program, "place_and_route")
        if o.mode == "generate":  # L1 would stream a whole context; decode is a latency (L0)
            o = dataclasses.replace(o, sim=SimLevel.L0)
        with self._stage("simulate"):
            self.sram, self.perf, self.events = simulate(program, o)
        if o.mode == "generate":
            return self.generate()
        perf = self.report_performance()
        self.progress(
            "simulate",
            f"{o.sim}: {perf['samples_per_s']:,.1f} samples/s, latency {perf['latency_s'] * 1e6:,.1f} us, "
            f"utilization {100 * perf['utilization']:.1f}%, bottleneck {perf['bottleneck']}"
            + (
                f" (L1 vs L0: throughput {100 * self.events.throughput_rel_diff:+.1f}%, "
                f"latency {100 * self.events.latency_rel_diff:+.1f}%)"
                if self.events
                else ""
            ),
        )
        if self._should_validate():
            self.validate_numerics()
        return self

    @property
    def prompt(self) -> int:
        """Generate mode's prompt length: `options.prompt`, or `default_prompt` of the context."""
        from wsecc.generate import default_prompt

        kg = self._need(self.kernel_graph, "lower_and_size")
        return self.options.prompt or default_prompt(kg.tokens_per_sample)

    def generate(self) -> Compilation:
        """Generate mode, after `simulate`'s SRAM map: the prefill and decode figures of the
        placed program (`wsecc.generate`); with `validate`, greedy generation through the tiled
        functional simulator against onnxruntime."""
        from wsecc.generate import plan_generation

        program = self._need(self.program, "place_and_route")
        with self._stage("generate"):
            self.generation = plan_generation(program, self.prompt)
        g = self.generation
        self.progress(
            "generate",
            f"time to first token {g.ttft_s * 1e3:,.3f} ms; decode {g.tokens_per_s_per_sequence:,.0f} "
            f"tokens/s per sequence, {g.tokens_per_s:,.0f} aggregate; bound {g.decode_bound}",
        )
        if self._should_validate():
            self.validate_generation()
        return self

    def _need(self, product: T | None, stage: str) -> T:
        if product is None:
            raise WseccError(f"{self.model_path}: run the {stage} stage first")
        return product

    def _should_validate(self) -> bool:
        if self.options.weights == "inputs":  # no values to compute with
            return False
        if self.options.inject_fault is not None:  # a fault is there to be caught
            return True
        if self.options.validate is not None:
            return self.options.validate
        if self.options.mode == "train":  # finite differences take a minute even when small
            return False
        if self._numerics_skipped() is not None:
            return False
        if self.fused is None:  # reloaded from a folder: its report counted the parameters
            params = (self.saved_report or {}).get("model", {}).get("params", 0)
        else:
            params = self._model(self.fused)["params"]
        return params <= VALIDATE_AUTO_MAX_PARAMS

    def _too_large(self) -> str | None:
        """ "'NAME', X GiB at this binding (over 16 GiB)" when the largest tensor the unfused
        graph computes (what onnxruntime holds when the numerics run) is too large, else None."""
        g = self.graph if self.graph is not None else self.fused
        if g is None:
            return None
        sizes = ((v.type.size * v.type.dtype.itemsize, v.name) for n in g.nodes for v in n.outputs)
        size, name = max(sizes, default=(0, ""))
        if size <= MAX_TENSOR_BYTES:
            return None
        return (
            f"{name!r}, {size / 2**30:,.1f} GiB at this binding (over {MAX_TENSOR_BYTES >> 30} GiB)"
        )

    def _numerics_skipped(self) -> str | None:
        """Why numerics cannot run at all here (the report's `numerics_skipped`), or None."""
        if self.options.weights == "inputs":
            return NUMERICS_SKIPPED_WEIGHTLESS
        large = self._too_large()
        return None if large is None else f"skipped: onnxruntime would hold {large}"

    def _check_numerics_fit(self) -> None:
        large = self._too_large()
        if large is not None:
            raise WseccError(
                f"--validate: onnxruntime and the functional simulation would hold {large}; "
                "bind a shorter --seq or smaller --batch to check numerics, or --no-validate"
            )

    def _model(self, g: Any) -> dict[str, Any]:
        """The report's model facts for graph `g`, computed once (hashing the file and
        counting the parameters take seconds on a real model)."""
        from wsecc.analysis import flops_per_sample, param_count

        if self._model_facts is None or self._model_facts[0] is not g:
            facts = {
                "path": str(self.model_path),
                "sha256": (
                    self._model_sha256.result()
                    if self._model_sha256 is not None
                    else sha256_of(self.model_path)
                ),
                "params": param_count(g),
                # as the kernels do the work: known once the passes have fused the graph
                "flops_per_sample": flops_per_sample(g) if g is self.fused else None,
            }
            self._model_facts = (g, facts)
        return dict(self._model_facts[1])

    def _model_inputs(self) -> dict[str, Any]:
        """The inputs the numerics run on: `options.inputs`, else generated (seeded, padded)."""
        from wsecc.numerics import make_inputs

        if self.options.inputs:
            return _load_inputs(self.options.inputs, self.graph)
        return make_inputs(self.graph, seed=self.options.seed, padded=True)

    def validate_numerics(self) -> Compilation:
        """Run the tiled functional simulation and compare every output with onnxruntime."""
        from wsecc.sim.functional import simulate_functional, verdict

        o = self.options
        self._ensure_fused()
        self._check_numerics_fit()
        with self._stage("numerics"):
            self.sim_inputs = self._model_inputs()
            program = (self.fused, self.kernel_graph, self.sizing)
            fault = o.inject_fault
            self.sim_outputs = simulate_functional(
                *program, o.precision, self.sim_inputs, fault=fault
            )
            exact = (  # the structure check: the same tiled program in fp32
                self.sim_outputs
                if o.precision == "fp32"
                else simulate_functional(*program, "fp32", self.sim_inputs, fault=fault)
            )
            widened = self.import_info.widened if self.import_info is not None else ()
            self.numerics = verdict(
                self.model_path, self.fused, self.sim_inputs, self.sim_outputs, o.precision,
                exact, fault=fault, widened=widened,
            )  # fmt: skip
        self.progress("numerics", self.numerics.summary())
        return self

    def validate_generation(self) -> Compilation:
        """Generate mode: greedy generation of `options.new_tokens` tokens after a prompt of
        random ids (seeded), through the tiled functional simulator on the K/V cache it keeps
        (`wsecc.sim.generate`), against onnxruntime running the same file step by step
        (`wsecc.numerics.ort_generate`): ids and every step's logits, the simulation fed
        onnxruntime's ids (teacher forcing) so that every step is compared; in mixed or fp16
        also the same program's fp32 generation, the structure check. `generated` keeps the
        simulator's own greedy generation."""
        import numpy as np

        from wsecc.numerics import ort_generate, vocab_sizes
        from wsecc.sim.generate import generation_verdict, ids_input, simulate_generation

        o = self.options
        self._ensure_fused()
        self._check_numerics_fit()
        fused, kg = self._need(self.fused, "fuse"), self._need(self.kernel_graph, "lower")
        P, N, C = self.prompt, o.new_tokens, kg.tokens_per_sample
        if P + N - 1 > C and o.validate is None and N == DEFAULT_NEW_TOKENS:  # auto: what fits
            N = C - P + 1
        if P + N - 1 > C:
            raise WseccError(
                f"--validate generates {N} tokens after a {P}-token prompt: that needs a context "
                f"of {P + N - 1}, the graph is bound at {C}; raise --context or lower --prompt "
                "or --new-tokens"
            )
        ids = ids_input(fused)
        vocab = vocab_sizes(fused)[ids.name]
        rng = np.random.default_rng(o.seed)
        prompt_ids = rng.integers(0, vocab, size=(ids.type.shape[0], P), dtype=np.int64)
        with self._stage("numerics"):
            program = (fused, kg, self.sizing)
            info = self.import_info
            ref = ort_generate(
                self.model_path, prompt_ids, N, info.generation if info is not None else None
            )
            # fed onnxruntime's ids, so every step's logits are comparable even where the two
            # would choose differently (teacher forcing); the free run only when they do
            forced = {"fault": o.inject_fault, "forced": ref[0]}
            sim = simulate_generation(*program, o.precision, prompt_ids, N, **forced)
            exact = (  # the structure check: the same tiled program in fp32
                None
                if o.precision == "fp32"
                else simulate_generation(*program, "fp32", prompt_ids, N, **forced)
            )
            self.generation_check = generation_verdict(
                *sim, *ref, o.precision, exact=exact, fault=o.inject_fault, forced=True
            )
            if not self.generation_check.ids_equal:
                sim = simulate_generation(
                    *program, o.precision, prompt_ids, N, fault=o.inject_fault
                )
        self.generated = {"prompt_ids": prompt_ids, "generated_ids": sim[0], "logits": sim[1]}
        self.progress("numerics", self.generation_check.summary())
        return self

    @property
    def copies(self) -> int:
        """Copies of the program on the wafer (`wsecc.replicas`); 1 before placement."""
        return self.program.replicas.k if self.program is not None else 1

    def report_performance(self) -> dict[str, Any]:
        """The report's `performance` object (L1's figures when L1 ran, L0's otherwise): the
        throughput and utilization of every copy together; latency, the bottleneck and the
        on-wafer figures are one copy's."""
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

    def report_replicas(self) -> dict[str, Any]:
        """The report's `replicas` object: how many copies, why no more (`wsecc.replicas`),
        their tiles, and (once simulated) a copy's throughput, the total and the host I/O
        bound the copies share."""
        program = self._need(self.program, "place_and_route")
        reps = program.replicas
        rep = reps.to_json()
        if self.perf is not None and self.training is None:
            total = self.report_performance()["samples_per_s"]
            bound = host_samples_per_s(self.perf, self.target.io.offwafer_bytes_per_s)
            rep |= {
                "per_copy_samples_per_s": total / reps.k,
                "samples_per_s": total,
                "host_io_samples_per_s": None if math.isinf(bound) else bound,
            }
        return rep

    def report_sizing(self) -> dict[str, Any]:
        """The report's `sizing` object: the PEs of every copy, the rest one copy's."""
        s = self._need(self.sizing, "lower_and_size")
        return {
            "bottleneck": s.bottleneck,
            "balance": s.balance,
            "pes_used": self.copies * s.pes_used,
            "fabric_fraction": self.copies * s.fabric_fraction,
            "max_sram_bytes_per_pe": s.max_sram_per_pe,
            "samples_per_s": s.samples_per_s,
            "tokens_per_s": s.tokens_per_s,
            "ceiling_samples_per_s": s.ceiling_samples_per_s,
            "chunk_tokens": s.chunk_tokens,
        }

    def limits(self) -> Limits | None:
        """What limits the throughput, as the summary, the viewer and the PNG state it
        (`wsecc.limits`): the performance simulation's when it ran, else sizing's."""
        rep: dict[str, Any] = {"replicas": {"k": self.copies}}
        if self.sizing is not None:
            rep["sizing"] = self.report_sizing()
        if self.training is not None:
            rep["performance"] = self.report_training()
        elif self.generation is not None:
            rep["performance"] = self.report_generation()
        elif self.perf is not None:
            rep["performance"] = self.report_performance()
        return Limits.from_report(rep)

    def report_training(self) -> dict[str, Any]:
        """The report's `performance` object in train mode: the step's figures (`wsecc.train`);
        `latency_s` is one optimizer step."""
        t = self._need(self.training, "train")
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

    def report_generation(self) -> dict[str, Any]:
        """The report's `performance` object in generate mode (`wsecc.generate`):
        `tokens_per_s` is the aggregate decode rate, `latency_s` one token's decode step,
        `samples_per_s` sequences completed per second when each fills the context after its
        prompt (B / (time to first token + (C - P) token latencies)), `utilization` the decode
        step's work over the program rectangle's peak."""
        g = self._need(self.generation, "generate")
        new = g.context - g.prompt
        flops = sum(s.flops for s in g.stages)
        return {
            "model": "generate",
            "samples_per_s": g.batch / (g.ttft_s + new * g.decode_latency_s),
            "tokens_per_s": g.tokens_per_s,
            "latency_s": g.decode_latency_s,
            "utilization": min(
                1.0,
                flops / g.decode_latency_s / self.target.peak_flops_per_s(self.options.precision),
            ),
            "bottleneck": g.decode_bound,
            "bottleneck_kind": "decode",
            "on_wafer_bottleneck": g.slowest_kernel,
            "on_wafer_bottleneck_kind": "kernel",
            **g.to_json(),
        }

    def _link_util_max(self) -> float:
        if self.events is not None and self.events.links:
            return max(u.peak for u in self.events.links)
        flows = [f for f in self.perf.flows if f.kind != "host"] if self.perf else []
        return max((f.busy for f in flows), default=0.0)

    # --- reports -----------------------------------------------------------------------------

    def _stage(self, name: str) -> _Timer:
        self.progress(name, "")
        return _Timer(self.seconds, name)

    def report(self, *, timings: bool = True) -> dict[str, Any]:
        """The `wsecc.report/1` dictionary (docs/report-schema.md) of the stages run so far.

        With `timings=False` every wall-clock field is left out, so two compiles of the same
        inputs and options (deterministic placement) give equal reports.
        """
        from wsecc.analysis import fused_ops

        g = self.fused if self.fused is not None else self.graph
        saved = self.saved_report or {}
        rep: dict[str, Any] = {"schema": REPORT_SCHEMA, "wsecc": __version__}
        rep["mode"] = self.options.mode.value
        if g is not None:
            rep["model"] = self._model(g)
            if self.import_info is not None and self.import_info.widened:
                rep["model"]["widened"] = list(self.import_info.widened)
        else:
            rep["model"] = saved["model"]
        t = self.target
        rep["target"] = {
            "name": t.name,
            "fabric": {"width": t.fabric.program_width, "height": t.fabric.program_height},
        }
        rep["options"] = {
            k: v
            for k, v in dataclasses.asdict(self.options).items()
            if k
            not in ("print_after_all", "dump_dir", "check_each_pass", "explain", "inject_fault")
        }
        if self.import_info is not None:
            rep["bindings"] = dict(self.import_info.bindings)
            rep["passes"] = [{"name": r.name, "seconds": r.seconds} for r in self.pass_records]
            if self.import_info.generation is not None:
                rep["generation"] = dataclasses.asdict(self.import_info.generation)
        else:
            rep["bindings"], rep["passes"] = saved.get("bindings", {}), saved.get("passes", [])
            if "generation" in saved:
                rep["generation"] = saved["generation"]
        if self.fused is not None:
            rep["ops_after"] = self.fused.op_histogram()
            rep["fused"] = fused_ops(self.fused)
        elif saved:
            rep["ops_after"], rep["fused"] = saved.get("ops_after", {}), saved.get("fused", [])
        rep["precision"] = self.options.precision
        if self.sizing is not None:
            rep["kernels"] = self._kernel_rows()
            rep["sizing"] = self.report_sizing()
        if self.placement is not None:
            p, r = self.placement, self.routing
            rep["placement"] = {
                "placer": self.options.placer, "objective": p.objective, "bound": p.bound,
                "bound_kind": p.bound_kind, "gap": p.gap, "status": p.status, "seconds": p.seconds,
                "pool_shapes": self.pool_shapes,
            }  # fmt: skip
            if p.search is not None:  # what CP-SAT's search added to its start, why it stopped
                rep["placement"]["search"] = {**dataclasses.asdict(p.search), "gain": p.search.gain}
            rep["routing"] = {
                "flows": len(self.problem.flows), "lanes": len(r.lanes),
                "colors_max": r.colors_used_max, "color_budget": r.color_budget,
                "color_lower_bound": r.color_lower_bound, "link_load_max": r.link_load_max,
                "total_length": r.total_length,
            }  # fmt: skip
            rep["replicas"] = self.report_replicas()
        if self.perf is not None:
            rep["routing"]["link_util_max"] = self._link_util_max()
            sm = self.sram
            counts, edges = sm.histogram()
            rep["sram"] = {
                "budget_bytes": sm.sram_bytes_per_pe,
                "max_bytes": sm.max_bytes,
                "mean_bytes": sm.mean_used_bytes,
                "mean_fabric_bytes": sm.mean_fabric_bytes,
                "pes_used": sm.pes_used,
                "histogram": {"bin_bytes": int(edges[1] - edges[0]), "counts": counts.tolist()},
            }
            rep["performance"] = self.report_performance()
            rep["numerics"] = self.numerics.to_json() if self.numerics is not None else None
        if self.generation is not None:
            rep["performance"] = self.report_generation()
            check = self.generation_check
            rep["numerics"] = check.to_json() if check is not None else None
        if self.training is not None:
            rep["performance"] = self.report_training()
            rep["numerics"] = self.gradients.to_json() if self.gradients is not None else None
        why = self._numerics_skipped() if "numerics" in rep and rep["numerics"] is None else None
        if why is not None:
            rep["numerics_skipped"] = why
        rep["stage_seconds"] = dict(self.seconds)
        if not timings:
            _drop_timings(rep)
        return rep

    def _kernel_rows(self) -> list[dict[str, Any]]:
        rows = []
        for ks in self.sizing.kernels:  # weight streaming: the unit on the wafer
            k = self.kernel_graph.kernel(ks.name)
            row: dict[str, Any] = {"name": k.name, "kind": k.kind.value}
            w, h = ks.w, ks.h
            if self.placement is not None:  # the placer may pick one of sizing's alternatives
                rect = self.placement.rects[k.name]
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
            if self.perf is not None:
                kp = self.perf.kernel(k.name)
                row["sram_bytes_per_pe_max"] = self.sram.kernel_max[k.name]
                row["cycles_per_sample"] = kp.cycles_per_sample
                row["bound"] = kp.bound
            row["onnx_nodes"] = list(k.provenance)
            rows.append(row)
        return rows

    def write(self, out_dir: str | os.PathLike[str], *, keep: bool = False) -> Path:
        """Write the output folder atomically (a temporary sibling renamed into place).

        `keep=True` carries over the files of an existing `out_dir` that this compilation does
        not produce again (a re-simulation keeps fused.ir.txt, say)."""
        from wsecc.ir.printer import format_graph

        files: dict[str, str | bytes] = {}
        old = Path(out_dir)
        if keep and old.is_dir():
            files |= {p.name: p.read_bytes() for p in old.iterdir() if p.is_file()}
            for stale in ("trace.json", "inputs.npz", "outputs.npz", "generated.npz"):
                files.pop(stale, None)
        files["report.json"] = json.dumps(self.report(), indent=1) + "\n"
        if self.fused is not None:
            files["fused.ir.txt"] = format_graph(self.fused)
        if self.kernel_graph is not None:
            files["kernels.json"] = json.dumps(self.kernel_graph.to_json(), indent=1) + "\n"
            files["sizing.json"] = json.dumps(self.sizing.to_json(), indent=1) + "\n"
        files["target.toml"] = target_source(self.options.target)[0]
        if self.placement is not None:
            files["placement.json"] = self.placement.dumps(include_timing=False) + "\n"
            files["routing.json"] = self.routing.dumps() + "\n"
            files["viewer.html"] = self.viewer_html()
            files["placement.png"] = self._png(_placement_png)
        if self.perf is not None:
            files["sram.png"] = self._png(_sram_png)
            files["roofline.png"] = self._png(_roofline_png)
        if self.generation is not None:
            files["decode_roofline.png"] = self._png(_decode_roofline_png)
        if self.events is not None:
            files["trace.json"] = json.dumps(
                {"traceEvents": list(self.events.trace), "displayTimeUnit": "ns"}
            )
        if self.options.save_outputs and self.generated is not None:
            files["generated.npz"] = _npz(self.generated)
        if self.options.save_outputs and self.sim_outputs is not None:
            files["inputs.npz"] = _npz(self.sim_inputs)
            files["outputs.npz"] = _npz(self.sim_outputs)
        return write_folder(Path(out_dir), files)

    @property
    def title(self) -> str:
        title = f"{self.model_path.name} on {self.target.name}"
        t = self.training
        if t is None:
            return title
        if t.execution.value == "pipelined":
            return f"{title}: training, pipelined"
        return f"{title}: training, weight streaming ({t.layout.name.split(':')[-1]} on the wafer)"

    def viewer_html(self) -> str:
        """viewer.html: the placed, routed compile, self-contained (wsecc.view)."""
        from wsecc.view import render_viewer

        info = None
        if self.perf is not None:
            info = {
                k.name: {
                    "bound": k.bound,
                    "cycles_per_sample": k.cycles_per_sample,
                    "sram_bytes_per_pe": self.sram.kernel_max[k.name],
                }
                for k in self.perf.kernels
            }
        return render_viewer(
            self._need(self.program, "place_and_route"), title=self.title, kernel_info=info,
            sram_per_pe=self.sram.total if self.sram is not None else None, limits=self.limits(),
        )  # fmt: skip

    def _png(self, draw: Callable[[Compilation, Path], None]) -> bytes:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "figure.png"
            draw(self, path)
            return path.read_bytes()


def _sram_png(c: Compilation, path: Path) -> None:
    from wsecc.view.png import write_sram_png

    write_sram_png(path, c.sram)


def _decode_roofline_png(c: Compilation, path: Path) -> None:
    from wsecc.view.png import write_decode_roofline_png

    g = c._need(c.generation, "generate")
    write_decode_roofline_png(
        path,
        g.roofline(),
        f"{c.title}: decode {g.tokens_per_s_per_sequence:,.0f} tokens/s per sequence, "
        f"bound {g.decode_bound}",
    )


def _roofline_png(c: Compilation, path: Path) -> None:
    from wsecc.view.png import write_roofline_png

    write_roofline_png(path, c.perf, c.target)


def _npz(arrays: Mapping[str, Any]) -> bytes:
    import io

    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, **dict(arrays))
    return buf.getvalue()


def _load_inputs(path: str, graph: Any) -> dict[str, Any]:
    """Model inputs from an .npz keyed by the ONNX input names, checked against the graph."""
    from wsecc.sim.functional import load_npz

    try:
        feeds = load_npz(path)
    except (OSError, ValueError) as e:
        raise WseccError(f"--inputs {path}: cannot read an .npz ({e})") from None
    for v in graph.inputs:
        if v.name not in feeds:
            raise WseccError(
                f"--inputs {path}: no array {v.name!r} (the model's inputs: "
                f"{', '.join(i.name for i in graph.inputs)})"
            )
        if tuple(feeds[v.name].shape) != tuple(v.type.shape):
            raise WseccError(
                f"--inputs {path}: {v.name!r} has shape {tuple(feeds[v.name].shape)}, the "
                f"bound model expects {tuple(v.type.shape)} (bind with --batch/--seq)"
            )
        feeds[v.name] = feeds[v.name].astype(v.type.dtype.numpy, copy=False)
    return feeds


def _placement_png(c: Compilation, path: Path) -> None:
    from wsecc.view import write_placement_png

    write_placement_png(
        path, c.kernel_graph, c.placement, c.target, c.title, limits=c.limits(), routing=c.routing,
        replicas=c.program.replicas,
    )  # fmt: skip


class _Timer:
    def __init__(self, into: dict[str, float], name: str) -> None:
        self.into, self.name = into, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.into[self.name] = self.into.get(self.name, 0.0) + time.perf_counter() - self.t0


_TIMING_KEYS = frozenset({"seconds", "stage_seconds", "l1_seconds", "wall_seconds"})


def _drop_timings(obj: Any) -> None:
    if isinstance(obj, dict):
        for k in [k for k in obj if k in _TIMING_KEYS]:
            del obj[k]
        for v in obj.values():
            _drop_timings(v)
    elif isinstance(obj, list):
        for v in obj:
            _drop_timings(v)


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
