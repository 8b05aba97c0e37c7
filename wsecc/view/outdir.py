"""`load_outdir`: the products of a saved compile, rebuilt from its output folder.

A `wsecc compile` folder holds kernels.json, sizing.json, placement.json, routing.json and
report.json (whose target name picks the target); that is all the viewer needs, so
`wsecc view OUTDIR` can draw a compile again without recompiling.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from wsecc.core.program import Program
from wsecc.core.replicas import Replicas
from wsecc.errors import WseccError, one_line
from wsecc.kernels import KernelGraph, Sizing
from wsecc.limits import Limits
from wsecc.place.problem import Placement
from wsecc.report.products import check_program, check_report, read_json
from wsecc.route.problem import Routing
from wsecc.targets import Target, load_target, parse_target

T = TypeVar("T")
NOT_NEEDED = frozenset({"performance"})
"""Report keys a saved compile may lack here: without a simulation the viewer draws sizing's
figures (`Limits.from_report`), and `wsecc simulate` makes the performance again."""

OUTDIR_FILES = ("kernels.json", "sizing.json", "placement.json", "routing.json", "report.json")


@dataclass(frozen=True)
class ViewInputs:
    """What `render_viewer` takes, loaded from a compile folder."""

    program: Program
    title: str
    limits: Limits | None  # from report.json's performance (sizing's when not simulated)


def load_outdir(path: str | os.PathLike[str]) -> ViewInputs:
    """Read and verify the products in a compile output folder.

    Every file is checked before it is used (`wsecc.report.products`): report.json by its schema,
    each product's keys and types as it is built, then the program through the compile's own
    validators (placement legal on the target's fabric, routing consistent with it, sizing
    within the target's SRAM). The title is the model file's name and the target's, and the
    limits what its performance simulation found (else sizing's bottleneck), all from
    report.json. Raises WseccError (one line, naming the file and the entry) if a file is
    missing, unreadable or wrong; TargetError if the target named in the report is neither
    built in nor a file that still exists.
    """
    folder = Path(path)
    if not folder.is_dir():
        what = "no such folder" if not folder.exists() else "a file, not a folder"
        raise WseccError(f"{folder}: {what} (give a `wsecc compile` output folder)")
    hint = f" (is {folder} a `wsecc compile` output folder?)"
    docs = {name: read_json(folder / name, hint) for name in OUTDIR_FILES}
    report = check_report(docs["report.json"], folder / "report.json", NOT_NEEDED)
    target_name = report["target"]["name"]
    model = Path(str(report["model"]["path"])).name
    target = _target(folder, target_name)
    program = Program(
        kg=_build(folder, "kernels.json", KernelGraph.from_json, docs),
        sizing=_build(folder, "sizing.json", Sizing.from_json, docs),
        placement=_build(folder, "placement.json", _placement, docs),
        routing=_build(folder, "routing.json", Routing.from_json, docs),
        target=target,
        replicas=_build(folder, "report.json", _replicas, docs),
    )
    options = report.get("options", {})
    pinned, layer = bool(options.get("pins")), report.get("mode") == "train"
    check_program(program, folder, pinned=pinned, layer=layer)
    try:
        limits = Limits.from_report(report)
    except (KeyError, TypeError, ValueError) as e:
        raise WseccError(f"{folder / 'report.json'}: malformed performance ({e!r})") from None
    return ViewInputs(program, title=f"{model} on {target_name}", limits=limits)


def _build(folder: Path, name: str, make: Callable[[Any], T], docs: dict[str, Any]) -> T:
    """`make(docs[name])`, a WseccError naming the file when its contents do not build."""
    try:
        return make(docs[name])
    except WseccError as e:
        raise WseccError(f"{folder / name}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise WseccError(
            f"{folder / name}: malformed ({type(e).__name__}: {one_line(str(e))})"
        ) from None


def _placement(doc: Any) -> Placement:
    """Placement.from_json after checking each rectangle is four integers."""
    for kernel, r in doc["rects"].items():
        if (
            not isinstance(r, dict)
            or sorted(r) != ["h", "w", "x", "y"]
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in r.values())
        ):
            raise ValueError(f"rects.{kernel} must be integers x, y, w, h, got {r!r}")
    return Placement.from_json(doc)


def _replicas(report: Any) -> Replicas:
    return Replicas.from_json(report["replicas"]) if "replicas" in report else Replicas()


def _target(folder: Path, name: str) -> Target:
    """The compile's own copy (target.toml) when present, else the target by name."""
    saved = folder / "target.toml"
    if saved.is_file():
        return parse_target(saved.read_text(encoding="utf-8"), str(saved))
    return load_target(name)
