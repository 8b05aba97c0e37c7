"""The compile as one chain of frozen stage values (`wsecc.core.chain`, `wsecc.core.stages`), the mode a
strategy value (`wsecc.modes.strategy`), one performance interface (`wsecc.report.results`)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES

from wsecc.core import chain, stages
from wsecc.core.instrument import Instrument, Trace
from wsecc.modes.strategy import STRATEGIES
from wsecc.report.build import report
from wsecc.vocab import Mode, Precision

GPT2 = SAMPLES / "gpt2_legacy_op17.onnx"


def test_every_stage_value_is_frozen() -> None:
    for cls in (stages.Job, stages.Loaded, stages.Fused, stages.Sized, stages.Placed,
                stages.Simulated):  # fmt: skip
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]


def test_every_mode_has_one_strategy() -> None:
    assert set(STRATEGIES) == set(Mode)
    assert all(s.mode is m for m, s in STRATEGIES.items())


def test_the_sweep_runs_the_chain_not_the_compiler() -> None:
    tree = ast.parse((ROOT / "wsecc" / "sweep" / "run.py").read_text())
    names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    assert "wsecc.compiler" not in names and "wsecc.core.flow" not in names


def test_a_stage_is_not_changed_by_the_stages_after_it() -> None:
    """One `Fused` value feeds two compiles (as a sweep's points share it); each later stage is
    a new value, and the report of an earlier one stays what it was."""
    job = chain.job(GPT2, seq=8, placer="greedy", sim="l0", validate=False)
    fused = chain.fuse(chain.load(job))
    sized = chain.size(fused)
    before = report(sized, timings=False)
    done = chain.simulate(chain.place(sized))
    assert report(sized, timings=False) == before and "placement" not in before
    assert done.placed.sized is sized and sized.fused is fused
    assert len(done.placed.systems.programs) == 1 and not done.placed.systems.crossings
    wse3 = chain.fork(fused, dataclasses.replace(job.options, target="wse3"))
    assert wse3.graph is fused.graph and wse3.job.target.name == "wse3"
    assert fused.job.target.name == "wse2"
    with pytest.raises(dataclasses.FrozenInstanceError):
        done.placed = done.placed  # type: ignore[misc]


@pytest.mark.parametrize("mode", list(Mode))
def test_every_mode_reports_through_one_performance_interface(mode: Mode) -> None:
    path = SAMPLES / ("llama_dynamo.onnx" if mode is Mode.GENERATE else "gpt2_legacy_op17.onnx")
    done = chain.compile_file(
        path, chain.job(path, seq=16, placer="greedy", sim="l0", validate=False, mode=mode).options
    )
    rep = report(done)
    assert rep["performance"] == done.performance.to_json()
    for key in ("samples_per_s", "tokens_per_s", "latency_s", "utilization", "bottleneck"):
        assert key in rep["performance"]
    assert rep["mode"] == mode.value and Path(rep["model"]["path"]) == path


def test_stage_seconds_and_pass_seconds_are_the_instruments_records() -> None:
    """One instrumentation (`wsecc.core.instrument`): the report's stage_seconds are the stage
    records of the value's trace, its passes' seconds the pass manager's step records."""
    job = chain.job(GPT2, seq=8, placer="greedy", sim="l0", validate=False)
    fused = chain.fuse(chain.load(job))
    done = chain.simulate(chain.place(chain.size(fused)))
    rep = report(done)
    assert list(rep["stage_seconds"]) == ["frontend", "passes", "size", "place", "simulate"]
    assert rep["stage_seconds"] == done.trace.seconds == done.seconds
    steps = [(r.stage, r.step, r.seconds) for r in done.trace.records if r.step]
    assert steps == [("passes", r.name, r.seconds) for r in fused.records]
    assert [p["seconds"] for p in rep["passes"]] == [s for _, _, s in steps]
    assert list(report(fused)["stage_seconds"]) == ["frontend", "passes"]
    # --explain's placement line says when placement re-sized at a lower fill than sizing's
    program = done.placed.program
    assert "re-sized" not in chain.placement_decision(program, program.sizing.fill)
    lower = dataclasses.replace(program, sizing=dataclasses.replace(program.sizing, fill=0.75))
    line = chain.placement_decision(lower, 0.85)
    assert line.endswith("; re-sized at 75% fill (the regions did not pack at 85%)")


def test_an_instrument_numbers_its_dumps_and_explains_only_when_asked(tmp_path: Path) -> None:
    said: list[tuple[str, str]] = []
    ins = Instrument.after(Trace(), lambda s, m: said.append((s, m)), tmp_path / "d")
    with ins.stage("size"):
        ins.dump("input", "a")
    ins.explain("size", "hidden")
    ins.dump("sizing", "{}", "json")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["00-input.txt", "01-sizing.json"]
    assert said == [("size", "")]  # announced, not explained
    again = Instrument.after(ins.trace, ins.say, tmp_path / "d", explaining=True)
    with again.stage("size"), again.step("size", "a pass"):
        again.explain("size", "shown")
    assert said[1:] == [("size", ""), ("size", "shown")]
    assert again.dump("routing", "", "json") == tmp_path / "d" / "02-routing.json"
    assert list(again.trace.seconds) == ["size"] and len(again.trace.records) == 3
    assert again.trace.seconds["size"] == sum(r.seconds for r in again.trace.records if not r.step)
    assert ins.trace.records == again.trace.records[:1]  # a trace is a value: not changed after


def test_the_chain_times_through_the_instrument_only() -> None:
    """No second timing mechanism beside `wsecc.core.instrument` in the chain, the stage
    values, the mode strategies or the pass manager: none of them reads a clock."""
    for rel in ("core/chain.py", "core/stages.py", "modes/strategy.py", "pm.py"):
        tree = ast.parse((ROOT / "wsecc" / rel).read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "time" not in names, rel


def test_a_precision_given_as_a_string_is_the_enum_in_every_stage() -> None:
    """The API's `precision="fp16"` is parsed once (`Options`); sizing, the placed program and
    the report carry it on as `Precision.FP16`, written as the same "fp16"."""
    job = chain.job(GPT2, seq=8, placer="greedy", sim="l0", validate=False, precision="fp16")
    assert job.options.precision is Precision.FP16
    sized = chain.size(chain.fuse(chain.load(job)))
    assert sized.sizing.precision is Precision.FP16
    done = chain.simulate(chain.place(sized))
    assert done.placed.systems.programs[0].precision is Precision.FP16
    assert report(done, timings=False)["precision"] == "fp16"
