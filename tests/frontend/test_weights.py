"""`--weights inputs`: weightless exports (every weight a graph input with a static shape and no
data) compile as the same model with its weights does — the same fusions, parameters, kernels
and flows — without numerics; the flag's one-line errors; which inputs are weights."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import SAMPLES
from onnx import TensorProto, helper

import wsecc
from wsecc.analysis import param_count
from wsecc.cli import main
from wsecc.compiler import NUMERICS_SKIPPED_WEIGHTLESS, Compilation, Options
from wsecc.errors import WseccError
from wsecc.frontend.onnx import import_model, load_model, weight_inputs
from wsecc.ir.arrays import is_uniform
from wsecc.progress import summary_rows
from wsecc.sweep import load_spec, read_table, run_sweep


def weightless_copy(src: Path, dst: Path) -> int:
    """`src` with every parameter (a float initializer of more than one element) moved to a
    graph input with its shape and no data, as a meta-device export has it; returns how many."""
    m = onnx.load(str(src))
    g = m.graph
    params = [
        t
        for t in g.initializer
        if t.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16) and int(np.prod(t.dims)) > 1
    ]
    names = {t.name for t in params}
    keep = [t for t in g.initializer if t.name not in names]
    del g.initializer[:]
    g.initializer.extend(keep)
    listed = {i.name for i in g.input}
    g.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in params
        if t.name not in listed
    )
    onnx.save(m, str(dst))
    return len(params)


def compiled_facts(path: Path, **options: object) -> dict[str, object]:
    """What must not depend on the weights' values: fused ops, parameters, FLOPs, kernels,
    flows, the sizing of every kernel."""
    c = Compilation.load(path, Options(batch=2, seq=16, **options)).fuse().lower_and_size()
    rep = c.report(timings=False)
    kg = c.kernel_graph
    return {
        "ops": rep["ops_after"],
        "fused": [(f["op"], f["onnx_nodes"]) for f in rep["fused"]],
        "params": rep["model"]["params"],
        "flops": rep["model"]["flops_per_sample"],
        "kernels": list(kg.kernels),
        "flows": list(kg.flows),
        "sizing": rep["sizing"],
        "kernel_rows": rep["kernels"],
    }


@pytest.fixture(scope="module")
def weightless(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("weightless")
    out = {}
    for p in sorted(SAMPLES.glob("*.onnx")):
        out[p.name] = folder / p.name
        assert weightless_copy(p, out[p.name]) > 10  # Falcon without biases: 16
    return out


@pytest.mark.parametrize(
    "sample",
    [
        "gpt2_dynamo.onnx",
        "bert_dynamo.onnx",
        "bert_legacy_op14.onnx",
        "bert_legacy_op17.onnx",
        "gpt2_legacy_op14.onnx",
        "gpt2_legacy_op17.onnx",
    ],
)
def test_weightless_compiles_as_the_weighted_model(weightless, sample):
    weighted = compiled_facts(SAMPLES / sample)
    shapes_only = compiled_facts(weightless[sample], weights="inputs")
    if sample.startswith("gpt2_legacy"):
        # The legacy exporter stores the tied embedding twice, the table [1000, 64] and its
        # transpose for the head: with data they are seen to be one parameter, a tied head;
        # without, they are two (the dynamo exporter reads one input twice: tied either way).
        assert shapes_only.pop("params") == weighted.pop("params") + 1000 * 64
        head = [k.name for k in weighted["kernels"] if k.params.get("tied")]  # type: ignore[attr-defined]
        assert head == ["lm_head"]
        weighted["kernels"] = [
            dataclasses.replace(k, params={**k.params, "tied": False}) if k.name in head else k
            for k in weighted["kernels"]  # type: ignore[attr-defined]
        ]
    assert shapes_only == weighted


def test_weights_are_constants_without_memory(weightless):
    graph, info = import_model(weightless["gpt2_dynamo.onnx"], batch=1, seq=16, weights="inputs")
    assert info.weight_inputs == 28 and [v.name for v in graph.inputs] == [
        "input_ids",
        "attention_mask",
    ]
    big = [v for v in graph.constants() if v.type.size > 1024]
    assert big and all(is_uniform(v.const) for v in big)
    # one element each, and no two alike (sharing equal constants must not merge them)
    assert sum(v.const.base.nbytes for v in big) == sum(v.type.dtype.itemsize for v in big)
    assert len({float(v.const.flat[0]) for v in big}) == len(big)


def _weightless_linear(tmp_path: Path, x_shape: list[object]) -> Path:
    """y = x @ W + b with W [8, 16] and b [16] graph inputs without data; x as given."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
    w = helper.make_tensor_value_info("W", TensorProto.FLOAT, [8, 16])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="mm"),
        helper.make_node("Add", ["xw", "b"], ["y"], name="add"),
    ]
    g = helper.make_graph(nodes, "linear", [x, w, b], [y])
    path = tmp_path / "linear.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_parameters_are_counted_from_shapes(tmp_path):
    path = _weightless_linear(tmp_path, ["batch", 8])
    graph, _ = import_model(path, batch=3, weights="inputs")
    assert param_count(graph) == 8 * 16 + 16
    assert [v.name for v in graph.inputs] == ["x"] and graph.inputs[0].type.shape == (3, 8)


