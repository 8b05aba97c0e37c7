"""Placement problem and solution schemas (frozen, JSON round-trip); no solver imported here.

Coordinates are integer PE units on the *usable* fabric: x grows east (columns), y grows south
(rows); a rectangle covers columns [x, x+w) and rows [y, y+h).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property, reduce
from typing import Any

from wsecc.errors import WseccError


@dataclass(frozen=True)
class Rect:
    x: int
    y: int
    w: int
    h: int

    @property
    def area(self) -> int:
        return self.w * self.h

    def center2(self) -> tuple[int, int]:
        """Doubled centre (2x+w, 2y+h): integral for any rectangle."""
        return (2 * self.x + self.w, 2 * self.y + self.h)

    def overlaps(self, other: Rect) -> bool:
        return (
            self.x < other.x + other.w
            and other.x < self.x + self.w
            and self.y < other.y + other.h
            and other.y < self.y + self.h
        )


@dataclass(frozen=True)
class PlaceKernel:
    """A kernel to place: its allowed region shapes as (w, h), preferred first (the menu).

    `pool`: further shapes the kernel could take (sizing's, as good for its stage time), not
    in the menu. A placement uses menu shapes only; a placer may first move pool shapes into
    the menu (`tailored`), and then places and bounds that problem.
    """

    name: str
    shapes: tuple[tuple[int, int], ...]
    onnx_nodes: tuple[str, ...] = ()
    kind: str = ""
    pool: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class PlaceFlow:
    """A directed flow between two kernels, weighted by bytes per sample."""

    src: str
    dst: str
    bytes_per_sample: float
    name: str = ""


@dataclass(frozen=True)
class PlacementProblem:
    width: int
    height: int
    kernels: tuple[PlaceKernel, ...]
    flows: tuple[PlaceFlow, ...]
    pins: dict[str, Rect] = field(default_factory=dict)

    @property
    def area(self) -> int:
        """Usable PEs: width × height."""
        return self.width * self.height

    @cached_property
    def kernels_by_name(self) -> dict[str, PlaceKernel]:
        """Kernels keyed by name (computed once; the problem is immutable)."""
        return {k.name: k for k in self.kernels}

    def kernel(self, name: str) -> PlaceKernel:
        """The kernel called `name` (KeyError if none)."""
        return self.kernels_by_name[name]

    def to_json(self) -> dict[str, Any]:
        return {
            "width": self.width,
            "height": self.height,
            "kernels": [
                {n: v for n, v in asdict(k).items() if n != "pool" or v} for k in self.kernels
            ],
            "flows": [asdict(f) for f in self.flows],
            "pins": {k: asdict(r) for k, r in sorted(self.pins.items())},
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> PlacementProblem:
        return PlacementProblem(
            width=int(d["width"]),
            height=int(d["height"]),
            kernels=tuple(
                PlaceKernel(
                    name=k["name"],
                    shapes=tuple((int(w), int(h)) for w, h in k["shapes"]),
                    onnx_nodes=tuple(k.get("onnx_nodes", ())),
                    kind=k.get("kind", ""),
                    pool=tuple((int(w), int(h)) for w, h in k.get("pool", ())),
                )
                for k in d["kernels"]
            ),
            flows=tuple(PlaceFlow(**f) for f in d["flows"]),
            pins={k: Rect(**r) for k, r in d.get("pins", {}).items()},
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True)


class PlacementError(WseccError):
    """A placement could not be produced, or a given one is illegal; the message says why."""


def kernel_shapes(problem: PlacementProblem, name: str) -> tuple[tuple[int, int], ...]:
    """Shapes a kernel may take: its pin's shape if pinned, else its allowed shapes."""
    pin = problem.pins.get(name)
    if pin is not None:
        return ((pin.w, pin.h),)
    return problem.kernel(name).shapes


def with_pools(problem: PlacementProblem) -> PlacementProblem:
    """`problem` with each kernel's pool appended to its menu (what a placer may pick from)."""
    if not any(k.pool for k in problem.kernels):
        return problem
    kernels = tuple(replace(k, shapes=k.shapes + k.pool, pool=()) for k in problem.kernels)
    return replace(problem, kernels=kernels)


def tailored(problem: PlacementProblem, rects: Mapping[str, Rect]) -> PlacementProblem:
    """`problem` with the pool shapes `rects` take moved into their kernels' menus, pools
    emptied: the problem a placement from `with_pools(problem)` is legal for. A lower bound on
    any problem with more menu shapes holds for it too (more shapes only lower the optimum)."""
    kernels = []
    for k in problem.kernels:
        r = rects.get(k.name)
        took = () if r is None or (r.w, r.h) not in k.pool else ((r.w, r.h),)
        kernels.append(replace(k, shapes=k.shapes + took, pool=()))
    return replace(problem, kernels=tuple(kernels))


def with_halos(problem: PlacementProblem, halos: Mapping[str, int]) -> PlacementProblem:
    """`problem` with each named kernel's shapes (menu and pool) grown by `halos[name]` PEs on
    every side. Any placement of it, shrunk back (`without_halos`), is one of `problem` that
    keeps a ring that wide around each of those kernels free of other regions: room on every
    side for the lanes leaving and entering it. Pinned kernels keep their pins; a grown shape
    that no longer fits the fabric is dropped, and a kernel none of whose shapes fit grown
    keeps its own (no halo). A kernel it does not grow is the same object in the result."""
    W, H = problem.width, problem.height
    kernels = []
    for k in problem.kernels:
        m = halos.get(k.name, 0)
        grown = tuple((w + 2 * m, h + 2 * m) for w, h in k.shapes)
        fits = tuple(s for s in grown if s[0] <= W and s[1] <= H)
        if m > 0 and k.name not in problem.pins and fits:
            pool = tuple((w + 2 * m, h + 2 * m) for w, h in k.pool)
            k = replace(k, shapes=fits, pool=tuple(s for s in pool if s[0] <= W and s[1] <= H))
        kernels.append(k)
    return replace(problem, kernels=tuple(kernels))


def without_halos(
    problem: PlacementProblem, halos: Mapping[str, int], rects: Mapping[str, Rect]
) -> dict[str, Rect]:
    """`rects` (a placement of `with_halos(problem, halos)`) with each grown rectangle shrunk
    back to the kernel's own shape, about the same centre."""
    grown = with_halos(problem, halos)
    out = dict(rects)
    for k, g in zip(problem.kernels, grown.kernels, strict=True):
        m = halos.get(k.name, 0)
        if g is not k and m > 0:
            r = rects[k.name]
            out[k.name] = Rect(r.x + m, r.y + m, r.w - 2 * m, r.h - 2 * m)
    return out


def weighted_wirelength(problem: PlacementProblem, rects: Mapping[str, Rect]) -> float:
    """Σ_flows bytes_per_sample × (|cx_s − cx_d| + |cy_s − cy_d|), centres in PE units.

    Centre distance, not facing-edge distance, because (1) it is what a lane of the flow
    travels on average when lanes leave from and arrive at points spread over the rectangles,
    and (2) in the doubled-centre model (2x + w) it is linear in the positions, whereas the
    facing-edge distance jumps when one rectangle slides past the other. Self-flows add 0.
    Guarantees: a pure function of the rectangles (summed in flow order, so bit-reproducible).
    """
    total = 0.0
    for f in problem.flows:
        (sx, sy), (dx, dy) = rects[f.src].center2(), rects[f.dst].center2()
        total += f.bytes_per_sample * (abs(sx - dx) + abs(sy - dy)) / 2
    return total


def weight_unit(weights: list[float]) -> float:
    """Bytes per integer weight unit for CP-SAT: the exact gcd for integral weights with
    max/gcd ≤ 10⁴, else max/10⁴ (weights are then floored, so bounds stay valid)."""
    if not weights:
        return 1.0
    if all(float(b).is_integer() for b in weights):
        g = reduce(math.gcd, (int(b) for b in weights))
        if g > 0 and max(weights) / g <= 1e4:
            return float(g)
    return max(weights) / 1e4


def pairwise_lower_bound(problem: PlacementProblem) -> float:
    """Lower bound on `weighted_wirelength` over every legal placement.

    Two disjoint rectangles are separated in x or in y, so their doubled-centre distance is at
    least min(w_i + w_j, h_i + h_j); over alternative shapes take the smallest w and h of each.
    Bound = Σ_flows bytes × min(w_i + w_j, h_i + h_j) / 2, except that a flow between two pinned
    kernels contributes its exact (constant) distance.
    """
    total = 0.0
    for f in problem.flows:
        if f.src == f.dst:
            continue
        if f.src in problem.pins and f.dst in problem.pins:
            (sx, sy), (dx, dy) = problem.pins[f.src].center2(), problem.pins[f.dst].center2()
            total += f.bytes_per_sample * (abs(sx - dx) + abs(sy - dy)) / 2
            continue
        si, sj = kernel_shapes(problem, f.src), kernel_shapes(problem, f.dst)
        wsum = min(w for w, _ in si) + min(w for w, _ in sj)
        hsum = min(h for _, h in si) + min(h for _, h in sj)
        total += f.bytes_per_sample * min(wsum, hsum) / 2
    return total


def relative_gap(objective: float, bound: float) -> float:
    """(objective − bound) / objective, 0 when the objective is 0."""
    return (objective - bound) / objective if objective > 0 else 0.0


@dataclass(frozen=True)
class Search:
    """What CP-SAT's search did after its start: which start it began from ("greedy",
    "layered", "tiled" or "initial"), that start's wirelength and the one it ended at (on the
    problem it searched: a placement with halos or copies reports its own objective elsewhere),
    the neighbourhoods it solved and how many of them improved the placement, and why it stopped
    (a key of `STOPS`); `whole`: the whole model was solved once before the neighbourhoods
    (small problems), so the gain need not come from them; `reason`: why it stopped, in words
    (for report.json's `placement.search`), e.g. "could not improve the tiled start: its first
    6 neighbourhoods improved nothing"."""

    start: str
    start_objective: float
    objective: float
    windows: int
    improved: int
    stopped: str
    whole: bool = False
    reason: str = ""  # why it stopped, in words (derived from the above when not given)

    def __post_init__(self) -> None:
        if not self.reason:
            reason = STOPS.get(self.stopped, self.stopped)
            if self.stopped == "no gain":
                reason = (
                    f"could not improve the {self.start} start: its first {self.windows} "
                    "neighbourhoods improved nothing"
                )
            object.__setattr__(self, "reason", reason)

    @property
    def gain(self) -> float:
        """The fraction of the start's wirelength the search removed."""
        return 1 - self.objective / self.start_objective if self.start_objective > 0 else 0.0

    def summary(self) -> str:
        """One phrase for the compile's placement line: what the search added, why it stopped."""
        packed = " of CP-SAT's layer packings" if self.start == "tiled" else ""
        if self.stopped == "no gain":
            return f"CP-SAT search {self.reason} (the start{packed}, {self.start_objective:.4g})"
        return (
            f"CP-SAT search {100 * self.gain:.1f}% below the {self.start} start{packed}, "
            f"{self.start_objective:.4g}, in {'one solve of the whole model and ' * self.whole}"
            f"{self.windows} neighbourhoods ({self.improved} improved); stopped: {self.reason}"
        )


# why a CP-SAT search stops (`Search.stopped`)
STOPS = {
    "optimal": "the full model proved its placement optimal",
    "stalled": "the last neighbourhoods took too little off the wirelength to go on",
    "no gain": "could not improve its start: its first neighbourhoods improved nothing",
    "budget": "the time budget was spent",
    "quota": "deterministic mode's work quota was spent",
    "nothing to move": "at most one kernel is free",
}


@dataclass(frozen=True)
class Placement:
    """A rectangle per kernel, with the placer's quality certificate.

    `objective` is always `weighted_wirelength(problem, rects)` (build with `Placement.of`);
    `bound` is a proven lower bound on the optimum, `gap` = (objective − bound) / objective,
    `bound_kind` which bound that is: "cpsat" (the solver's own), "separation" or "star"
    (`wsecc.place.bounds`), "cluster" (`wsecc.place.clusters`), "optimal" (the solver proved
    the objective optimal), "" if unknown. `search`: what CP-SAT's search added to its start
    (None for the other placers).
    The shape a kernel took is implied by its rectangle's (w, h).
    """

    rects: dict[str, Rect]
    placer: str
    objective: float
    bound: float
    gap: float
    status: str
    seconds: float
    seed: int
    bound_kind: str = ""
    search: Search | None = None

    @staticmethod
    def of(
        problem: PlacementProblem,
        rects: Mapping[str, Rect],
        *,
        placer: str,
        bound: float,
        status: str,
        seconds: float,
        seed: int,
        bound_kind: str = "",
        search: Search | None = None,
    ) -> Placement:
        """Build a Placement whose objective and gap are recomputed from `rects`."""
        objective = weighted_wirelength(problem, rects)
        return Placement(
            rects={k.name: rects[k.name] for k in problem.kernels},
            placer=placer,
            objective=objective,
            bound=bound,
            gap=relative_gap(objective, bound),
            status=status,
            seconds=seconds,
            seed=seed,
            bound_kind=bound_kind,
            search=search,
        )

    def to_json(self, include_timing: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "rects": {k: asdict(r) for k, r in sorted(self.rects.items())},
            "placer": self.placer,
            "objective": self.objective,
            "bound": self.bound,
            "bound_kind": self.bound_kind,
            "gap": self.gap,
            "status": self.status,
            "seed": self.seed,
        }
        if self.search is not None:
            d["search"] = asdict(self.search)
        if include_timing:
            d["seconds"] = self.seconds
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> Placement:
        return Placement(
            rects={k: Rect(**r) for k, r in d["rects"].items()},
            placer=d["placer"],
            objective=float(d["objective"]),
            bound=float(d["bound"]),
            gap=float(d["gap"]),
            status=d["status"],
            seconds=float(d.get("seconds", 0.0)),
            seed=int(d["seed"]),
            bound_kind=d.get("bound_kind", ""),
            search=Search(**d["search"]) if "search" in d else None,
        )

    def dumps(self, include_timing: bool = True) -> str:
        """Deterministic JSON (sorted keys); without timing it is byte-identical across
        reproducible runs."""
        return json.dumps(self.to_json(include_timing), indent=1, sort_keys=True)


def validate_problem(problem: PlacementProblem) -> list[str]:
    """Violations that make a problem unplaceable before any placer runs (empty if none)."""
    out: list[str] = []
    names = [k.name for k in problem.kernels]
    for name in sorted({n for n in names if names.count(n) > 1}):
        out.append(f"kernel '{name}' is defined more than once")
    known = set(names)
    for f in problem.flows:
        for end in (f.src, f.dst):
            if end not in known:
                out.append(f"flow {f.src}->{f.dst} names unknown kernel '{end}'")
    for k in problem.kernels:
        if not k.shapes and k.name not in problem.pins:
            out.append(f"kernel '{k.name}' has no allowed shape")
        elif k.name not in problem.pins and not any(
            0 < w <= problem.width and 0 < h <= problem.height for w, h in k.shapes
        ):
            out.append(
                f"kernel '{k.name}': no shape of {_fmt_shapes(k.shapes)} fits the "
                f"{problem.width}x{problem.height} fabric"
            )
    for name in sorted(problem.pins):
        if name not in known:
            out.append(f"pin names unknown kernel '{name}'")
    return out


def validate_placement(problem: PlacementProblem, placement: Placement) -> list[str]:
    """Every violation of legality, as human-readable lines (empty list = legal).

    Legal means: every kernel placed exactly once and nothing else; each rectangle has one of
    the kernel's allowed shapes, or equals its pin; inside [0, W) × [0, H); no two overlap;
    `objective` equals the recomputed weighted wirelength.
    """
    out: list[str] = []
    rects = placement.rects
    known = {k.name for k in problem.kernels}
    out += [f"kernel '{k.name}' is not placed" for k in problem.kernels if k.name not in rects]
    out += [f"unknown kernel '{n}' is placed" for n in sorted(rects) if n not in known]
    W, H = problem.width, problem.height
    for k in problem.kernels:
        r = rects.get(k.name)
        if r is None:
            continue
        pin = problem.pins.get(k.name)
        if pin is not None and r != pin:
            out.append(f"kernel '{k.name}' at {_fmt_rect(r)} is pinned at {_fmt_rect(pin)}")
        elif pin is None and (r.w, r.h) not in k.shapes:
            out.append(f"kernel '{k.name}' has shape {r.w}x{r.h}, allowed: {_fmt_shapes(k.shapes)}")
        if r.w <= 0 or r.h <= 0 or r.x < 0 or r.y < 0 or r.x + r.w > W or r.y + r.h > H:
            out.append(f"kernel '{k.name}' at {_fmt_rect(r)} leaves the {W}x{H} fabric")
    placed = sorted((r.x, r.y, n) for n, r in rects.items() if n in known)
    for i, (_, _, a) in enumerate(placed):  # sweep in x: only x-overlapping successors
        ra = rects[a]
        for _, _, b in placed[i + 1 :]:
            rb = rects[b]
            if rb.x >= ra.x + ra.w:
                break
            if ra.overlaps(rb):
                out.append(f"kernels '{a}' at {_fmt_rect(ra)} and '{b}' at {_fmt_rect(rb)} overlap")
    if not out:
        expected = weighted_wirelength(problem, rects)
        if abs(expected - placement.objective) > 1e-6 * max(1.0, abs(expected)):
            out.append(
                f"objective {placement.objective} differs from the recomputed wirelength {expected}"
            )
    return out


def check_placement(problem: PlacementProblem, placement: Placement) -> None:
    """Raise `PlacementError` listing every violation; return None if the placement is legal."""
    violations = validate_placement(problem, placement)
    if violations:
        raise PlacementError(
            f"illegal placement from '{placement.placer}' ({len(violations)} violations): "
            + "; ".join(violations)
        )


def _fmt_rect(r: Rect) -> str:
    return f"(x={r.x}, y={r.y}, w={r.w}, h={r.h})"


def _fmt_shapes(shapes: tuple[tuple[int, int], ...]) -> str:
    return ", ".join(f"{w}x{h}" for w, h in shapes) or "none"
