"""The onnxruntime reference: a file onnxruntime cannot run is the user's one-line error. The
tolerance rule: fp32's, or 4 x what float32 itself loses when that is more."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from wsecc.check.numerics import compare, make_inputs, ort_run, verdict_line
from wsecc.errors import WseccError


def test_a_file_onnxruntime_cannot_load_is_a_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07not a protobuf at all")
    with pytest.raises(WseccError, match=r"onnxruntime cannot run model.onnx .*--no-validate") as e:
        ort_run(bad, {})
    assert "\n" not in str(e.value)


def test_inputs_onnxruntime_rejects_are_a_one_line_error(samples_dir: Path) -> None:
    feeds = {"input_ids": np.zeros((1, 4), np.float32)}  # token ids must be integers
    with pytest.raises(WseccError, match="onnxruntime cannot run gpt2_legacy_op17.onnx"):
        ort_run(samples_dir / "gpt2_legacy_op17.onnx", feeds)


def test_numerics_too_large_to_hold_are_refused_in_one_line_or_skipped(
    monkeypatch: pytest.MonkeyPatch, samples_dir: Path, tmp_path: Path, capsys
) -> None:
    """A binding whose tensors onnxruntime could not hold (long sequences) compiles; asked to
    validate, it fails in one line before anything runs; left to auto, numerics are skipped."""
    import wsecc
    import wsecc.check.checks
    from wsecc.cli import main

    monkeypatch.setattr(wsecc.check.checks, "MAX_TENSOR_BYTES", 64 << 10)  # GPT-2 sample's scores
    gpt2 = samples_dir / "gpt2_legacy_op17.onnx"
    code = main(["compile", str(gpt2), "--seq", "32", "--placer", "greedy", "--validate",
                 "-o", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress lines
    assert code == 2 and err.startswith("wsecc: error: --validate"), err
    assert "--validate: onnxruntime and the functional simulation would hold" in err
    assert "--no-validate" in err and not (tmp_path / "out").exists()
    c = wsecc.compile(gpt2, seq=32, placer="greedy")
    assert c.numerics is None and c.perf is not None
    assert c.report()["numerics_skipped"].startswith("skipped: onnxruntime would hold")


def test_a_float16_export_compiles_and_its_numerics_run_and_pass(tmp_path: Path, capsys) -> None:
    """A file that computes in float16 (half-precision weights behind a Cast) is read as
    float32: it compiles, its numerics run against onnxruntime on the same float32 model and
    pass, the report, the summary and `wsecc inspect` say the file was read so, and
    onnxruntime's run of the file as written is reported beside the verdict, unchecked."""
    import json

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from wsecc.cli import main

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float16), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float16), "b")
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
        helper.make_node("MatMul", ["x16", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Cast", ["hb"], ["y"], to=TensorProto.FLOAT),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    path = tmp_path / "linear16.onnx"
    onnx.save(
        helper.make_model(
            helper.make_graph(nodes, "g", [x], [y], [w, b]),
            opset_imports=[helper.make_opsetid("", 17)],
        ),
        path,
    )
    code = main(["compile", str(path), "--seq", "4", "--placer", "greedy", "--validate",
                 "-o", str(tmp_path / "out")])  # fmt: skip
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    n = report["numerics"]
    assert code == 0 and n["passed"] and n["structure"]["passed"] and n["fused"]["passed"]
    assert "numerics_skipped" not in report and report["model"]["widened"] == ["float16"]
    assert "the file's float16 read as float32" in out
    assert main(["inspect", str(path), "--seq", "4"]) == 0
    assert "; the file's float16 read as float32" in capsys.readouterr().out.splitlines()[0]
    written = n["as_written"]
    assert written["types"] == ["float16"] and written["error"] is None
    # onnxruntime's CPU provider drops Cast(x, float16) and runs the MatMul in float32: 0 here
    assert written["outputs"][0]["max_rel_err"] < 1e-2


@pytest.mark.parametrize(
    "sample,half,keep_io_types",
    [
        ("bert_legacy_op17.onnx", "float16", False),  # torch exporting model.half()
        ("gpt2_legacy_op17.onnx", "float16", True),  # onnxconverter-common, keep_io_types
        ("bert_legacy_op17.onnx", "bfloat16", True),
    ],
)
def test_a_half_precision_export_passes_every_check_as_its_float32_model(
    sample: str, half: str, keep_io_types: bool, samples_dir: Path, tmp_path: Path
) -> None:
    """A bundled export converted to float16 (or bfloat16) compiles, and its numerics pass
    every check (mixed against onnxruntime, structure, fused) within the tolerances of a
    float32 file: every stage and onnxruntime compute the same float32 model. onnxruntime
    runs the float16 file as written too (the report's `as_written`, not checked)."""
    import json

    from half_exports import save_half
    from onnx import TensorProto

    from wsecc.cli import main

    path = save_half(
        samples_dir / sample, tmp_path / f"{half}_{sample}", keep_io_types=keep_io_types,
        half=TensorProto.FLOAT16 if half == "float16" else TensorProto.BFLOAT16,
    )  # fmt: skip
    out = tmp_path / "out"
    assert main(["compile", str(path), "--seq", "16", "--placer", "greedy", "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    n = report["numerics"]
    assert report["model"]["widened"] == [half] and "numerics_skipped" not in report
    assert n["precision"] == "mixed" and n["passed"] and n["precision_passed"], verdict_line(n)
    assert n["structure"]["passed"] and n["fused"]["passed"], verdict_line(n)
    checked = [*n["outputs"], *n["structure"]["outputs"], *n["fused"]["outputs"]]
    assert all(o["fp32_noise"] is None for o in checked)  # the plain tolerances
    written = n["as_written"]
    if half == "float16":  # measured 4.2e-4 (BERT), 4.1e-4 (GPT-2) on onnxruntime 1.32's CPU
        assert written["error"] is None and written["outputs"][0]["max_rel_err"] < 1e-2
    jsonschema = pytest.importorskip("jsonschema")
    from importlib import resources

    schema = json.loads((resources.files("wsecc.report") / "report.schema.json").read_text())
    jsonschema.validate(report, schema)


def test_float16_weights_left_on_disk_are_read_as_float32_from_there(
    samples_dir: Path, tmp_path: Path
) -> None:
    """GPT-2's two largest float16 weights (125 KB each) saved as external data stay on disk,
    memory-mapped by the loader: the frontend reads them as float32 from there, and
    onnxruntime's reference gets the widened model whole."""
    import onnx
    from half_exports import to_half

    import wsecc

    model = to_half(onnx.load(samples_dir / "gpt2_legacy_op17.onnx"))
    path = tmp_path / "gpt2_float16.onnx"
    onnx.save_model(
        model, path, save_as_external_data=True, location="weights.bin", size_threshold=1 << 16
    )
    kept = [t.name for t in onnx.load(path, load_external_data=False).graph.initializer
            if t.data_location == onnx.TensorProto.EXTERNAL]  # fmt: skip
    assert len(kept) == 2
    c = wsecc.compile(path, seq=16, placer="greedy")
    assert c.import_info is not None and c.import_info.widened == ("float16",)
    assert c.numerics is not None and c.numerics.passed, c.numerics.summary()


TWINS = Path(__file__).resolve().parent / "data" / "generation"


@pytest.mark.parametrize(
    "past,twin",
    [
        ("gpt2_optimum_past.onnx", "gpt2_optimum.onnx"),
        ("llama_optimum_merged.onnx", "llama_optimum.onnx"),
        ("llama_dynamo_past.onnx", "llama_optimum.onnx"),
    ],
)
def test_ort_run_runs_a_generation_graph_as_a_fresh_prompt(
    samples_dir: Path, past: str, twin: str
) -> None:
    """The past empty, positions arange, use_cache_branch False, the presents left out: the
    outputs of the same model exported without past, on the same (right-padded) inputs."""
    ids = np.random.default_rng(0).integers(3, 256, (2, 6))
    mask = np.ones((2, 6), np.int64)
    mask[1, -2:] = 0
    out = ort_run(samples_dir / past, {"input_ids": ids, "attention_mask": mask})
    assert list(out) == ["logits"]
    positions = np.broadcast_to(np.arange(6), (2, 6))
    ref = ort_run(
        TWINS / twin, {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
    )
    np.testing.assert_allclose(out["logits"], ref["logits"], rtol=1e-5, atol=1e-5)


def test_an_output_passes_within_4_x_its_float32_noise_when_that_is_more_than_the_tolerance():
    ref = np.linspace(-1.0, 1.0, 101)
    got = ref + 5e-5  # max rel err 5e-5, past fp32's 1e-5
    plain = compare("y", got, ref)
    assert not plain.passed and plain.fp32_noise is None
    within = compare("y", got, ref, fp32_noise=2e-5)  # within 8e-5
    assert within.passed and within.fp32_noise == 2e-5
    beyond = compare("y", got, ref, fp32_noise=5e-6)  # 2e-5: raised, and still short
    assert not beyond.passed and beyond.fp32_noise == 5e-6
    tiny = compare("y", got, ref, fp32_noise=1e-7)  # 4e-7: the tolerance stands, unrecorded
    assert not tiny.passed and tiny.fp32_noise is None
    n = {"passed": True, "precision": "fp32", "reference": "ort", "outputs": [asdict(within)]}
    assert verdict_line(n) == (
        "PASS: fp32 PASS (worst y: max rel err 5.00e-05, PCC 1.000000; within 4 x the 2.0e-05 "
        "float32 itself loses on these inputs) vs ort"
    )


def test_the_noise_raises_the_limit_only_up_to_mixed_precisions_own():
    """Where float32 loses more than mixed precision's 3e-2, an fp32 check cannot tell a wrong
    program from rounding: a result 5e-2 off fails however noisy float32 is."""
    ref = np.linspace(-1.0, 1.0, 101)
    off = compare("y", ref + 5e-2, ref, fp32_noise=1.0)
    assert not off.passed and off.fp32_noise == 1.0
    assert compare("y", ref + 2e-2, ref, fp32_noise=1.0).passed


def test_make_inputs_fills_a_per_query_mask_with_random_zeros_and_ones() -> None:
    """Megatron's float mask [B, 1, max, max]: 0/1 of its own element type, masked and kept
    pairs in every row, the diagonal kept (every query keeps a key); all ones unpadded."""
    from wsecc.ir.core import DType, Graph, TensorType, Value

    v = Value("attention_mask", TensorType(DType.FLOAT32, (2, 1, 16, 16)))
    graph = Graph((v,), (v,), ())
    m = make_inputs(graph, seed=1)["attention_mask"]
    assert m.dtype == np.float32 and set(np.unique(m)) == {0.0, 1.0}
    assert (m[:, 0].diagonal(axis1=-2, axis2=-1) == 1).all()
    assert (m.min(axis=-1) == 0).all()
    assert (make_inputs(graph, padded=False)["attention_mask"] == 1).all()
