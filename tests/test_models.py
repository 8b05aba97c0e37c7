"""Real exports end to end through the frontend and the passes.

For every committed sample, every corpus graph that compiles, and (with torch installed) tiny
Hugging Face exports of eight model families by three exporters: after the passes no
Softmax/Erf/Tanh/Pow/ReduceMean/Sqrt is left outside a fused op, and the reference interpreter
on the fused graph matches onnxruntime on the original file (max relative error ≤ 1e-5, fp32)
at two (batch, seq) bindings, with an all-ones and with a padded attention mask.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from conftest import ORT_CORPUS, SAMPLES
from wsecc.passes import DEFAULT_PIPELINE

from wsecc.analysis import param_count
from wsecc.check.numerics import compare, make_inputs, ort_run
from wsecc.frontend.onnx import import_model
from wsecc.interp import run
from wsecc.ir.core import Graph, Op
from wsecc.ir.verify import verify
from wsecc.pm import NumericsCheck, Pass, PassContext, PassManager

SAMPLE_FILES = sorted(p.name for p in SAMPLES.glob("*.onnx"))
BINDINGS = [(2, 16), (1, 7)]
# onnxruntime's contrib SkipLayerNormalization on these integer-weight test graphs normalises
# values ~270 with a tiny variance; its own float32 rounding differs from exact by ~1.5e-5.
CORPUS = {
    "TFBertForQuestionAnswering.onnx": 1e-5,
    "attention_opt.onnx": 3e-5,
    "bert_3d_attention_opt.onnx": 3e-5,
    # Megatron's per-query mask [B, 1, 64, 64], random 0/1 (make_inputs); the fused file's
    # reference gives its 4-D mask_index to onnxruntime's CPU kernel as the 3-D corner
    "gpt2_megatron.onnx": 1e-5,
    "gpt2_megatron_opt_skiplayernorm.onnx": 1e-5,
}


@cache
def imported_and_fused(path: Path, batch: int, seq: int) -> tuple[Graph, Graph]:
    """The graph as imported at (batch, seq) and after the passes, verified fully fused: made
    once for a binding's two masks (the passes do not change the imported graph)."""
    graph, _ = import_model(path, batch=batch, seq=seq)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    verify(fused, allow_unfused=False)
    return graph, fused


def check_model(path: Path, batch: int, seq: int, padded: bool, tol: float = 1e-5) -> None:
    graph, fused = imported_and_fused(path, batch, seq)
    feeds = make_inputs(graph, seed=batch * 100 + seq, padded=padded)
    ref = ort_run(path, feeds)
    got = run(fused, feeds)
    for name, r in ref.items():
        err = compare(name, got[name], r)
        assert err.max_rel_err <= tol, err


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "ones"])
@pytest.mark.parametrize("batch,seq", BINDINGS)
@pytest.mark.parametrize("name", SAMPLE_FILES)
def test_samples_fuse_and_match_onnxruntime(name, batch, seq, padded):
    check_model(SAMPLES / name, batch, seq, padded)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_fuses_and_matches_onnxruntime(name):
    path = ORT_CORPUS / name
    check_model(path, 2, 7, padded=True, tol=CORPUS[name])


def test_tensorflow_tensordot_linears_take_their_bias_and_gelu():
    """TF's Tensordot puts the bias Add after the Reshape back: still one Linear per dense."""
    path = ORT_CORPUS / "TFBertForQuestionAnswering.onnx"
    graph, _ = import_model(path, batch=1, seq=7)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    hist = fused.op_histogram()
    linears = [n for n in fused.nodes if n.op is Op.LINEAR]
    assert "GELU" not in hist and hist.get("ADD", 0) <= 1, hist
    assert all(n.attr("has_bias") for n in linears)


@pytest.mark.parametrize("name", [n for n in SAMPLE_FILES if n.startswith(("gpt2", "bert"))])
def test_samples_fuse_to_the_expected_ops(name):
    graph, _ = import_model(SAMPLES / name, batch=1, seq=8)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    hist = fused.op_histogram()
    assert hist["ATTENTION"] == 2 and hist["EMBEDDING"] == 1
    assert hist["LAYER_NORM"] == 5
    attn = [n for n in fused.nodes if n.op is Op.ATTENTION]
    assert all(n.attr("causal") == name.startswith("gpt2") for n in attn)
    assert all(n.attr("mask") == "key_padding" for n in attn)
    if name.startswith("gpt2"):
        assert hist["LM_HEAD"] == 1
        assert (
            sum(n.attr("activation") == "gelu_tanh" for n in fused.nodes if n.op is Op.LINEAR) == 2
        )
    else:
        assert sum(n.attr("activation") == "gelu" for n in fused.nodes if n.op is Op.LINEAR) == 2


