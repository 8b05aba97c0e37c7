"""The compile as one chain of pure functions over frozen stage values (`wsecc.core.stages`):

    job(path, options) ─load─▶ Loaded ─fuse─▶ Fused ─size─▶ Sized ─place─▶ Placed
                       ─simulate─▶ Simulated

Each function takes the stage before and returns a new value, timing itself, dumping its
product (`--dump-dir`) and explaining its decisions (`--explain`) through one `Instrument`
(`wsecc.core.instrument`, the pass manager's too) and telling `say(stage, message)` what it did; the mode's strategy (`wsecc.modes.strategy`) decides what sizing,
placement and simulation do. The CLI, the Python API (`wsecc.compiler`, a façade over this)
and the sweep run these same functions; a sweep shares a `Fused` between points and a placement
between tasks (`with_placement`).

Example::

    from wsecc.core import chain
    fused = chain.fuse(chain.load(chain.job("samples/gpt2_legacy_op17.onnx", seq=32)))
    done = chain.simulate(chain.place(chain.size(fused)))
    print(done.performance.to_json()["samples_per_s"])
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from wsecc.core.experts import expert_shards
from wsecc.core.flow import fuse as run_passes
from wsecc.core.flow import load as import_model
from wsecc.core.flow import place_and_route, split_experts
from wsecc.core.instrument import Instrument, Say, Trace, quiet
from wsecc.core.partition import PartitionError, place_systems, size_over_systems
from wsecc.core.program import Program, Systems
from wsecc.core.replicas import Replicas
from wsecc.core.stages import Fused, Job, Loaded, Placed, Simulated, Sized
from wsecc.errors import WseccError
from wsecc.frontend.common import widened_text
from wsecc.hashing import sha256_beside
from wsecc.ir.core import Graph, Op
from wsecc.kernels import Sizing, SizingError
from wsecc.modes.strategy import Layout, bound_batch, per_sample_batch, strategy
from wsecc.options import Options, saved_options
from wsecc.place.from_kernels import placement_problem
from wsecc.place.problem import STOPS, Placement, PlacementError, PlacementProblem, tailored
from wsecc.route.problem import Routing
from wsecc.targets import load_target
from wsecc.view import load_outdir


def _instrument(trace: Trace, job: Job, say: Say) -> Instrument:
    """The instrument of a stage of `job` after `trace` (its options' dump folder and explain)."""
    o = job.options
    return Instrument.after(trace, say, o.dump_dir, o.explain)


def _json(value: Any) -> str:
    return json.dumps(value, indent=1) + "\n"


def job(path: str | os.PathLike[str], options: Options | None = None, **changes: Any) -> Job:
    """What to compile: the model file, the options (keywords change `options`), the target
    (loaded now, so a bad target fails before the slow stages)."""
    options = dataclasses.replace(options or Options(), **changes)
    return Job(Path(path), options, load_target(options.target))


def load(job: Job, say: Say = quiet) -> Loaded:
    """Load, bind and import the ONNX file (folded, into the wsecc IR); the file's hash is
    taken on another thread meanwhile."""
    sha = sha256_beside(job.model_path)
    ins = _instrument(Trace(), job, say)
    with ins.stage("frontend"):
        graph, info = import_model(job.model_path, job.options, bound_batch(job.options))
    n, widened = info.weight_inputs, info.widened
    say(
        "frontend",
        f"{len(graph.nodes)} ops after folding, bindings {info.describe_bindings()}"
        + (f"; {n} weights from input shapes, no data" if n else "")
        + (f"; {widened_text(widened)}" if widened else ""),
    )
    return Loaded(job, graph, info, sha, ins.trace)


def fuse(loaded: Loaded, say: Say = quiet) -> Fused:
    """The pass pipeline (canonicalize and fuse) on the imported graph."""
    o = loaded.job.options
    ins = _instrument(loaded.trace, loaded.job, say)
    with ins.stage("passes"):
        graph, records = run_passes(loaded.graph, loaded.job.model_path, o, ins)
        shards = expert_shards(graph, loaded.job.target, o)
        if shards:  # a mixture-of-experts block over several systems (`wsecc.core.experts`)
            graph, more = split_experts(graph, shards, ins)
            records = [*records, *more]
            counts = sorted(set(shards.values())) if isinstance(shards, dict) else [shards]
            ins.explain(
                "passes",
                f"decided: moe blocks split into {' or '.join(map(str, counts))} shards of their "
                "experts (--expert-shards, or the fewest whose largest fits one system)",
            )
    for r in records:
        say(
            "passes",
            f"{r.name:<15} {r.nodes_before:>5} -> {r.nodes_after:<5} ops ({r.seconds * 1e3:.0f} ms)",
        )
        for note in r.notes:
            ins.explain("passes", f"  not fused: {note}")
    return Fused(loaded, graph, tuple(records), ins.trace)


def fork(fused: Fused, options: Options) -> Fused:
    """`fused` under other options (another target, precision, placer, ...): the frontend and
    pass products are shared. The bindings (batch, seq, dims) must be `fused`'s, except the
    batch of a graph bound at `per_sample_batch` 1 when `options` run no numerics; a sweep
    compiles many points of one binding this way."""
    o = fused.job.options
    batch = bound_batch(o)
    if batch == 1 and per_sample_batch(options) == 1:
        batch = bound_batch(options)  # the graph is per sample for these options
    if (bound_batch(options), options.seq, dict(options.dims)) != (batch, o.seq, dict(o.dims)):
        raise ValueError("fork: the bindings (batch, seq, dims) must stay the same")
    job = Job(fused.job.model_path, options, load_target(options.target))
    if _shards_may_differ(fused.graph, o, options):  # split again from the imported graph
        return fuse(dataclasses.replace(fused.loaded, job=job))
    return in_job(fused, job)


def _shards_may_differ(graph: Graph, old: Options, new: Options) -> bool:
    """Whether a fused graph with moe ops, split for `old` (`wsecc.core.experts`), might be split
    otherwise for `new`: the options that choice reads differ."""

    def reads(o: Options) -> tuple[object, ...]:
        return (o.expert_shards, o.systems == 1, o.target, o.precision, o.mode, o.chunk_tokens)

    return reads(old) != reads(new) and any(n.op is Op.MOE for n in graph.nodes)


def in_job(fused: Fused, job: Job) -> Fused:
    """`fused` (its graphs, shared) as a stage of `job`."""
    return dataclasses.replace(fused, loaded=dataclasses.replace(fused.loaded, job=job))


def size(fused: Fused, say: Say = quiet) -> Sized:
    """Lower the fused graph to kernels and size them as the mode does (in train mode: cost the
    training step, and check the gradients when asked)."""
    mode = strategy(fused.job.options.mode)
    ins = _instrument(fused.trace, fused.job, say)
    with ins.stage(mode.size_stage):
        sized = mode.size(fused, say)
    say(mode.size_stage, mode.size_summary(sized))
    ins.explain(mode.size_stage, sizing_decision(sized.sizing))
    if ins.dump_dir is not None:  # the text only for a dump (0.5 s of JSON for GPT-2 XL)
        ins.dump("sizing", _json(sized.sizing.to_json()), "json")
    return mode.check(dataclasses.replace(sized, trace=ins.trace), ins)


def sizing_decision(sizing: Sizing) -> str:
    """What sizing decided, for `--explain`: the pipeline's bottleneck and the fill."""
    s = sizing
    return (
        f"decided: bottleneck {s.bottleneck} at {s.stage_cycles:,} cycles/sample (balance "
        f"{s.balance:.2f}, 1.00 is even); regions may fill {s.fill:.0%} of the usable PEs "
        f"({s.strategy} sizing) and take {s.fabric_fraction:.1%}"
    )


def placement_decision(program: Program, sized_fill: float) -> str:
    """What placement decided, for `--explain`: the placer, why it stopped, the copies, and
    the fill it re-sized to when the regions did not pack at sizing's."""
    p, reps = program.placement, program.replicas
    if p.search is not None:
        stopped = p.search.reason or STOPS.get(p.search.stopped, p.search.stopped)
    elif p.status.startswith("heuristic"):
        stopped = f"after its one heuristic pass ({p.status})"
    else:
        stopped = f"with solver status {p.status}"
    fill = program.sizing.fill
    refill = (
        f"; re-sized at {fill:.0%} fill (the regions did not pack at {sized_fill:.0%})"
        if fill != sized_fill
        else ""
    )
    why = f" ({reps.reason})" if reps.reason else ""
    return (
        f"decided: {p.placer} placer, stopped: {stopped}; gap {100 * p.gap:.1f}% to the "
        f"{p.bound_kind or 'lower'} bound; {reps.k} cop{'y' if reps.k == 1 else 'ies'}{why}"
        + refill
    )


def routing_decision(routing: Routing) -> str:
    """What routing decided, for `--explain`: colors used against the budget."""
    r = routing
    fewest = ", the fewest possible" if r.colors_used_max == r.color_lower_bound else ""
    return (
        f"decided: {r.colors_used_max} of {r.color_budget} colors used at most on a PE (lower "
        f"bound {r.color_lower_bound}{fewest}); {len(r.lanes)} lanes, busiest link carries "
        f"{r.link_load_max}"
    )


def place(sized: Sized, say: Say = quiet) -> Placed:
    """Place the regions (re-sizing at lower fill if they do not pack) and route
    (`wsecc.core.flow.place_and_route`), what the mode lays out on the wafer."""
    o, target = sized.job.options, sized.job.target
    layout = strategy(o.mode).layout(sized)
    ins = _instrument(sized.trace, sized.job, say)
    if layout.systems is not None:  # a pipeline over several systems (`wsecc.core.partition`)
        return _place_systems(sized, layout, ins)
    with ins.stage("place"):
        placed = place_and_route(
            layout.kernel_graph, layout.sizing, target, o.precision, placer=o.placer,
            time_budget_s=o.time_budget_s, seed=o.seed, deterministic=o.deterministic,
            pins=o.pins, say=say, rule=layout.rule, replicas=layout.replicas,
        )  # fmt: skip
    program = placed.program
    if layout.one_copy_because is not None:
        program = dataclasses.replace(program, replicas=Replicas(1, layout.one_copy_because))
    p, r = program.placement, program.routing
    say(
        "place",
        f"{o.placer}: weighted wirelength {p.objective:.4g} B·PE, bound {p.bound:.4g} "
        f"({p.bound_kind}), gap {100 * p.gap:.1f}%, {p.status} ({p.seconds:.1f} s), "
        f"{placed.pool_shapes} kernels in pool shapes"
        + (f"; {p.search.summary()}" if p.search is not None else ""),
    )
    say(
        "route",
        f"{len(r.lanes)} lanes, colors max {r.colors_used_max}/{r.color_budget} "
        f"(lower bound {r.color_lower_bound}), link load max {r.link_load_max}",
    )
    _explain_and_dump(ins, program, layout.sizing.fill)
    return Placed(sized, placed.problem, Systems.one(program), placed.pool_shapes, ins.trace)


def _explain_and_dump(ins: Instrument, program: Program, sized_fill: float, of: str = "") -> None:
    """Placement's and routing's `--explain` lines (after `of`, which program they are of) and
    `--dump-dir` files, `program`'s."""
    ins.explain("place", of + placement_decision(program, sized_fill))
    ins.explain("route", of + routing_decision(program.routing))
    if ins.dump_dir is not None:  # the texts only for a dump (routing's: 0.3 s for GPT-2 small)
        ins.dump("placement", program.placement.dumps(include_timing=False) + "\n", "json")
        ins.dump("routing", program.routing.dumps() + "\n", "json")


def unpacked_why(sized_why: str, unpacked: list[int]) -> str:
    """Why auto chose one more system than the last count in `unpacked`: the first sizing's
    reason, then the counts at which a group's regions did not pack."""
    counts = ", ".join(map(str, unpacked))
    return (
        f"{sized_why}; over {counts} system(s) a group's regions did not pack at any fill, so "
        f"{unpacked[-1] + 1}"
    )


def _place_systems(sized: Sized, layout: Layout, ins: Instrument) -> Placed:
    """`place` over several systems: each distinct layer group placed and routed once (the
    dumps and explanations are system 0's)."""
    o, target = sized.job.options, sized.job.target
    over = layout.systems
    say = ins.say
    assert over is not None
    first_why, unpacked = over.why, []
    with ins.stage("place"):
        while True:
            try:
                each, systems = place_systems(
                    over, target, o.precision, placer=o.placer, time_budget_s=o.time_budget_s,
                    seed=o.seed, deterministic=o.deterministic, say=say, rule=layout.rule,
                )  # fmt: skip
                break
            except (PlacementError, SizingError) as e:
                # auto: a group whose regions do not pack at any fill takes one more system
                if o.systems is not None:
                    raise PartitionError(
                        f"a group of layers does not pack on one of {over.count} systems "
                        f"({str(e)[:100]}...): raise --systems or use --systems auto"
                    ) from None
                n = over.count + 1
                say("place", f"{over.count} systems: a group does not pack; {n} systems")
                more = size_over_systems(
                    sized.kernel_graph, target, o.precision, layout.rule, o.chunk_tokens, n
                )
                unpacked.append(over.count)
                over = dataclasses.replace(more, why=unpacked_why(first_why, unpacked))
    sized = dataclasses.replace(sized, sizing=over.sizings[0], systems=over)
    if layout.one_copy_because is not None:
        one = Replicas(1, layout.one_copy_because)
        programs = tuple(dataclasses.replace(p, replicas=one) for p in systems.programs)
        systems = dataclasses.replace(systems, programs=programs)
    lanes = sum(len(p.program.routing.lanes) for p in each)
    say(
        "place",
        f"{systems.count} systems, {len(each)} placements ({systems.count - len(each)} shared), "
        f"{lanes} lanes, {len(systems.crossings)} flows crossing between systems",
    )
    pool = sum(p.pool_shapes for p in each)
    _explain_and_dump(ins, systems.programs[0], layout.sizing.fill, "system 0: ")
    return Placed(sized, each[0].problem, systems, pool, ins.trace)


def placed_to_json(placed: Placed) -> dict[str, Any]:
    """What a placement shares with a compile of the same kernels (`with_placement`)."""
    p = placed.program
    return {
        "problem": placed.problem.to_json(), "sizing": p.sizing.to_json(),
        "placement": p.placement.to_json(), "routing": p.routing.to_json(),
        "replicas": p.replicas.to_json(), "pool_shapes": placed.pool_shapes,
    }  # fmt: skip


def with_placement(sized: Sized, saved: dict[str, Any], trace: Trace) -> Placed:
    """`sized` placed and routed as `saved` (`placed_to_json` of a compile of the same kernel
    graph, target and placement options) says; `trace` is `sized.trace` and the place stage
    that computed or read `saved` (its `Instrument`'s)."""
    layout = strategy(sized.job.options.mode).layout(sized)
    program = Program(
        layout.kernel_graph, Sizing.from_json(saved["sizing"]),
        Placement.from_json(saved["placement"]), Routing.from_json(saved["routing"]),
        sized.job.target, Replicas.from_json(saved["replicas"]),
    )  # fmt: skip
    problem = PlacementProblem.from_json(saved["problem"])
    return Placed(
        sized, problem, Systems.one(program), saved.get("pool_shapes", 0),
        trace,
    )  # fmt: skip


def fused_again(sized: Sized, say: Say = quiet) -> Fused:
    """The fused graph of `sized`, re-imported when the compile was reloaded from its folder."""
    if sized.fused is not None:
        return sized.fused
    path = sized.job.model_path
    if not path.is_file():
        raise WseccError(f"{path}: the compiled model is gone; numerics need it (--no-validate)")
    return fuse(load(dataclasses.replace(sized.job, saved=None), say), say)


def simulate(placed: Placed, say: Say = quiet) -> Simulated:
    """What the placed program achieves, as the mode simulates it, and the check against
    onnxruntime when it runs (`options.validate`, or auto)."""
    mode = strategy(placed.job.options.mode)
    ins = _instrument(placed.trace, placed.job, say)
    return mode.simulate(placed, ins, lambda: fused_again(placed.sized, say))


def run(fused: Fused, say: Say = quiet) -> Simulated:
    """Every stage after the passes."""
    return simulate(place(size(fused, say), say), say)


def compile_file(
    path: str | os.PathLike[str], options: Options | None = None, say: Say = quiet
) -> Simulated:
    """Every stage, from the ONNX file."""
    return run(fuse(load(job(path, options), say), say), say)


def reload(folder: str | os.PathLike[str]) -> Placed:
    """A saved compile (its output folder) with its placement and routing, ready for
    `simulate`. The model is re-imported only when numerics are asked for."""
    folder = Path(folder)
    saved = json.loads((folder / "report.json").read_text())
    v = load_outdir(folder)
    opts = saved_options(saved.get("options", {}))
    opts["target"] = (
        str(folder / "target.toml") if (folder / "target.toml").is_file() else v.program.target.name
    )
    try:
        options = Options(**opts)
    except (TypeError, WseccError) as e:
        raise WseccError(f"{folder / 'report.json'}: unusable options ({e})") from None
    prog = v.program
    job = Job(Path(saved["model"]["path"]), options, prog.target, saved)
    problem = tailored(
        placement_problem(prog.kg, prog.sizing, prog.target, prog.precision),
        prog.placement.rects,
    )
    pool = saved.get("placement", {}).get("pool_shapes", 0)
    if v.systems is not None:  # several systems: the whole model's graph, every system's program
        over = v.systems
        sized = Sized(job, None, over.model, prog.sizing, systems=over.sized)
        return Placed(sized, problem, over.systems, pool)
    sized = Sized(job, None, prog.kg, prog.sizing)
    return Placed(sized, problem, Systems.one(prog), pool)


def with_options(placed: Placed, **changes: Any) -> Placed:
    """`placed` under other options (keywords are `Options` fields), not yet simulated: another
    precision re-costs the placed program in it (no re-placing)."""
    options = dataclasses.replace(placed.job.options, **changes)
    systems = _in_precision(placed.systems, options.precision)
    program = systems.programs[0]
    job = dataclasses.replace(placed.job, options=options)
    fused = placed.sized.fused
    split = placed.sized.systems
    if split is not None:
        split = dataclasses.replace(split, sizings=tuple(p.sizing for p in systems.programs))
    sized = dataclasses.replace(
        placed.sized, job=job, fused=None if fused is None else in_job(fused, job),
        sizing=program.sizing, trace=Trace(), systems=split,
    )  # fmt: skip
    return Placed(sized, placed.problem, systems, placed.pool_shapes)


def _in_precision(systems: Systems, precision: Any) -> Systems:
    """Every system's program in `precision` (`Program.in_precision`), a shared placement
    re-costed once."""
    own = {i: systems.programs[i].in_precision(precision) for i in set(systems.placed_as or [0])}
    programs = tuple(own[systems.placed(i)] for i in range(systems.count))
    return dataclasses.replace(systems, programs=programs)
