"""`main_ispd2020`: writes a legal solution, a PNG and the viewer page; bad input is one line
and exit 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from wsecc.ispd2020.cli import main_ispd2020
from wsecc.ispd2020.kgraph import read_kgraph
from wsecc.ispd2020.score import read_solution, score_solution

DATA = Path(__file__).parent / "data"


@pytest.mark.pictures  # draws its PNG for real (tests/conftest.py)
def test_solves_and_draws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "h.solution", tmp_path / "h.png"
    rc = main_ispd2020(
        [str(DATA / "handout.kgraph"), "-o", str(out), "--time-budget", "2", "--png", str(png)]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    for field in ("Δt", "WL", "score", "Δt bound", "gap", "time"):
        assert field in printed
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    s = score_solution(read_kgraph(DATA / "handout.kgraph"), read_solution(out))
    assert s.legal
    assert s.score < 50693  # better than the handout's own example solution


def test_viewer_page_shows_the_solution(tmp_path: Path) -> None:
    out, html = tmp_path / "h.solution", tmp_path / "h.html"
    argv = [str(DATA / "handout.kgraph"), "-o", str(out), "--time-budget", "2", "--html", str(html)]
    assert main_ispd2020(argv) == 0
    page = html.read_text()
    m = re.search(r'<script type="application/json" id="wsecc-data">(.*?)</script>', page, re.S)
    assert m is not None
    data = json.loads(m.group(1))
    assert (data["fabric"]["width"], data["fabric"]["height"]) == (633, 633)
    s = score_solution(read_kgraph(DATA / "handout.kgraph"), read_solution(out))
    drawn = {k["name"]: k for k in data["kernels"]}
    assert set(drawn) == set(s.rects)
    for name, r in s.rects.items():
        k = drawn[name]
        assert (k["x"], k["y"], k["w"], k["h"]) == (r.x, r.y, r.w, r.h)
        assert k["info"]["time"] <= s.delta_t and k["info"]["memory_words"] <= 24576


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["missing.kgraph"], "missing.kgraph: cannot read"),
        (["--time-budget", "0", "x.kgraph"], "--time-budget must be positive"),
        ([], "the following arguments are required: kgraph"),
    ],
)
def test_bad_input(argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main_ispd2020(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert err.count("\n") == 1


def test_malformed_kgraph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.kgraph"
    bad.write_text((DATA / "handout.kgraph").read_text().replace("f=512 h=28", "f=512 hh=28"))
    assert main_ispd2020([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "wsecc ispd2020: error: bad.kgraph:15: expected 'dblock[N] f=.. h=.. w=..'"
    )
    assert err.count("\n") == 1
