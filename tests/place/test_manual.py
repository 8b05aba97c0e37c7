"""Manual placement: pins from a JSON file, everything else greedy around them."""

from __future__ import annotations

import json

import pytest

from wsecc.place.manual import load_pins, place_manual, with_pins
from wsecc.place.problem import PlacementError, Rect, validate_placement
from wsecc.place.synthetic import chain_problem


def test_pins_file_is_honoured_and_the_rest_placed_around(tmp_path):
    path = tmp_path / "pins.json"
    path.write_text(
        json.dumps(
            {"k0": {"x": 150, "y": 150, "w": 40, "h": 40}, "k9": {"x": 0, "y": 60, "w": 7, "h": 70}}
        )
    )
    problem = chain_problem(20)
    p = place_manual(problem, pins=path)
    pinned = with_pins(problem, load_pins(path))
    assert validate_placement(pinned, p) == []
    assert p.rects["k0"] == Rect(150, 150, 40, 40) and p.placer == "manual"


@pytest.mark.parametrize(
    "pins, message",
    [
        ({"nope": Rect(0, 0, 1, 1)}, "pin names unknown kernel 'nope'"),
        (
            {"k1": Rect(195, 0, 10, 10)},
            "pin 'k1' (x=195, y=0, w=10, h=10) leaves the 200x200 fabric",
        ),
        ({"k1": Rect(0, 0, 10, 10), "k2": Rect(5, 5, 10, 10)}, "pins 'k1' and 'k2' overlap"),
    ],
)
def test_bad_pins_are_rejected(pins, message):
    with pytest.raises(PlacementError, match=message.replace("(", r"\(").replace(")", r"\)")):
        place_manual(chain_problem(5), pins=pins)


def test_malformed_pins_file(tmp_path):
    path = tmp_path / "pins.json"
    path.write_text(json.dumps({"k0": {"x": 1, "y": 2, "w": 3}}))
    with pytest.raises(PlacementError, match="pin 'k0' needs integer x, y, w, h"):
        load_pins(path)