def test_data_inputs_are_not_weights(tmp_path):
    """Static float inputs are weights only where a parameter goes: an activation (MatMul's
    left operand) and a 2-D additive mask are data, however static their shapes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    w = helper.make_tensor_value_info("W", TensorProto.FLOAT, [8, 8])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, [2, 8])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 8])
    table = helper.make_tensor_value_info("table", TensorProto.FLOAT, [100, 8])
    wt = helper.make_tensor_value_info("Wt", TensorProto.FLOAT, [8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"]),
        helper.make_node("Transpose", ["Wt"], ["wt_t"], perm=[1, 0]),  # seen through a view
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("MatMul", ["h", "wt_t"], ["h2"]),
        helper.make_node("Add", ["h2", "mask"], ["h3"]),
        helper.make_node("ReduceSum", ["e"], ["s"], keepdims=0),
        helper.make_node("Add", ["h3", "s"], ["y"]),
    ]
    g = helper.make_graph(nodes, "g", [x, w, mask, ids, table, wt], [y])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    assert [i.name for i in weight_inputs(model)] == ["W", "table", "Wt"]


def test_a_weightless_model_without_the_flag_fails_in_one_line(tmp_path, capsys, weightless):
    path = weightless["gpt2_dynamo.onnx"]
    assert main(["inspect", str(path), "--seq", "16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert "weights without data" in err[0] and "pass --weights inputs" in err[0]
    assert main(["inspect", str(path), "--seq", "16", "--weights", "inputs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["params"] == 172_288


def test_the_flag_on_a_model_with_its_weights_fails_in_one_line(capsys):
    path = SAMPLES / "bert_dynamo.onnx"
    assert main(["check", str(path), "--seq", "16", "--weights", "inputs"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no graph input is a weight" in err[0]
    assert "drop --weights inputs" in err[0]


def test_a_model_with_weights_and_a_weight_shaped_input_still_compiles(tmp_path):
    """Without the flag, a static input read as a parameter fails only when the file holds
    fewer weights than such inputs (a weightless export), not in a model that has its own."""
    model = load_model(SAMPLES / "gpt2_dynamo.onnx")
    g = model.graph
    extra = helper.make_tensor_value_info("scale", TensorProto.FLOAT, [64])
    g.input.append(extra)
    first_ln = next(n for n in g.node if n.op_type == "LayerNormalization")
    g.node.append(helper.make_node("Mul", [first_ln.output[0], "scale"], ["scaled"]))
    g.output.append(helper.make_tensor_value_info("scaled", TensorProto.FLOAT, None))
    path = tmp_path / "with_scale.onnx"
    onnx.save(model, str(path))
    graph, info = import_model(path, batch=1, seq=16)
    assert info.weight_inputs == 0 and "scale" in {v.name for v in graph.inputs}


def test_numerics_are_skipped_with_a_note(weightless, tmp_path):
    path = weightless["bert_dynamo.onnx"]
    c = wsecc.compile(path, batch=2, seq=16, placer="greedy", weights="inputs")
    rep = c.report()
    assert c.numerics is None and rep["numerics"] is None
    assert rep["numerics_skipped"] == NUMERICS_SKIPPED_WEIGHTLESS
    assert rep["options"]["weights"] == "inputs" and rep["performance"]["samples_per_s"] > 0
    assert ("numerics", NUMERICS_SKIPPED_WEIGHTLESS) in summary_rows(rep)
    saved = json.loads((c.write(tmp_path / "o") / "report.json").read_text())
    assert saved["numerics_skipped"] == NUMERICS_SKIPPED_WEIGHTLESS
    for ask in ({"validate": True}, {"inject_fault": "drop_partial"}):
        with pytest.raises(WseccError, match="no values, so there are no numerics"):
            wsecc.compile(path, seq=16, weights="inputs", **ask)
    with pytest.raises(WseccError, match="unknown weights 'none': choose one of constants, inputs"):
        Options(weights="none")


def test_a_sweep_takes_the_weights(weightless, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[[models]]\npath = "{weightless["gpt2_dynamo.onnx"]}"\nweights = "inputs"\n'
        '[axes]\nseq = [16, 32]\n[fixed]\nplacer = "greedy"\nsim = "l0"\n'
    )
    points = load_spec(spec).points()
    assert [p.options().weights for p in points] == ["inputs", "inputs"]
    summary = run_sweep(load_spec(spec), tmp_path / "out", workers=1)
    assert (summary.ran, summary.failed) == (2, 0)
    rows = read_table(tmp_path / "out")
    assert [(r["status"], r["params"], r["numerics"]) for r in rows] == [("ok", 172_288, None)] * 2


@pytest.mark.parametrize(
    ("family", "sample"), [("gpt2lm", "gpt2_dynamo.onnx"), ("bertseq", "bert_dynamo.onnx")]
)
def test_a_meta_device_export_compiles_as_the_sample(tmp_path, family, sample):
    """docs/frontend.md's recipe on the samples' configs: built on the meta device, exported
    weightless, it compiles to what the sample (the same config, with weights) compiles to."""
    from hf_exports import _recipe

    recipe = _recipe()  # skips without torch and transformers
    spec = recipe.FAMILIES[family]
    path = tmp_path / f"{family}.onnx"
    module = recipe.build_family_meta(spec)
    inputs, params = recipe.export_weightless(module, recipe.make_inputs(spec, 2, 16, True), path)
    assert path.stat().st_size < params and inputs > 20  # under a byte per parameter
    facts = compiled_facts(path, weights="inputs")
    assert facts["params"] == params
    assert facts == compiled_facts(SAMPLES / sample)
