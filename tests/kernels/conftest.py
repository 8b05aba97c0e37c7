"""Synthetic GPT-2-shaped kernel graphs, built the way lowering would build them.

Per layer: ln1 -> qkv (linear, bias) -> attn (causal) -> proj (linear, bias, + residual)
-> ln2 -> fc (linear, bias, gelu_tanh) -> fc2 (linear, bias, + residual). The embedding sums
token and position tables (vocab + seq rows, 2 lookups per token); ln_f feeds a tied LM head.
"""

from __future__ import annotations

import pytest

from wsecc.kernels import Flow, Kernel, KernelGraph, KernelKind, Port


def gpt2_kernel_graph(
    layers: int, d: int, heads: int, seq: int, vocab: int, name: str = "gpt2"
) -> KernelGraph:
    kernels: list[Kernel] = []
    flows: list[Flow] = []
    ids = Port("input_ids", seq, "i32")
    logits = Port("logits", seq * vocab)

    def add(name: str, kind: KernelKind, **params: object) -> Kernel:
        k = Kernel(name, kind, params, (f"/{name}",))
        kernels.append(k)
        return k

    def linear(name: str, K: int, N: int, activation: str = "", residual: bool = False) -> Kernel:
        return add(
            name,
            KernelKind.LINEAR,
            tokens=seq,
            K=K,
            N=N,
            has_bias=True,
            activation=activation,
            residual=residual,
        )

    def ln(name: str) -> Kernel:
        return add(name, KernelKind.LAYERNORM, rows=seq, dim=d, has_residual=False)

    def flow(src: Kernel | Port, dst: Kernel | Port, elems: int, **kw: object) -> None:
        flows.append(Flow.between(src, dst, elems, **kw))  # type: ignore[arg-type]

    act = seq * d
    stream = add("embed", KernelKind.EMBEDDING, vocab=vocab + seq, dim=d, rows=seq, n_tables=2)
    flow(ids, stream, seq, elem_type="i32")
    for i in range(layers):
        ln1 = ln(f"h{i}.ln1")
        qkv = linear(f"h{i}.qkv", d, 3 * d)
        attn = add(
            f"h{i}.attn",
            KernelKind.ATTENTION,
            seq=seq,
            heads=heads,
            head_dim=d // heads,
            causal=True,
            padding_mask=False,
        )
        proj = linear(f"h{i}.proj", d, d, residual=True)
        ln2 = ln(f"h{i}.ln2")
        fc = linear(f"h{i}.fc", d, 4 * d, activation="gelu_tanh")
        fc2 = linear(f"h{i}.fc2", 4 * d, d, residual=True)
        flow(stream, ln1, act)
        flow(ln1, qkv, act)
        flow(qkv, attn, act, name="q")
        flow(qkv, attn, 2 * act, name="kv", dst_edge="W")
        flow(attn, proj, act)
        flow(stream, proj, act, name="residual", dst_edge="S")
        flow(proj, ln2, act)
        flow(ln2, fc, act)
        flow(fc, fc2, 4 * act)
        flow(proj, fc2, act, name="residual", dst_edge="S")
        stream = fc2
    ln_f = ln("ln_f")
    head = add("lm_head", KernelKind.LM_HEAD, rows=seq, K=d, vocab=vocab, tied=True)
    flow(stream, ln_f, act)
    flow(ln_f, head, act)
    flow(head, logits, seq * vocab)
    return KernelGraph(name, seq, tuple(kernels), tuple(flows), (ids,), (logits,))


@pytest.fixture(scope="session")
def gpt2_graph():
    """The builder: gpt2_graph(layers, d, heads, seq, vocab)."""
    return gpt2_kernel_graph
