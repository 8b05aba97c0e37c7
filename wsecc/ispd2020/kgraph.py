"""Reader for the ISPD 2020 contest's kernel-graph (`.kgraph`) files.

A file has three parts (see docs/ispd2020.md):

    (*                                  header: one `key=value` per line
    width=633
    ...
    *)
    (* Node Definitions *)              single-line comments are skipped
    conv[1] W=14 H=14 R=1 S=1 C=1024 K=512 T=1 U=1 name='k1'
    dblock[ 5] f=2048 h=7 w=7 name='k5'
    input[ 0] n=[112 112 128] name='k0'
    (* Connectivity *)
    conv[1]:y -> conv[2]:x, shape:[14][14][512]

Node indices are unique across kinds; an edge names both the kind and the index of each end and the
reader checks that they agree. A node without `name=` is called `k<index>`; a node with several
`name=` attributes (B.kgraph's input has `name='x' name='k0'`) keeps the last one, which is the
`k<index>` form every benchmark uses for its kernels.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wsecc.errors import WseccError

KERNEL_KINDS = ("conv", "dblock", "cblock")
TERMINAL_KINDS = ("input", "output")

# Formal arguments each node kind must carry (in the order the benchmarks write them).
FORMAL_ARGS: dict[str, tuple[str, ...]] = {
    "conv": ("W", "H", "R", "S", "C", "K", "T", "U"),
    "dblock": ("f", "h", "w"),
    "cblock": ("f", "h", "w"),
    "input": ("n",),
    "output": ("n",),
}

HEADER_INT_KEYS = ("width", "height", "memlimit")
HEADER_WEIGHT_KEYS = ("wdeltat", "wlength", "wadapter")

_NODE_RE = re.compile(r"(?P<kind>[A-Za-z_]\w*)\[\s*(?P<index>\d+)\s*\](?P<rest>.*)")
_ATTR_RE = re.compile(r"\s*(?P<key>\w+)=(?P<value>'[^']*'|\[[^\]]*\]|-?\d+)")
_EDGE_RE = re.compile(
    r"(?P<src_kind>\w+)\[\s*(?P<src>\d+)\s*\]:(?P<src_port>\w+)\s*->\s*"
    r"(?P<dst_kind>\w+)\[\s*(?P<dst>\d+)\s*\]:(?P<dst_port>\w+)\s*,\s*"
    r"shape:\s*(?P<shape>(?:\[\s*\d+\s*\])+)\s*"
)
_HEADER_RE = re.compile(r"(?P<key>\w+)\s*=\s*(?P<value>\S.*?)\s*")

# fail(lineno, expected, got) -> the error to raise
_Fail = Callable[[int, str, str], "KGraphError"]


class KGraphError(WseccError, ValueError):
    """A malformed kgraph file; the message starts with `file:line:`."""


@dataclass(frozen=True)
class KNode:
    """One node line: `kind[index] key=value ... name='..'`.

    `args` holds the integer formal arguments in file order (for conv: W H R S C K T U; for
    dblock/cblock: f h w); `dims` holds the `n=[..]` tensor shape of input/output nodes.
    """

    kind: str
    index: int
    name: str
    args: tuple[tuple[str, int], ...] = ()
    dims: tuple[int, ...] = ()
    line: int = 0

    @property
    def is_kernel(self) -> bool:
        return self.kind in KERNEL_KINDS

    def arg(self, key: str) -> int:
        for k, v in self.args:
            if k == key:
                return v
        raise KeyError(f"{self.kind}[{self.index}] has no formal argument {key!r}")


@dataclass(frozen=True)
class KEdge:
    """One connectivity line `src[i]:port -> dst[j]:port, shape:[..]` (shape is informational)."""

    src: int
    src_port: str
    dst: int
    dst_port: str
    shape: tuple[int, ...]
    line: int = 0


@dataclass(frozen=True)
class KGraph:
    """A parsed kernel graph: header values, nodes in file order, edges in file order."""

    test: str
    width: int
    height: int
    memlimit: int
    wdeltat: float
    wlength: float
    wadapter: float
    nodes: tuple[KNode, ...]
    edges: tuple[KEdge, ...]
    header: tuple[tuple[str, str], ...] = ()
    source: str = "<kgraph>"

    @property
    def kernels(self) -> tuple[KNode, ...]:
        """The nodes to size and place (conv, dblock, cblock); input/output are not placed."""
        return tuple(n for n in self.nodes if n.is_kernel)

    def node(self, index: int) -> KNode:
        for n in self.nodes:
            if n.index == index:
                return n
        raise KeyError(f"no node with index {index}")

    @property
    def kernel_edges(self) -> tuple[KEdge, ...]:
        """Edges whose both ends are kernels: the only ones that count in wirelength."""
        kernel_ids = {n.index for n in self.kernels}
        return tuple(e for e in self.edges if e.src in kernel_ids and e.dst in kernel_ids)


def kernel_sequence(graph: KGraph) -> tuple[KNode, ...]:
    """Kernels in a depth-first topological order: a chain stays consecutive, and the branches
    of a fork are visited one after the other (lowest index first). Cycles are broken at the
    lowest remaining index."""
    kernels = {n.index: n for n in graph.kernels}
    succ: dict[int, list[int]] = {i: [] for i in kernels}
    indeg = dict.fromkeys(kernels, 0)
    for e in graph.kernel_edges:
        succ[e.src].append(e.dst)
        indeg[e.dst] += 1
    stack = sorted((i for i in kernels if indeg[i] == 0), reverse=True)
    order: list[int] = []
    done: set[int] = set()
    while len(order) < len(kernels):
        if not stack:
            stack.append(min(i for i in kernels if i not in done))
        i = stack.pop()
        if i in done:
            continue
        done.add(i)
        order.append(i)
        for j in sorted(succ[i], reverse=True):
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(j)
    return tuple(kernels[i] for i in order)


def read_kgraph(path: str | Path) -> KGraph:
    """Read and validate a `.kgraph` file; raises `KGraphError` (with file:line) if malformed."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise KGraphError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise KGraphError(f"{p}: not a text file: {exc.reason}") from exc
    return parse_kgraph(text, source=p.name)