ROTARY_KERNELS = {
    # Llama: q, k, v, o and down projections, SwiGLU's gate and up as one kernel, RMSNorm x 5
    "llama": {"linear": 10, "gated_linear": 2, "rmsnorm": 5, "attention": 2, "embedding": 1,
              "lm_head": 1},
    # GPT-J: parallel attention and MLP, their outputs and the residual summed by the next
    # norm (two skips), no elementwise add left
    "gptj": {"linear": 12, "layernorm": 3, "attention": 2, "embedding": 1, "lm_head": 1},
}  # fmt: skip


@pytest.mark.parametrize(
    "name", [n for n in SAMPLE_FILES if n.split("_")[0] in ("llama", "gptj")]
)  # Llama 4's sample (llama4_) has its own tests: tests/passes/test_llama4.py
def test_llama_family_samples_fuse_with_no_generic_kernel(name):
    """RMSNorm, SwiGLU, rotary embeddings (Llama rotates halves, GPT-J neighbours) and grouped
    K/V heads (Llama: 2 for 4 query heads), by both exporters: every kernel of a known kind."""
    from collections import Counter

    from wsecc.passes.lower import lower_to_kernels

    family = name.split("_")[0]
    graph, _ = import_model(SAMPLES / name, batch=1, seq=16)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    kinds = Counter(k.kind.value for k in lower_to_kernels(fused).kernels)
    assert dict(kinds) == ROTARY_KERNELS[family]
    attn = [n.attr_dict for n in fused.nodes if n.op is Op.ATTENTION]
    want = {"llama": ("half", 2), "gptj": ("interleaved", 4)}[family]
    for a in attn:
        assert (a["rotary"], a.get("kv_heads", a["num_heads"])) == want
        assert (a["num_heads"], a["head_dim"], a["rotary_dim"]) == (4, 16, 16)
        # a generation export called without a mask is causal alone
        assert a["causal"] and a["mask"] == ("none" if "nomask" in name else "key_padding")


@pytest.mark.parametrize("name", ["llama_legacy_op17.onnx", "gptj_dynamo.onnx"])
def test_attention_does_not_fuse_a_broken_rotary_embedding(name):
    """rotate-half without its Neg (or rotate-every-two without it) is no rotation: the
    attention is left unfused, and the reason names the rotary check."""
    from dataclasses import replace

    graph, _ = import_model(SAMPLES / name, batch=1, seq=16)
    broken = graph.replace(replace(n, op=Op.IDENTITY) if n.op is Op.NEG else n for n in graph.nodes)
    ctx = PassContext()
    fused, _ = PassManager(DEFAULT_PIPELINE).run(broken, ctx)
    assert not any(n.op is Op.ATTENTION for n in fused.nodes)
    assert any("not a rotary embedding" in m for m in ctx.notes)


@pytest.mark.parametrize("name", ["llama_legacy_op17.onnx", "llama_dynamo.onnx"])
def test_llama_rotary_tables_fold_at_long_sequences(name):
    """cos(positions · inv_freq) is [1, S, head_dim]: at S 256 it is 4,096 elements, past the
    weights' threshold; the folder still evaluates it, so no Cos or Sin reaches the IR."""
    graph, _ = import_model(SAMPLES / name, batch=1, seq=256)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    assert sum(n.op is Op.ATTENTION for n in fused.nodes) == 2


@pytest.mark.parametrize("name", [n for n in SAMPLE_FILES if n.startswith("gpt2")])
def test_gpt2_param_count_matches_formula(name):
    """V·d + P·d + L·(12d² + 13d) + 2d with the tied LM head counted once (the generation
    samples, with past, have a vocabulary of 256: samples/README.md)."""
    graph, _ = import_model(SAMPLES / name, batch=1, seq=8)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    V, d, P, L = 256 if "_past" in name else 1000, 64, 128, 2
    assert (
        param_count(graph)
        == param_count(fused)
        == V * d + P * d + L * (12 * d * d + 13 * d) + 2 * d
    )


