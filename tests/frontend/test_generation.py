"""Generation graphs (issue 17, item 1): decoders exported with past key/value inputs import as
the whole-context causal forward pass, bound as a fresh prompt (`wsecc.frontend.generation`),
and fuse exactly as the same model's export without past."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ORT_CORPUS, SAMPLES
from onnx import TensorProto, helper, numpy_helper
from wsecc.passes import DEFAULT_PIPELINE

from wsecc.check.numerics import make_inputs, ort_run
from wsecc.core.flow import lower
from wsecc.errors import FrontendError
from wsecc.frontend.fold import fold
from wsecc.frontend.generation import SPLIT, STACKED, generation_io
from wsecc.frontend.onnx import import_model, resolve_bindings
from wsecc.interp import run
from wsecc.ir.core import Op
from wsecc.pm import PassManager

TWINS = Path(__file__).resolve().parents[1] / "data" / "generation"
# with-past sample -> an export of the same model without past: optimum's for GPT-2 and OPT;
# for Llama the torch.onnx samples of the same config (optimum's Llama without past takes
# position_ids as data, so its rotary tables do not fold: tests/test_generate_ort.py runs it)
PAST_SAMPLES = {
    "gpt2_optimum_past.onnx": TWINS / "gpt2_optimum.onnx",
    "opt_optimum_past.onnx": TWINS / "opt_optimum.onnx",
    "llama_optimum_past.onnx": SAMPLES / "llama_legacy_op17.onnx",
    "llama_optimum_merged.onnx": SAMPLES / "llama_legacy_op17.onnx",
    "gpt2_dynamo_past.onnx": TWINS / "gpt2_optimum.onnx",
    "llama_dynamo_past.onnx": SAMPLES / "llama_dynamo.onnx",
    "llama_dynamo_past_nomask.onnx": SAMPLES / "llama_dynamo.onnx",
}


def kernel_kinds(path: Path, seq: int = 16) -> Counter[str]:
    graph, _ = import_model(path, batch=1, seq=seq)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    return Counter(k.kind.value for k in lower(fused).kernels)


@pytest.mark.parametrize("name", sorted(PAST_SAMPLES))
def test_a_with_past_export_fuses_as_its_no_past_export(name):
    kinds = kernel_kinds(SAMPLES / name)
    expected = kernel_kinds(PAST_SAMPLES[name])
    if name.startswith("opt"):
        # OPT without past numbers positions by the mask's cumsum, data the folder cannot see
        # through, so its position lookup keeps an Add; with past they are the bound arange
        expected["elementwise"] -= 1
    assert kinds == expected
    assert kinds["attention"] == 2 and "generic" not in kinds, kinds


def test_the_generation_interface_is_recorded():
    _, info = import_model(SAMPLES / "llama_optimum_past.onnx", batch=1, seq=16)
    gen = info.generation
    assert gen is not None and gen.layout == SPLIT and gen.past_dim == "past_sequence_length"
    assert [layer.past for layer in gen.layers] == [
        ("past_key_values.0.key", "past_key_values.0.value"),
        ("past_key_values.1.key", "past_key_values.1.value"),
    ]
    assert [layer.present for layer in gen.layers] == [
        ("present.0.key", "present.0.value"),
        ("present.1.key", "present.1.value"),
    ]
    assert {(layer.heads, layer.head_dim) for layer in gen.layers} == {(2, 16)}  # GQA: 2 of 4
    assert (gen.input_ids, gen.attention_mask, gen.position_ids, gen.use_cache_branch) == (
        "input_ids",
        "attention_mask",
        "position_ids",
        None,
    )
    line = info.describe_bindings()
    assert "past_sequence_length=0 (empty past)" in line
    assert "past_sequence_length + sequence_length=16 (past + sequence)" in line
    assert "position_ids=arange(16) per row" in line


def test_the_merged_decoder_binds_its_no_cache_branch():
    graph, info = import_model(SAMPLES / "llama_optimum_merged.onnx", batch=2, seq=8)
    assert info.generation is not None
    assert info.generation.use_cache_branch == "use_cache_branch"
    assert "use_cache_branch=False" in info.describe_bindings()
    assert [v.name for v in graph.inputs] == ["input_ids", "attention_mask"]
    assert [v.name for v in graph.outputs] == ["logits"]


def test_the_present_outputs_are_dropped_and_the_past_inputs_bound():
    graph, _ = import_model(SAMPLES / "gpt2_optimum_past.onnx", batch=2, seq=8)
    assert [v.name for v in graph.inputs] == ["input_ids", "attention_mask"]
    assert [v.name for v in graph.outputs] == ["logits"]
    assert graph.outputs[0].type.shape == (2, 8, 256)


def test_the_megatron_corpus_graph_imports_with_its_stacked_past():
    graph, info = import_model(ORT_CORPUS / "gpt2_megatron.onnx", batch=1, seq=16)
    gen = info.generation
    assert gen is not None and gen.layout == STACKED and gen.past_dim == "past_seq_len"
    assert gen.layers[0].past == ("past_0",) and gen.layers[0].present == ("present_0",)
    assert [v.name for v in graph.outputs] == ["logits"]


@pytest.mark.parametrize("name", ["gpt2_megatron.onnx", "gpt2_megatron_opt_skiplayernorm.onnx"])
def test_the_megatron_attention_takes_its_4d_mask_as_a_full_mask(name):
    """Its attention mask is a float input [batch, 1, 64, 64] the caller fills (Megatron's
    per-query mask), applied as scores·m − 10000·(1 − m), or after onnxruntime's fusions an
    Attention's 4-D mask_index: one attention with a full mask, the input's [S, S] corner.
    Both files hold the same weights, so the fused one is checked against onnxruntime on the
    unfused one too, with a random 0/1 mask (every query keeps its own key)."""
    graph, _ = import_model(ORT_CORPUS / name, batch=2, seq=16)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    (att,) = [n for n in fused.nodes if n.op is Op.ATTENTION]
    assert att.attr("mask") == "full" and not att.attr("causal")
    assert att.inputs[3].type.shape == (2, 16, 16)
    feeds = make_inputs(graph, seed=5)
    mask = feeds["attention_mask"][:, 0, :16, :16]
    assert 0 < mask.mean() < 1 and (mask.min(axis=-1) == 0).all()  # masked pairs in every row
    want = ort_run(ORT_CORPUS / "gpt2_megatron.onnx", feeds)["logits"]
    got = run(fused, feeds)["logits"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    ones = {**feeds, "attention_mask": np.ones_like(feeds["attention_mask"])}
    assert not np.allclose(run(fused, ones)["logits"], got, atol=1e-3)  # the mask matters


def test_gpt2_past_is_refused_for_its_duplicate_definitions():
    """ORT's test generator appended Constant nodes that redefine 48 values (onnxruntime takes
    the last); wsecc's loader refuses a graph that is not in SSA form."""
    with pytest.raises(FrontendError, match="value '284' is defined twice"):
        import_model(ORT_CORPUS / "gpt2_past.onnx", batch=1, seq=1)


