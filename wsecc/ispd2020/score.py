"""The contest's solution format and a scorer written from the contest's definition.

Solution format (one kernel = two lines; `#` starts a comment):

    k1 = dblock( 56 56 256 4 4 8 8 8 8 64 16 )        H W F | h' w' | c1'..c3' | k1'..k3'
    k2 = cblock( 56 56 512 4 4 8 8 8 8 32 32 8 19 )   H W F | h' w' | c1'..c4' | k1'..k4'
    k7 = conv( 14 14 1024 512 1 1 1 1 2 2 16 32 )     H W C K R S T U | h' w' c' k'
    k1 : place(0 148 R0)                               lower-left corner, R0 or R90

The reader also accepts (and ignores) the template lines seen in accepted contest submissions:
`include "common.paint"`, `kN : name('kN)` and `kmap = union( ... )`.

Score (lower is better):

    score = wdeltat·Δt + wlength·WL + wadapter·ADAPT
    Δt    = max over kernels of time
    WL    = Σ over kernel→kernel edges of |cx_u − cx_v| + |cy_u − cy_v|   (rectangle centres)

Edges from `input` or to `output` are ignored. ADAPT (the protocol-adapter cost) is not defined
in any source we could read: it is counted as 0 and `Score.adapter_modelled` is False, so a
score on a benchmark with wadapter ≠ 0 is not the contest's score.

Legality: every kernel of the kgraph exactly once with its kind and formal arguments; execution
parameters positive integers within our bounds (perf.py); memory ≤ memlimit (real division);
rectangle inside [0, width] × [0, height]; no two rectangles overlap (half-open, touching is
fine). With R0 a kernel spans its `width` along x and `height` along y; R90 swaps them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from wsecc.errors import WseccError
from wsecc.ispd2020.kgraph import KERNEL_KINDS, KGraph
from wsecc.ispd2020.perf import KernelSpec, kernel_spec
from wsecc.place.problem import Rect

ROTATIONS = ("R0", "R90")

_KERNEL_LINE = re.compile(r"(?P<name>\w+)\s*=\s*(?P<kind>\w+)\s*\(\s*(?P<args>[-\d\s]*?)\s*\)")
_PLACE_LINE = re.compile(
    r"(?P<name>\w+)\s*:\s*place\s*\(\s*(?P<x>-?\d+)\s+(?P<y>-?\d+)\s+(?P<rot>\w+)\s*\)"
)
_IGNORED = (
    re.compile(r"include\s+\"[^\"]*\""),
    re.compile(r"\w+\s*:\s*name\s*\(.*\)"),
    re.compile(r"\w+\s*=\s*union\s*\(.*\)"),
)


class SolutionError(WseccError, ValueError):
    """A malformed solution file; the message starts with `file:line:`."""


@dataclass(frozen=True)
class KernelPlacement:
    """One kernel of a solution: `name = kind( args )` and `name : place(x y rot)`."""

    name: str
    kind: str
    args: tuple[int, ...]
    x: int
    y: int
    rot: str


@dataclass(frozen=True)
class Solution:
    kernels: tuple[KernelPlacement, ...]


def format_solution(solution: Solution) -> str:
    """The solution in the contest's text format."""
    lines = []
    for k in solution.kernels:
        lines.append(f"{k.name} = {k.kind}( {' '.join(map(str, k.args))} )")
        lines.append(f"{k.name} : place({k.x} {k.y} {k.rot})")
    return "\n".join(lines) + "\n"


def write_solution(path: str | Path, solution: Solution) -> None:
    Path(path).write_text(format_solution(solution))


def read_solution(path: str | Path) -> Solution:
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SolutionError(f"{p}: cannot read: {exc}") from exc
    return parse_solution(text, source=p.name)


def parse_solution(text: str, source: str = "<solution>") -> Solution:
    """Parse solution text; every kernel needs one definition line and one place line."""
    defs: dict[str, tuple[str, tuple[int, ...], int]] = {}
    places: dict[str, tuple[int, int, str, int]] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line or any(p.fullmatch(line) for p in _IGNORED):
            continue
        where = f"{source}:{lineno}"
        if m := _KERNEL_LINE.fullmatch(line):
            if m["kind"] not in KERNEL_KINDS:
                raise SolutionError(f"{where}: expected conv, dblock or cblock, got {m['kind']!r}")
            if m["name"] in defs:
                raise SolutionError(f"{where}: {m['name']} is defined twice")
            defs[m["name"]] = (m["kind"], tuple(int(t) for t in m["args"].split()), lineno)
        elif m := _PLACE_LINE.fullmatch(line):
            if m["rot"] not in ROTATIONS:
                raise SolutionError(f"{where}: expected R0 or R90, got {m['rot']!r}")
            if m["name"] in places:
                raise SolutionError(f"{where}: {m['name']} is placed twice")
            places[m["name"]] = (int(m["x"]), int(m["y"]), m["rot"], lineno)
        else:
            raise SolutionError(
                f"{where}: expected 'kN = kind( n n .. )' or 'kN : place(x y R0|R90)', got {line!r}"
            )
    for name, (*_, lineno) in places.items():
        if name not in defs:
            raise SolutionError(f"{source}:{lineno}: {name} is placed but never defined")
    for name, (*_, lineno) in defs.items():
        if name not in places:
            raise SolutionError(f"{source}:{lineno}: {name} is defined but never placed")
    return Solution(
        tuple(
            KernelPlacement(name, kind, args, *places[name][:3])
            for name, (kind, args, _) in defs.items()
        )
    )


