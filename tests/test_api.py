"""The Python API: `wsecc.compile` and the stages of a `Compilation`, `check`'s bounds, `diff`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import SAMPLES

import wsecc
from wsecc.cli import main
from wsecc.compiler import Compilation, Options
from wsecc.errors import WseccError
from wsecc.report.diff import diff_reports, load_report

GPT2 = SAMPLES / "gpt2_legacy_op17.onnx"


def test_public_names_are_pinned():
    assert sorted(wsecc.__all__) == [
        "Compilation",
        "Options",
        "WseccError",
        "__version__",
        "compile",
    ]
    import importlib.metadata

    from wsecc import compiler, errors, options

    assert wsecc.compile is compiler.compile and wsecc.Compilation is compiler.Compilation
    assert wsecc.Options is options.Options and wsecc.WseccError is errors.WseccError
    assert wsecc.__version__ == importlib.metadata.version("wsecc")
    with pytest.raises(AttributeError):
        wsecc.no_such_name  # noqa: B018


def test_compile_returns_every_product_and_writes_the_folder(tmp_path):
    c = wsecc.compile(GPT2, seq=16, placer="greedy")
    assert isinstance(c, Compilation)
    assert c.fused is not None and c.kernel_graph is not None
    assert c.sizing.pes_used == sum(c.sizing.kernel(k.name).pes for k in c.kernel_graph.kernels)
    assert set(c.placement.rects) == {k.name for k in c.kernel_graph.kernels}
    rep = c.report()
    assert rep["schema"] == "wsecc.report/1"
    assert rep["bindings"] == {"batch": 1, "sequence": 16}
    assert rep["placement"]["placer"] == "greedy"
    out = c.write(tmp_path / "o")
    assert json.loads((out / "report.json").read_text())["kernels"] == json.loads(
        json.dumps(rep["kernels"])
    )


def test_stages_run_one_at_a_time():
    c = Compilation.load(GPT2, Options(seq=8, placer="greedy"))
    assert c.fused is None and c.report()["model"]["params"] > 0
    c.fuse()
    assert "kernels" not in c.report()
    c.lower_and_size()
    assert "kernels" in c.report() and "placement" not in c.report()
    with pytest.raises(WseccError, match="run the place_and_route stage first"):
        c.simulate()
    c.place_and_route()
    assert c.report()["routing"]["colors_max"] <= c.target.color_budget


def test_other_options_make_another_compilation():
    """`with_options` leaves the compilation it came from as it was: another precision is the
    same placement re-costed in it, with the simulations cleared."""
    # sized in fp32, so every region also fits in mixed (a region sized in mixed may be packed
    # too tightly for fp32: then with_options raises, `wsecc.kernels.sizing_at`)
    c = Compilation.load(GPT2, Options(seq=8, placer="greedy", validate=False, precision="fp32"))
    c.fuse().lower_and_size().place_and_route().simulate()
    mixed = c.with_options(precision="mixed", sim="l0")
    assert c.options.precision == "fp32" and c.program.precision == "fp32" and c.perf
    assert mixed.program.precision == "mixed" and mixed.perf is None and mixed.events is None
    assert mixed.program.placement is c.program.placement
    mixed.simulate()
    assert mixed.sram.max_bytes < c.sram.max_bytes  # mixed stores 2 bytes where fp32 stores 4


def test_bad_options_are_one_line_errors():
    with pytest.raises(WseccError, match="unknown precision 'fp8'"):
        wsecc.compile(GPT2, precision="fp8")
    with pytest.raises(WseccError, match="unexpected keyword argument 'sequence'"):
        wsecc.compile(GPT2, sequence=8)


def test_report_without_timings_is_reproducible():
    a = wsecc.compile(GPT2, seq=8, placer="cpsat", deterministic=True, time_budget_s=2)
    b = wsecc.compile(GPT2, seq=8, placer="cpsat", deterministic=True, time_budget_s=2)
    assert json.dumps(a.report(timings=False)) == json.dumps(b.report(timings=False))
    assert "seconds" not in json.dumps(a.report(timings=False))


def test_check_reports_bounds_and_refuses_what_cannot_fit(tmp_path, capsys):
    assert main(["check", str(GPT2), "--seq", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    b = out["bounds"]
    assert out["ok"] and b["fits"] and 0 < b["min_pes"] <= b["usable_pes"]
    assert 0 < b["min_sram_per_pe"] <= b["sram_per_pe"]
    # a user's 32x32 target with 8 KB per PE: no shape of GPT-2's kernels fits
    from wsecc.targets import load_target

    text = (Path(load_target.__code__.co_filename).parent / "tiny32.toml").read_text()
    tight = tmp_path / "tight.toml"
    tight.write_text(
        text.replace("bytes_per_pe = 49152", "bytes_per_pe = 8320").replace(
            'name = "tiny32"', 'name = "tight"'
        )
    )
    assert main(["check", str(GPT2), "--seq", "128", "--target", str(tight)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wsecc: error:") and "tight" in err[0]


def test_diff_shows_the_wirelength_ratio(tmp_path, capsys):
    for placer in ("greedy", "cpsat"):
        argv = ["compile", str(GPT2), "--seq", "16", "--placer", placer, "--time-budget", "2",
                "--deterministic"]  # fmt: skip
        assert main([*argv, "-o", str(tmp_path / placer)]) == 0
    capsys.readouterr()
    assert main(["diff", str(tmp_path / "greedy"), str(tmp_path / "cpsat")]) == 0
    text = capsys.readouterr().out
    assert "wirelength" in text and "B/A" in text
    rows = diff_reports(load_report(tmp_path / "greedy"), load_report(tmp_path / "cpsat"))
    wl = next(r for r in rows if r["metric"] == "wirelength B·PE")
    assert wl["ratio"] == pytest.approx(wl["b"] / wl["a"]) and wl["ratio"] <= 1.0
    assert main(["diff", str(tmp_path / "greedy"), str(tmp_path / "nothing")]) == 2
    assert "no such report" in capsys.readouterr().err


def test_view_redraws_a_saved_compile(tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["compile", str(GPT2), "--seq", "8", "--placer", "greedy", "-o", str(out)]
    assert main(argv) == 0
    assert {"viewer.html", "placement.png", "target.toml"} <= {p.name for p in out.iterdir()}
    assert oct(out.stat().st_mode & 0o777) != "0o700"  # an ordinary folder, not mkdtemp's
    (out / "viewer.html").unlink()
    capsys.readouterr()
    assert main(["view", str(out)]) == 0
    assert capsys.readouterr().out.strip() == (out / "viewer.html").resolve().as_uri()
    assert "<canvas" in (out / "viewer.html").read_text()
    assert main(["view", str(tmp_path)]) == 2  # not a compile folder: one line, exit 2
    assert "missing" in capsys.readouterr().err


def test_profile_prints_where_the_time_went(tmp_path, capsys):
    argv = ["compile", str(GPT2), "--seq", "8", "--placer", "greedy", "--no-validate"]
    assert main([*argv, "-o", str(tmp_path / "o"), "--profile"]) == 0
    err = capsys.readouterr().err
    assert "wsecc profile: top" in err and "cumtime" in err and "cmd_compile" in err


def test_a_saved_compile_reloads_even_when_placed_shapes_outgrow_the_fill(tmp_path):
    """The placer may take alternative shapes with a few % more area than the fill target."""
    from wsecc.kernels import Sizing

    c = wsecc.compile(GPT2, seq=16, placer="greedy", validate=False)
    grown = {k.name: (k.h, k.w + 1) for k in c.sizing.kernels}
    from wsecc.kernels import sizing_at

    tight = dataclasses.replace(c.sizing, fill=(c.sizing.pes_used + 0.5) / c.target.usable_pes)
    s = sizing_at(tight, c.kernel_graph, c.target, "mixed", grown)
    assert s.pes_used > tight.fill * c.target.usable_pes
    assert Sizing.from_json(s.to_json()) == s  # verify() accepts it


def test_inputs_file_is_used_and_saved_outputs_match_onnxruntime(tmp_path):
    """--inputs feeds the numerics; --save-outputs lets anyone re-check the verdict."""
    import numpy as np

    from wsecc.check.numerics import make_inputs, ort_run

    c = Compilation.load(GPT2, Options(batch=2, seq=8))
    feeds = make_inputs(c.graph, seed=7)
    np.savez(tmp_path / "in.npz", **feeds)
    out = tmp_path / "o"
    argv = ["compile", str(GPT2), "--batch", "2", "--seq", "8", "--placer", "greedy"]
    assert (
        main([*argv, "--inputs", str(tmp_path / "in.npz"), "--save-outputs", "-o", str(out)]) == 0
    )
    with np.load(out / "inputs.npz") as z:
        assert all(np.array_equal(z[k], feeds[k]) for k in feeds)
    ref = ort_run(GPT2, feeds)
    with np.load(out / "outputs.npz") as z:
        assert set(z.files) == set(ref)
        for name, r in ref.items():
            assert np.corrcoef(z[name].ravel(), r.ravel())[0, 1] > 0.999
    np.savez(tmp_path / "bad.npz", input_ids=np.zeros((1, 3), np.int64))
    assert main([*argv, "--inputs", str(tmp_path / "bad.npz"), "-o", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_simulate_outdir_at_another_level_and_precision(tmp_path, capsys):
    out = tmp_path / "o"
    bert = SAMPLES / "bert_legacy_op14.onnx"
    argv = ["compile", str(bert), "--batch", "2", "--seq", "16", "--placer", "greedy"]
    assert main([*argv, "--no-validate", "-o", str(out)]) == 0
    assert json.loads((out / "report.json").read_text())["numerics"] is None
    capsys.readouterr()
    assert main(["simulate", str(out), "--sim", "l0", "--precision", "fp32", "--validate"]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["performance"]["model"] == "l0" and rep["precision"] == "fp32"
    assert rep["numerics"]["precision"] == "fp32" and rep["numerics"]["passed"]
    assert (out / "fused.ir.txt").exists() and not (out / "trace.json").exists()


def test_a_fork_compiles_the_fused_graph_under_other_options():
    fused = Compilation.load(GPT2, Options(seq=16, placer="greedy", validate=False)).fuse()
    other = fused.fork(Options(seq=16, target="wse3", precision="fp32", placer="greedy",
                               validate=False))  # fmt: skip
    assert other.fused is fused.fused and other.kernel_graph is None
    other.lower_and_size().place_and_route().simulate()
    direct = wsecc.compile(GPT2, seq=16, target="wse3", precision="fp32", placer="greedy",
                           validate=False)  # fmt: skip
    assert other.report(timings=False) == direct.report(timings=False)
    with pytest.raises(ValueError, match="bindings"):
        fused.fork(Options(seq=32))