def test_numerics_check_names_the_diverging_pass():
    """Break a pass on purpose: the PassManager names it and the first op that diverges."""
    import wsecc.passes as passes_pkg

    from wsecc.pm import PassError

    path = SAMPLES / "bert_dynamo.onnx"
    graph, _ = import_model(path, batch=2, seq=8)
    feeds = make_inputs(graph)
    ref = ort_run(path, feeds)
    real = passes_pkg.PASSES["fuse-gelu"]

    def broken(g, ctx):
        g = real(g, ctx)
        from wsecc.ir.core import Node

        nodes = [
            Node(
                n.op,
                n.inputs,
                n.outputs,
                tuple((k, "relu" if k == "activation" and v == "gelu" else v) for k, v in n.attrs),
                n.name,
                n.origin,
            )
            for n in g.nodes
        ]
        return g.replace(nodes)

    pipeline = [Pass("fuse-gelu", broken) if p == "fuse-gelu" else p for p in DEFAULT_PIPELINE]
    with pytest.raises(
        PassError, match=r"numerics diverge after pass fuse-gelu: .*first divergent op: .*linear\("
    ):
        PassManager(pipeline, numerics=NumericsCheck(feeds, ref)).run(graph)


HF = pytest.importorskip  # alias for readability below


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "ones"])
@pytest.mark.parametrize("exporter", ["legacy14", "legacy17", "dynamo"])
@pytest.mark.parametrize(
    "family", ["gpt2lm", "gpt2", "gptneo", "opt", "bert", "bertseq", "distilbert", "roberta"]
)
def test_hf_exports_fuse_and_match(family, exporter, padded):
    from hf_exports import export_path

    path = export_path(family, exporter)
    for batch, seq in BINDINGS:
        check_model(path, batch, seq, padded)


@pytest.mark.parametrize("exporter", ["legacy14", "legacy17", "dynamo"])
@pytest.mark.parametrize("family", ["gpt2lm", "bert", "distilbert"])
def test_hf_sdpa_exports_fuse_and_match(family, exporter):
    """SDPA attention exports: q and k each scaled by d^-1/4, Where masks, IsNaN clean-up."""
    from hf_exports import export_path

    path = export_path(family, exporter, attn="sdpa")
    for batch, seq in BINDINGS:
        for padded in (True, False):
            check_model(path, batch, seq, padded)


@pytest.mark.parametrize(
    "family,exporter,rotary",
    [
        ("gptj_partial", "legacy17", ("interleaved", 8)),
        ("gptj_partial", "dynamo", ("interleaved", 8)),
        # GPT-NeoX's legacy export fails in torch's trace under transformers 4.57 ("unordered_map
        # ::at", as GPT-2 LM's does); under transformers 5 it exports and fuses the same way
        ("gptneox", "dynamo", ("half", 4)),
        ("gptneox_serial", "dynamo", ("half", 4)),
    ],
)
def test_hf_partial_rotary_exports_fuse_and_match(family, exporter, rotary):
    """Partial rotary, the first rotary_dim of 16 head dims rotated and the rest passed through
    (GPT-J rotating 8, as GPT-J-6B does 64 of 256; GPT-NeoX a quarter, with its fused
    query_key_value laid out [heads, 3, head_dim] per token, its attention and MLP in parallel
    or in series): each attention fuses with that rotary_dim and the fused graph matches
    onnxruntime."""
    from hf_exports import export_path

    path = export_path(family, exporter)
    for batch, seq in BINDINGS:
        for padded in (True, False):
            check_model(path, batch, seq, padded)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(import_model(path, batch=1, seq=16)[0])
    attn = [n.attr_dict for n in fused.nodes if n.op is Op.ATTENTION]
    assert [(a["rotary"], a["rotary_dim"], a["head_dim"]) for a in attn] == [(*rotary, 16)] * 2


