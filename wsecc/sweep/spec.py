"""A sweep's spec: models, the axes to cross, fixed options; expanded into points.

    [[models]]
    path = "models/gpt2.onnx"      # relative to the spec's folder
    name = "gpt2"                  # optional; the file's stem by default
    seq = 1024                     # optional: this model's own options (bindings)
    batch = [128, 256]             # a list: this model's own axis, crossed with [axes]
    [axes]
    seq = [128, 512]
    batch = [1, 8]
    target = ["wse2", "wse3"]
    [fixed]
    placer = "greedy"
    validate = false

Keys are `wsecc compile`'s long options (`time-budget` or `time_budget` alike, `dim` a table
of NAME = VALUE). A point is one model with one value of every axis: the product of the axes
and the model's own axes, model by model, in the spec's order (the models of a study rarely
share one grid: GPT-3 sizes by batch, GPT-2 XL by sequence length). Every value is checked when the spec loads (types,
choices, targets, files), so a bad spec fails before any compile, in one line.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wsecc.compiler import sha256_of
from wsecc.errors import WseccError
from wsecc.options import Option, OptionError, Options, check_value, spec_keys, toml_types
from wsecc.sweep.table import MAX_POINTS
from wsecc.version import __version__

SPEC_KEYS: dict[str, Option] = spec_keys()
"""The options a spec may set: `wsecc compile`'s long options without dashes, derived from the
one option definition (`wsecc.options`), with its types, ranges and checks."""

MAX_AXIS_VALUES = 10_000
"""Values one axis may list: a study's axis is a handful of sizes; 10,000 is a typo or a
generated list that would take days to compile."""


class SpecError(WseccError):
    """The spec cannot be read or names an option or value that wsecc does not take."""


@dataclass(frozen=True)
class Model:
    name: str
    path: Path
    sha256: str
    options: Mapping[str, Any]  # the model's own keys (normalized), fixed for its points
    axes: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # its own axes (lists)


@dataclass(frozen=True)
class Point:
    """One compile: a model and the values of every option the spec sets for it."""

    model: Model
    axes: Mapping[str, Any]  # this point's value of each axis (normalized keys)
    settings: Mapping[str, Any]  # every option the spec sets (fixed, model, axes)

    def options(self) -> Options:
        return Options(**{SPEC_KEYS[k].name: v for k, v in self.settings.items()})

    @property
    def config_hash(self) -> str:
        """The point's identity: the model's content, every option it sets, wsecc's version.
        A finished point with the same hash is not run again."""
        key = {"model": self.model.sha256, "options": self.settings, "wsecc": __version__}
        blob = json.dumps(key, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def label(self) -> str:
        axes = " ".join(f"{k}={v}" for k, v in self.axes.items())
        return f"{self.model.name} {axes}".strip()


@dataclass(frozen=True)
class Spec:
    path: Path
    models: tuple[Model, ...]
    axes: Mapping[str, tuple[Any, ...]]
    fixed: Mapping[str, Any]
    text: str

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(self.axes)

    def points(self) -> list[Point]:
        out = []
        for model in self.models:
            grid = {**self.axes, **model.axes}
            names = list(grid)
            for values in itertools.product(*(grid[n] for n in names)):
                axes = dict(zip(names, values, strict=True))
                out.append(Point(model, axes, {**self.fixed, **model.options, **axes}))
        return out


def _key(raw: str, where: str) -> str:
    key = raw.replace("_", "-")
    if key not in SPEC_KEYS:
        raise SpecError(
            f"{where}: unknown option {raw!r}; a spec takes wsecc compile's options: "
            + ", ".join(SPEC_KEYS)
        )
    return key


def _value(key: str, value: Any, where: str, base: Path) -> Any:
    """One option's value checked and normalized by its definition (`wsecc.options`): files
    resolved against the spec's folder, a dim table sorted, a budget a float."""
    o = SPEC_KEYS[key]
    kinds = toml_types(o)
    # TOML booleans are ints to Python: an int option must not take true/false
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(t.__name__ for t in kinds)
        article = "an" if expected[0] in "aeiou" else "a"
        raise SpecError(f"{where}: {key} = {value!r} is not {article} {expected}")
    if isinstance(value, str) and (o.file or (key == "target" and value.endswith(".toml"))):
        value = str((base / value).resolve())
    try:
        checked = check_value(o, value)
    except OptionError as e:
        raise SpecError(f"{where}: {key} = {value!r}: {e.reason}") from None
    except WseccError as e:
        raise SpecError(f"{where}: {key} = {value!r}: {e}") from None
    return value if o.auto and value == "auto" else checked  # "auto" as written: the hash


