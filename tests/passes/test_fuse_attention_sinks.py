"""fuse-attention on gpt-oss's attention (the bundled tiny export): sinks, one logit per head
joined to the scores before the softmax and its probability sliced off, become the attention's
`sinks`; layer 0's sliding window (8) and layer 1's full causal attention are read from the
mask as before; the rotary form that concatenates the two rotated halves is matched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from wsecc.passes import PASSES, PassContext

from wsecc.frontend.onnx import import_model
from wsecc.interp import run
from wsecc.ir.core import Graph, Node, Op, Value
from wsecc.ir.verify import verify

BEFORE = ("canonicalize", "fuse-embedding", "fuse-linear", "fuse-moe", "fuse-layernorm")


def _graph(samples_dir: Path) -> Graph:
    g, _ = import_model(samples_dir / "gptoss_dynamo.onnx", batch=2, seq=16)
    ctx = PassContext()
    for p in BEFORE:
        g = PASSES[p](g, ctx)
    return g


def _feeds() -> dict[str, np.ndarray]:
    mask = np.ones((2, 16), np.int64)
    mask[1, -4:] = 0  # right padding on the second row
    ids = np.random.default_rng(0).integers(3, 256, (2, 16)).astype(np.int64)
    return {"input_ids": ids, "attention_mask": mask}


def _sink_columns(g: Graph) -> list[np.ndarray]:
    cats = [n for n in g.nodes if n.op is Op.CONCAT and n.output.type.shape[-1] == 17]
    return [np.asarray(n.inputs[1].const)[0, :, 0, 0] for n in cats]


def test_sinks_window_and_rotary_fuse_into_attention(samples_dir: Path) -> None:
    g = _graph(samples_dir)
    sinks = _sink_columns(g)
    out = PASSES["fuse-attention"](g, PassContext())
    verify(out)
    atts = [n for n in out.nodes if n.op is Op.ATTENTION]
    assert len(atts) == 2 and Op.SOFTMAX not in [n.op for n in out.nodes]
    assert [a.attr("window") for a in atts] == [8, 0]
    assert all(a.attr("causal") and a.attr("rotary") == "half" for a in atts)
    for a, want in zip(atts, sinks, strict=True):
        assert np.array_equal(np.float32(a.attr("sinks")), want)
    feeds = _feeds()
    want, got = run(g, feeds), run(out, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_a_column_that_is_not_one_logit_per_head_is_not_a_sink(samples_dir: Path) -> None:
    """Layer 0's sink column made to vary along the queries: not a sink, so that softmax is
    left with the reason; layer 1 still fuses."""
    g = _graph(samples_dir)
    cat = next(n for n in g.nodes if n.op is Op.CONCAT and n.output.type.shape[-1] == 17)
    col = np.asarray(cat.inputs[1].const).copy()
    col[..., 3, :] += 1.0
    new = Value.constant(f"{cat.inputs[1].name}/varied", col)
    bad = Node(cat.op, (cat.inputs[0], new), cat.outputs, cat.attrs, cat.name, cat.origin)
    ctx = PassContext()
    out = PASSES["fuse-attention"](g.replace(bad if n is cat else n for n in g.nodes), ctx)
    assert [n.op for n in out.nodes].count(Op.ATTENTION) == 1
    assert any("not one logit per head" in n for n in ctx.notes), ctx.notes
