"""The mode as a value: one strategy per mode chooses, in one place, what the frontend binds,
what sizing optimises, how the program is placed, what the simulation runs and which
performance result the report gets.

- `Infer`: regions sized for pipeline throughput, replicated on the wafer, L0/L1 simulated,
  numerics against onnxruntime;
- `Train`: a training step costed pipelined or weight-streaming (`wsecc.modes.train`), its layout
  placed to show it, the gradient check;
- `Generate`: regions sized for the decode step with the K/V cache resident
  (`wsecc.modes.generate`), prefill and decode figures, greedy generation against onnxruntime.

`strategy(mode)` gives the strategy of a `wsecc.vocab.Mode`; nothing else in the chain looks at
the mode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from wsecc.check.checks import (
    check_generation,
    check_gradients,
    check_numerics,
    should_validate,
)
from wsecc.core.experts import charges_text, decode_charges
from wsecc.core.flow import FILL_STEPS, ForDecode, ForThroughput, SizingRule, lower, simulate
from wsecc.core.instrument import Instrument
from wsecc.core.partition import (
    SizedSystems,
    crossing_latency_s,
    renamed,
    size_over_systems,
)
from wsecc.core.replicas import GENERATE_MODE, TRAIN_MODE
from wsecc.core.stages import Fused, Placed, Simulated, Sized
from wsecc.kernels import KernelSizing
from wsecc.kernels.costs import SramBreakdown
from wsecc.modes.generate import (
    GenerationPerf,
    default_prompt,
    generation_kernels,
    over_systems,
    plan_generation,
)
from wsecc.modes.train import plan_training
from wsecc.options import Options
from wsecc.report.results import (
    GeneratePerformance,
    InferPerformance,
    SystemRow,
    SystemsInferPerformance,
    TrainPerformance,
    one_system,
    system_rows,
)
from wsecc.sim.events import systems_trace
from wsecc.vocab import Mode, SimLevel

if TYPE_CHECKING:
    from wsecc.ir.core import Graph
    from wsecc.kernels import KernelGraph, Sizing

Say = Callable[[str, str], None]


@dataclass(frozen=True)
class Layout:
    """What a mode places: the kernel graph and sizing on the wafer, the sizing rule every
    re-sizing and re-costing follows, the copies wanted (None: as many as help), and the reason
    a mode keeps one copy (None: the placer says)."""

    kernel_graph: KernelGraph
    sizing: Sizing
    rule: SizingRule
    replicas: int | None
    one_copy_because: str | None = None
    # several systems (`wsecc.core.partition`): each system's graph and sizing, placed in turn
    systems: SizedSystems | None = None


class ModeStrategy(Protocol):
    """What a mode decides (module doc)."""

    @property
    def mode(self) -> Mode: ...

    @property
    def size_stage(self) -> str:
        """The progress and timing name of its sizing stage."""
        ...

    @property
    def placed_in_sweep(self) -> bool:
        """Whether a sweep places its points (train mode's figures are the step's cost, known
        from sizing on; its placement only shows the layout)."""
        ...

    def bound_batch(self, options: Options) -> int:
        """The batch the graph is bound at."""
        ...

    def size(self, fused: Fused, say: Say) -> Sized:
        """Lower the fused graph and size its kernels (the stage's products, untimed)."""
        ...

    def size_summary(self, sized: Sized) -> str:
        """The sizing stage's progress line."""
        ...

    def check(self, sized: Sized, ins: Instrument) -> Sized:
        """`sized` with the check a mode runs before placement (train's gradients), timed in
        `ins`."""
        ...

    def layout(self, sized: Sized) -> Layout:
        """What placement places."""
        ...

    def simulate(
        self, placed: Placed, ins: Instrument, fused_again: Callable[[], Fused]
    ) -> Simulated:
        """What the placed program achieves, and the check when it runs, timed in `ins`
        (`fused_again`: the fused graph, re-imported when the compile was reloaded from its
        folder)."""
        ...


def _params(fused: Fused | None, sized: Sized) -> int:
    if fused is not None:
        return fused.params
    return int((sized.job.saved or {}).get("model", {}).get("params", 0))


def _sizing_line(sized: Sized) -> str:
    kg = sized.kernel_graph
    return f"{len(kg.kernels)} kernels, {len(kg.flows)} flows; " + sized.sizing.summary()


def _graph(sized: Sized) -> Graph | None:
    return sized.fused.loaded.graph if sized.fused is not None else None


@dataclass(frozen=True)
class Infer:
    """Forward passes, layer-pipelined and replicated (ARCHITECTURE §3)."""

    mode: Mode = Mode.INFER
    size_stage: str = "size"
    placed_in_sweep: bool = True

    def bound_batch(self, options: Options) -> int:
        return options.batch or 1

    def size(self, fused: Fused, say: Say) -> Sized:
        return _sized(fused, lower(fused.graph), ForThroughput(), say)

    def size_summary(self, sized: Sized) -> str:
        return _sizing_line(sized)

    def check(self, sized: Sized, ins: Instrument) -> Sized:
        return sized

    def layout(self, sized: Sized) -> Layout:
        o = sized.job.options
        if sized.systems is not None:
            return Layout(
                sized.kernel_graph, sized.sizing, ForThroughput(), 1, SEVERAL_SYSTEMS,
                sized.systems,
            )  # fmt: skip
        return Layout(sized.kernel_graph, sized.sizing, ForThroughput(), o.replicas)

    def simulate(
        self, placed: Placed, ins: Instrument, fused_again: Callable[[], Fused]
    ) -> Simulated:
        o = placed.job.options
        if placed.sized.systems is not None:
            return _simulate_infer_systems(placed, ins, fused_again)
        with ins.stage("simulate"):
            sram, perf, events = simulate(placed.program, o)
        performance = InferPerformance(
            perf, events, placed.program.replicas.k, one_system(placed, [perf.latency_s])
        )
        ins.say("simulate", performance.summary())
        return _with_numerics(
            Simulated(placed, performance, sram, perf, events, trace=ins.trace), ins, fused_again
        )


@dataclass(frozen=True)
class Train:
    """A training step (ARCHITECTURE §3): costed by `wsecc.modes.train`, its layout (the pipelined
    program, or the slowest streamed unit on the whole wafer) placed to show and check it; the
    step's figures stay the costing's. The gradient check (minutes even when small) runs only
    when asked."""

    mode: Mode = Mode.TRAIN
    size_stage: str = "train"
    placed_in_sweep: bool = False

    def bound_batch(self, options: Options) -> int:
        return 1  # the kernels are per sample; the global batch is the step's

    def size(self, fused: Fused, say: Say) -> Sized:
        o, target = fused.job.options, fused.job.target
        kg = lower(fused.graph)
        assert o.systems is not None  # Options refuses --systems auto in train mode
        t = plan_training(
            kg, target, o.precision, execution=o.execution, batch=o.batch, systems=o.systems,
            chunk_tokens=o.chunk_tokens,
        )  # fmt: skip
        return Sized(fused.job, fused, kg, t.sizing, training=t)

    def size_summary(self, sized: Sized) -> str:
        assert sized.training is not None  # made by `size`
        return TrainPerformance(sized.training).summary()

    def check(self, sized: Sized, ins: Instrument) -> Sized:
        """`sized` with the gradient check, when it runs."""
        if sized.fused is None or not should_validate(
            sized.job, _graph(sized), sized.fused.params, by_default=False
        ):
            return sized
        with ins.stage("numerics"):
            check = check_gradients(sized.fused)
        ins.say("numerics", check.summary())
        return dataclasses.replace(sized, check=check, trace=ins.trace)

    def layout(self, sized: Sized) -> Layout:
        t = sized.training
        assert t is not None  # made by `size`
        # training's data parallelism is over systems (`wsecc.modes.train`): one program
        return Layout(t.layout, t.sizing, ForThroughput(t.costs), 1, TRAIN_MODE)

    def simulate(
        self, placed: Placed, ins: Instrument, fused_again: Callable[[], Fused]
    ) -> Simulated:
        t = placed.sized.training
        assert t is not None
        return Simulated(placed, TrainPerformance(t), check=placed.sized.check, trace=placed.trace)


@dataclass(frozen=True)
class Generate:
    """Token generation (ARCHITECTURE §3): every attention keeps the K/V cache of the batch's
    sequences, regions sized for the decode step's latency, one placement the sequences share;
    prefill and decode figures from L0."""

    mode: Mode = Mode.GENERATE
    size_stage: str = "size"
    placed_in_sweep: bool = True

    def bound_batch(self, options: Options) -> int:
        return options.batch or 1  # the sequences in flight

    def _rule(self, options: Options) -> ForDecode:
        return ForDecode(options.batch or 1)

    def size(self, fused: Fused, say: Say) -> Sized:
        o, target = fused.job.options, fused.job.target
        rule = self._rule(o)
        one = o.systems == 1
        kg = generation_kernels(
            lower(fused.graph), rule.batch, target, o.precision, o.chunk_tokens, one_wafer=one
        )
        return _sized(fused, kg, rule, say)

    def size_summary(self, sized: Sized) -> str:
        return _sizing_line(sized)

    def check(self, sized: Sized, ins: Instrument) -> Sized:
        return sized

    def layout(self, sized: Sized) -> Layout:
        # the batch's sequences share one placement (`wsecc.modes.generate`)
        rule = self._rule(sized.job.options)
        return Layout(sized.kernel_graph, sized.sizing, rule, 1, GENERATE_MODE, sized.systems)

    def prompt(self, sized: Sized) -> int:
        """`options.prompt`, or `default_prompt` of the context."""
        return sized.job.options.prompt or default_prompt(sized.kernel_graph.tokens_per_sample)

    def simulate(
        self, placed: Placed, ins: Instrument, fused_again: Callable[[], Fused]
    ) -> Simulated:
        # L1 would stream a whole context; decode is a latency (L0)
        if placed.job.options.sim is SimLevel.L1:
            ins.say("simulate", L1_IN_GENERATE)
        o = dataclasses.replace(placed.job.options, sim=SimLevel.L0)
        with ins.stage("simulate"):
            sram, perf, events = simulate(placed.program, o)
        sized, target = placed.sized, placed.job.target
        with ins.stage("generate"):
            generation, rows = _generation(
                placed, self.prompt(sized), lambda line: ins.say("generate", line)
            )
        peak = placed.systems.count * target.peak_flops_per_s(o.precision)
        performance = GeneratePerformance(generation, peak, rows)
        ins.say("generate", performance.summary())
        if not should_validate(sized.job, _graph(sized), _params(sized.fused, sized)):
            return Simulated(placed, performance, sram, perf, events, trace=ins.trace)
        fused = fused_again()
        placed = dataclasses.replace(placed, sized=dataclasses.replace(sized, fused=fused))
        with ins.stage("numerics"):
            check, generated = check_generation(
                fused, sized.kernel_graph, whole_sizing(placed), self.prompt(sized)
            )
        ins.say("numerics", check.summary())
        arrays = {"generated.npz": generated}
        return Simulated(placed, performance, sram, perf, events, check, arrays, ins.trace)


L1_IN_GENERATE = (
    "l0: generate mode's decode step is one token's latency through the regions, which L0 "
    "costs; L1 streams chunks of many samples, so --sim l1 is not run here"
)
"""What generate mode says when asked for L1."""


SEVERAL_SYSTEMS = "several systems: one copy of each layer group, one on each system"
"""Why a program over several systems keeps one copy per system (`wsecc.core.replicas`)."""


def _sized(fused: Fused, kg: KernelGraph, rule: SizingRule, say: Say) -> Sized:
    """`kg` sized by `rule` on one system, or split over the systems the options ask for
    (`wsecc.core.partition`), each group sized by `rule`; one system (auto, on a model that fits
    a wafer) is the one-system compile."""
    o, target = fused.job.options, fused.job.target
    if o.systems == 1:
        sizing = rule.size(kg, target, o.precision, FILL_STEPS[0], o.chunk_tokens)
        return Sized(fused.job, fused, kg, sizing)
    over = size_over_systems(kg, target, o.precision, rule, o.chunk_tokens, o.systems)
    say("size", f"{over.count} system(s): {over.why}")
    if over.count == 1:
        return Sized(fused.job, fused, kg, over.sizings[0])
    return Sized(fused.job, fused, kg, over.sizings[0], systems=over)


def whole_sizing(placed: Placed) -> Sizing:
    """Every kernel's region as placed, over every system (system 0's program when there is
    one): what the functional simulation reads. A system that shares another's placement
    takes that system's regions kernel by kernel, in order. A kernel the host computes
    (`wsecc.core.partition.host_lookups`) is simulated on one PE: its lookup does not depend on
    a region."""
    systems = placed.systems
    sized = placed.sized.systems
    if sized is None:
        return placed.program.sizing
    kg = placed.sized.kernel_graph
    kernels = [
        KernelSizing(name, kg.kernel(name).kind.value, 1, 1, SramBreakdown(0, 0, 0, 0), 0, 0)
        for name in sized.partition.host_held
    ]
    for i, part in enumerate(sized.partition.parts):
        kernels += renamed(systems.programs[i].sizing, part.graph).kernels
    return dataclasses.replace(placed.program.sizing, kernels=tuple(kernels))


def _crossing_s(placed: Placed) -> float:
    """A crossing's latency between two systems (`wsecc.core.partition.crossing_latency_s`)."""
    return crossing_latency_s(placed.job.target)


def _generation(
    placed: Placed, prompt: int, say: Callable[[str], None] = lambda line: None
) -> tuple[GenerationPerf, tuple[SystemRow, ...]]:
    """The generation figures over the program's systems (`wsecc.modes.generate.over_systems`), each
    distinct placement's computed once, and a row per system; `say` gets the line on the
    split blocks' charge, if any (`wsecc.core.experts.charges_text`)."""
    systems = placed.systems
    if placed.sized.systems is None:
        program = placed.program
        blocks, (choices,) = decode_charges(program.kg, [(program, program.kg)])
        if blocks:
            say(charges_text(blocks))
        g = plan_generation(program, prompt, choices)
        return g, one_system(placed, [g.decode_latency_s])
    parts = placed.sized.systems.partition.parts
    # a block's shards charged the worst split of its k choices (`wsecc.core.experts`): systems
    # sharing a placement share a plan only when their shards are charged alike
    blocks, charged = decode_charges(
        placed.sized.kernel_graph,
        [(systems.programs[i], p.graph) for i, p in enumerate(parts)],
    )
    if blocks:
        say(charges_text(blocks))
    key = [(systems.placed(i), tuple(sorted(charged[i].items()))) for i in range(systems.count)]
    own: dict[tuple[object, ...], GenerationPerf] = {}
    for i, ki in enumerate(key):
        if ki not in own:
            own[ki] = plan_generation(systems.programs[i], prompt, charged[i])
    per = [own[ki] for ki in key]
    g = over_systems(per, [p.first for p in parts], _crossing_s(placed))
    return g, system_rows(placed, [x.decode_latency_s for x in per])


def _simulate_infer_systems(
    placed: Placed, ins: Instrument, fused_again: Callable[[], Fused]
) -> Simulated:
    """Infer mode over several systems: L0 (and L1 when asked) of each distinct placement, the
    pipeline of the systems (`wsecc.report.results.SystemsInferPerformance`); the SRAM map, L0
    and L1 kept are system 0's, except L1's trace, which holds every system's
    (`wsecc.sim.events.systems_trace`)."""
    o, systems = placed.job.options, placed.systems
    with ins.stage("simulate"):
        own = {i: simulate(systems.programs[i], o) for i in set(systems.placed_as)}
        runs = [own[systems.placed(i)] for i in range(systems.count)]
    perfs = tuple(perf for _, perf, _ in runs)
    l1 = tuple(ev for _, _, ev in runs if ev is not None)
    events = l1 if len(l1) == len(runs) else None
    rows = system_rows(placed, [p.latency_s for p in events or perfs])
    performance = SystemsInferPerformance(perfs, _crossing_s(placed), rows, events)
    ins.say("simulate", performance.summary())
    sram, perf, first = runs[0]
    if events is not None and first is not None:
        crossing = _crossing_s(placed)
        starts = [sum(e.latency_s + crossing for e in events[:i]) for i in range(len(events))]
        first = dataclasses.replace(first, trace=systems_trace([e.trace for e in events], starts))
    return _with_numerics(
        Simulated(placed, performance, sram, perf, first, trace=ins.trace), ins, fused_again
    )


def _with_numerics(
    simulated: Simulated, ins: Instrument, fused_again: Callable[[], Fused]
) -> Simulated:
    """`simulated` with inference's numerics against onnxruntime when the compile validates:
    the fused graph made again if the compile was reloaded, the functional simulation over
    every kernel's placed region (`whole_sizing`)."""
    placed = simulated.placed
    sized = placed.sized
    if not should_validate(sized.job, _graph(sized), _params(sized.fused, sized)):
        return simulated
    fused = fused_again()
    placed = dataclasses.replace(placed, sized=dataclasses.replace(sized, fused=fused))
    with ins.stage("numerics"):
        check, inputs, outputs = check_numerics(fused, sized.kernel_graph, whole_sizing(placed))
    ins.say("numerics", check.summary())
    arrays = {"inputs.npz": inputs, "outputs.npz": outputs}
    return dataclasses.replace(
        simulated, placed=placed, check=check, arrays=arrays, trace=ins.trace
    )


STRATEGIES: dict[Mode, ModeStrategy] = {
    Mode.INFER: Infer(),
    Mode.TRAIN: Train(),
    Mode.GENERATE: Generate(),
}


def strategy(mode: Mode) -> ModeStrategy:
    """The strategy of `mode`."""
    return STRATEGIES[Mode(mode)]


def bound_batch(options: Options) -> int:
    """The batch the graph is bound at: `options.batch` (in generate mode the sequences in
    flight), or 1 in train mode, whose kernels are per sample (the global batch is the step's,
    `wsecc.modes.train`)."""
    return strategy(options.mode).bound_batch(options)


def per_sample_batch(options: Options) -> int:
    """The batch a graph must be bound at for `options` when it may be shared with other
    batches: `bound_batch`, or 1 when numerics do not run (`validate` false), for then every
    later stage is per sample (kernels, sizing, placement) or takes the batch as a number
    (performance). A sweep's points that differ in batch alone share one frontend this way."""
    return bound_batch(options) if options.validate is not False else 1