def parse_kgraph(text: str, source: str = "<kgraph>") -> KGraph:
    """Parse kgraph text; `source` names the file in error messages."""

    def fail(lineno: int, expected: str, got: str) -> KGraphError:
        return KGraphError(f"{source}:{lineno}: expected {expected}, got {got.strip()!r}")

    header: list[tuple[str, str]] = []
    header_line = 0
    nodes: dict[int, KNode] = {}
    edges: list[KEdge] = []
    in_header = False
    seen_header = False
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if in_header:
            if line == "*)":
                in_header = False
            elif line:
                m = _HEADER_RE.fullmatch(line)
                if m is None:
                    raise fail(lineno, "'key=value' or '*)' in the header", line)
                header.append((m["key"], m["value"]))
            continue
        if not line or (line.startswith("(*") and line.endswith("*)") and line != "(*"):
            continue  # blank line or single-line comment
        if line == "(*":
            if seen_header or nodes or edges:
                raise fail(lineno, "a node or an edge line (the header comes first)", line)
            in_header = seen_header = True
            header_line = lineno
            continue
        if "->" in line:
            edges.append(_parse_edge(line, lineno, nodes, fail))
        else:
            node = _parse_node(line, lineno, fail)
            if node.index in nodes:
                raise fail(
                    lineno, f"a new node index (index {node.index} is already defined)", line
                )
            nodes[node.index] = node
    if in_header:
        raise KGraphError(f"{source}:{header_line}: header '(*' is never closed by '*)'")
    if not seen_header:
        raise KGraphError(f"{source}:1: expected a '(* key=value ... *)' header, found none")
    values = dict(header)
    missing = [k for k in HEADER_INT_KEYS + HEADER_WEIGHT_KEYS if k not in values]
    if missing:
        raise KGraphError(f"{source}:{header_line}: header lacks {', '.join(missing)}")
    ints = {k: _header_number(values[k], k, header_line, source) for k in HEADER_INT_KEYS}
    if any(not isinstance(v, int) or v <= 0 for v in ints.values()):
        raise KGraphError(
            f"{source}:{header_line}: width, height and memlimit must be positive integers"
        )
    weights = {
        k: float(_header_number(values[k], k, header_line, source)) for k in HEADER_WEIGHT_KEYS
    }
    if not any(n.is_kernel for n in nodes.values()):
        raise KGraphError(f"{source}: no conv, dblock or cblock node")
    first_use: dict[str, KNode] = {}
    for n in nodes.values():
        if n.name in first_use:
            raise KGraphError(
                f"{source}:{n.line}: expected a unique node name, got {n.name!r} again "
                f"(first on line {first_use[n.name].line})"
            )
        first_use[n.name] = n
    return KGraph(
        test=values.get("test", ""),
        width=int(ints["width"]),
        height=int(ints["height"]),
        memlimit=int(ints["memlimit"]),
        wdeltat=weights["wdeltat"],
        wlength=weights["wlength"],
        wadapter=weights["wadapter"],
        nodes=tuple(nodes.values()),
        edges=tuple(edges),
        header=tuple(header),
        source=source,
    )


