"""Lowering real exports to kernels, and sizing them on real and test targets."""

from __future__ import annotations

import functools

import pytest
from conftest import SAMPLES
from wsecc.passes import DEFAULT_PIPELINE
from wsecc.passes.lower import lower_to_kernels
from wsecc.targets import load_target

from wsecc.frontend.onnx import import_model
from wsecc.kernels import KernelKind, size_regions, work_proportional_sizing
from wsecc.pm import PassManager

SAMPLE_FILES = sorted(p.name for p in SAMPLES.glob("*.onnx"))


@functools.cache
def kernels_of(name: str, seq: int = 64):
    graph, _ = import_model(SAMPLES / name, batch=1, seq=seq)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    return lower_to_kernels(fused)


@pytest.mark.parametrize("name", SAMPLE_FILES)
def test_lowering_keeps_provenance_and_connects_every_kernel(name):
    kg = kernels_of(name)
    kinds = [k.kind for k in kg.kernels]
    assert kinds.count(KernelKind.ATTENTION) == 2 and kinds.count(KernelKind.EMBEDDING) == 1
    assert all(k.provenance for k in kg.kernels)
    for k in kg.kernels:  # a linear kernel is fed its whole input, tokens x K per sample
        if k.kind is KernelKind.LINEAR:
            fed = [f.elems_per_sample for f in kg.flows if f.dst == k.name and f.dst_edge == "W"]
            assert fed == [k.params["tokens"] * k.params["K"]], k.name
    attn = [k for k in kg.kernels if k.kind is KernelKind.ATTENTION]
    # a generation export called without a mask has none
    assert all(k.params["padding_mask"] == ("nomask" not in name) for k in attn)
    encoders = ("bert", "mpnet", "albert", "xlmroberta", "modernbert", "t5encoder")
    assert all(k.params["causal"] == (not name.startswith(encoders)) for k in attn)
    # MPNet's and T5's relative position biases are the attention's bias operand; no other
    # sample has one
    assert all(k.params["bias"] == name.startswith(("mpnet", "t5encoder")) for k in attn)


@pytest.mark.parametrize("target", ["wse2", "small64"])
@pytest.mark.parametrize("name", SAMPLE_FILES)
def test_sizing_never_loses_to_work_proportional(name, target):
    kg = kernels_of(name)
    t = load_target(target)
    s = size_regions(kg, t, "mixed")
    wp = work_proportional_sizing(kg, t, "mixed")
    assert s.kernel(s.bottleneck).cycles_per_sample <= wp.kernel(wp.bottleneck).cycles_per_sample
    assert s.max_sram_per_pe <= t.sram.bytes_per_pe
    assert s.pes_used <= t.usable_pes


def test_lowering_is_a_pass_that_requires_a_fused_graph():
    """The pass manager runs lowering like any pass, and refuses it a graph whose attention was
    not fused, naming the op left over and how to see why (--explain)."""
    from wsecc.passes import LOWERING

    from wsecc.kernels import KernelGraph
    from wsecc.pm import Level, PassError

    graph, _ = import_model(SAMPLES / "gpt2_legacy_op17.onnx", batch=1, seq=16)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    kg, records = PassManager(LOWERING).run(fused)
    assert isinstance(kg, KernelGraph) and records[0].nodes_after == len(kg.kernels)
    assert PASSES_LEVELS() == (Level.FUSED, Level.KERNELS)
    no_attention = [p for p in DEFAULT_PIPELINE if p != "fuse-attention"]
    with pytest.raises(PassError, match=r"input of pass lower is not fused: .*SOFTMAX.*--explain"):
        PassManager([*no_attention, *LOWERING]).run(graph)


def PASSES_LEVELS():  # noqa: N802 - reads like the table it checks
    from wsecc.passes import PASSES

    return PASSES["lower"].requires, PASSES["lower"].produces


def test_explain_names_the_rules_that_did_not_fire():
    """A MatMul of two activations (attention's scores before fuse-attention) is not a Linear:
    the pass records why, and the compile's --explain prints it."""
    from wsecc.compiler import Compilation, Options

    lines: list[str] = []
    c = Compilation.load(
        SAMPLES / "bert_dynamo.onnx", Options(seq=16, explain=True), lambda s, m: lines.append(m)
    ).fuse()
    notes = [n for r in c.pass_records for n in r.notes]
    assert any("fuse-linear: MATMUL" in n and "not a constant matrix" in n for n in notes)
    assert sum("not fused: " in line for line in lines) == len(notes)


def test_a_kernel_is_not_named_like_a_port(tmp_path):
    """torch names an output it was given no name for after its op: 'linear'."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["linear"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("linear", TensorProto.FLOAT, None)],
        [w],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    graph, _ = import_model(path, batch=1)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    kg = lower_to_kernels(fused)
    assert [k.name for k in kg.kernels] == ["linear.2"]
    assert [p.name for p in kg.outputs] == ["linear"]
