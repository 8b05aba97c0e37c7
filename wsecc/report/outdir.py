"""The output folder is wsecc's, never the user's.

A compile writes only into a folder that does not exist yet, an empty one, or one that holds a
previous wsecc output and nothing else (its `report.json` says `wsecc.report/…` and every entry
is a file wsecc writes, or the `systems/` folder of a compile over several systems holding only
what it writes); it then replaces that folder in one rename. A sweep writes only into a
new or empty folder or a previous sweep's (its `points.jsonl` or `spec.toml`, and only the
entries a sweep writes). Anything else, the working folder or one of its parents, a folder that
holds the input, an existing file or a symbolic link, is refused in one line before any work,
and checked again just before the write, so no user file is ever deleted.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from wsecc.errors import WseccError

COMPILE_FILES = frozenset(
    {
        "report.json", "fused.ir.txt", "kernels.json", "sizing.json", "target.toml",
        "placement.json", "routing.json", "viewer.html", "placement.png", "sram.png",
        "roofline.png", "decode_roofline.png", "trace.json", "generated.npz", "inputs.npz",
        "outputs.npz",
    }
)  # fmt: skip
"""Every file a compile writes at the top of its folder (`wsecc.report.artifacts.folder_files`),
besides `SYSTEMS_DIR`; `wsecc view` rewrites two of them."""

SYSTEMS_DIR = "systems"
"""The subfolder of a compile over several systems: `N/` per system N >= 1 (`SYSTEM_FILES`) and
`MODEL_KERNELS` (`wsecc.report.artifacts.systems_files`)."""

SYSTEM_FILES = frozenset({"kernels.json", "sizing.json", "placement.json", "routing.json"})
"""System N's products in `SYSTEMS_DIR/N/`."""

MODEL_KERNELS = "model-kernels.json"
"""The whole model's kernel graph, before the split over systems, in `SYSTEMS_DIR`."""

SWEEP_ENTRIES = frozenset(
    {"spec.toml", "points.jsonl", "results.parquet", "results.csv", "report.html", "cache"}
)
"""What a sweep folder holds besides its plots (`*.png`) and temporaries (`.*`)."""


class OutputFolderError(WseccError):
    """The output folder named would hold or replace files wsecc did not write."""


def check_compile_output(
    out: str | os.PathLike[str], inputs: Iterable[Path] = (), *, label: str = "-o"
) -> Path:
    """Refuse, in one line, an output folder whose replacement could lose a user's file;
    returns the resolved path. `inputs` are files the compile reads (the model, its pins);
    `label` names the folder in the message (the flag that gave it)."""
    path = _check_common(
        Path(out), inputs, hint="name a new folder (default MODEL_STEM.wsecc)", label=label
    )
    if path.is_dir():
        entries = sorted(p.name for p in path.iterdir())
        if entries and not _is_compile_output(path):
            raise OutputFolderError(
                f"{label} {out}: the folder exists and is not a wsecc output (no wsecc report.json); "
                "name a new folder, or an empty one"
            )
        for name in _foreign(path):
            raise OutputFolderError(
                f"{label} {out}: the folder holds {name!r}, which wsecc did not write, and "
                "would be replaced; move it out or name a new folder"
            )
    return path


def _foreign(path: Path) -> list[str]:
    """The entries of compile folder `path` a compile does not write: anything but the files of
    `COMPILE_FILES` and a `SYSTEMS_DIR` of numbered folders of `SYSTEM_FILES` and
    `MODEL_KERNELS` (symbolic links are foreign)."""
    out = []
    for p in sorted(path.iterdir()):
        if p.name == SYSTEMS_DIR and p.is_dir() and not p.is_symlink():
            for q in sorted(p.iterdir()):
                if q.name == MODEL_KERNELS and q.is_file() and not q.is_symlink():
                    continue
                if not (q.name.isdigit() and q.is_dir() and not q.is_symlink()):
                    out.append(f"{SYSTEMS_DIR}/{q.name}")
                    continue
                out += [
                    f"{SYSTEMS_DIR}/{q.name}/{r.name}"
                    for r in sorted(q.iterdir())
                    if r.name not in SYSTEM_FILES or not r.is_file() or r.is_symlink()
                ]
        elif p.name not in COMPILE_FILES or not p.is_file():
            out.append(p.name)
    return out


def check_sweep_output(out: str | os.PathLike[str], inputs: Iterable[Path] = ()) -> Path:
    """As `check_compile_output`, for a sweep's folder (resumed, so written in place)."""
    path = _check_common(
        Path(out), inputs, hint="name a new folder (default SPEC_STEM.sweep)", label="-o"
    )
    if path.is_dir():
        entries = sorted(p.name for p in path.iterdir())
        if entries and not ((path / "points.jsonl").is_file() or (path / "spec.toml").is_file()):
            raise OutputFolderError(
                f"-o {out}: the folder exists and is not a wsecc sweep folder (no points.jsonl "
                "or spec.toml); name a new folder, or an empty one"
            )
        for name in entries:
            known = name in SWEEP_ENTRIES or name.endswith(".png") or name.startswith(".")
            if not known:
                raise OutputFolderError(
                    f"-o {out}: the folder holds {name!r}, which a sweep did not write; "
                    "move it out or name a new folder"
                )
    return path


def write_folder(out_dir: Path, files: Mapping[str, str | bytes]) -> Path:
    """Write `files` into a temporary sibling folder, then move it into place in one rename:
    an interrupted or failed write leaves no half-written `out_dir`, and a folder that is not
    wsecc's is refused (`check_compile_output`) rather than replaced."""
    out_dir = check_compile_output(out_dir, label="output folder")
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputFolderError(
            f"output folder {out_dir}: cannot make its parent folder: {e.strerror}"
        ) from None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    except OSError as e:
        raise OutputFolderError(
            f"output folder {out_dir}: cannot write beside it: {e.strerror}"
        ) from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the result is an ordinary folder
    old = None
    try:
        for name, data in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)  # systems/N/
            (tmp / name).write_bytes(data.encode() if isinstance(data, str) else data)
        if out_dir.exists():  # moved aside, not deleted, until the new folder is in place
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
            os.replace(out_dir, old / out_dir.name)
        os.replace(tmp, out_dir)
    except OSError as e:
        if old is not None and not out_dir.exists():
            os.replace(old / out_dir.name, out_dir)
        raise OutputFolderError(f"output folder {out_dir}: cannot write it: {e.strerror}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return out_dir


def _check_common(out: Path, inputs: Iterable[Path], *, hint: str, label: str) -> Path:
    if out.is_symlink():
        raise OutputFolderError(f"{label} {out} is a symbolic link; {hint}")
    if out.exists() and not out.is_dir():
        raise OutputFolderError(f"{label} {out} is an existing file; {hint}")
    path = out.resolve()
    cwd = Path.cwd().resolve()
    if path == cwd or path in cwd.parents:
        raise OutputFolderError(f"{label} {out} is the working folder or holds it; {hint}")
    for f in inputs:
        source = Path(f).resolve()
        if path == source or path in source.parents:
            raise OutputFolderError(f"{label} {out} holds the input {f}; {hint}")
    return path


def _is_compile_output(path: Path) -> bool:
    try:
        report = json.loads((path / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(report, dict) and str(report.get("schema", "")).startswith("wsecc.report/")