# ------------------------------------------------------------------ hand-made graphs


def _decoder(past_dims: list[object], *, mask_dim: object = "past + seq") -> onnx.ModelProto:
    """y = Concat(past_i, x) per past input, reduced to logits-like [B, S, 4]; presents out."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 2, 4])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", mask_dim])
    inputs, outputs, nodes = [x, mask], [], []
    nodes.append(helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1, 3]))
    for i, d in enumerate(past_dims):
        name = f"past_key_values.{i}.{'key' if i % 2 == 0 else 'value'}"
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", 2, d, 4]))
        present = name.replace("past_key_values", "present")
        nodes.append(helper.make_node("Concat", [name, "xt"], [present], axis=2))
        outputs.append(helper.make_tensor_value_info(present, TensorProto.FLOAT, None))
    nodes.append(helper.make_node("Relu", ["x"], ["y"]))
    outputs.insert(0, helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "decoder", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_an_expression_dim_binds_to_its_value():
    model = _decoder(["past", "past"], mask_dim="past + seq")
    assert resolve_bindings(model, 2, 5) == {"batch": 2, "seq": 5, "past": 0, "past + seq": 5}


def test_the_mask_key_length_under_its_own_name_is_the_context():
    model = _decoder(["past", "past"], mask_dim="total_length")
    assert resolve_bindings(model, 2, 5)["total_length"] == 5


def test_past_inputs_that_disagree_on_the_past_length_are_one_error():
    with pytest.raises(FrontendError) as e:
        generation_io(_decoder(["past", "past_len"]))
    assert str(e.value).count("\n") == 0
    assert "past inputs disagree on the past length" in str(e.value)
    assert "past_key_values.1.value has 'past_len'" in str(e.value)


def test_a_fixed_past_length_is_one_error():
    with pytest.raises(FrontendError, match="has a fixed past length of 3"):
        generation_io(_decoder(["past", 3]))


def test_binding_the_past_to_a_length_is_refused():
    with pytest.raises(FrontendError, match="past length is bound to 0.*drop --dim past"):
        resolve_bindings(_decoder(["past", "past"]), 2, 5, {"past": 4})


def test_a_hand_made_decoder_imports_without_its_presents(tmp_path):
    path = tmp_path / "decoder.onnx"
    onnx.save(_decoder(["past", "past"]), path)
    graph, info = import_model(path, batch=2, seq=5)
    assert [v.name for v in graph.outputs] == ["y"]
    assert info.generation is not None
    assert info.generation.present_outputs == ("present.0.key", "present.1.value")


# ------------------------------------------------------------------ folding


def _scatter_model(indices: np.ndarray) -> onnx.ModelProto:
    """out = ScatterND(zeros [1, 2, 3], indices, Relu(u)), u shaped as the indices' rows."""
    rows = list(indices.shape[:-1]) + [3] * (3 - indices.shape[-1])
    u = helper.make_tensor_value_info("u", TensorProto.FLOAT, rows)
    nodes = [
        helper.make_node("Relu", ["u"], ["r"]),
        helper.make_node("ScatterND", ["data", "indices", "r"], ["out"]),
    ]
    inits = [
        numpy_helper.from_array(np.zeros((1, 2, 3), np.float32), "data"),
        numpy_helper.from_array(indices.astype(np.int64), "indices"),
    ]
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, 3])
    graph = helper.make_graph(nodes, "scatter", [u], [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_a_scatter_over_every_element_folds_to_a_reshape():
    every = np.argwhere(np.ones((1, 2, 3)))  # [6, 3]: every element, in row-major order
    folded, _ = fold(_scatter_model(every))
    assert [n.op_type for n in folded.graph.node] == ["Relu", "Reshape"]


def test_a_scatter_over_every_element_out_of_order_stays():
    every = np.argwhere(np.ones((1, 2, 3)))[::-1].copy()
    folded, _ = fold(_scatter_model(every))
    assert "ScatterND" in [n.op_type for n in folded.graph.node]


def test_a_scatter_over_part_of_the_tensor_stays():
    part = np.array([[0, 1]])  # writes row (0, 1) only
    folded, _ = fold(_scatter_model(part))
    assert "ScatterND" in [n.op_type for n in folded.graph.node]


def test_a_dynamo_export_with_a_cache_binds_its_mask_length_as_the_context():
    """torch.onnx's dynamo export names the mask's key length `total` (no position_ids input)."""
    _, info = import_model(SAMPLES / "gpt2_dynamo_past.onnx", batch=1, seq=16)
    assert info.generation is not None and info.generation.position_ids is None
    assert info.bindings["total"] == 16 and info.bindings["past_sequence"] == 0
    assert info.sources["total"] == "past + sequence"


def test_the_default_sequence_reads_positions_as_bound():
    """OPT's table has 130 rows read at position + 2: with position_ids bound to arange, the
    default sequence is 128, not the 130 that ids of ones would suggest."""
    _, info = import_model(SAMPLES / "opt_optimum_past.onnx", batch=1)
    assert info.bindings["sequence_length"] == 128
    assert info.sources["sequence_length"] == "position table"


def test_an_expression_dim_given_another_value_is_refused():
    model = _decoder(["past", "past"], mask_dim="past + seq")
    with pytest.raises(FrontendError, match="disagrees with the dims it names"):
        resolve_bindings(model, 2, 5, {"past + seq": 7})


def test_an_unnamed_past_length_is_one_error():
    model = _decoder(["past", "past"])
    model.graph.input[2].type.tensor_type.shape.dim[2].Clear()  # neither a value nor a name
    with pytest.raises(FrontendError, match="'past_key_values.0.key' has an unnamed past length"):
        generation_io(model)
