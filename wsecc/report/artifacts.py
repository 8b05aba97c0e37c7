"""The output folder of a stage value: its files (report.json, the products as JSON, viewer.html,
the PNGs, the trace and saved arrays) as a function of the stage, written atomically by
`wsecc.report.outdir.write_folder`."""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from wsecc.check.checks import VALIDATE_AUTO_MAX_PARAMS
from wsecc.core.partition import crossing_latency_s
from wsecc.core.stages import Stage
from wsecc.ir.printer import format_graph
from wsecc.report.build import Trail, limits, model_facts, report
from wsecc.report.outdir import MODEL_KERNELS, SYSTEMS_DIR, write_folder
from wsecc.targets import target_source
from wsecc.view import render_viewer
from wsecc.view.data import systems_payload

STALE = (
    "trace.json", "inputs.npz", "outputs.npz", "generated.npz",
    "placement.png", "sram.png", "roofline.png", "decode_roofline.png",
)  # fmt: skip
"""Files a re-simulation does not carry over from the folder it rewrites (`keep`): drawn again
when they are drawn at all, never left from another simulation."""

PNG_AUTO_MAX_PARAMS = VALIDATE_AUTO_MAX_PARAMS
"""`png=None` (auto) draws the PNGs for a model of at most this many parameters (the bundled
samples); above it they take about 1.2 s of CPU of a compile (GPT-2 small, matplotlib's import
included: bench/RESULTS.md, issue 34's third pass) that viewer.html makes unnecessary."""


def draws_pngs(stage: Stage) -> bool:
    """Whether `stage`'s folder gets its PNGs: `--png` / `--no-png`, else (auto) for a model of
    at most `PNG_AUTO_MAX_PARAMS` parameters (or of unknown size)."""
    t = Trail.of(stage)
    if t.job.options.png is not None:
        return t.job.options.png
    params = model_facts(t).get("params")
    return params is None or params <= PNG_AUTO_MAX_PARAMS


def viewer_html(stage: Stage) -> str:
    """viewer.html: the placed, routed compile, self-contained (wsecc.view)."""
    t = Trail.of(stage)
    if t.placed is None:
        raise ValueError("viewer_html: the stage is not placed")
    sim = t.simulated
    info = None
    if sim is not None and sim.perf is not None and sim.sram is not None:
        sram = sim.sram
        info = {
            k.name: {
                "bound": k.bound,
                "cycles_per_sample": k.cycles_per_sample,
                "sram_bytes_per_pe": sram.kernel_max[k.name],
            }
            for k in sim.perf.kernels
        }
    return render_viewer(
        t.placed.program, title=t.title, kernel_info=info,
        sram_per_pe=sim.sram.total if sim is not None and sim.sram is not None else None,
        limits=limits(stage), systems=_system_panels(t),
    )  # fmt: skip


def _system_panels(t: Trail) -> list[dict[str, Any]] | None:
    """The viewer's panel per system of a program over several systems, else None."""
    assert t.placed is not None
    sized = t.placed.sized.systems
    if sized is None or t.performance is None:
        return None
    names = [[k.name for k in p.graph.kernels] for p in sized.partition.parts]
    rows = t.performance.systems_json()
    return systems_payload(t.placed.systems, names, rows, crossing_latency_s(t.job.target))


