"""The test suite's PNG switch (tests/conftest.py): outside the tests that look at pixels a figure
is still built and a valid 1x1 PNG stands in for its layout and rasterisation; a test marked
`pictures` gets the real figure."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import one_pixel_png

SERIES = {"gpt2": [(1.0, 10.0), (2.0, 19.0), (4.0, 35.0)]}


def _draw(path: Path) -> bytes:
    from wsecc.view.png import write_series_png

    write_series_png(path, SERIES, xlabel="batch", ylabel="tokens/s", title="switch")
    return path.read_bytes()


def test_the_stand_in_is_a_valid_one_pixel_png() -> None:
    image = pytest.importorskip("PIL.Image").open(io.BytesIO(one_pixel_png()))
    image.load()  # decodes every chunk: a bad CRC or a short IDAT raises
    assert (image.size, image.mode, image.getpixel((0, 0))) == ((1, 1), "RGB", (255, 255, 255))


def test_a_figure_outside_the_pictures_tests_is_built_then_stood_in(tmp_path: Path) -> None:
    assert _draw(tmp_path / "f.png") == one_pixel_png()
    from wsecc.view.png import write_series_png

    with pytest.raises(IndexError):  # the figure is still built from the data it is given
        write_series_png(tmp_path / "g.png", {"gpt2": [(1.0,)]}, xlabel="", ylabel="", title="")  # type: ignore[list-item]


@pytest.mark.pictures
def test_a_pictures_test_gets_the_rasterised_figure(tmp_path: Path) -> None:
    data = _draw(tmp_path / "f.png")
    image = pytest.importorskip("PIL.Image").open(io.BytesIO(data))
    assert data != one_pixel_png() and image.size[0] > 500 and image.size[1] > 300