@dataclass(frozen=True)
class Score:
    """A scored solution. `score` uses ADAPT = 0 (not modelled; see module docstring)."""

    violations: tuple[str, ...]
    delta_t: int
    wirelength: float
    score: float
    rects: dict[str, Rect]
    adapter_modelled: bool = False
    ceil_memory_ok: bool = True  # also within memlimit if every division in memory is ceil'ed

    @property
    def legal(self) -> bool:
        return not self.violations


def kernel_rect(spec: KernelSpec, k: KernelPlacement) -> Rect:
    """The tiles a placed kernel covers: R0 spans width × height, R90 height × width."""
    perf = spec.perf(spec.params_from_args(k.args))
    w, h = (perf.width, perf.height) if k.rot == "R0" else (perf.height, perf.width)
    return Rect(k.x, k.y, w, h)


def ceil_memory(spec: KernelSpec, k: KernelPlacement) -> int:
    """Memory with every division rounded up (the strictest reading of the formula)."""
    p = spec.params_from_args(k.args)

    def cd(a: int, b: int) -> int:
        return -(-a // b)

    return max(
        cd(c.C, ci) * cd(c.K, ki) * c.R * c.S
        + cd(c.W + c.S - 1, p.w) * cd(c.H + c.R - 1, p.h) * cd(c.K, ki)
        for c, ci, ki in zip(spec.convs, p.c, p.k, strict=True)
    )


def score_solution(graph: KGraph, solution: Solution) -> Score:
    """Check legality and compute Δt, WL and the score of `solution` for `graph`."""
    specs = {n.name: (n, kernel_spec(n)) for n in graph.kernels}
    violations: list[str] = []
    seen: dict[str, KernelPlacement] = {}
    for k in solution.kernels:
        if k.name in seen:
            violations.append(f"{k.name}: placed more than once")
        elif k.name not in specs:
            violations.append(f"{k.name}: not a kernel of {graph.source}")
        else:
            seen[k.name] = k
    violations += [f"{name}: not placed" for name in specs if name not in seen]

    rects: dict[str, Rect] = {}
    times: list[int] = []
    ceil_ok = True
    for name, k in seen.items():
        node, spec = specs[name]
        if k.kind != node.kind:
            violations.append(f"{name}: is a {node.kind} in the kgraph, not a {k.kind}")
            continue
        try:
            params = spec.params_from_args(k.args)
        except ValueError as exc:
            violations.append(f"{name}: {exc}")
            continue
        errors = spec.param_errors(params)
        if errors:
            violations += errors
            continue
        perf = spec.perf(params)
        times.append(perf.time)
        if perf.memory > graph.memlimit:
            violations.append(f"{name}: memory {_fmt(perf.memory)} > memlimit {graph.memlimit}")
        ceil_ok = ceil_ok and ceil_memory(spec, k) <= graph.memlimit
        r = kernel_rect(spec, k)
        rects[name] = r
        if r.x < 0 or r.y < 0 or r.x + r.w > graph.width or r.y + r.h > graph.height:
            violations.append(
                f"{name}: {r.w}x{r.h} at ({r.x}, {r.y}) leaves the {graph.width}x{graph.height} fabric"
            )
    placed = sorted(rects.items(), key=lambda t: t[1].x)
    for i, (a, ra) in enumerate(placed):  # sweep along x
        for b, rb in placed[i + 1 :]:
            if rb.x >= ra.x + ra.w:
                break
            if ra.overlaps(rb):
                first, second = sorted((a, b))
                violations.append(f"{first} and {second} overlap")

    wl2 = 0  # doubled, exact
    for e in graph.kernel_edges:
        u, v = graph.node(e.src).name, graph.node(e.dst).name
        if u in rects and v in rects:
            (ux, uy), (vx, vy) = rects[u].center2(), rects[v].center2()
            wl2 += abs(ux - vx) + abs(uy - vy)
    delta_t = max(times, default=0)
    wl = wl2 / 2
    return Score(
        violations=tuple(violations),
        delta_t=delta_t,
        wirelength=wl,
        score=graph.wdeltat * delta_t + graph.wlength * wl,
        rects=rects,
        adapter_modelled=False,
        ceil_memory_ok=ceil_ok,
    )


def _fmt(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{float(x):.2f}"
