"""Kernel IR: derived work and weights, flows, the verifier's messages, JSON, networkx."""

from __future__ import annotations

import json

import networkx as nx
import pytest
from wsecc.targets import PRECISIONS

from wsecc.kernels import Flow, Kernel, KernelGraph, KernelGraphError, KernelKind, Port
from wsecc.kernels.ir import PRECISION_TABLE
from wsecc.kernels.kinds.attention import attention_pairs

LINEAR = dict(tokens=16, K=64, N=32, has_bias=True, activation="gelu_tanh", residual=True)


def test_precisions_agree_with_targets() -> None:
    assert tuple(PRECISION_TABLE) == PRECISIONS


def test_linear_work_and_weights() -> None:
    k = Kernel("fc", KernelKind.LINEAR, LINEAR)
    # 2 M K N + M N (bias 1 + residual 1 + gelu_tanh 15) = 65,536 + 512 x 17
    assert k.flops_per_sample == 2 * 16 * 64 * 32 + 16 * 32 * 17 == 74_240
    assert k.weight_elems == 64 * 32 + 32
    assert k.weight_bytes("mixed") == 2 * 2080 and k.weight_bytes("fp32") == 4 * 2080


def test_attention_work() -> None:
    k = Kernel("a", "attention", dict(seq=16, heads=2, head_dim=8, causal=True, padding_mask=False))
    assert attention_pairs(16, causal=True) == 16 * 17 // 2 == 136
    # heads x pairs x (4 d + 11 softmax ops) + heads x seq x d (normalise)
    assert k.flops_per_sample == 2 * 136 * (32 + 11) + 2 * 16 * 8 == 11_952
    assert k.weight_elems == 0


def test_tied_lm_head_counted_once(gpt2_graph) -> None:
    kg = gpt2_graph(layers=1, d=64, heads=2, seq=16, vocab=100)
    head = kg.kernel("lm_head")
    assert head.weight_elems == 64 * 100  # its region still holds a copy
    assert kg.unique_weight_elems() == sum(k.weight_elems for k in kg.kernels) - 64 * 100


def test_params_are_read_only() -> None:
    k = Kernel("fc", KernelKind.LINEAR, LINEAR)
    with pytest.raises(TypeError):
        k.params["K"] = 1  # type: ignore[index]


def test_flow_bytes_and_default_edges() -> None:
    ids = Port("ids", 16, "i32")
    emb = Kernel("emb", "embedding", dict(vocab=100, dim=8, rows=16, n_tables=1))
    ln = Kernel("ln", "layernorm", dict(rows=16, dim=8, has_residual=False))
    f_ids, f_act = Flow.between(ids, emb, 16, elem_type="i32"), Flow.between(emb, ln, 128)
    assert (f_ids.src_edge, f_ids.dst_edge, f_act.src_edge, f_act.dst_edge) == ("W", "W", "S", "N")
    assert f_ids.bytes_per_sample("fp16") == 64  # ids stay i32
    assert f_act.bytes_per_sample("mixed") == 256 and f_act.bytes_per_sample("fp32") == 512


def test_json_round_trip_and_networkx(gpt2_graph) -> None:
    kg = gpt2_graph(layers=2, d=64, heads=2, seq=16, vocab=100)
    kg.verify()
    again = KernelGraph.from_json(json.loads(json.dumps(kg.to_json())))
    assert again == kg
    g = kg.as_networkx()
    assert g.number_of_nodes() == len(kg.kernels) + 2
    assert g.number_of_edges() == len(kg.flows)
    assert nx.is_directed_acyclic_graph(g)
    assert g.nodes["input_ids"]["role"] == "input" and g.nodes["h0.attn"]["role"] == "kernel"


# --- verifier ------------------------------------------------------------------------------------


def graph_with(kernel: Kernel) -> KernelGraph:
    x, y = Port("x", 16), Port("y", 16)
    return KernelGraph(
        "g", 16, (kernel,), (Flow("x", kernel.name, 16), Flow(kernel.name, "y", 16)), (x,), (y,)
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"K": None}, "kernel 'fc' (linear): missing param 'K'"),
        ({"bias": True}, "kernel 'fc' (linear): unknown param 'bias'"),
        ({"K": 0}, "kernel 'fc' (linear): param 'K' must be a positive int, got 0"),
        ({"has_bias": 1}, "kernel 'fc' (linear): param 'has_bias' must be a bool, got 1"),
        (
            {"activation": "swish"},
            "kernel 'fc' (linear): activation 'swish' is not one of '', 'relu', 'gelu_tanh', 'gelu_erf', 'tanh'",
        ),
    ],
)
def test_verifier_names_kernel_and_param(change: dict, message: str) -> None:
    params = {**LINEAR, **change}
    params = {k: v for k, v in params.items() if v is not None}
    with pytest.raises(KernelGraphError) as info:
        graph_with(Kernel("fc", KernelKind.LINEAR, params)).verify()
    assert str(info.value) == message


def test_verifier_rejects_bad_flows_and_names() -> None:
    a = Kernel("a", "softmax", dict(rows=4, dim=4))
    b = Kernel("b", "softmax", dict(rows=4, dim=4))
    x, y = Port("x", 16), Port("y", 16)
    cases = [
        (
            (a, b),
            (Flow("x", "a", 16), Flow("a", "zz", 16)),
            "flow 'a' -> 'zz': unknown destination 'zz'",
        ),
        (
            (a, b),
            (Flow("x", "a", 16), Flow("b", "a", 16), Flow("a", "b", 16), Flow("b", "y", 16)),
            "flow 'b' -> 'a': goes backwards (kernels must be in topological order)",
        ),
        (
            (a, b),
            (Flow("x", "a", 16), Flow("a", "y", 16), Flow("x", "b", 16)),
            "kernel 'b' (softmax): no outgoing flow",
        ),
        ((a, a), (Flow("x", "a", 16), Flow("a", "y", 16)), "duplicate name 'a'"),
        (
            (a,),
            (Flow("x", "a", 16), Flow("a", "y", 16, dst_edge="Q")),
            "flow 'a' -> 'y': edges must be one of N, S, E, W",
        ),
    ]
    for kernels, flows, message in cases:
        with pytest.raises(KernelGraphError) as info:
            KernelGraph("g", 4, kernels, flows, (x,), (y,)).verify()
        assert str(info.value) == message
