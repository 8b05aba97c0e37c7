"""`load_outdir`: the products of a saved compile, rebuilt from its output folder.

A `wsecc compile` folder holds kernels.json, sizing.json, placement.json, routing.json and
report.json (whose target name picks the target); that is all the viewer needs, so
`wsecc view OUTDIR` can draw a compile again without recompiling. A compile over several
systems adds the others' four in `systems/N/` and the whole model's kernel graph in
`systems/model-kernels.json`; every system is loaded and checked.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from wsecc.core.partition import PartitionError, SizedSystems, regroup
from wsecc.core.program import Program, Systems
from wsecc.core.replicas import Replicas
from wsecc.errors import WseccError, one_line
from wsecc.kernels import KernelGraph, Sizing
from wsecc.limits import Limits
from wsecc.place.problem import Placement
from wsecc.report.outdir import MODEL_KERNELS, SYSTEMS_DIR
from wsecc.report.products import check_program, check_report, read_json
from wsecc.route.problem import Routing
from wsecc.targets import Target, load_target, parse_target
from wsecc.view.data import systems_payload

if TYPE_CHECKING:
    from wsecc.core.partition import SizedSystems

T = TypeVar("T")
NOT_NEEDED = frozenset({"performance"})
"""Report keys a saved compile may lack here: without a simulation the viewer draws sizing's
figures (`Limits.from_report`), and `wsecc simulate` makes the performance again."""

OUTDIR_FILES = ("kernels.json", "sizing.json", "placement.json", "routing.json", "report.json")
_PRODUCTS = ("sizing.json", "placement.json", "routing.json")


@dataclass(frozen=True)
class SavedSystems:
    """A program over several systems, loaded from a compile folder: the whole model's kernel
    graph, its split with each system's sizing as placed, the placed programs with their
    crossings, and report.json's `systems` rows and crossing latency (the viewer's panels)."""

    model: KernelGraph
    sized: SizedSystems
    systems: Systems
    rows: tuple[dict[str, Any], ...]
    crossing_latency_s: float


@dataclass(frozen=True)
class ViewInputs:
    """What `render_viewer` takes, loaded from a compile folder; `program` is system 0's."""

    program: Program
    title: str
    limits: Limits | None  # from report.json's performance (sizing's when not simulated)
    systems: SavedSystems | None = None  # a compile over several systems


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
    systems = _systems(folder, report, program) if len(report.get("systems", ())) > 1 else None
    return ViewInputs(program, title=f"{model} on {target_name}", limits=limits, systems=systems)


def _systems(folder: Path, report: dict[str, Any], first: Program) -> SavedSystems:
    """The other systems of a compile over several (`wsecc.report.artifacts.systems_files`),
    each checked as system 0's is (`check_program`): the split made again from
    `systems/model-kernels.json` must give system 0's kernels.json and each `systems/N/`'s,
    and a system sharing system P's placement is checked against P's kernels."""
    rows = tuple(report["systems"])
    n = len(rows)
    at = folder / SYSTEMS_DIR
    hint = f" (a compile over {n} systems keeps them in {at})"
    model = _build(
        at,
        MODEL_KERNELS,
        KernelGraph.from_json,
        {MODEL_KERNELS: read_json(at / MODEL_KERNELS, hint)},
    )
    where = [folder, *(at / str(i) for i in range(1, n))]
    saved = [read_json(w / "kernels.json", hint) for w in where]
    try:
        groups = [[k["name"] for k in doc["kernels"]] for doc in saved]
        layers = [(int(r["first_layer"]), int(r["last_layer"])) for r in rows]
        why = str(report.get("partition", {}).get("why", ""))
        partition = regroup(model, first.precision, groups, layers, why)
    except (PartitionError, KeyError, TypeError, ValueError) as e:
        files = ", ".join(str(w / "kernels.json") for w in where)
        raise WseccError(
            f"{at / MODEL_KERNELS} and the {n} systems' kernels.json ({files}) do not agree "
            f"({one_line(str(e))}); compile the model again"
        ) from None
    for i, part in enumerate(partition.parts):
        if saved[i] != part.graph.to_json():
            raise WseccError(
                f"{where[i] / 'kernels.json'}: not system {i}'s kernels of {MODEL_KERNELS} split "
                f"over {n} systems; compile the model again"
            )
    placed_as = tuple(r["placed_as"] for r in rows)
    programs = [first]
    for i in range(1, n):
        docs = {name: read_json(where[i] / name, hint) for name in _PRODUCTS}
        p = placed_as[i] if 0 <= placed_as[i] < n else i
        program = replace(
            first,
            kg=partition.parts[p].graph,
            sizing=_build(where[i], "sizing.json", Sizing.from_json, docs),
            placement=_build(where[i], "placement.json", _placement, docs),
            routing=_build(where[i], "routing.json", Routing.from_json, docs),
        )
        pinned = bool(report.get("options", {}).get("pins"))
        check_program(program, where[i], pinned=pinned)
        programs.append(program)
    try:
        systems = Systems(tuple(programs), partition.crossings, placed_as)
    except ValueError as e:
        raise WseccError(f"{folder / 'report.json'}: systems: {e}") from None
    why = str(report.get("partition", {}).get("count_why", ""))
    sized = SizedSystems(partition, tuple(p.sizing for p in programs), why)
    latency = float(report.get("partition", {}).get("crossing_latency_s", 0.0))
    return SavedSystems(model, sized, systems, rows, latency)


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


def system_panels(v: ViewInputs) -> list[dict[str, Any]] | None:
    """The viewer's panel per system of a saved compile over several systems
    (`wsecc.view.data.systems_payload`, from report.json's rows), else None."""
    if v.systems is None:
        return None
    over = v.systems
    names = [[k.name for k in p.graph.kernels] for p in over.sized.partition.parts]
    return systems_payload(over.systems, names, over.rows, over.crossing_latency_s)
