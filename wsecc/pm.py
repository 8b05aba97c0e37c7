"""Passes and the PassManager: runs passes in order; checks IR levels, verifies, times, prints,
dumps, checks numerics.

A `Pass` is a pure function of (product, `PassContext`) with the IR `Level` it requires and the
one it produces: the fusions take and give a `Graph` (GRAPH), lowering requires a FUSED graph
(no Softmax/Erf/Tanh/Pow/ReduceMean/Sqrt left outside a fused op) and produces a `KernelGraph`
(KERNELS). Before a pass the manager checks its product is at the level the pass requires (a
graph is checked at FUSED with the fused-level verifier); after a pass it runs the verifier of
the level produced (a failing pass is named in the error). It records the seconds each took and
the reasons its rules did not fire (`PassContext.note`, shown by `wsecc compile --explain`),
optionally prints the IR (`print_after_all`) or writes it to `dump_dir/NN-<pass>.txt`, and optionally evaluates the graph with the reference interpreter
against reference outputs (onnxruntime on the original file; in fp32 within what float32 itself
loses on the graph, `wsecc.check.numerics.NOISE_FACTOR`), naming the first pass — and in it the first
op — whose result diverges. Timings and dumps go through the compile's `Instrument`
(`wsecc.core.instrument`), the one the later stages record in too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from wsecc.check.numerics import compare, float32_noise, within_noise
from wsecc.core.instrument import Instrument
from wsecc.interp import evaluate
from wsecc.ir.core import Graph, Node, Value
from wsecc.ir.printer import format_graph, format_node
from wsecc.ir.verify import VerificationError, verify
from wsecc.passdef import Level, Pass, PassContext, PassError, Product
from wsecc.passes import PASSES
from wsecc.vocab import Precision

__all__ = [
    "Level",
    "NumericsCheck",
    "Pass",
    "PassContext",
    "PassError",
    "PassManager",
    "PassRecord",
    "Product",
    "check_level",
]


@dataclass(frozen=True)
class PassRecord:
    name: str
    seconds: float
    nodes_before: int
    nodes_after: int  # kernels, after a pass that produces KERNELS
    notes: tuple[str, ...] = ()  # why its rules did not fire where they did not


def _size(product: Product) -> int:
    return len(product.nodes) if isinstance(product, Graph) else len(product.kernels)


def _format(product: Product) -> str:
    if isinstance(product, Graph):
        return format_graph(product)
    return json.dumps(product.to_json(), indent=1) + "\n"


def check_level(product: Product, level: Level, what: str) -> None:
    """Raise PassError unless `product` is valid at `level`; `what` names it in the message."""
    if level is Level.KERNELS:
        if isinstance(product, Graph):
            raise PassError(f"{what} is a graph where kernels are required (run lowering)")
        product.verify()
        return
    if not isinstance(product, Graph):
        raise PassError(f"{what} is a kernel graph where a tensor graph is required")
    try:
        verify(product, allow_unfused=level is not Level.FUSED)
    except VerificationError as e:
        at = ""
        if e.node is not None:
            onnx = f" (ONNX {', '.join(e.node.origin[:3])})" if e.node.origin else ""
            at = f" at node {e.node.name!r}{onnx}"
        if level is Level.FUSED:
            raise PassError(
                f"{what} is not fused: {e.reason}{at}; no fusion matched it (wsecc compile --explain shows why)"
            ) from None
        raise PassError(f"{what} is invalid IR: {e.reason}{at}") from None


@dataclass(frozen=True)
class NumericsCheck:
    """Reference outputs to compare against after every pass."""

    feeds: Mapping[str, np.ndarray]
    reference: Mapping[str, np.ndarray]
    precision: Precision = Precision.FP32


@dataclass
class PassManager:
    """Runs `pipeline` (pass names of `wsecc.passes.PASSES`, or `Pass`es) on a Graph, timing
    and dumping through `instrument` (when None: one of its own, dumping to `dump_dir`)."""

    pipeline: Sequence[str | Pass]
    print_after_all: bool = False
    dump_dir: Path | None = None
    numerics: NumericsCheck | None = None
    out: TextIO = field(default_factory=lambda: sys.stderr)
    on_pass: Callable[[PassRecord], None] | None = None
    instrument: Instrument | None = None
    passes: tuple[Pass, ...] = field(init=False)

    def __post_init__(self) -> None:
        unknown = [p for p in self.pipeline if isinstance(p, str) and p not in PASSES]
        if unknown:
            raise PassError(f"unknown passes {unknown}; known: {', '.join(PASSES)}")
        self.passes = tuple(PASSES[p] if isinstance(p, str) else p for p in self.pipeline)

    def run(self, graph: Graph, ctx: PassContext | None = None) -> tuple[Product, list[PassRecord]]:
        """The pipeline's product (a Graph, or a KernelGraph after lowering) and a record per
        pass. Raises PassError naming the pass whose input or output is below its level."""
        ctx = ctx or PassContext()
        ins = self.instrument or Instrument(dump_dir=self.dump_dir)
        records: list[PassRecord] = []
        if ins.dump_dir is not None:
            ins.dump("input", format_graph(graph))
        prev: Product = graph
        for p in self.passes:
            if p.requires is not Level.GRAPH:
                check_level(prev, p.requires, f"the input of pass {p.name}")
            if not isinstance(prev, Graph):
                raise PassError(f"pass {p.name} follows lowering: it has no graph to work on")
            n_notes = len(ctx.notes)
            with ins.step("passes", p.name) as timer:
                product = p(prev, ctx)
            dt = timer.seconds
            check_level(product, p.produces, f"the output of pass {p.name}")
            rec = PassRecord(p.name, dt, _size(prev), _size(product), tuple(ctx.notes[n_notes:]))
            records.append(rec)
            if self.on_pass is not None:
                self.on_pass(rec)
            if self.print_after_all:
                self.out.write(
                    f"// ----- IR after {p.name} ({dt * 1e3:.1f} ms)\n{_format(product)}"
                )
            if ins.dump_dir is not None:
                ins.dump(p.name, _format(product))
            if self.numerics is not None and isinstance(product, Graph):
                self._check(p.name, prev, product)
            prev = product
        return prev, records

    def _check(self, name: str, before: Graph, after: Graph) -> None:
        assert self.numerics is not None
        env = evaluate(after, self.numerics.feeds, keep_all=True)
        bad = []
        for v in after.outputs:
            ref = self.numerics.reference.get(v.name)
            if ref is None:
                continue
            err = compare(v.name, env[v], ref, self.numerics.precision)
            if not err.passed:
                bad.append(err)
        if bad and self.numerics.precision == "fp32":  # within what float32 itself loses here
            outs = {v.name: env[v] for v in after.outputs}
            noise = float32_noise(after, self.numerics.feeds, outs)
            again = within_noise(bad, outs, self.numerics.reference, Precision.FP32, noise)
            bad = [e for e in again if not e.passed]
        if not bad:
            return
        node = _first_divergent(before, after, self.numerics.feeds, env)
        where = f"; first divergent op: {format_node(node)}" if node is not None else ""
        e = bad[0]
        raise PassError(
            f"numerics diverge after pass {name}: output {e.name!r} max_rel_err {e.max_rel_err:.3g} "
            f"(pcc {e.pcc:.6f}){where}"
        )


def _first_divergent(
    before: Graph, after: Graph, feeds: Mapping[str, np.ndarray], env_after: dict[Value, np.ndarray]
) -> Node | None:
    """The first node of `after` whose output differs from the same-named value of `before`."""
    env_before = {v.name: a for v, a in evaluate(before, feeds, keep_all=True).items()}
    for n in after.nodes:
        for v in n.outputs:
            ref = env_before.get(v.name)
            if ref is None or ref.shape != env_after[v].shape:
                continue
            if not compare(v.name, env_after[v], ref).passed:
                return n
    return None
