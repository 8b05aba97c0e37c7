"""Train mode (`wsecc.modes.train`): both executions, the batch choice, gradient accumulation, data
parallel systems, and the one-line errors of a step that cannot run."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import pytest
from conftest import SAMPLES
from wsecc.targets import load_target

import wsecc
from wsecc.cli import main
from wsecc.compiler import Compilation
from wsecc.kernels.ir import Kernel, KernelGraph, KernelKind
from wsecc.modes.train import (
    MAX_CHOSEN_BATCH,
    SwarmX,
    TrainError,
    plan_training,
    streamed_units,
    swarmx,
    tree_depth,
)
from wsecc.options import Options

GPT2 = SAMPLES / "gpt2_legacy_op17.onnx"
BERT = SAMPLES / "bert_dynamo.onnx"


@pytest.fixture(scope="module")
def gpt2_kernels() -> KernelGraph:
    c = Compilation.load(GPT2, Options(mode="train", seq=32)).fuse()
    from wsecc.core.flow import lower

    return lower(c.fused)


def _small_wafer(tmp_path: Path, width: int, height: int, system: bool = True) -> str:
    """wse2 cut down to a width x height program rectangle (its [system] kept or dropped)."""
    text = (resources.files("wsecc.targets") / "wse2.toml").read_text()
    for old, new in (
        ("program_width = 750", f"program_width = {width}"),
        ("program_height = 994", f"program_height = {height}"),
        ('name = "wse2"', 'name = "small"'),
    ):
        text = text.replace(old, new, 1)
    if not system:
        head, _, tail = text.partition("\n[system]")
        text = head + "\n" + tail[tail.index("\n[sources]") :]
        text = "\n".join(line for line in text.splitlines() if not line.startswith('"system.'))
    path = tmp_path / "small.toml"
    path.write_text(text)
    return str(path)


def test_the_backward_of_a_linear_is_twice_its_forward() -> None:
    k = Kernel("fc", KernelKind.LINEAR, dict(tokens=8, K=16, N=32, has_bias=False,
                                              activation="", residual=False))  # fmt: skip
    assert k.spec.grad is not None
    assert k.spec.grad.flops(k.params) == 2 * k.flops_per_sample  # dX and dW
    assert k.spec.grad.saved_elems(k.params) == 8 * 16  # X, for dW


def test_units_are_the_layers_between_input_and_output(gpt2_kernels: KernelGraph) -> None:
    names = [name for name, _ in streamed_units(gpt2_kernels)]
    assert names == ["input", "L0", "L1", "output"]
    kernels = sum(len(ks) for _, ks in streamed_units(gpt2_kernels))
    assert kernels == len(gpt2_kernels.kernels)


def test_both_executions_and_auto_runs_the_faster(gpt2_kernels: KernelGraph) -> None:
    target = load_target("wse2")
    runs = {
        ex: plan_training(gpt2_kernels, target, "mixed", execution=ex, batch=64, chunk_tokens=8)
        for ex in ("pipelined", "weight-streaming")
    }
    auto = plan_training(gpt2_kernels, target, "mixed", batch=64, chunk_tokens=8)
    best = max(runs.values(), key=lambda r: r.samples_per_s)
    assert auto.execution is best.execution and auto.samples_per_s == best.samples_per_s
    assert "faster" in auto.why
    for r in runs.values():
        assert r.batch == 64
        assert 0 < r.utilization < 1
        assert math.isclose(r.step_s, sum(r.terms.values()))
        # training does forward + backward work: more than 2x the forward's flops
        assert r.flops_per_sample > 2 * gpt2_kernels.flops_per_sample
    ws = runs["weight-streaming"]
    assert [u.name for u in ws.units] == ["input", "L0", "L1", "output"]
    assert all(u.backward_io_s == 2 * u.weights_in_s for u in ws.units)


def test_pipelined_training_needs_more_sram_and_time_than_inference(gpt2_kernels) -> None:
    from wsecc.kernels import size_regions
    from wsecc.modes.train import pipelined_sizing

    target = load_target("wse2")
    infer = size_regions(gpt2_kernels, target, "mixed", fill=0.85, chunk_tokens=8)
    train = pipelined_sizing(gpt2_kernels, target, "mixed", 8)
    for k in gpt2_kernels.kernels:
        i, t = infer.kernel(k.name), train.kernel(k.name)
        if (i.h, i.w) == (t.h, t.w):  # the same region costs more in training
            assert t.compute_cycles > i.compute_cycles
            assert t.sram.buffers > i.sram.buffers
            if k.weight_elems:
                assert t.sram.weights > i.sram.weights


def test_weight_streaming_accumulates_gradients_over_micro_batches(tmp_path: Path) -> None:
    c = Compilation.load(GPT2, Options(mode="train", seq=32)).fuse()
    target = _small_wafer(tmp_path, 100, 100)  # little SRAM for activations: few samples fit
    one = c.fork(Options(mode="train", seq=32, target=target, execution="weight-streaming", validate=False,
                         batch=1)).train().training  # fmt: skip
    m = one.notes[0].split("at most ")[1].split(" samples")[0]
    m_max = int(m.replace(",", ""))
    assert m_max >= 1
    batch = 3 * m_max + 1
    r = c.fork(Options(mode="train", seq=32, target=target, execution="weight-streaming", validate=False,
                       batch=batch)).train().training  # fmt: skip
    assert r.grad_accum == 4 and r.micro_batch <= m_max
    assert r.grad_accum * r.micro_batch >= batch


def test_a_chosen_batch_is_the_smallest_near_the_best(gpt2_kernels: KernelGraph) -> None:
    target = load_target("wse2")
    r = plan_training(gpt2_kernels, target, "mixed", execution="weight-streaming",
                      chunk_tokens=8)  # fmt: skip
    assert r.batch_note.startswith("the smallest global batch within 1%")
    assert r.batch <= MAX_CHOSEN_BATCH
    for b in (r.batch, 2 * r.batch, 8 * r.batch):
        if b > MAX_CHOSEN_BATCH:
            continue  # beyond what the search tries
        other = plan_training(gpt2_kernels, target, "mixed", execution="weight-streaming",
                              batch=b, chunk_tokens=8)  # fmt: skip
        assert r.samples_per_s >= 0.99 * other.samples_per_s * (0.99 if b > r.batch else 1)
    half = plan_training(gpt2_kernels, target, "mixed", execution="weight-streaming",
                         batch=max(1, r.batch // 2), chunk_tokens=8)  # fmt: skip
    assert half.samples_per_s < r.samples_per_s


@pytest.mark.parametrize("execution", ["weight-streaming", "pipelined"])
def test_a_chosen_batch_stays_within_the_published_runs(
    gpt2_kernels: KernelGraph, execution: str
) -> None:
    """A tiny model fits millions of samples per pass (issue 33: 2,963,153 for a 2-layer Qwen2):
    the chosen batch stops at the largest batch the published CS-2 runs used, and says so; a
    batch given is taken as given."""
    target = load_target("wse2")
    r = plan_training(gpt2_kernels, target, "mixed", execution=execution, chunk_tokens=8)
    assert 1 <= r.batch <= MAX_CHOSEN_BATCH
    assert f"at most {MAX_CHOSEN_BATCH:,} per system" in r.batch_note
    two = plan_training(gpt2_kernels, target, "mixed", execution=execution, chunk_tokens=8,
                        systems=2)  # fmt: skip
    assert two.batch <= 2 * MAX_CHOSEN_BATCH
    given = plan_training(gpt2_kernels, target, "mixed", execution=execution, chunk_tokens=8,
                          batch=4 * MAX_CHOSEN_BATCH)  # fmt: skip
    assert given.batch == 4 * MAX_CHOSEN_BATCH and given.batch_note == ""


def test_swarmx_tree_by_hand() -> None:
    """wse2's SwarmX: a 1:4 tree, line rate 150e9 B/s, 200 us per level (an assumption)."""
    target = load_target("wse2")
    assert [tree_depth(n, 4) for n in (1, 2, 4, 5, 16, 17, 192)] == [0, 1, 1, 2, 2, 3, 4]
    assert swarmx(target, 1) == SwarmX(1, 0, 150e9, 0.0)
    sixteen = swarmx(target, 16)
    assert sixteen.depth == 2 and sixteen.bytes_per_s == 150e9
    assert sixteen.sync_s == pytest.approx(2 * 2 * 200e-6)  # up and down, two levels each
    assert sixteen.reduce_s(3_000_000) == pytest.approx(2 * 3e6 / 150e9)  # up and back
    with pytest.raises(TrainError, match="at most 192"):
        swarmx(target, 193)


