"""The PassManager: runs named passes in order; verifies, times, prints, dumps, checks numerics.

After every pass it runs the verifier (a failing pass is named in the error), records the
seconds it took, optionally prints the IR (`print_after_all`) or writes it to
`dump_dir/NN-<pass>.txt`, and optionally evaluates the graph with the reference interpreter
against reference outputs (onnxruntime on the original file), naming the first pass — and in
it the first op — whose result diverges.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from wsecc.errors import WseccError
from wsecc.interp import evaluate
from wsecc.ir.core import Graph, Node, Value
from wsecc.ir.printer import format_graph, format_node
from wsecc.ir.verify import VerificationError, verify
from wsecc.numerics import compare
from wsecc.passes import PASSES, Pass, PassContext


class PassError(WseccError):
    """A pass broke the IR or the numerics."""


@dataclass(frozen=True)
class PassRecord:
    name: str
    seconds: float
    nodes_before: int
    nodes_after: int


@dataclass(frozen=True)
class NumericsCheck:
    """Reference outputs to compare against after every pass."""

    feeds: Mapping[str, np.ndarray]
    reference: Mapping[str, np.ndarray]
    precision: str = "fp32"


@dataclass
class PassManager:
    pipeline: Sequence[str]
    print_after_all: bool = False
    dump_dir: Path | None = None
    numerics: NumericsCheck | None = None
    out: TextIO = field(default_factory=lambda: sys.stderr)
    on_pass: Callable[[PassRecord], None] | None = None

    def __post_init__(self) -> None:
        unknown = [p for p in self.pipeline if p not in PASSES]
        if unknown:
            raise PassError(f"unknown passes {unknown}; known: {', '.join(PASSES)}")

    def run(self, graph: Graph, ctx: PassContext | None = None) -> tuple[Graph, list[PassRecord]]:
        ctx = ctx or PassContext()
        records: list[PassRecord] = []
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            (self.dump_dir / "00-input.txt").write_text(format_graph(graph))
        prev = graph
        for i, name in enumerate(self.pipeline, 1):
            fn: Pass = PASSES[name]
            t0 = time.perf_counter()
            graph = fn(graph, ctx)
            dt = time.perf_counter() - t0
            try:
                verify(graph)
            except VerificationError as e:
                raise PassError(f"pass {name} produced invalid IR: {e}") from None
            rec = PassRecord(name, dt, len(prev.nodes), len(graph.nodes))
            records.append(rec)
            if self.on_pass is not None:
                self.on_pass(rec)
            if self.print_after_all:
                self.out.write(
                    f"// ----- IR after {name} ({dt * 1e3:.1f} ms)\n{format_graph(graph)}"
                )
            if self.dump_dir is not None:
                (self.dump_dir / f"{i:02d}-{name}.txt").write_text(format_graph(graph))
            if self.numerics is not None:
                self._check(name, prev, graph)
            prev = graph
        return graph, records

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

