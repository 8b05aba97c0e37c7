"""report.json: every sample's validates against wsecc.report/1; compiles are reproducible across
processes; an interrupted compile leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from conftest import SAMPLES

from wsecc.cli import main

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = json.loads((resources.files("wsecc.report") / "report.schema.json").read_text())
SAMPLE_FILES = sorted(SAMPLES.glob("*.onnx"))


def _timeless(obj):
    """The report without wall-clock fields (what may differ between two identical compiles)."""
    if isinstance(obj, dict):
        return {
            k: _timeless(v)
            for k, v in obj.items()
            if k not in ("seconds", "stage_seconds", "l1_seconds")
        }
    if isinstance(obj, list):
        return [_timeless(v) for v in obj]
    return obj


def test_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("model", SAMPLE_FILES, ids=lambda p: p.stem)
def test_every_sample_report_validates(model, sample_compile):
    """`wsecc compile SAMPLE --batch 2 --seq 16 --placer greedy` (conftest's SAMPLE_COMPILE, the
    compile test_warnings reads too)."""
    compiled = sample_compile(model)
    assert compiled.exit_code == 0
    out = compiled.out
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    assert report["numerics"]["passed"], report["numerics"]
    assert report["performance"]["utilization"] <= 1.0
    assert report["routing"]["link_util_max"] <= 1.0
    assert report["sram"]["max_bytes"] <= report["sram"]["budget_bytes"]
    # balanced and achieved, and the kernel or flow between them (the schema knows the kinds)
    perf = report["performance"]
    assert {"on_wafer_bottleneck_kind", "on_wafer_samples_per_s"} <= perf.keys()
    assert report["sizing"]["samples_per_s"] > 0
    if perf["bottleneck_kind"] != "host":
        assert perf["on_wafer_bottleneck"] == perf["bottleneck"]
    trace = json.loads((out / "trace.json").read_text())
    assert trace["traceEvents"], "the L1 trace is empty"


def test_a_broken_report_does_not_validate(tmp_path):
    out = tmp_path / "o"
    argv = ["compile", str(SAMPLE_FILES[0]), "--seq", "8", "--placer", "greedy", "--no-validate"]
    assert main([*argv, "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    for field, bad in (("utilization", 1.5), ("on_wafer_bottleneck_kind", "host")):
        broken = json.loads(json.dumps(report))
        broken["performance"][field] = bad
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SCHEMA)


def _compile_in_fresh_process(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = ["compile", str(SAMPLES / "gpt2_legacy_op17.onnx"), "--seq", "16", "-o", str(out)]
    return subprocess.run(
        [sys.executable, "-m", "wsecc.cli", *argv, *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_same_inputs_give_identical_outputs_across_processes_under_load(tmp_path):
    # --deterministic depends on the inputs and seed only: the second compile runs beside a
    # busy loop on every core, and its products are the same bytes (no retry, no skip)
    det = ["--placer", "cpsat", "--deterministic", "--seed", "3", "--time-budget", "2"]
    a = _compile_in_fresh_process(tmp_path / "a", *det)
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        b = _compile_in_fresh_process(tmp_path / "b", *det)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    for name in ("placement.json", "routing.json", "kernels.json", "sizing.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    ra, rb = (json.loads((tmp_path / d / "report.json").read_text()) for d in "ab")
    assert json.dumps(_timeless(ra), sort_keys=True) == json.dumps(_timeless(rb), sort_keys=True)


def test_sigint_midway_leaves_no_output_folder(tmp_path):
    out = tmp_path / "o"
    argv = ["compile", str(SAMPLES / "gpt2_legacy_op17.onnx"), "--seq", "16", "-o", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "wsecc.cli", *argv, "--placer", "cpsat", "--time-budget", "60"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # the model is loaded: passes, sizing, placement, ... are ahead
        if line.startswith("frontend"):
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    # 130, or killed by the SIGINT itself (-2): a shell shows both as $? = 130
    assert proc.wait(timeout=60) in (130, -signal.SIGINT)
    assert rest.strip().splitlines()[-1] == "wsecc: interrupted"
    assert list(tmp_path.iterdir()) == []  # no folder, no temporary sibling


def test_a_generation_report_says_what_was_bound(tmp_path):
    out = tmp_path / "o"
    model = SAMPLES / "llama_optimum_merged.onnx"
    argv = ["compile", str(model), "--seq", "16", "--placer", "greedy", "--no-validate"]
    assert main([*argv, "--sim", "l0", "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    assert report["bindings"]["past_sequence_length"] == 0
    gen = report["generation"]
    assert gen["bound"] == {
        "past_sequence_length": "0 (empty past)",
        "position_ids": "arange(16) per row",
        "use_cache_branch": "False",
    }
    assert gen["use_cache_branch"] == "use_cache_branch" and gen["layout"] == "[B, H, P, d]"
    assert [(layer["heads"], layer["head_dim"]) for layer in gen["layers"]] == [(2, 16)] * 2