def test_weak_scaling_adds_the_sync_and_nothing_else(gpt2_kernels) -> None:
    """Weight streaming at a fixed batch per system: N systems' step is one system's plus the
    tree's latency both ways, since SwarmX streams each system at its own I/O's rate."""
    target = load_target("wse2")
    per = 256
    one = plan_training(gpt2_kernels, target, "mixed", execution="weight-streaming",
                        batch=per, chunk_tokens=8)  # fmt: skip
    for n, depth in ((4, 1), (16, 2)):
        r = plan_training(gpt2_kernels, target, "mixed", execution="weight-streaming",
                          batch=n * per, systems=n, chunk_tokens=8)  # fmt: skip
        assert r.micro_batch * r.grad_accum == one.micro_batch * one.grad_accum
        assert "synchronisation" not in one.terms
        assert r.terms["synchronisation"] == pytest.approx(2 * depth * 200e-6)
        assert r.step_s == pytest.approx(one.step_s + 2 * depth * 200e-6)
        assert r.scaling_efficiency == pytest.approx(one.step_s / r.step_s)


def test_a_narrower_swarmx_makes_scaling_lose(tmp_path, gpt2_kernels) -> None:
    """At half the system I/O through SwarmX, pipelined training's gradient reduction takes
    twice as long (every gradient up and back: 2 x bytes / rate), and streaming's I/O-bound
    units slow down with N > 1 only."""
    text = (resources.files("wsecc.targets") / "wse2.toml").read_text()
    narrow = tmp_path / "narrow.toml"
    narrow.write_text(
        text.replace("swarmx_bytes_per_s = 150e9", "swarmx_bytes_per_s = 75e9", 1).replace(
            'name = "wse2"', 'name = "narrow"', 1
        )
    )
    wide, half = load_target("wse2"), load_target(str(narrow))
    grads = gpt2_kernels.unique_weight_elems() * 2  # mixed: 16-bit storage
    for target, rate in ((wide, 150e9), (half, 75e9)):
        r = plan_training(gpt2_kernels, target, "mixed", execution="pipelined",
                          batch=64, systems=2, chunk_tokens=8)  # fmt: skip
        assert r.terms["gradient reduction"] == pytest.approx(2 * grads / rate)
        assert r.terms["synchronisation"] == pytest.approx(2 * 1 * 200e-6)
    runs = {
        t.name: [plan_training(gpt2_kernels, t, "mixed", execution="weight-streaming",
                               batch=n * 8, systems=n, chunk_tokens=8) for n in (1, 2)]
        for t in (wide, half)
    }  # fmt: skip
    assert runs["narrow"][0].step_s == runs["wse2"][0].step_s  # one system: no SwarmX
    assert runs["narrow"][1].terms["system I/O"] > runs["wse2"][1].terms["system I/O"] > 0
    assert runs["narrow"][1].scaling_efficiency < runs["wse2"][1].scaling_efficiency < 1.0


