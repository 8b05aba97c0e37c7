"""L1 over several systems (issue 30): each system's placed program runs the event simulation,
and the pipeline of the systems is L1's as it is L0's (`SystemsInferPerformance`)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from conftest import SAMPLES

import wsecc
from wsecc.cli import main

LLAMA = SAMPLES / "llama_dynamo.onnx"  # 2 layers: one a system


@pytest.fixture(scope="module")
def l1() -> wsecc.Compilation:
    return wsecc.compile(LLAMA, seq=32, systems=2, placer="greedy", sim="l1", validate=False)


def test_l1_over_two_systems_is_the_pipeline_of_each_systems_l1(l1: wsecc.Compilation) -> None:
    perf = l1.report()["performance"]
    performance = l1.simulated.performance
    events, crossing = performance.events, performance.crossing_s
    assert perf["model"] == "l1" and perf["systems"] == 2 and len(events) == 2
    # the slowest system's L1 rate; a sample's latency: each system's first sample plus the
    # one crossing between them
    assert perf["samples_per_s"] == min(e.samples_per_s for e in events)
    assert perf["latency_s"] == pytest.approx(sum(e.latency_s for e in events) + crossing)
    # L0's pipeline of the same systems beside it, as one system's report has it
    l0 = performance.perfs
    assert perf["l0"]["samples_per_s"] == min(p.samples_per_s for p in l0)
    assert perf["l0"]["latency_s"] == pytest.approx(sum(p.latency_s for p in l0) + crossing)
    rel = perf["l1_vs_l0"]["latency_rel_diff"]
    assert rel == pytest.approx(perf["latency_s"] / perf["l0"]["latency_s"] - 1)
    schema = json.loads((resources.files("wsecc.report") / "report.schema.json").read_text())
    pytest.importorskip("jsonschema").validate(l1.report(), schema)


def test_the_trace_holds_every_system_after_the_ones_before(
    l1: wsecc.Compilation, tmp_path: Path
) -> None:
    out = l1.write(tmp_path / "l1.wsecc")
    trace = json.loads((out / "trace.json").read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in trace if e["name"] == "process_name"}
    assert names == {
        1: "system 0: kernels",
        2: "system 0: links",
        3: "system 1: kernels",
        4: "system 1: links",
    }
    events = l1.simulated.performance.events
    first = min(e["ts"] for e in trace if e["pid"] in (3, 4) and "ts" in e)
    reaches = (events[0].latency_s + l1.simulated.performance.crossing_s) * 1e6  # trace: µs
    assert first >= reaches - 1e-9
    assert {e["pid"] for e in trace if e.get("ph") == "X"} == {1, 2, 3, 4}
    # the saved folder simulates again to the same figures (L1 is deterministic)
    assert main(["simulate", str(out), "--sim", "l1", "--no-validate"]) == 0
    again = json.loads((out / "report.json").read_text())["performance"]
    before = l1.report()["performance"]
    for key in ("l1_seconds",):
        again.pop(key), before.pop(key)
    assert again == before


def test_generate_mode_says_it_does_not_run_l1(tmp_path: Path, capsys) -> None:
    args = ["compile", str(LLAMA), "--mode", "generate", "--seq", "32", "--placer", "greedy"]
    assert main([*args, "--sim", "l1", "--no-validate", "-o", str(tmp_path / "g")]) == 0
    assert "--sim l1 is not run here" in capsys.readouterr().err
