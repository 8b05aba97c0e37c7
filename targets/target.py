"""The `Target` type: one wafer described as data, loaded from a TOML file.

A target file has a top-level `name` and `description` and one table per section below
(`[fabric]`, `[clock]`, ...). The section dataclasses *are* the schema: the loader reads every
field of every section, checks its type and range, and rejects unknown keys, so a typo or a
missing number is a one-line `TargetError` naming the file and the field::

    wse9.toml: missing field fabric.width
    wse9.toml: fabric.width must be a positive integer, got 'abc'

A `[sources]` table maps dotted field names (`fabric.width`) to the public source of each
number; the built-in targets cite one for every field (a test keeps it so). Built-in targets are
the TOML files of this package; `load_target` also takes a path to a user's own file.

Coordinates follow `wsecc.place`: x grows east (columns, `width`), y grows south (rows,
`height`). The program rectangle is the part of the fabric a compiled program may use; the rest
is the host-I/O (memcpy) halo.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, get_type_hints

from wsecc.errors import WseccError
from wsecc.vocab import Precision

PRECISIONS: tuple[str, ...] = tuple(p.value for p in Precision)
"""The precisions a target gives rates for (`wsecc.vocab.Precision`)."""


class TargetError(WseccError, ValueError):
    """A target file that cannot be used; the message is one line naming the file and field."""


_Fail = Callable[[str], TargetError]


def _min(value: int) -> dict[str, int]:
    """Field metadata: the smallest allowed value (the default is 1 for ints, > 0 for floats)."""
    return {"min": value}


@dataclass(frozen=True)
class Fabric:
    width: int  # full fabric, columns
    height: int  # full fabric, rows
    program_x: int = field(metadata=_min(0))  # program rectangle origin (west column)
    program_y: int = field(metadata=_min(0))  # program rectangle origin (north row)
    program_width: int
    program_height: int


@dataclass(frozen=True)
class Clock:
    hz: float  # the clock we convert cycles to seconds with
    max_hz: float  # the published ceiling, for reference


@dataclass(frozen=True)
class Sram:
    bytes_per_pe: int
    reserved_bytes: int = field(metadata=_min(0))  # code, runtime, stack: not for kernel data


@dataclass(frozen=True)
class PerPrecision:
    """One rate per precision (see `PRECISIONS`); index it with the precision name."""

    fp32: int
    mixed: int
    fp16: int

    def __getitem__(self, precision: Precision) -> int:
        check_precision(precision)
        return int(getattr(self, precision))


@dataclass(frozen=True)
class MemoryPorts:
    reads_per_cycle: int
    writes_per_cycle: int
    width_bits: int


@dataclass(frozen=True)
class Link:
    bits_per_cycle: int  # per direction, per link
    hop_latency_cycles: int
    ramp_latency_cycles: int = field(metadata=_min(0))


@dataclass(frozen=True)
class Colors:
    total: int
    reserved: int = field(metadata=_min(0))


@dataclass(frozen=True)
class OffWafer:
    offwafer_bytes_per_s: float


@dataclass(frozen=True)
class System:
    """The system around the wafer that training's weight streaming uses (optional section
    `[system]`; a target without it cannot weight-stream). The system I/O bandwidth is
    `io.offwafer_bytes_per_s`, shared by weights streaming in and gradients streaming out."""

    external_memory_bytes: float  # MemoryX: weights and optimizer state off the wafer
    max_systems: int  # systems SwarmX connects for data parallel training
    step_overhead_s: float = field(metadata=_min(0))  # per optimizer step, outside the wafer's work
    # SwarmX, between external memory and N > 1 systems (`wsecc.modes.train.swarmx`): a tree of
    # broadcast-reduce nodes, `swarmx_fanout` systems (or nodes) under each, that broadcasts
    # weights down and reduces gradients up, each system's stream at `swarmx_bytes_per_s`,
    # each level adding `swarmx_hop_s` of latency
    swarmx_fanout: int = field(metadata=_min(2))
    swarmx_bytes_per_s: float
    swarmx_hop_s: float = field(metadata=_min(0))
    # infer and generate over several systems (`wsecc.core.partition`): the latency an activation
    # adds crossing from one system's I/O to the next (its bytes pass at `io.offwafer_bytes_per_s`)
    crossing_s: float = field(metadata=_min(0))


@dataclass(frozen=True)
class Target:
    """A wafer: fabric geometry, clock, per-PE SRAM and rates, fabric links, colors, host I/O.

    `flops_per_cycle` is the per-PE matmul (FMAC) rate, one FMA counted as 2 flops;
    `vector_ops_per_cycle` the per-PE elementwise rate (add/mul/move) used for epilogues,
    normalisations and softmax. Both are indexed by precision: `t.flops_per_cycle[Precision.MIXED]`.
    """

    name: str
    description: str
    fabric: Fabric
    clock: Clock
    sram: Sram
    flops_per_cycle: PerPrecision
    vector_ops_per_cycle: PerPrecision
    memory: MemoryPorts
    link: Link
    colors: Colors
    io: OffWafer
    system: System | None = None  # optional section: absent, the target cannot weight-stream
    sources: tuple[tuple[str, str], ...] = ()

    @property
    def usable_pes(self) -> int:
        """PEs in the program rectangle."""
        return self.fabric.program_width * self.fabric.program_height

    @property
    def color_budget(self) -> int:
        """Colors a compiled program may use: total minus those the runtime reserves."""
        return self.colors.total - self.colors.reserved

    @property
    def sram_budget_bytes(self) -> int:
        """Per-PE SRAM left for kernel data (weights, buffers, K/V) after the reserve."""
        return self.sram.bytes_per_pe - self.sram.reserved_bytes

    @property
    def link_bytes_per_cycle(self) -> int:
        return self.link.bits_per_cycle // 8

    def peak_flops_per_s(self, precision: Precision) -> float:
        """usable_pes x flops_per_cycle[precision] x clock.hz."""
        return self.usable_pes * self.flops_per_cycle[precision] * self.clock.hz

    def summary(self) -> str:
        """One line for listings (`wsecc targets`)."""
        fab = self.fabric
        return (
            f"{self.name}: {fab.program_width}x{fab.program_height} PEs (fabric "
            f"{fab.width}x{fab.height}), {self.clock.hz / 1e6:.0f} MHz, "
            f"{self.sram.bytes_per_pe // 1024} KiB/PE, {self.color_budget} colors, "
            f"{self.peak_flops_per_s(Precision.FP16) / 1e15:.2f} PFLOP/s fp16 peak"
        )

    def source(self, key: str) -> str:
        """The cited source of a dotted field (`fabric.width`), or '' if the file gave none."""
        return dict(self.sources).get(key, "")


def check_precision(precision: Precision | str) -> Precision:
    """`precision` as a `Precision`; ValueError naming the choices when it is none (a string
    from a script or a file that skipped `Precision(...)`)."""
    if precision not in PRECISIONS:
        raise ValueError(
            f"unknown precision {precision!r} (expected one of {', '.join(PRECISIONS)})"
        )
    return Precision(precision)


# --- loading ---------------------------------------------------------------------------------

_PACKAGE = "wsecc.targets"
_SECTIONS: tuple[str, ...] = tuple(
    f.name for f in fields(Target) if f.name not in ("name", "description", "sources")
)
_OPTIONAL_SECTIONS = frozenset({"system"})


def list_targets() -> list[str]:
    """Names of the built-in targets (the package's TOML files), sorted."""
    root = resources.files(_PACKAGE)
    return sorted(p.name.removesuffix(".toml") for p in root.iterdir() if p.name.endswith(".toml"))


def load_target(name_or_path: str | os.PathLike[str]) -> Target:
    """A built-in target by name (`wse2`), or a user's TOML file by path."""
    text, filename = target_source(name_or_path)
    return parse_target(text, filename)


def target_source(name_or_path: str | os.PathLike[str]) -> tuple[str, str]:
    """The TOML text of a built-in target or a user's file, and its file name. A compile keeps
    it (target.toml in the output folder), so a saved compile reloads with its own target."""
    text_name = os.fspath(name_or_path)
    if text_name in list_targets():
        resource = resources.files(_PACKAGE) / f"{text_name}.toml"
        return resource.read_text(encoding="utf-8"), f"{text_name}.toml"
    path = Path(text_name)
    if not path.is_file():
        raise TargetError(
            f"unknown target {text_name!r}: not a built-in ({', '.join(list_targets())}) "
            "and no such file"
        )
    try:
        return path.read_text(encoding="utf-8"), path.name
    except (OSError, UnicodeDecodeError) as e:
        raise TargetError(f"{path}: cannot read the target file ({e})") from None


def parse_target(text: str, filename: str) -> Target:
    """Parse and validate TOML text; `filename` is used in error messages only."""

    def fail(message: str) -> TargetError:
        return TargetError(f"{filename}: {message}")

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise fail(f"invalid TOML: {e}") from None
    except RecursionError:
        raise fail("invalid TOML: nested too deeply") from None

    known = {"name", "description", "sources", *_SECTIONS}
    for key in doc:
        if key not in known:
            raise fail(f"unknown field {key}")
    hints = get_type_hints(Target)
    sections = {
        name: _read_section(_section_class(hints[name]), name, doc.get(name, {}), fail)
        for name in _SECTIONS
        if name in doc or name not in _OPTIONAL_SECTIONS
    }
    target = Target(
        name=_read_str(doc, "name", fail),
        description=_read_str(doc, "description", fail),
        sources=_read_sources(doc.get("sources", {}), sections, fail),
        **sections,
    )
    _check_consistency(target, fail)
    return target


def _section_class(hint: Any) -> type:
    """The dataclass of a section's type hint (`System | None` for an optional one)."""
    args = [a for a in getattr(hint, "__args__", ()) if a is not type(None)]
    return args[0] if args else hint


def _read_str(doc: dict[str, Any], key: str, fail: _Fail) -> str:
    if key not in doc:
        raise fail(f"missing field {key}")
    value = doc[key]
    if not isinstance(value, str) or not value.strip():
        raise fail(f"{key} must be a non-empty string, got {value!r}")
    return value


def _read_section(cls: type, section: str, table: Any, fail: _Fail) -> Any:
    """Build section dataclass `cls` from its TOML table, checking every field."""
    if not isinstance(table, dict):
        raise fail(f"{section} must be a table, got {table!r}")
    hints = get_type_hints(cls)
    names = {f.name for f in fields(cls)}
    for key in table:
        if key not in names:
            raise fail(f"unknown field {section}.{key}")
    values = {}
    for f in fields(cls):
        key = f"{section}.{f.name}"
        if f.name not in table:
            raise fail(f"missing field {key}")
        values[f.name] = _check_number(
            table[f.name], hints[f.name], f.metadata.get("min"), key, fail
        )
    return cls(**values)


def _check_number(value: Any, kind: type, minimum: int | None, key: str, fail: _Fail) -> Any:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if kind is int:
        low = 1 if minimum is None else minimum
        if not is_int or value < low:
            word = "a positive integer" if low == 1 else f"an integer >= {low}"
            raise fail(f"{key} must be {word}, got {value!r}")
        return value
    is_number = is_int or (isinstance(value, float) and math.isfinite(value))
    if minimum == 0 and is_number and value >= 0:
        return float(value)
    if not is_number or value <= 0:
        raise fail(f"{key} must be a positive number, got {value!r}")
    return float(value)


def _read_sources(table: Any, sections: dict[str, Any], fail: _Fail) -> tuple[tuple[str, str], ...]:
    """`[sources]`: dotted field name -> citation; a key naming no field is a typo."""
    if not isinstance(table, dict):
        raise fail(f"sources must be a table, got {table!r}")
    valid = {f"{name}.{f.name}" for name, section in sections.items() for f in fields(section)}
    for key, value in table.items():
        if key not in valid:
            raise fail(f"sources: {key!r} names no field")
        if not isinstance(value, str):
            raise fail(f"sources.{key} must be a string, got {value!r}")
    return tuple(sorted(table.items()))


MAX_FABRIC_SIDE = 4096
"""The widest and tallest fabric a target may describe: 5.4x WSE-3's 762 columns, 3.5x its 1172
rows (docs/hardware.md §2). wsecc's placement and routing grids grow with the fabric; measured
(a 2-core machine under load): GPT-2's sample at --seq 16, greedy, L0, on a 4096 x 4096 fabric,
32 s and 2.2 GB peak. A 10^9 x 10^9 fabric would run for hours; it is refused when the target
loads."""


MAX_SRAM_BYTES_PER_PE = 1 << 24
"""16 MiB per PE, 341x WSE-3's 48 KB (docs/hardware.md §4): sizing's menus grow with the SRAM a
PE offers (10^15 bytes ran out of memory); a wafer with more is not a PE of this kind."""
CLOCK_RANGE_HZ = (1e6, 1e12)
"""Clocks from 1 MHz to 1 THz (WSE-2 delivers 850 MHz, docs/hardware.md §13.1): a clock far
outside overflows the cycle counts turned into seconds (1e-300 Hz did)."""


def _check_consistency(t: Target, fail: _Fail) -> None:
    """Relations between fields that single-field checks cannot see."""
    fab = t.fabric
    if t.sram.bytes_per_pe > MAX_SRAM_BYTES_PER_PE:
        raise fail(
            f"sram.bytes_per_pe {t.sram.bytes_per_pe:,} is over the {MAX_SRAM_BYTES_PER_PE:,} a "
            "PE may have (targets.target.MAX_SRAM_BYTES_PER_PE; WSE-3's is 49,152)"
        )
    low, high = CLOCK_RANGE_HZ
    for key, hz in (("clock.hz", t.clock.hz), ("clock.max_hz", t.clock.max_hz)):
        if not low <= hz <= high:
            raise fail(f"{key} {hz:g} is outside {low:g} to {high:g} Hz")
    for key, n in (("fabric.width", fab.width), ("fabric.height", fab.height)):
        if n > MAX_FABRIC_SIDE:
            raise fail(
                f"{key} {n:,} is over the {MAX_FABRIC_SIDE:,} PEs a fabric side may have "
                "(targets.target.MAX_FABRIC_SIDE; WSE-3's is 762 x 1172)"
            )
    if fab.program_x + fab.program_width > fab.width:
        raise fail(
            f"fabric.program_width: program_x {fab.program_x} + program_width "
            f"{fab.program_width} exceeds fabric.width {fab.width}"
        )
    if fab.program_y + fab.program_height > fab.height:
        raise fail(
            f"fabric.program_height: program_y {fab.program_y} + program_height "
            f"{fab.program_height} exceeds fabric.height {fab.height}"
        )
    if t.sram.reserved_bytes >= t.sram.bytes_per_pe:
        raise fail(
            f"sram.reserved_bytes {t.sram.reserved_bytes} must be below "
            f"sram.bytes_per_pe {t.sram.bytes_per_pe}"
        )
    if t.colors.reserved >= t.colors.total:
        raise fail(
            f"colors.reserved {t.colors.reserved} must be below colors.total {t.colors.total}"
        )
    if t.clock.hz > t.clock.max_hz:
        raise fail(f"clock.hz {t.clock.hz:g} exceeds clock.max_hz {t.clock.max_hz:g}")
    if t.link.bits_per_cycle % 8:
        raise fail(f"link.bits_per_cycle must be a multiple of 8, got {t.link.bits_per_cycle}")
