"""`load_outdir`: the products of a saved compile, rebuilt from its output folder.

A `wsecc compile` folder holds kernels.json, sizing.json, placement.json, routing.json and
report.json (whose target name picks the target); that is all the viewer needs, so
`wsecc view OUTDIR` can draw a compile again without recompiling.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wsecc.errors import WseccError
from wsecc.kernels import KernelGraph, Sizing
from wsecc.limits import Limits
from wsecc.place.problem import Placement
from wsecc.program import Program
from wsecc.replicas import Replicas
from wsecc.route.problem import Routing
from wsecc.targets import Target, load_target, parse_target

OUTDIR_FILES = ("kernels.json", "sizing.json", "placement.json", "routing.json", "report.json")


@dataclass(frozen=True)
class ViewInputs:
    """What `render_viewer` takes, loaded from a compile folder."""

    program: Program
    title: str
    limits: Limits | None  # from report.json's performance (sizing's when not simulated)


def load_outdir(path: str | os.PathLike[str]) -> ViewInputs:
    """Read and verify the products in a compile output folder.

    The title is the model file's name and the target's, and the limits what its performance
    simulation found (else sizing's bottleneck), all from report.json. Raises WseccError
    (one line) if a file is missing or unreadable; TargetError if the target named in the
    report is neither built in nor a file that still exists.
    """
    folder = Path(path)
    docs = {name: _read(folder, name) for name in OUTDIR_FILES}
    report = docs["report.json"]
    try:
        target_name = report["target"]["name"]
    except (KeyError, TypeError):
        raise WseccError(f"{folder / 'report.json'}: no target.name") from None
    model = Path(str(report.get("model", {}).get("path", folder.name))).name
    try:
        program = Program(
            kg=KernelGraph.from_json(docs["kernels.json"]),
            sizing=Sizing.from_json(docs["sizing.json"]),
            placement=Placement.from_json(docs["placement.json"]),
            routing=Routing.from_json(docs["routing.json"]),
            target=_target(folder, target_name),
            replicas=Replicas.from_json(report["replicas"]) if "replicas" in report else Replicas(),
        )
        return ViewInputs(
            program, title=f"{model} on {target_name}", limits=Limits.from_report(report)
        )
    except (KeyError, TypeError) as e:
        raise WseccError(f"{folder}: malformed compile output ({type(e).__name__}: {e})") from None


def _target(folder: Path, name: str) -> Target:
    """The compile's own copy (target.toml) when present, else the target by name."""
    saved = folder / "target.toml"
    if saved.is_file():
        return parse_target(saved.read_text(encoding="utf-8"), str(saved))
    return load_target(name)


def _read(folder: Path, name: str) -> Any:
    p = folder / name
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise WseccError(f"{p}: missing (is {folder} a `wsecc compile` output folder?)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise WseccError(f"{p}: cannot read: {e}") from None