def folder_files(
    stage: Stage, *, save_outputs: bool, old: Path | None = None
) -> dict[str, str | bytes]:
    """Every file of `stage`'s output folder, by name; with `old` (a folder this compile
    rewrites), that folder's files it does not produce again, less `STALE`."""
    t = Trail.of(stage)
    files: dict[str, str | bytes] = {}
    if old is not None and old.is_dir():
        files |= {p.name: p.read_bytes() for p in old.iterdir() if p.is_file()}
        for stale in STALE:
            files.pop(stale, None)
    files["report.json"] = json.dumps(report(stage), indent=1) + "\n"
    if t.fused is not None:
        files["fused.ir.txt"] = format_graph(t.fused.graph)
    if t.sized is not None:
        split = t.sized.systems  # several systems: system 0's at the top, the others' in systems/
        kg = split.partition.parts[0].graph if split is not None else t.sized.kernel_graph
        files["kernels.json"] = _json(kg.to_json())
        files["sizing.json"] = _json(t.sizing.to_json())
    files["target.toml"] = target_source(t.job.options.target)[0]
    sim = t.simulated
    if t.placed is not None:
        program = t.placed.program
        files["placement.json"] = program.placement.dumps(include_timing=False) + "\n"
        files["routing.json"] = program.routing.dumps() + "\n"
        files["viewer.html"] = viewer_html(stage)
        files |= systems_files(t)
    pngs = draws_pngs(stage)
    if t.placed is not None and pngs:
        files["placement.png"] = _png(lambda path: _placement_png(t, stage, path))
    if sim is not None and sim.perf is not None and sim.sram is not None and pngs:
        from wsecc.view.png import write_roofline_png, write_sram_png

        sram, perf = sim.sram, sim.perf
        files["sram.png"] = _png(lambda path: write_sram_png(path, sram))
        files["roofline.png"] = _png(lambda path: write_roofline_png(path, perf, t.job.target))
    if sim is not None:
        if pngs:
            for name, draw in sim.performance.figures(t.title).items():
                files[name] = _png(draw)
        if sim.events is not None:
            files["trace.json"] = json.dumps(
                {"traceEvents": list(sim.events.trace), "displayTimeUnit": "ns"}
            )
        if save_outputs:
            files |= {name: _npz(arrays) for name, arrays in sim.arrays.items()}
    return files


def systems_files(t: Trail) -> dict[str, str]:
    """The products of a program over several systems besides system 0's (which are the top
    level's kernels.json, sizing.json, placement.json and routing.json): `SYSTEMS_DIR/N/` holds
    system N's four (N >= 1), and `SYSTEMS_DIR/MODEL_KERNELS` the whole model's kernel graph the
    split was made from (`wsecc.core.partition.split_layers`), so a saved folder re-simulates
    the whole program. A system that shares system P's placement (report.json
    `systems[N].placed_as`) holds its own kernels.json and P's sizing, placement and routing.
    Nothing for a one-system program."""
    split = t.sized.systems if t.sized is not None else None
    if t.placed is None or split is None:
        return {}
    files = {f"{SYSTEMS_DIR}/{MODEL_KERNELS}": _json(t.placed.sized.kernel_graph.to_json())}
    for part in split.partition.parts[1:]:
        program = t.placed.systems.programs[part.index]
        at = f"{SYSTEMS_DIR}/{part.index}"
        files[f"{at}/kernels.json"] = _json(part.graph.to_json())
        files[f"{at}/sizing.json"] = _json(program.sizing.to_json())
        files[f"{at}/placement.json"] = program.placement.dumps(include_timing=False) + "\n"
        files[f"{at}/routing.json"] = program.routing.dumps() + "\n"
    return files


def _json(doc: Any) -> str:
    return json.dumps(doc, indent=1) + "\n"


def write(stage: Stage, out_dir: str | os.PathLike[str], *, keep: bool = False) -> Path:
    """Write `stage`'s output folder atomically (a temporary sibling renamed into place).

    `keep=True` carries over the files of an existing `out_dir` that this stage does not
    produce again (a re-simulation keeps fused.ir.txt, say)."""
    save = Trail.of(stage).job.options.save_outputs
    files = folder_files(stage, save_outputs=save, old=Path(out_dir) if keep else None)
    return write_folder(Path(out_dir), files)


def _placement_png(t: Trail, stage: Stage, path: Path) -> None:
    from wsecc.view.png import write_placement_png  # matplotlib, on first use

    assert t.placed is not None and t.sized is not None
    program = t.placed.program
    write_placement_png(
        path, t.sized.kernel_graph, program.placement, t.job.target, t.title,
        limits=limits(stage), routing=program.routing, replicas=program.replicas,
    )  # fmt: skip


def _png(draw: Callable[[Path], None]) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "figure.png"
        draw(path)
        return path.read_bytes()


def _npz(arrays: Mapping[str, Any]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **dict(arrays))
    return buf.getvalue()