@pytest.mark.parametrize("exporter", ["legacy14", "legacy17", "dynamo"])
def test_hf_mpnet_relative_position_bias_exports_fuse_and_match(exporter):
    """MPNet's relative position bias: the encoder buckets each (query, key) distance, looks
    the buckets up in an Embedding(32, heads) once and every layer adds the [B, heads, S, S]
    result to its scores before the padding mask. At a bound sequence it folds to a constant,
    and each attention fuses with it as its bias operand [heads, S, S] (one constant, shared by
    the layers); the fused graph matches onnxruntime, padded too."""
    from hf_exports import export_path

    path = export_path("mpnet", exporter)
    for batch, seq in BINDINGS:
        for padded in (True, False):
            check_model(path, batch, seq, padded)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(import_model(path, batch=2, seq=16)[0])
    attn = [n for n in fused.nodes if n.op is Op.ATTENTION]
    assert len(attn) == 2 and all(n.attr("has_bias") for n in attn)
    (bias,) = {n.inputs[4] for n in attn}
    assert bias.type.shape == (4, 16, 16) and bias.const is not None


@pytest.mark.parametrize("exporter", ["legacy17", "dynamo"])
def test_hf_bloom_alibi_exports_fuse_and_match(exporter):
    """BLOOM's ALiBi: scores formed in [B·heads, S, S] (baddbmm of the bias, q and kᵀ),
    reshaped to [B, heads, S, S] and masked; each attention fuses with the per-head slopes
    2^(-8 h / heads) and the fused graph matches onnxruntime, padded too (the positions count
    the kept keys)."""
    from hf_exports import export_path

    path = export_path("bloom", exporter)
    for batch, seq in BINDINGS:
        for padded in (True, False):
            check_model(path, batch, seq, padded)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(import_model(path, batch=1, seq=16)[0])
    attn = [n.attr_dict for n in fused.nodes if n.op is Op.ATTENTION]
    assert [a["alibi"] for a in attn] == [(0.25, 0.0625, 0.015625, 0.00390625)] * 2


# Issue 33: one bundled export per family users bring (samples/README.md, "Families"), each
# with the kernels it must become. No generic kernel, no elementwise kernel: every pattern
# (per-head q/k norms, GeGLU, a fused gate/up, parallel residuals, padding-derived positions,
# the embedding scale, shared zero biases, folded lookups) is fused.
FAMILY_KERNELS = {
    # q/k RMSNorm per head before rotary (9 norms: 2 per layer for q, k, 2 for the block, final)
    "qwen3_dynamo.onnx": {"attention": 2, "embedding": 1, "gated_linear": 2, "linear": 10,
                          "lm_head": 1, "rmsnorm": 9},
    # the same after the head transpose, GeGLU (tanh), √d embedding scale, 4 block norms
    "gemma3_dynamo.onnx": {"attention": 2, "embedding": 1, "gated_linear": 2, "linear": 10,
                           "lm_head": 1, "rmsnorm": 13},
    # fused gate_up projection, split: one gated linear per layer
    "phi3_dynamo.onnx": {"attention": 2, "embedding": 1, "gated_linear": 2, "linear": 6,
                         "lm_head": 1, "rmsnorm": 5},
    # parallel attention and MLP from one norm: the next norm sums both into the stream
    "falcon_dynamo.onnx": {"attention": 2, "embedding": 1, "layernorm": 3, "linear": 8,
                           "lm_head": 1},
    "codegen_dynamo.onnx": {"attention": 2, "embedding": 1, "layernorm": 3, "linear": 8,
                            "lm_head": 1},
    # parallel block with two norms; zero QKV biases stored once for both layers
    "gptneox_dynamo.onnx": {"attention": 2, "embedding": 1, "layernorm": 5, "linear": 8,
                            "lm_head": 1},
    # ALiBi; zero QKV biases stored once for both layers
    "bloom_dynamo.onnx": {"attention": 2, "embedding": 1, "layernorm": 6, "linear": 8,
                          "lm_head": 1},
    # factorised embedding (32) and its projection; token types a folded lookup
    "albert_legacy_op17.onnx": {"attention": 2, "embedding": 1, "layernorm": 5, "linear": 14},
    # positions from padding (Equal, Not, CumSum) inside the embedding; pooler's first token
    "xlmroberta_legacy_op17.onnx": {"attention": 2, "embedding": 1, "layernorm": 5,
                                    "linear": 13},
    # GeGLU (erf) over a sliced Wi; rotary in an encoder
    "modernbert_legacy_op17.onnx": {"attention": 2, "embedding": 1, "gated_linear": 2,
                                    "layernorm": 5, "linear": 6},
    # relative position buckets with a padding mask: a constant bias per head
    "t5encoder_legacy_op17.onnx": {"attention": 2, "embedding": 1, "linear": 12, "rmsnorm": 5},
    # soft-capped scores (the attention's softcap) and logits (the head's), a sliding window
    # on every other layer, GeGLU, √d scale, 4 norms a block
    "gemma2_dynamo.onnx": {"attention": 2, "embedding": 1, "gated_linear": 2, "linear": 10,
                           "lm_head": 1, "rmsnorm": 9},
}  # fmt: skip
FAMILY_DECODERS = sorted(n for n in FAMILY_KERNELS if "dynamo" in n)


