"""The command line: compile writes its folder atomically, inspect's JSON has its documented keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLES

from wsecc.cli import main


@pytest.mark.pictures  # the README's compile: its PNGs rasterised (tests/conftest.py)
def test_compile_writes_report(tmp_path, capsys):
    out = tmp_path / "o"
    assert (
        main(
            [
                "compile",
                str(SAMPLES / "gpt2_legacy_op17.onnx"),
                "--seq",
                "16",
                "-o",
                str(out),
                "--check-each-pass",
            ]
        )
        == 0
    )
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "wsecc.report/1"
    assert report["bindings"] == {"batch": 1, "sequence": 16}
    assert [p["name"] for p in report["passes"]][0] == "canonicalize"
    assert {k["kind"] for k in report["kernels"]} >= {
        "embedding",
        "linear",
        "attention",
        "layernorm",
        "lm_head",
    }
    copies = report["replicas"]["k"]  # kernels[] are copy 0's; sizing counts every copy's PEs
    assert report["sizing"]["pes_used"] == copies * sum(k["pes"] for k in report["kernels"])
    assert report["placement"]["objective"] >= report["placement"]["bound"] > 0
    assert report["routing"]["colors_max"] <= report["routing"]["color_budget"]
    assert all({"x", "y", "w", "h"} <= k["region"].keys() for k in report["kernels"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]  # no temporary folder left behind


def test_compile_dump_dir_has_the_passes_and_the_later_stages(tmp_path):
    """--dump-dir: the input and one file per pass, then sizing's, placement's and routing's
    products as those stages finish, numbered on (one instrumentation, wsecc.core.instrument);
    placement's and routing's are the files the output folder keeps."""
    dump, out = tmp_path / "dump", tmp_path / "o"
    argv = ["compile", str(SAMPLES / "bert_dynamo.onnx"), "--seq", "8", "-o", str(out)]
    # the dumps do not depend on the placer: the fast one
    assert main([*argv, "--dump-dir", str(dump), "--placer", "greedy"]) == 0
    from wsecc.passes import DEFAULT_PIPELINE

    n = 1 + len(DEFAULT_PIPELINE)
    passes = ["00-input.txt"] + [f"{i:02d}-{p}.txt" for i, p in enumerate(DEFAULT_PIPELINE, 1)]
    later = [f"{n:02d}-sizing.json", f"{n + 1:02d}-placement.json", f"{n + 2:02d}-routing.json"]
    assert sorted(p.name for p in dump.iterdir()) == passes + later
    assert (dump / later[1]).read_text() == (out / "placement.json").read_text()
    assert (dump / later[2]).read_text() == (out / "routing.json").read_text()
    sizing = json.loads((dump / later[0]).read_text())
    report = json.loads((out / "report.json").read_text())
    assert [k["name"] for k in sizing["kernels"]] == [k["name"] for k in report["kernels"]]


def _stderr_lines(argv: list[str], capsys) -> list[str]:
    assert main(argv) == 0
    return capsys.readouterr().err.splitlines()


def test_explain_says_what_sizing_placement_and_routing_decided(tmp_path, capsys):
    """--explain: one line each on sizing's bottleneck and fill, the placer and why it stopped,
    routing's colors against the budget, from the compile's own figures; none without it."""
    argv = ["compile", str(SAMPLES / "gpt2_legacy_op17.onnx"), "--seq", "8", "--placer"]
    argv += ["greedy", "--no-validate", "-o", str(tmp_path / "o")]
    lines = _stderr_lines([*argv, "--explain"], capsys)
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    decided = {line.split()[0]: line for line in lines if "decided: " in line}
    assert set(decided) == {"size", "place", "route"}
    p, r = report["placement"], report["routing"]
    fill = json.loads((tmp_path / "o" / "sizing.json").read_text())["fill"]
    assert f"bottleneck {report['sizing']['bottleneck']} at " in decided["size"]
    assert f"fill {100 * fill:.0f}% of the usable PEs" in decided["size"]
    assert f"{p['placer']} placer, stopped: after its one heuristic pass" in decided["place"]
    assert f"({p['status']})" in decided["place"]
    colors = f"{r['colors_max']} of {r['color_budget']} colors used"
    assert colors in decided["route"]
    assert not [x for x in _stderr_lines(argv, capsys) if "decided: " in x]


def test_inspect_json_keys(capsys):
    assert (
        main(
            [
                "inspect",
                str(SAMPLES / "bert_legacy_op17.onnx"),
                "--batch",
                "2",
                "--seq",
                "16",
                "--target",
                "wse2",
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert {
        "params",
        "flops_per_sample",
        "ops_raw",
        "ops_after",
        "fused",
        "unsupported",
        "kernels",
        "sizing",
    } <= d.keys()
    assert d["unsupported"] == []
    assert d["ops_raw"]["MatMul"] == 16 and d["ops_after"]["ATTENTION"] == 2
    assert all({"op", "onnx_nodes"} <= f.keys() and f["onnx_nodes"] for f in d["fused"])
    k = d["kernels"][0]
    assert {
        "name",
        "kind",
        "pes",
        "region",
        "sram_bytes_per_pe",
        "cycles_per_sample",
        "onnx_nodes",
    } <= k.keys()
    assert {"bottleneck", "balance", "pes_used", "fabric_fraction", "ceiling_samples_per_s"} <= d[
        "sizing"
    ].keys()


def test_model_that_cannot_fit_is_a_clear_error(tmp_path):
    """A user's target TOML with 128 usable bytes per PE: the embedding table cannot fit; exit 2, one line."""
    from wsecc.targets import load_target

    text = (Path(load_target.__code__.co_filename).parent / "tiny32.toml").read_text()
    toml = tmp_path / "tight.toml"
    toml.write_text(
        text.replace("bytes_per_pe = 49152", "bytes_per_pe = 8320").replace(
            'name = "tiny32"', 'name = "tight"'
        )
    )
    r = subprocess.run(
        [sys.executable, "-m", "wsecc.cli", "compile", str(SAMPLES / "gpt2_dynamo.onnx"), "--seq", "128",
         "--target", str(toml), "-o", str(tmp_path / "o")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("wsecc:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1] == errors[0]  # the progress lines come first
    assert "B/PE" in errors[0] or "bytes" in errors[0], errors[0]
    assert not (tmp_path / "o").exists()


def test_targets_lists_builtins(capsys):
    assert main(["targets"]) == 0
    out = capsys.readouterr().out
    assert "wse2: 750x994 PEs" in out and "wse3" in out


def _custom_target(tmp_path: Path, **replace: str) -> Path:
    from wsecc.targets import load_target

    text = (Path(load_target.__code__.co_filename).parent / "small64.toml").read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    p = tmp_path / "custom.toml"
    p.write_text(text)
    return p


def test_too_few_colors_is_a_routing_error(tmp_path):
    toml = _custom_target(tmp_path, **{"total = 24": "total = 4"})
    r = subprocess.run(
        [sys.executable, "-m", "wsecc.cli", "compile", str(SAMPLES / "bert_dynamo.onnx"), "--seq", "16",
         "--target", str(toml), "--placer", "greedy", "-o", str(tmp_path / "o")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith("wsecc: error:") and "router (" in err and "colors" in err, err
    assert not (tmp_path / "o").exists()


def test_an_injected_fault_fails_the_compile(tmp_path, capsys):
    """The check of the checks: in the default precision (mixed) a misplaced weight tile passes
    the precision check but not the structure check; the compile says FAIL, still writes its
    folder, and exits with 1."""
    out = tmp_path / "o"
    args = ["compile", str(SAMPLES / "bert_dynamo.onnx"), "--seq", "16", "-o", str(out),
            "--placer", "greedy", "--sim", "l0"]  # fmt: skip
    assert main([*args, "--inject-fault", "misplace_tile"]) == 1
    numerics = json.loads((out / "report.json").read_text())["numerics"]
    assert numerics["precision_passed"] and not numerics["structure"]["passed"]
    assert not numerics["passed"] and numerics["fault"] == "misplace_tile"
    assert "numerics       FAIL: mixed PASS" in capsys.readouterr().out
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args, "--inject-fault", "rotary_position"]) == 2  # one line, before any work
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--inject-fault rotary_position: no such fault in infer mode" in err[0]
    with pytest.raises(SystemExit) as refused:  # a fault no mode knows: when the line is read
        main([*args, "--inject-fault", "no_such_fault"])
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_fault: no such fault" in err[0]


@pytest.mark.parametrize(
    # the fast placer: fusion and numerics do not depend on where kernels sit (the default
    # placer's compile is test_compile_writes_report's)
    "extra",
    [["--placer", "greedy"], ["--batch", "2", "--placer", "greedy"]],
    ids=["batch1-greedy", "batch2-greedy"],
)
def test_mpnet_relative_position_bias_fuses_and_passes(tmp_path, capsys, extra):
    """MPNet (legacy exporter, opset 17): the relative position bias the encoder computes once
    folds to a constant, and every layer's attention fuses with it as its bias operand; no
    MatMul or Softmax is left, and every numerics check passes, with the last row padded (the
    numerics' default inputs: one of one row, one of two)."""
    out = tmp_path / "o"
    argv = ["compile", str(SAMPLES / "mpnet_legacy_op17.onnx"), "--seq", "16", "-o", str(out)]
    assert main([*argv, *extra]) == 0
    report = json.loads((out / "report.json").read_text())
    ops = report["ops_after"]
    assert ops["ATTENTION"] == 2 and "MATMUL" not in ops and "SOFTMAX" not in ops, ops
    fused = [f["onnx_nodes"] for f in report["fused"] if f["op"] == "ATTENTION"]
    for layer, nodes in enumerate(fused):
        attn = f"/model/encoder/layer.{layer}/attention/attn"
        assert {f"{attn}/Softmax", f"{attn}/Add", f"{attn}/Add_1"} <= set(nodes)
    attention = [k for k in report["kernels"] if k["kind"] == "attention"]
    assert len(attention) == 2 and all(k["sram"]["weights"] > 0 for k in attention)  # the bias
    numerics = report["numerics"]
    assert numerics["passed"] and numerics["precision_passed"]
    assert numerics["structure"]["passed"] and numerics["fused"]["passed"]
    assert "numerics       PASS: mixed PASS" in capsys.readouterr().out


def test_positions_past_the_table_stop_in_one_line(tmp_path, capsys):
    """MPNet numbers its tokens from padding id + 1 = 2, so --seq 130 reads row 131 of its
    130-row table: the positions are computed from the ids, so only the numerics see it; they
    stop in one line that says what to do, and no folder is left."""
    out = tmp_path / "o"
    argv = ["compile", str(SAMPLES / "mpnet_legacy_op17.onnx"), "--seq", "130", "-o", str(out)]
    assert main([*argv, "--placer", "greedy"]) == 2
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("wsecc: error:")]
    assert len(errors) == 1 and "Traceback" not in err
    assert "the table holds 130 rows: bind a shorter --seq" in errors[0]
    assert not out.exists()
