"""The output folder is wsecc's, never the user's: `-o` never deletes a file wsecc did not write."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wsecc.errors import WseccError
from wsecc.report.outdir import check_compile_output, check_sweep_output, write_folder

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
MODEL = SAMPLES / "gpt2_legacy_op17.onnx"
FAST = ["--seq", "8", "--placer", "greedy", "--no-validate"]


def wsecc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wsecc.cli", *args], cwd=cwd, capture_output=True, text=True
    )


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "models").mkdir()
    shutil.copy(MODEL, tmp_path / "models" / "model.onnx")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("my notes")
    (tmp_path / "file.txt").write_text("a file")
    (tmp_path / "theirs").mkdir()  # another tool's report, named as wsecc names its own
    (tmp_path / "theirs" / "report.json").write_text('{"schema": "someone.else/2"}')
    return tmp_path


@pytest.mark.parametrize(
    "out, says",
    [
        ("models", "holds the input"),
        ("mine", "not a wsecc output"),
        ("theirs", "not a wsecc output"),
        (".", "working folder"),
        ("file.txt", "existing file"),
        ("models/model.onnx", "existing file"),
    ],
)
def test_compile_refuses_a_folder_it_does_not_own_before_any_work(
    workdir: Path, out: str, says: str
) -> None:
    before = snapshot(workdir)
    r = wsecc("compile", "models/model.onnx", *FAST, "-o", out, cwd=workdir)
    assert r.returncode == 2
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("wsecc: error: -o ") and says in last
    assert "frontend" not in r.stderr  # refused before the model was read
    assert snapshot(workdir) == before


def test_compile_writes_an_empty_folder_and_replaces_its_own_output(workdir: Path) -> None:
    (workdir / "out").mkdir()
    assert wsecc("compile", "models/model.onnx", *FAST, "-o", "out", cwd=workdir).returncode == 0
    first = sorted(p.name for p in (workdir / "out").iterdir())
    assert "report.json" in first
    r = wsecc("compile", "models/model.onnx", *FAST, "-o", "out", cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (workdir / "out").iterdir()) == first


def test_an_output_folder_with_a_users_file_is_refused_by_compile_and_simulate(
    workdir: Path,
) -> None:
    assert wsecc("compile", "models/model.onnx", *FAST, "-o", "out", cwd=workdir).returncode == 0
    (workdir / "out" / "notes.txt").write_text("added by the user")
    before = snapshot(workdir)
    for args in (["compile", "models/model.onnx", *FAST, "-o", "out"], ["simulate", "out"]):
        r = wsecc(*args, cwd=workdir)
        assert r.returncode == 2, args
        assert "'notes.txt', which wsecc did not write" in r.stderr.strip().splitlines()[-1]
        assert "internal error" not in r.stderr
        assert snapshot(workdir) == before


def test_a_symbolic_link_is_refused(workdir: Path) -> None:
    os.symlink(workdir / "mine", workdir / "link")
    with pytest.raises(WseccError, match="symbolic link"):
        check_compile_output(workdir / "link")


def test_the_api_write_refuses_a_users_folder(workdir: Path) -> None:
    with pytest.raises(WseccError, match="not a wsecc output"):
        write_folder(workdir / "mine", {"report.json": "{}"})
    assert (workdir / "mine" / "notes.txt").read_text() == "my notes"


def test_a_parent_of_the_working_folder_is_refused(workdir: Path) -> None:
    inner = workdir / "mine"
    r = wsecc("compile", str(workdir / "models" / "model.onnx"), *FAST, "-o", "..", cwd=inner)
    assert r.returncode == 2 and "working folder" in r.stderr


def test_sweep_refuses_a_folder_that_is_no_sweeps(workdir: Path) -> None:
    with pytest.raises(WseccError, match="not a wsecc sweep folder"):
        check_sweep_output(workdir / "mine")
    (workdir / "sw").mkdir()
    (workdir / "sw" / "points.jsonl").write_text("")
    assert check_sweep_output(workdir / "sw") == (workdir / "sw").resolve()
    (workdir / "sw" / "thesis.tex").write_text("")
    with pytest.raises(WseccError, match="thesis.tex"):
        check_sweep_output(workdir / "sw")


PNGS = {"placement.png", "sram.png", "roofline.png"}


def test_pngs_are_drawn_for_small_models_and_asked_for_above(tmp_path: Path, monkeypatch) -> None:
    """The PNGs: by default for a model of at most PNG_AUTO_MAX_PARAMS parameters (a sample),
    not above it (viewer.html stays), `--png` / `--no-png` either way; the report does not
    depend on them."""
    import json

    import wsecc.report.artifacts as artifacts
    from wsecc.cli import main
    from wsecc.report.build import drop_timings

    def files(name: str, *flags: str) -> dict[str, bytes]:
        assert main(["compile", str(MODEL), *FAST, "-o", str(tmp_path / name), *flags]) == 0
        return snapshot(tmp_path / name)

    small = files("small")
    assert PNGS | {"viewer.html"} <= set(small)
    assert not PNGS & set(files("small-no", "--no-png"))
    monkeypatch.setattr(artifacts, "PNG_AUTO_MAX_PARAMS", 1000)  # the sample is then "large"
    large = files("large")
    assert "viewer.html" in large and not PNGS & set(large)
    asked = files("large-png", "--png")
    assert PNGS <= set(asked)

    def report(f: dict[str, bytes]) -> dict:
        r = json.loads(f["report.json"])
        drop_timings(r)
        return r

    assert report(large) == report(asked)
