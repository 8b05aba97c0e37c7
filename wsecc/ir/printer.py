"""Text form of the graph IR: `format_graph` prints, `parse_graph` reads it back.

    graph main(%x: f32[2,4]) {
      %w = const f32[4,3] [[...]]
      %y: f32[2,3] = matmul(%x, %w) name='mm' origin=('/MatMul',)
      return %y
    }

Large constants are elided (`<elided f32[768,768]>`) unless `full=True`; elided text does not
parse back.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

import numpy as np

from wsecc.ir.core import DType, Graph, IRError, Node, Op, TensorType, Value, make_attrs

_PLAIN = re.compile(r"[A-Za-z0-9_.:/\-]+")
_NAME = r'%(?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_.:/\-]+)'
ELIDE_OVER = 16


def _vname(v: Value) -> str:
    return "%" + (v.name if _PLAIN.fullmatch(v.name) else json.dumps(v.name))


def _literal(x: Any) -> str:
    if isinstance(x, float):
        if math.isinf(x):
            return "1e999" if x > 0 else "-1e999"
        return repr(x)
    if isinstance(x, tuple):
        return "(" + "".join(_literal(e) + ", " for e in x).rstrip(" ") + ")"
    return repr(x)


def _const_text(v: Value, full: bool) -> str:
    assert v.const is not None
    if v.type.size > ELIDE_OVER and not full:
        return f"<elided {v.type}>"
    data = v.const.tolist()
    return json.dumps(data).replace("Infinity", "1e999").replace("NaN", "nan")


def format_node(n: Node) -> str:
    outs = ", ".join(f"{_vname(v)}: {v.type}" for v in n.outputs)
    ins = ", ".join(_vname(v) for v in n.inputs)
    text = f"{outs} = {n.op.value}({ins})"
    if n.attrs:
        text += " {" + ", ".join(f"{k!r}: {_literal(v)}" for k, v in n.attrs) + "}"
    if n.name:
        text += f" name={n.name!r}"
    if n.origin:
        text += f" origin={_literal(n.origin)}"
    return text


def format_graph(g: Graph, *, full: bool = False) -> str:
    head = ", ".join(f"{_vname(v)}: {v.type}" for v in g.inputs)
    lines = [f"graph {g.name}({head}) {{"]
    for v in g.constants():
        lines.append(f"  {_vname(v)} = const {v.type} {_const_text(v, full)}")
    lines += [f"  {format_node(n)}" for n in g.nodes]
    lines.append("  return " + ", ".join(_vname(v) for v in g.outputs))
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- parser

_TYPE = re.compile(r"(\w+)\[([0-9,]*)\]")


def _parse_type(s: str) -> TensorType:
    m = _TYPE.fullmatch(s.strip())
    if not m:
        raise IRError(f"bad type {s!r}")
    dims = tuple(int(d) for d in m.group(2).split(",") if d)
    return TensorType(DType(m.group(1)), dims)


def _parse_name(tok: str) -> str:
    tok = tok.strip()
    if not tok.startswith("%"):
        raise IRError(f"expected a %value, got {tok!r}")
    body = tok[1:]
    return json.loads(body) if body.startswith('"') else body


def _typed_list(s: str) -> list[tuple[str, TensorType]]:
    out = []
    for m in re.finditer(rf"({_NAME})\s*:\s*(\w+\[[0-9,]*\])", s):
        out.append((_parse_name(m.group(1)), _parse_type(m.group(2))))
    return out


def parse_graph(text: str) -> Graph:
    """Parse the text form back into a Graph (constants must not be elided)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    m = re.fullmatch(r"graph (\S+)\((.*)\) \{", lines[0])
    if not m or lines[-1] != "}":
        raise IRError("expected 'graph NAME(...) {' ... '}'")
    env: dict[str, Value] = {}
    inputs = []
    for name, t in _typed_list(m.group(2)):
        env[name] = Value(name, t)
        inputs.append(env[name])
    nodes: list[Node] = []
    outputs: tuple[Value, ...] = ()
    for ln in lines[1:-1]:
        if ln.startswith("return"):
            outputs = tuple(env[_parse_name(t)] for t in re.findall(_NAME, ln[len("return") :]))
            continue
        cm = re.fullmatch(rf"({_NAME}) = const (\w+\[[0-9,]*\]) (.*)", ln)
        if cm:
            name, t, data = _parse_name(cm.group(1)), _parse_type(cm.group(2)), cm.group(3)
            if data.startswith("<elided"):
                raise IRError(f"constant %{name} is elided and cannot be parsed")
            arr = np.array(
                ast.literal_eval(data.replace("nan", "None")), dtype=t.dtype.numpy
            ).reshape(t.shape)
            v = Value.constant(name, arr)
            env[name] = v
            continue
        nodes.append(_parse_node(ln, env))
    return Graph(tuple(inputs), outputs, tuple(nodes), m.group(1))


def _parse_node(ln: str, env: dict[str, Value]) -> Node:
    m = re.fullmatch(rf"(.+?) = (\w+)\(((?:{_NAME}(?:, )?)*)\)(.*)", ln)
    if not m:
        raise IRError(f"cannot parse node line {ln!r}")
    outs = [Value(n, t) for n, t in _typed_list(m.group(1))]
    op = Op(m.group(2))
    ins = []
    for tok in re.findall(_NAME, m.group(3)):
        name = _parse_name(tok)
        if name not in env:
            raise IRError(f"%{name} used before definition in {ln!r}")
        ins.append(env[name])
    rest = m.group(4).strip()
    attrs: dict[str, Any] = {}
    name, origin = "", ()
    if rest.startswith("{"):
        depth, i = 0, 0
        for i, ch in enumerate(rest):  # noqa: B007 (i is the end index)
            depth += ch == "{"
            depth -= ch == "}"
            if depth == 0:
                break
        attrs = ast.literal_eval(rest[: i + 1])
        rest = rest[i + 1 :].strip()
    nm = re.match(r"name=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\s*", rest)
    if nm:
        name = ast.literal_eval(nm.group(1))
        rest = rest[nm.end() :]
    if rest.startswith("origin="):
        origin = tuple(ast.literal_eval(rest[len("origin=") :]))
    for v in outs:
        env[v.name] = v
    return Node(op, tuple(ins), tuple(outs), make_attrs(attrs), name, origin)