def _header_number(value: str, key: str, lineno: int, source: str) -> int | float:
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        raise KGraphError(
            f"{source}:{lineno}: expected a number for {key}, got {value!r}"
        ) from None


def _expected_node(kind: str) -> str:
    if kind in ("input", "output"):
        return f"'{kind}[N] n=[..]'"
    if kind in FORMAL_ARGS:
        return f"'{kind}[N] " + " ".join(f"{a}=.." for a in FORMAL_ARGS[kind]) + "'"
    return "a node line 'conv|dblock|cblock|input|output[N] key=value ...'"


def _parse_node(line: str, lineno: int, fail: _Fail) -> KNode:
    m = _NODE_RE.fullmatch(line)
    kind = m["kind"] if m else ""
    if m is None or kind not in FORMAL_ARGS:
        raise fail(lineno, _expected_node(kind), line)
    rest = m["rest"]
    attrs: dict[str, str] = {}
    name = f"k{int(m['index'])}"
    pos = 0
    while pos < len(rest):
        a = _ATTR_RE.match(rest, pos)
        if a is None:
            if rest[pos:].strip():
                raise fail(lineno, _expected_node(kind), line)
            break
        pos = a.end()
        if a["key"] == "name":
            name = a["value"].strip("'")
        elif a["key"] in attrs:
            raise fail(lineno, f"{_expected_node(kind)} with {a['key']} given once", line)
        else:
            attrs[a["key"]] = a["value"]
    if set(attrs) != set(FORMAL_ARGS[kind]):
        raise fail(lineno, _expected_node(kind), line)
    if kind in TERMINAL_KINDS:
        dims_text = attrs["n"]
        if not dims_text.startswith("["):
            raise fail(lineno, _expected_node(kind), line)
        dims = tuple(int(t) for t in dims_text.strip("[]").split())
        return KNode(kind, int(m["index"]), name, dims=dims, line=lineno)
    args = []
    for key in FORMAL_ARGS[kind]:
        v = attrs[key]
        if not re.fullmatch(r"\d+", v) or int(v) <= 0:
            raise fail(lineno, f"{_expected_node(kind)} with {key} a positive integer", line)
        args.append((key, int(v)))
    return KNode(kind, int(m["index"]), name, args=tuple(args), line=lineno)


def _parse_edge(line: str, lineno: int, nodes: dict[int, KNode], fail: _Fail) -> KEdge:
    m = _EDGE_RE.fullmatch(line)
    if m is None:
        raise fail(lineno, "'src[i]:port -> dst[j]:port, shape:[..]'", line)
    ends = []
    for end in ("src", "dst"):
        index, kind = int(m[end]), m[f"{end}_kind"]
        node = nodes.get(index)
        if node is None:
            raise fail(
                lineno, f"an edge between defined nodes ({kind}[{index}] is not defined)", line
            )
        if node.kind != kind:
            raise fail(lineno, f"{node.kind}[{index}] (as defined on line {node.line})", line)
        ends.append(index)
    shape = tuple(int(t) for t in re.findall(r"\d+", m["shape"]))
    return KEdge(ends[0], m["src_port"], ends[1], m["dst_port"], shape, line=lineno)
