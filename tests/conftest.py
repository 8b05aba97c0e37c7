from __future__ import annotations

import os
import struct
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
DATA = ROOT / "tests" / "data"  # inputs nobody here wrote, vendored: tests/data/README.md
ORT_CORPUS = DATA / "onnxruntime"
ISPD_CORPUS = DATA / "ispd2020"


@pytest.fixture
def samples_dir() -> Path:
    return SAMPLES


# Where the PNGs a test makes are rasterised for real in the default run: the view tests (every
# figure's pixels), the tests marked `pictures` (a compile per mode: inference, training,
# replicas; the sweep's figures; the roofline, SRAM and ISPD writers' own tests), and every
# compile in a fresh process (the hostile inputs, the determinism tests, generation's CLI test).
# Elsewhere each figure is still built from the compile's data (every artist: a figure that
# cannot be made from a model fails its test), then a 1x1 PNG stands in for its layout and
# rasterisation, which were 60% of an in-process compile (bench/RESULTS.md, "Test suite time").
RASTERISED_DIRS = frozenset({"view"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "pictures: the PNGs this test makes are laid out and rasterised (tests/conftest.py)",
    )


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def one_pixel_png() -> bytes:
    """A valid 1x1 white RGB PNG, built from the format's chunks (signature, IHDR, IDAT, IEND)."""
    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB, no interlace
    pixels = zlib.compress(b"\x00\xff\xff\xff")  # filter byte 0, then one white pixel
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", pixels)
        + _png_chunk(b"IEND", b"")
    )


def rasterises(item: pytest.Item) -> bool:
    """Whether the PNGs `item` makes (its fixtures' too) are drawn for real."""
    folders = Path(str(item.path)).relative_to(ROOT / "tests").parts[:-1]
    return item.get_closest_marker("pictures") is not None or bool(RASTERISED_DIRS & set(folders))


class _Figures:
    """The switch `wsecc.view.png._save` reads once `pytest_runtest_setup` has wrapped it: set
    for each test before its fixtures are made, so a shared compile a fixture makes for it follows
    the test that first asks for it."""

    rasterise = True
    wrapped = False


def _wrap_save() -> None:
    from wsecc.view import png  # matplotlib: the first compile would import it anyway

    real = png._save

    def save(fig: Any, path: str | os.PathLike[str]) -> None:
        if _Figures.rasterise:
            real(fig, path)
        else:
            Path(path).write_bytes(one_pixel_png())

    png._save = save
    _Figures.wrapped = True


def pytest_runtest_setup(item: pytest.Item) -> None:
    _Figures.rasterise = rasterises(item)
    if not _Figures.rasterise and not _Figures.wrapped:
        _wrap_save()


# The one compile of an export that the tests of every sample's report (test_report.py) and of
# a quiet terminal (test_warnings.py) both read: two numerics batches (the last row padded),
# the fast placer, the event-level simulation, numerics validated.
SAMPLE_COMPILE = ("--batch", "2", "--seq", "16", "--placer", "greedy")


@dataclass(frozen=True)
class SampleCompile:
    """`wsecc compile PATH *SAMPLE_COMPILE -o out` run in this process: its exit code, its
    output folder, and every Python warning it raised (with the "always" filter)."""

    exit_code: int
    out: Path
    warnings: tuple[str, ...]


@pytest.fixture(scope="session")
def sample_compile(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], SampleCompile]:
    """The `SampleCompile` of an export, compiled the first time a test asks for it."""
    from wsecc.cli import main

    done: dict[Path, SampleCompile] = {}

    def compile_once(path: Path) -> SampleCompile:
        if path not in done:
            out = tmp_path_factory.mktemp(path.stem) / "o"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                code = main(["compile", str(path), *SAMPLE_COMPILE, "-o", str(out)])
            said = tuple(f"{w.category.__name__}: {w.message} ({w.filename})" for w in caught)
            done[path] = SampleCompile(code, out, said)
        return done[path]

    return compile_once


def corpus_file(name: str) -> Path:
    return ORT_CORPUS / name


def stdout_of_fresh_process(code: str) -> str:
    """Run Python `code` in a new interpreter (repo root on the path) and return its stdout;
    determinism tests compare two of these."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
        # only ends a hung run, never decides a result: deterministic CP-SAT's own wall-clock
        # guard is 300 s at least (`CpSatOptions.wall_guard_floor_s`)
        timeout=600,
    ).stdout


def two_fresh_runs(code: str) -> tuple[str, str]:
    """The stdout of `code` in two new interpreters, for a determinism test (deterministic
    CP-SAT promises the same bytes whatever the machine's load, or fails: no retry, no skip)."""
    return stdout_of_fresh_process(code), stdout_of_fresh_process(code)


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    """Say how many tests skipped for want of the export tools, and how to run them: a skip
    should never pass unseen."""
    skipped = terminalreporter.stats.get("skipped", [])
    torchless = [
        r for r in skipped if "torch" in str(r.longrepr) or "transformers" in str(r.longrepr)
    ]
    if torchless:
        terminalreporter.write_line(
            f"{len(torchless)} tests skipped: they export Hugging Face models and need torch and "
            "transformers (pip install -e '.[export]')",
            yellow=True,
        )