@pytest.mark.parametrize("name", sorted(FAMILY_KERNELS))
def test_family_samples_fuse_to_their_kernels(name):
    """Every kernel of a known kind, none generic or elementwise (the fused graph matches
    onnxruntime: test_samples_fuse_and_match_onnxruntime runs on every sample)."""
    from collections import Counter

    from wsecc.passes.lower import lower_to_kernels

    graph, _ = import_model(SAMPLES / name, batch=1, seq=16)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    kinds = Counter(k.kind.value for k in lower_to_kernels(fused).kernels)
    assert dict(kinds) == FAMILY_KERNELS[name]


@pytest.mark.parametrize("name", sorted(FAMILY_KERNELS))
def test_family_samples_compile_and_validate(name):
    """`wsecc compile FILE --seq 8 --placer greedy` (validation on, mixed precision): every
    numerics check passes, against onnxruntime and the fp32 structure check."""
    import wsecc

    c = wsecc.compile(SAMPLES / name, seq=8, placer="greedy")
    numerics = c.report()["numerics"]
    assert numerics["passed"] and numerics["structure"]["passed"], numerics
    assert not [k.name for k in c.kernel_graph.kernels if k.kind.value == "generic"]


@pytest.mark.parametrize("name", FAMILY_DECODERS)
def test_family_decoders_generate_as_onnxruntime(name):
    """`--mode generate --validate --precision fp32`: a 4-token prompt and 4 new tokens, the
    ids identical to onnxruntime's greedy generation from the same file."""
    import wsecc

    c = wsecc.compile(
        SAMPLES / name, seq=16, placer="greedy", mode="generate", prompt=4, new_tokens=4,
        precision="fp32",
    )  # fmt: skip
    check = c.generation_check
    assert check is not None and check.passed and check.ids_equal, check.summary()


def test_gemma2_soft_caps_and_windows_are_kept():
    """Gemma 2 (issue 33): each attention holds the score cap (0.05) and its layer's window (4
    on the sliding layers, none on the global ones), the head the logit cap (0.5); the caps
    bite on this sample: without them the fused graph is far from onnxruntime, with them
    within float32's rounding."""
    import numpy as np

    from wsecc.check.numerics import make_inputs, ort_run
    from wsecc.ir.core import Node

    path = SAMPLES / "gemma2_dynamo.onnx"
    fused, _ = PassManager(DEFAULT_PIPELINE).run(import_model(path, batch=2, seq=16)[0])
    attn = [n.attr_dict for n in fused.nodes if n.op is Op.ATTENTION]
    cap = float(np.float32(0.05))
    assert [(a["softcap"], a["window"]) for a in attn] == [(cap, 4), (cap, 0)]
    (head,) = [n for n in fused.nodes if n.op is Op.LM_HEAD]
    assert head.attr("softcap") == 0.5
    feeds = make_inputs(fused, seed=0, padded=True)
    want = ort_run(path, feeds)["logits"]
    got = run(fused, feeds)["logits"]
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))
    top = float(np.max(np.abs(want)))
    for op, least in ((Op.ATTENTION, 1e-3), (Op.LM_HEAD, 0.1)):  # measured 3.7e-3 and 0.95
        uncapped = fused.replace([
            Node(n.op, n.inputs, n.outputs,
                 tuple(kv for kv in n.attrs if n.op is not op or kv[0] != "softcap"), n.name)
            for n in fused.nodes
        ])  # fmt: skip
        assert np.max(np.abs(run(uncapped, feeds)["logits"] - want)) > least * top, op