def test_a_target_without_a_system_cannot_weight_stream(tmp_path, gpt2_kernels) -> None:
    target = load_target(_small_wafer(tmp_path, 750, 994, system=False))
    with pytest.raises(TrainError, match=r"no \[system\] section"):
        plan_training(gpt2_kernels, target, "mixed", execution="weight-streaming", chunk_tokens=8)
    r = plan_training(gpt2_kernels, target, "mixed", chunk_tokens=8)  # auto: pipelined fits
    assert r.execution.value == "pipelined" and "weight-streaming does not fit" in r.why


def test_auto_streams_when_the_pipelined_program_does_not_fit(tmp_path, gpt2_kernels) -> None:
    target = load_target(_small_wafer(tmp_path, 12, 12))
    with pytest.raises(wsecc.WseccError):
        plan_training(gpt2_kernels, target, "mixed", execution="pipelined", chunk_tokens=8)
    r = plan_training(gpt2_kernels, target, "mixed", chunk_tokens=8)
    assert r.execution.value == "weight-streaming"
    assert r.why.startswith("pipelined does not fit")
    tiny = load_target(_small_wafer(tmp_path, 3, 3))  # weights and state exceed all its SRAM
    with pytest.raises(wsecc.WseccError, match=r"GB of data SRAM; weight streaming keeps them"):
        plan_training(gpt2_kernels, tiny, "mixed", execution="pipelined", chunk_tokens=8)