def _options(table: Any, where: str, base: Path) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise SpecError(f"{where} must be a table of options")
    return {_key(k, where): _value(_key(k, where), v, where, base) for k, v in table.items()}


def load_spec(path: str | Path) -> Spec:
    """Read and check a spec (module doc). Raises SpecError (one line) on anything wrong."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        raw = tomllib.loads(text)
    except OSError as e:
        raise SpecError(f"{path}: cannot read the spec ({e.strerror or e})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: not valid TOML ({e})") from None
    except RecursionError:
        raise SpecError(f"{path}: not valid TOML (nested too deeply)") from None
    unknown = set(raw) - {"models", "axes", "fixed"}
    if unknown:
        raise SpecError(
            f"{path}: unknown section {sorted(unknown)[0]!r}; a spec has [[models]], [axes] "
            "and [fixed]"
        )
    base = path.resolve().parent
    fixed = _options(raw.get("fixed", {}), f"{path} [fixed]", base)
    axes = _axes(raw.get("axes", {}), f"{path} [axes]", base)
    clash = set(axes) & set(fixed)
    if clash:
        raise SpecError(f"{path}: {sorted(clash)[0]} is both an axis and fixed; choose one")
    models = _models(raw.get("models"), path, base, set(axes))
    spec = Spec(path, models, axes, fixed, text)
    count = sum(math.prod(len(v) for v in {**axes, **m.axes}.values()) for m in models)
    if count > MAX_POINTS:
        raise SpecError(
            f"{path}: {count:,} points (models x axes); a sweep takes at most {MAX_POINTS:,} "
            "(wsecc.sweep.spec.MAX_POINTS): split it into several specs"
        )
    points = spec.points()
    for p in points[:1] + points[-1:]:  # each value alone was checked; the combination too
        _check_options(p)
    for m in models:  # every value of every axis makes valid options
        for key, values in {**axes, **m.axes}.items():
            for v in values:
                _check_options(Point(m, {key: v}, {**fixed, **m.options, key: v}))
    return spec


def _axes(table: Any, where: str, base: Path) -> dict[str, tuple[Any, ...]]:
    if not isinstance(table, dict):
        raise SpecError(f"{where} must be a table of NAME = [values]")
    axes: dict[str, tuple[Any, ...]] = {}
    for k, values in table.items():
        key = _key(k, where)
        if not isinstance(values, list) or not values:
            raise SpecError(f"{where}: {k} must be a non-empty list of values")
        if len(values) > MAX_AXIS_VALUES:
            raise SpecError(
                f"{where}: {k} lists {len(values):,} values; an axis takes at most "
                f"{MAX_AXIS_VALUES:,} (wsecc.sweep.spec.MAX_AXIS_VALUES)"
            )
        vals = tuple(_value(key, v, where, base) for v in values)
        if len({json.dumps(v, sort_keys=True) for v in vals}) != len(vals):
            raise SpecError(f"{where}: {k} lists a value twice")
        axes[key] = vals
    return axes


def _check_options(p: Point) -> None:
    """The point's options together (each value was checked alone; `Options` loads the
    target)."""
    try:
        p.options()
    except WseccError as e:
        raise SpecError(f"{p.label()}: {e}") from None


def _models(raw: Any, path: Path, base: Path, axes: set[str]) -> tuple[Model, ...]:
    if not isinstance(raw, list) or not raw:
        raise SpecError(f"{path}: no models; add [[models]] tables with a path each")
    if len(raw) > MAX_POINTS:
        raise SpecError(f"{path}: {len(raw):,} models; a sweep takes at most {MAX_POINTS:,} points")
    models = []
    for i, m in enumerate(raw):
        where = f"{path} [[models]] #{i + 1}"
        if not isinstance(m, dict) or not isinstance(m.get("path"), str):
            raise SpecError(f'{where}: needs path = "MODEL.onnx"')
        file = (base / m["path"]).resolve()
        if not file.is_file():
            raise SpecError(f"{where}: {m['path']!r}: no such file ({file})")
        name = m.get("name", file.stem)
        if not isinstance(name, str) or not name:
            raise SpecError(f"{where}: name must be a non-empty string")
        own = {k: v for k, v in m.items() if k not in ("path", "name")}
        opts = _options({k: v for k, v in own.items() if not isinstance(v, list)}, where, base)
        lists = _axes({k: v for k, v in own.items() if isinstance(v, list)}, where, base)
        both = (set(opts) | set(lists)) & axes
        if both:
            raise SpecError(f"{where}: {sorted(both)[0]} is both an axis and this model's own")
        models.append(Model(name, file, sha256_of(file), opts, lists))
    names = [m.name for m in models]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise SpecError(
            f"{path}: two models named {sorted(dup)[0]!r}; give them names (name = ...)"
        )
    return tuple(models)
