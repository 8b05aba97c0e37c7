"""Manual placement: kernels pinned from a JSON file, the rest placed greedily around them.

Pins file: {"kernel_name": {"x": .., "y": .., "w": .., "h": ..}, ...}. A pinned kernel keeps
exactly that rectangle (any shape) and is a fixed obstacle for every placer, CP-SAT included.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from wsecc.place.greedy import place_greedy
from wsecc.place.problem import (
    Placement,
    PlacementError,
    PlacementProblem,
    Rect,
)


def load_pins(path: str | Path) -> dict[str, Rect]:
    """Read a pins file; raises PlacementError naming the entry that is malformed."""
    raw = json.loads(Path(path).read_text())
    pins = {}
    for name, r in sorted(raw.items()):
        try:
            pins[name] = Rect(int(r["x"]), int(r["y"]), int(r["w"]), int(r["h"]))
        except (KeyError, TypeError, ValueError) as e:
            raise PlacementError(f"{path}: pin '{name}' needs integer x, y, w, h ({e})") from e
    return pins


def with_pins(problem: PlacementProblem, pins: Mapping[str, Rect]) -> PlacementProblem:
    """The problem with `pins` added (overriding earlier pins of the same kernels).

    Raises PlacementError if a pin names an unknown kernel, leaves the fabric or overlaps
    another pin. Validate placements against the returned problem.
    """
    merged = {**problem.pins, **pins}
    bad = [f"pin names unknown kernel '{n}'" for n in merged if n not in problem.kernels_by_name]
    bad += [
        f"pin '{n}' (x={r.x}, y={r.y}, w={r.w}, h={r.h}) leaves the "
        f"{problem.width}x{problem.height} fabric"
        for n, r in merged.items()
        if r.w <= 0
        or r.h <= 0
        or r.x < 0
        or r.y < 0
        or r.x + r.w > problem.width
        or r.y + r.h > problem.height
    ]
    names = sorted(merged)
    bad += [
        f"pins '{a}' and '{b}' overlap"
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if merged[a].overlaps(merged[b])
    ]
    if bad:
        raise PlacementError("bad pins: " + "; ".join(bad))
    return replace(problem, pins=merged)


def place_manual(
    problem: PlacementProblem, *, pins: Mapping[str, Rect] | str | Path | None = None, seed: int = 0
) -> Placement:
    """Pinned kernels where the pins say, the others by greedy around them.

    `pins` (a mapping or a pins-file path) is added to `problem.pins`; the placement is legal
    for `with_pins(problem, pins)`.
    """
    if isinstance(pins, str | Path):
        pins = load_pins(pins)
    return replace(place_greedy(with_pins(problem, pins or {}), seed=seed), placer="manual")