def test_a_step_that_fits_nowhere_is_one_line(tmp_path: Path, capsys) -> None:
    target = _small_wafer(tmp_path, 2, 2)
    code = main(["compile", str(GPT2), "--seq", "32", "--mode", "train", "--target", target,
                 "-o", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    assert (
        code == 2 and err[-1].startswith("wsecc: error: ") and "neither execution fits" in err[-1]
    )
    assert not any("Traceback" in line for line in err)
    assert not (tmp_path / "out").exists()


def test_train_options_are_refused_in_infer_mode(capsys) -> None:
    assert main(["compile", str(GPT2), "--execution", "pipelined"]) == 2
    assert "a train-mode option" in capsys.readouterr().err


@pytest.mark.pictures  # the training layout's placement.png rasterised (tests/conftest.py)
def test_compile_train_writes_a_report_of_the_step(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    out = tmp_path / "bert.wsecc"
    # the fast placer: the report's step does not depend on where kernels sit
    code = main(["compile", str(BERT), "--seq", "16", "--mode", "train", "--batch", "32",
                 "--placer", "greedy", "--no-validate", "-o", str(out)])  # fmt: skip
    assert code == 0
    rep = json.loads((out / "report.json").read_text())
    schema = json.loads((resources.files("wsecc.report") / "report.schema.json").read_text())
    jsonschema.validate(rep, schema)
    perf = rep["performance"]
    assert rep["mode"] == "train" and perf["model"] == "train" and perf["batch"] == 32
    assert perf["execution"] in ("pipelined", "weight-streaming") and perf["execution_reason"]
    assert perf["samples_per_s"] == pytest.approx(32 / perf["step_s"])
    # the training layout is placed and routed for the viewer; the step is not simulated
    assert (out / "viewer.html").is_file() and rep["routing"]["lanes"] > 0
    assert "sram" not in rep


@pytest.mark.parametrize("fault, code", [(None, 0), ("layernorm_gamma", 1)])
def test_train_validate_checks_gradients_and_a_broken_rule_fails(
    tmp_path: Path, capsys, monkeypatch, fault, code
) -> None:
    monkeypatch.setattr("wsecc.check.checks.GRAD_SAMPLES", 4)  # a few coordinates per tensor: fast
    args = ["compile", str(GPT2), "--seq", "8", "--mode", "train", "--precision", "fp32",
            "--placer", "greedy", "--validate", "-o", str(tmp_path / "out")]  # fmt: skip
    assert main(args + (["--inject-fault", fault] if fault else [])) == code
    out = capsys.readouterr().out
    assert ("gradients      PASS" in out) == (fault is None)
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    failed = [r["name"] for r in rep["numerics"]["rows"] if not r["passed"]]
    assert failed == ([] if fault is None else [n for n in failed if "ln" in n])
    assert (fault is None) or failed


def test_layers_are_found_by_structure_not_by_name() -> None:
    """The dynamo exporter names kernels 'linear.5', the legacy one 'L1.linear': the same units."""
    from wsecc.core.flow import lower

    def kinds(path: Path) -> list[tuple[str, list[str]]]:
        kg = lower(Compilation.load(path, Options(mode="train", seq=16)).fuse().fused)
        return [(n, [k.kind.value for k in ks]) for n, ks in streamed_units(kg)]

    legacy, dynamo = kinds(GPT2), kinds(SAMPLES / "gpt2_dynamo.onnx")
    assert legacy == dynamo
    assert [n for n, _ in dynamo] == ["input", "L0", "L1", "output"]
    assert all(ks.count("attention") == 1 for n, ks in dynamo if n.startswith("L"))


@pytest.mark.parametrize("name", ["llama_legacy_op17.onnx", "llama_dynamo.onnx"])
def test_train_validate_passes_on_the_llama_samples(tmp_path: Path, capsys, monkeypatch, name):
    """Every new kind's gradient rule (RMSNorm, SwiGLU's gated linear, rotary and grouped-K/V
    attention) against onnxruntime's finite differences; the dynamo file's rotary inv_freq is
    a position frequency (only through Cos/Sin), not an untraced weight."""
    monkeypatch.setattr("wsecc.check.checks.GRAD_SAMPLES", 4)
    args = ["compile", str(SAMPLES / name), "--seq", "8", "--mode", "train", "--precision",
            "fp32", "--placer", "greedy", "--validate", "-o", str(tmp_path / "out")]  # fmt: skip
    assert main(args) == 0
    assert "gradients      PASS" in capsys.readouterr().out
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert not rep["numerics"]["untraced"]
