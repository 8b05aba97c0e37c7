"""Targets: every built-in loads with sourced numbers; malformed files fail naming the field."""

from __future__ import annotations

import re
from dataclasses import fields
from importlib import resources
from pathlib import Path

import pytest
from wsecc.targets import PRECISIONS, Target, TargetError, list_targets, load_target

BUILTINS = ["cs1-ispd2020", "small64", "tiny32", "wse1", "wse2", "wse3"]
SECTIONS = [f.name for f in fields(Target) if f.name not in ("name", "description", "sources")]


def dotted_fields(t: Target) -> list[str]:
    present = [s for s in SECTIONS if getattr(t, s) is not None]  # [system] is optional
    return [f"{s}.{f.name}" for s in present for f in fields(getattr(t, s))]


def test_list_targets() -> None:
    assert list_targets() == BUILTINS


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_loads_with_a_source_for_every_field(name: str) -> None:
    t = load_target(name)
    assert t.name == name
    missing = [key for key in dotted_fields(t) if not t.source(key)]
    assert missing == []
    fab = t.fabric
    assert fab.program_x + fab.program_width <= fab.width
    assert fab.program_y + fab.program_height <= fab.height
    assert t.color_budget == 21
    assert t.sram_budget_bytes == 49152 - (0 if name == "cs1-ispd2020" else 8192)


def test_wse2_numbers() -> None:
    t = load_target("wse2")
    assert (t.fabric.width, t.fabric.height) == (757, 996)
    fab = t.fabric
    assert (fab.program_x, fab.program_y, fab.program_width, fab.program_height) == (4, 1, 750, 994)
    assert t.usable_pes == 750 * 994 == 745_500
    assert (t.clock.hz, t.clock.max_hz) == (850e6, 1.1e9)
    assert (t.sram.bytes_per_pe, t.sram.reserved_bytes) == (49152, 8192)
    assert [t.flops_per_cycle[p] for p in PRECISIONS] == [2, 4, 8]
    assert (t.memory.reads_per_cycle, t.memory.writes_per_cycle, t.memory.width_bits) == (2, 1, 64)
    assert (t.link.bits_per_cycle, t.link.hop_latency_cycles, t.link.ramp_latency_cycles) == (
        32,
        1,
        2,
    )
    assert t.link_bytes_per_cycle == 4
    assert (t.colors.total, t.colors.reserved) == (24, 3)
    assert t.io.offwafer_bytes_per_s == 150e9  # 1.2 Tb/s
    # 745,500 PEs x 4 flop/cycle x 850 MHz
    assert t.peak_flops_per_s("mixed") == pytest.approx(745_500 * 4 * 850e6)
    assert "850 MHz" in t.source("clock.hz") and "chose" in t.source("clock.hz")


def test_wse3_and_wse1_rates() -> None:
    assert [load_target("wse3").flops_per_cycle[p] for p in PRECISIONS] == [2, 8, 16]
    assert load_target("wse3").usable_pes == 755 * 1170
    assert load_target("wse1").fabric.width == 633


@pytest.mark.parametrize("name, side", [("tiny32", 32), ("small64", 64)])
def test_test_fabrics_are_fictional_wse2_derivatives(name: str, side: int) -> None:
    t, wse2 = load_target(name), load_target("wse2")
    assert t.usable_pes == side * side
    assert "Fictional" in t.description
    assert (t.sram, t.flops_per_cycle, t.link, t.colors, t.clock) == (
        wse2.sram,
        wse2.flops_per_cycle,
        wse2.link,
        wse2.colors,
        wse2.clock,
    )


def test_unknown_precision() -> None:
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        load_target("wse2").flops_per_cycle["fp8"]


# --- user files and malformed files --------------------------------------------------------------


def wse2_text() -> str:
    return (resources.files("wsecc.targets") / "wse2.toml").read_text(encoding="utf-8")


def edit(text: str, key: str, line: str | None) -> str:
    """Replace (or with None delete) the first line that assigns `key`."""
    pattern = re.compile(rf"^{re.escape(key)} = .*$", re.MULTILINE)
    assert pattern.search(text), key
    return pattern.sub(line or "", text, count=1)


def test_user_file_by_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(edit(wse2_text(), "name", 'name = "mine"'))
    assert load_target(path).name == "mine"
    assert load_target(str(path)).usable_pes == 745_500


def test_unknown_target_name() -> None:
    with pytest.raises(
        TargetError, match=r"unknown target 'wse9': not a built-in \(cs1-ispd2020, small64,"
    ):
        load_target("wse9")


MALFORMED = [
    ("width", None, "missing field fabric.width"),
    ("width", 'width = "abc"', "fabric.width must be a positive integer, got 'abc'"),
    ("width", "width = 0", "fabric.width must be a positive integer, got 0"),
    ("width", "width = 757.5", "fabric.width must be a positive integer, got 757.5"),
    ("fp16", "fp16 = true", "flops_per_cycle.fp16 must be a positive integer, got True"),
    ("hz", "hz = -1", "clock.hz must be a positive number, got -1"),
    ("program_x", "program_x = -1", "fabric.program_x must be an integer >= 0, got -1"),
    ("width", "width = 757\nwidht = 3", "unknown field fabric.widht"),
    ("name", None, "missing field name"),
    ('"fabric.width"', '"fabric.widht" = "typo"', "sources: 'fabric.widht' names no field"),
    (
        "program_width",
        "program_width = 800",
        "fabric.program_width: program_x 4 + program_width 800 exceeds fabric.width 757",
    ),
    (
        "reserved_bytes",
        "reserved_bytes = 60000",
        "sram.reserved_bytes 60000 must be below sram.bytes_per_pe 49152",
    ),
    ("hz", "hz = 2e9", "clock.hz 2e+09 exceeds clock.max_hz 1.1e+09"),
]


@pytest.mark.parametrize("key, line, message", MALFORMED)
def test_malformed_names_file_and_field(
    tmp_path: Path, key: str, line: str | None, message: str
) -> None:
    path = tmp_path / "wse9.toml"
    path.write_text(edit(wse2_text(), key, line))
    with pytest.raises(TargetError) as info:
        load_target(path)
    assert str(info.value) == f"wse9.toml: {message}"


def test_missing_section_names_its_first_field(tmp_path: Path) -> None:
    text = wse2_text()
    start, end = text.index("[colors]"), text.index("[io]")
    path = tmp_path / "wse9.toml"
    path.write_text(text[:start] + text[end:])
    with pytest.raises(TargetError, match=r"^wse9.toml: missing field colors.total$"):
        load_target(path)


def test_invalid_toml_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "wse9.toml"
    path.write_text("[fabric\nwidth = 1\n")
    with pytest.raises(TargetError) as info:
        load_target(path)
    assert str(info.value).startswith("wse9.toml: invalid TOML: ")
    assert "\n" not in str(info.value)
