"""`Options`: every knob of a compile, defined once.

Each field of `Options` is one option: its name is the keyword of `wsecc.compile(...)`, its
default the default everywhere, and its `Option` (the field's metadata, `option_table()`)
holds the rest: the `wsecc compile` flag, the type, the range or choices, the help text, which
commands take it and whether a sweep spec may set it. From that one definition come

- the argparse flags of `wsecc compile`, `check`, `inspect` and `simulate` (`add_flags`),
- the keys a sweep spec takes, with their TOML types (`spec_keys`),
- the checks `Options(...)` runs on every value (`check_value`): a type, a finite number, a
  range, a choice, a file that exists and parses,

so a flag added here appears in the CLI, the sweep spec and the API, and a bad value is refused
in one line when it is parsed, not after a compile (tests/test_options.py pins both).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import json
import math
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wsecc.errors import WseccError, one_line
from wsecc.frontend.bind import DEFAULT_SEQ, tensor_budget_bytes
from wsecc.ir.core import IRError
from wsecc.ir.grad import grad_scale_factor
from wsecc.kernels.costs import DEFAULT_CHUNK_TOKENS
from wsecc.place.manual import load_pins
from wsecc.targets import load_target
from wsecc.vocab import Execution, Mode, Placer, Precision, SimLevel, Weights, parse

FAULTS = ("drop_partial", "misplace_tile")
"""Faults `inject_fault` can put into the functional simulation (`wsecc.sim.functional`):
drop_partial loses PE (0, 0)'s partial sum in the first linear kernel; misplace_tile swaps two
of its PEs' weight tiles."""
DEFAULT_NEW_TOKENS = 16
"""Tokens generate mode's `--validate` generates after the prompt (issue 17: "default 16")."""
GENERATE_FAULTS = (*FAULTS, "rotary_position")
"""Faults for generation's numerics (`wsecc.sim.generate`): the functional simulation's, and
rotary_position, which rotates every decode step's new keys with the position before their own
(t - 1 for token t), a broken rotary rule that prefill cannot show."""
TRAIN_FAULTS = ("layernorm_gamma", "moe_router", "grad_scale=F")
"""Faults for train mode's gradient check (`wsecc.ir.grad`): layernorm_gamma breaks the gradient
rule of LayerNorm's scale; moe_router gives a mixture-of-experts router no weight gradient;
grad_scale=F (F a positive number, e.g. grad_scale=1.05) multiplies
the last Linear's weight gradient by F, a wrong scale."""

MAX_DIM = 2**31 - 1
"""The largest value of a dim (batch, seq, a --dim, tokens): ONNX Runtime and numpy index a
tensor's dims as int64 but wsecc's kernels count tokens and PEs in int32 arithmetic. Far below
this, binding checks the tensors against the machine's memory (`wsecc.frontend.bind`)."""
MAX_SEED = 2**31 - 1
"""CP-SAT's `random_seed` is an int32 parameter (ortools sat_parameters.proto)."""
MAX_TIME_BUDGET_S = 7 * 24 * 3600.0
"""A week: a placement budget beyond it is a typo (an extra digit), not a plan."""
MAX_NEW_TOKENS = 2**20
"""Tokens generate mode's --validate may generate: beyond any context wsecc binds (a decode
step per token runs the tiled functional simulator); the context bounds it further."""
MAX_COPIES = 2**16
"""Systems (train mode) and replicas (infer mode): 65,536 is far beyond any cluster or wafer
(a replica needs at least one PE per kernel)."""

MAX_PINS = 4096
"""Pins a --pins file may hold: one per kernel, and a kernel graph holds hundreds (the pins'
pairwise overlap check made 100,000 pins run for minutes)."""

COMPILE = frozenset({"compile"})
MODEL = frozenset({"compile", "check", "inspect"})  # the options that bind and size a model
SIMULATE = frozenset({"compile", "simulate"})


class OptionError(WseccError):
    """A value an option does not take: "SUBJECT: REASON", the subject the option and the value
    as the user wrote them (`--seed -1`), the reason what the value must be."""

    def __init__(self, subject: str, reason: str) -> None:
        super().__init__(f"{subject}: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class Option:
    """One option's definition beside its `Options` field (whose name and default it takes).

    `kind` is the value's type (int, float, bool, str, dict for --dim); `choices` the values of
    a string option; `low`/`high` an inclusive range of a number; `nullable` that None is a
    value (a default chosen later; `auto` on the command line where `auto` is set); `file` that
    the value names a file that must exist (`check` then reads it); `check` any further check of
    the value, raising WseccError. `commands` are the subcommands with the flag; `spec` whether
    a sweep spec may set it (the options that print or write files beside the results cannot)."""

    flag: str | None  # `--time-budget`; None: API only (no flag, no spec key)
    help: str
    kind: type
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    nullable: bool = False
    auto: bool = False
    file: bool = False
    check: Callable[[Any], None] | None = None
    commands: frozenset[str] = COMPILE
    spec: bool = True
    metavar: str | None = None
    name: str = ""  # filled by option_table from the field
    default: Any = None  # likewise

    @property
    def key(self) -> str:
        """The sweep spec key: the flag without its dashes."""
        return (self.flag or "")[2:]


def _opt(default: Any, flag: str | None, help: str, kind: type, **kw: Any) -> Any:
    """An `Options` field with its `Option` as metadata (dict defaults become factories)."""
    meta = {"option": Option(flag, help, kind, **kw)}
    if isinstance(default, dict):
        return field(default_factory=dict, metadata=meta)
    return field(default=default, metadata=meta)


def _values(kind: type[enum.StrEnum]) -> tuple[str, ...]:
    return tuple(m.value for m in kind)


def _check_pins(path: str) -> None:
    """A pins file parses: a JSON object of kernel name -> {x, y, w, h} (`load_pins`)."""
    try:
        raw = json.loads(Path(path).read_bytes())
    except (ValueError, UnicodeDecodeError) as e:
        raise OptionError(f"--pins {path}", f"not valid JSON ({one_line_reason(e)})") from None
    if not isinstance(raw, dict) or not all(isinstance(r, dict) for r in raw.values()):
        raise OptionError(
            f"--pins {path}",
            'must be a JSON object {"kernel": {"x": .., "y": .., "w": .., "h": ..}}',
        )
    if len(raw) > MAX_PINS:
        raise OptionError(
            f"--pins {path}", f"{len(raw):,} pins; at most {MAX_PINS:,} (one per kernel)"
        )
    load_pins(path)


def _check_fault(kind: str) -> None:
    """A fault some mode knows (which mode: `Options.__post_init__`), grad_scale's factor a
    positive number."""
    if kind.startswith("grad_scale="):
        try:
            grad_scale_factor(kind)
        except IRError as e:
            raise OptionError(f"--inject-fault {kind}", str(e)) from None
    elif kind not in _ALL_FAULTS:
        raise OptionError(
            f"--inject-fault {kind}", f"no such fault; choose one of {', '.join(_ALL_FAULTS)}"
        )


_ALL_FAULTS = (*GENERATE_FAULTS, *TRAIN_FAULTS)


def _check_dump_dir(path: str) -> None:
    """A folder, or one that can be made (made and removed again to find out)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OptionError(f"--dump-dir {path}", "names a file, not a folder; name a folder")
    if p.exists():
        return
    made = [q for q in (p, *p.parents) if not q.exists()]
    try:
        p.mkdir(parents=True)
    except OSError as e:
        raise OptionError(f"--dump-dir {path}", f"cannot be made ({e.strerror or e})") from None
    for q in made:  # deepest first
        q.rmdir()


def _check_target(name: str) -> None:
    """A built-in target or a target file that loads (`load_target`); each name and file
    version is loaded once per process (a sweep spec makes thousands of `Options`)."""
    p = Path(name)
    st = p.stat() if p.is_file() else None
    _load_target_once(name, (st.st_mtime_ns, st.st_size) if st else None)


@functools.lru_cache(maxsize=64)
def _load_target_once(name: str, version: tuple[int, int] | None) -> None:
    load_target(name)


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _check_inputs(path: str) -> None:
    """An .npz whose arrays, unpacked, fit `tensor_budget_bytes()` together (a compressed
    npz of zeros is small on disk and any size in memory)."""
    if not zipfile.is_zipfile(path):
        raise OptionError(f"--inputs {path}", "not an .npz file (numpy.savez); write one")
    with zipfile.ZipFile(path) as z:
        unpacked = sum(i.file_size for i in z.infolist())
    budget = tensor_budget_bytes()
    if unpacked > budget:
        raise OptionError(
            f"--inputs {path}",
            f"its arrays unpack to {_size(unpacked)}, over the {_size(budget)} a tensor may "
            "take here (wsecc.frontend.bind)",
        )


@dataclass(frozen=True)
class Options:
    """Every knob of a compile; the defaults are `wsecc compile`'s. Enum fields accept their
    string values ("mixed", "l1", "cpsat"). Every value is checked against its `Option`
    (`check_value`) before the checks between options."""

    target: str = _opt(
        "wse2", "--target",
        "built-in target name or a path to a target TOML (see `wsecc targets`)",
        str, check=_check_target, commands=MODEL, metavar="NAME|FILE.toml",
    )  # fmt: skip
    mode: Mode = _opt(
        Mode.INFER, "--mode",
        "infer: forward passes, placed, routed and simulated; train: a training step "
        "(forward, backward, AdamW), costed pipelined or weight-streaming (README: what train "
        "mode models); generate: a decoder's prompt prefill and decode steps with the K/V cache "
        "in SRAM, the graph bound at --context (README: what generate mode models)",
        str, choices=_values(Mode),
    )  # fmt: skip
    batch: int | None = _opt(
        None, "--batch",
        "bind the batch dim (default 1); with --mode train, the global batch of an optimizer "
        "step (default: chosen for throughput)",
        int, low=1, high=MAX_DIM, nullable=True, commands=MODEL, metavar="N",
    )  # fmt: skip
    seq: int | None = _opt(
        None, "--seq",
        "bind the sequence dim (default: the model's context where the graph shows it — its "
        f"position table — else {DEFAULT_SEQ})",
        int, low=1, high=MAX_DIM, nullable=True, commands=MODEL, metavar="N",
    )  # fmt: skip
    dims: Mapping[str, int] = _opt(
        {}, "--dim", "bind any symbolic dim by name (repeatable)",
        dict, low=1, high=MAX_DIM, commands=MODEL, metavar="NAME=VALUE",
    )  # fmt: skip
    weights: Weights = _opt(
        Weights.CONSTANTS, "--weights",
        "where the weights are: constants, in the file; inputs, graph inputs with static shapes "
        "and no data (a weightless export, README): compiled from their shapes, numerics skipped",
        str, choices=_values(Weights), commands=MODEL,
    )  # fmt: skip
    precision: Precision = _opt(
        Precision.MIXED, "--precision", "storage/compute precision",
        str, choices=_values(Precision), commands=MODEL | SIMULATE,
    )  # fmt: skip
    chunk_tokens: int = _opt(
        DEFAULT_CHUNK_TOKENS, "--chunk-tokens",
        "tokens a kernel buffers per step; fewer need less SRAM",
        int, low=1, high=MAX_DIM, commands=MODEL, metavar="N",
    )  # fmt: skip
    placer: Placer = _opt(
        Placer.CPSAT, "--placer", "placement strategy", str, choices=_values(Placer)
    )
    time_budget_s: float = _opt(
        10.0, "--time-budget",
        "placement budget in seconds, a ceiling (the search stops earlier when it stalls): wall "
        "clock, or with --deterministic CP-SAT's deterministic time; a placement whose routed "
        "program falls short of 90%% of its balanced throughput is made once more with halos, "
        "with the budget again",
        float, low=0.0, high=MAX_TIME_BUDGET_S, metavar="S",
    )  # fmt: skip
    seed: int = _opt(0, "--seed", "placer and input seed", int, low=0, high=MAX_SEED)
    deterministic: bool = _opt(
        False, "--deterministic",
        "byte-identical placement for the same input and seed, whatever the machine's load (1 "
        "worker, deterministic-time limits; the wall clock only guards, failing the compile)",
        bool,
    )  # fmt: skip
    pins: str | None = _opt(
        None, "--pins", 'JSON {"kernel": {"x":..,"y":..,"w":..,"h":..}} of fixed regions',
        str, nullable=True, file=True, check=_check_pins, metavar="FILE",
    )  # fmt: skip
    validate: bool | None = _opt(
        None, "--validate",
        "run the tiled functional simulation and compare with onnxruntime",
        bool, nullable=True, commands=SIMULATE,
    )  # fmt: skip
    png: bool | None = _opt(
        None, "--png",
        "draw placement.png, sram.png and roofline.png (and generate mode's decode_roofline.png) "
        "into the output folder; viewer.html shows the same, interactively",
        bool, nullable=True, commands=SIMULATE,
    )  # fmt: skip
    sim: SimLevel = _opt(
        SimLevel.L1, "--sim",
        "performance model: l0 analytical, l1 event-level with contention and a trace",
        str, choices=_values(SimLevel), commands=SIMULATE,
    )  # fmt: skip
    sim_samples: int = _opt(
        4, None, "samples the event-level simulation streams", int, low=1, high=2**16
    )
    execution: Execution = _opt(
        Execution.AUTO, "--execution",
        "train mode: pipelined (everything resident), weight-streaming (one layer at a time, "
        "weights from external memory) or auto (the faster that fits; the report says why)",
        str, choices=_values(Execution),
    )  # fmt: skip
    systems: int | None = _opt(
        1, "--systems",
        "systems the compile spans. Train mode: data parallel over N systems. Infer and "
        "generate modes: a pipeline over N systems, each a contiguous group of layers "
        "(wsecc.core.partition), the embedding held by the host; auto: the fewest whose SRAM "
        "holds the weights, K/V cache and buffers (the report says which split and why)",
        int, low=1, high=MAX_COPIES, nullable=True, auto=True, metavar="N|auto",
    )  # fmt: skip
    expert_shards: int | None = _opt(
        None, "--expert-shards",
        "infer and generate modes: split every mixture-of-experts block into N shards of E/N "
        "experts each (N divides E), each with a copy of the router, summed in turn "
        "(wsecc.core.experts); default: with --systems auto or N > 1, a block whose experts "
        "do not fit one system is split into the fewest shards that do",
        int, low=1, high=MAX_COPIES, nullable=True, metavar="N",
    )  # fmt: skip
    prompt: int | None = _opt(
        None, "--prompt", "generate mode: prompt tokens (default min(128, context / 2))",
        int, low=1, high=MAX_DIM, nullable=True, metavar="P",
    )  # fmt: skip
    new_tokens: int = _opt(
        DEFAULT_NEW_TOKENS, "--new-tokens",
        "generate mode: tokens --validate generates greedily after the prompt and checks against "
        "onnxruntime step by step; prompt + new tokens - 1 must fit the context (when "
        "validation runs by default and N is the default, as many as the context leaves room "
        f"for); at most {MAX_NEW_TOKENS:,}",
        int, low=1, high=MAX_NEW_TOKENS, metavar="N",
    )  # fmt: skip
    replicas: int | None = _opt(
        None, "--replicas",
        "infer mode: N data-parallel copies of the pipeline on the wafer, sharing the host I/O; "
        "auto: as many as raise the throughput and fit (the report says what stops them). Train "
        "mode keeps one program (its data parallelism is --systems)",
        int, low=1, high=MAX_COPIES, nullable=True, auto=True, metavar="N|auto",
    )  # fmt: skip
    inputs: str | None = _opt(
        None, "--inputs",
        "model inputs for the numerics, keyed by ONNX input name (default: generated from "
        "--seed: token ids within the vocabulary, a padded attention mask)",
        str, nullable=True, file=True, check=_check_inputs, metavar="FILE.npz",
    )  # fmt: skip
    inject_fault: str | None = _opt(
        None, "--inject-fault",
        "a check of the checks: break the functional simulation on purpose (drop_partial: lose "
        "one PE's partial sum; misplace_tile: swap two PEs' weight tiles, both in the first "
        "linear kernel; in train mode layernorm_gamma breaks LayerNorm's scale gradient rule, "
        "moe_router gives a moe router no weight gradient and grad_scale=F multiplies the last linear kernel's weight gradient by F, e.g. 1.05; in "
        "generate mode rotary_position rotates each decode step's new keys with the position "
        "before their own); the numerics verdict must then FAIL",
        str, nullable=True, check=_check_fault, metavar="{" + ",".join(_ALL_FAULTS) + "}",
    )  # fmt: skip
    save_outputs: bool = _opt(
        False, "--save-outputs",
        "write inputs.npz and the simulated outputs.npz into the output folder",
        bool, spec=False,
    )  # fmt: skip
    check_each_pass: bool = _opt(
        False, "--check-each-pass",
        "after every pass, compare the reference interpreter with onnxruntime on the original "
        "file",
        bool,
    )  # fmt: skip
    explain: bool = _opt(
        False, "--explain",
        "say why each fusion did not fire where it did not (one line per unmatched anchor) and "
        "what sizing, placement and routing decided (a line each)",
        bool, spec=False,
    )  # fmt: skip
    print_after_all: bool = _opt(
        False, "--print-after-all", "print the IR after every pass", bool, spec=False
    )
    dump_dir: str | None = _opt(
        None, "--dump-dir",
        "write the IR after every pass into DIR (NN-<pass>.txt), then sizing's, placement's "
        "and routing's products (NN-sizing.json, ...)",
        str, nullable=True, check=_check_dump_dir, spec=False, metavar="DIR",
    )  # fmt: skip

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for o in option_table(type(self)):
            set_(self, o.name, check_value(o, getattr(self, o.name)))
        set_(self, "precision", parse(Precision, self.precision, "precision"))
        set_(self, "sim", parse(SimLevel, self.sim, "simulator level"))
        set_(self, "placer", parse(Placer, self.placer, "placer"))
        set_(self, "mode", parse(Mode, self.mode, "mode"))
        set_(self, "execution", parse(Execution, self.execution, "execution"))
        set_(self, "weights", parse(Weights, self.weights, "weights"))
        if self.batch is None and self.mode in (Mode.INFER, Mode.GENERATE):
            set_(self, "batch", 1)
        if self.mode is Mode.TRAIN and self.replicas not in (None, 1):
            raise WseccError(
                "--replicas is an infer-mode option; training is data parallel over --systems"
            )
        if self.mode is Mode.GENERATE and self.replicas not in (None, 1):
            raise WseccError(
                "--replicas is an infer-mode option; generate mode serves its --batch "
                "sequences from one placement"
            )
        if self.mode is not Mode.TRAIN and self.execution is not Execution.AUTO:
            raise WseccError("--execution is a train-mode option (--mode train)")
        if self.mode is Mode.TRAIN and self.systems is None:
            raise WseccError(
                "--systems auto is for infer and generate modes; train mode takes a number "
                "of data-parallel systems (--systems N)"
            )
        if self.mode is Mode.TRAIN and self.expert_shards not in (None, 1):
            raise WseccError(
                "--expert-shards is for infer and generate modes; train mode keeps each "
                "mixture-of-experts block whole"
            )
        if self.systems != 1 and self.replicas not in (None, 1):
            raise WseccError(
                "--replicas with --systems: a program over several systems keeps one copy "
                "on each; drop --replicas"
            )
        if self.mode is not Mode.GENERATE and (
            self.prompt is not None or self.new_tokens != DEFAULT_NEW_TOKENS
        ):
            raise WseccError(
                "--prompt and --new-tokens are generate-mode options (--mode generate)"
            )
        if self.prompt is not None and self.seq is not None and self.prompt >= self.seq:
            raise WseccError(
                f"the prompt ({self.prompt} tokens) must be shorter than the context "
                f"({self.seq}): raise --context or lower --prompt"
            )
        if self.mode is Mode.GENERATE and self.seq is not None:
            prompt = self.prompt if self.prompt is not None else min(128, self.seq // 2)
            if self.new_tokens != DEFAULT_NEW_TOKENS and prompt + self.new_tokens - 1 > self.seq:
                raise WseccError(
                    f"--new-tokens {self.new_tokens} after a {prompt}-token prompt needs a "
                    f"context of {prompt + self.new_tokens - 1}, the graph is bound at {self.seq} "
                    f"(--context): at most {self.seq - prompt + 1} new tokens fit"
                )
        if self.weights is Weights.INPUTS and (
            self.validate or self.inject_fault or self.check_each_pass or self.inputs
        ):
            raise WseccError(
                "--weights inputs: the weights have no values, so there are no numerics; drop "
                "--validate, --inputs, --inject-fault and --check-each-pass"
            )
        if self.placer is Placer.MANUAL and not self.pins:
            raise WseccError("placer 'manual' needs pins (--pins FILE)")
        faults = {Mode.TRAIN: TRAIN_FAULTS, Mode.GENERATE: GENERATE_FAULTS}.get(self.mode, FAULTS)
        kind = self.inject_fault
        if self.mode is Mode.TRAIN and kind is not None and kind.startswith("grad_scale="):
            try:
                grad_scale_factor(kind)
            except IRError as e:  # a factor that is no positive number
                raise WseccError(f"--inject-fault {kind}: {e}") from None
            kind = "grad_scale=F"
        if kind is not None and kind not in faults:
            raise WseccError(
                f"--inject-fault {self.inject_fault}: no such fault in {self.mode} mode; "
                "choose one of " + ", ".join(faults)
            )


SAVED_SKIPPED = frozenset({"pins", "dump_dir"})
"""Options a saved compile's report keeps that re-simulating it does not read (its placement is
saved; nothing is dumped), so a pins file since moved does not make the folder unusable."""


def saved_options(saved: Mapping[str, Any], cls: type = Options) -> dict[str, Any]:
    """The `Options` keywords of a report's "options" (`Compilation.from_outdir`): the fields
    `cls` has, less `SAVED_SKIPPED`."""
    known = {o.name for o in option_table(cls)} - SAVED_SKIPPED
    return {k: v for k, v in saved.items() if k in known}


def option_table(cls: type = Options) -> tuple[Option, ...]:
    """Every option of `cls` (Options, or a subclass adding fields), in field order, with its
    name and default filled in from the field."""
    out = []
    for f in dataclasses.fields(cls):
        o = f.metadata.get("option")
        if not isinstance(o, Option):
            raise TypeError(f"Options field {f.name} has no Option (define it with _opt)")
        factory: Any = f.default_factory
        value = factory() if f.default is dataclasses.MISSING else f.default
        out.append(dataclasses.replace(o, name=f.name, default=value))
    return tuple(out)


def option(name: str, cls: type = Options) -> Option:
    """The option whose `Options` field is `name`."""
    return next(o for o in option_table(cls) if o.name == name)


def default(name: str) -> Any:
    """The default of option `name` (what the CLI flag defaults to)."""
    return option(name).default


def choices(name: str) -> tuple[str, ...]:
    """The values a string option takes, in order."""
    return option(name).choices


def _label(o: Option) -> str:
    return o.flag or o.name


def _number(o: Option, v: Any, label: str) -> Any:
    """`v` checked as o's int or float: its type, finite, within [low, high]."""
    if o.kind is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise OptionError(f"{label} {v!r}", "must be an integer")
    elif isinstance(v, bool) or not isinstance(v, (int, float)):
        raise OptionError(f"{label} {v!r}", "must be a number")
    elif not math.isfinite(v):
        raise OptionError(f"{label} {v}", "must be a finite number")
    low = o.low if o.low is not None else -math.inf
    high = o.high if o.high is not None else math.inf
    if o.kind is float and o.low == 0.0 and not 0 < v <= high:
        raise OptionError(f"{label} {v:g}", f"must be above 0, at most {high:g}")
    if not low <= v <= high:
        span = f"from {low:g} to {high:g}" if o.kind is float else f"from {low:,.0f} to {high:,.0f}"
        raise OptionError(f"{label} {v}", f"must be {span}")
    return float(v) if o.kind is float else v


def check_value(o: Option, v: Any) -> Any:
    """`v` as option `o` takes it (a float for a float option), or OptionError in one line
    naming the option, the value and what it must be. Files are read here, so a missing or
    unreadable one fails before any work."""
    label = _label(o)
    if v is None and o.nullable:
        return None
    if o.auto and v == "auto":
        return None
    if o.auto and isinstance(v, str):
        raise OptionError(f"{label} {v!r}", "must be a positive integer or auto")
    if o.kind is dict:
        if not isinstance(v, Mapping):
            raise OptionError(f"{label} {v!r}", "must be a table of NAME = VALUE")
        return {str(k): _number(o, n, f"{label} {k}") for k, n in sorted(v.items(), key=str)}
    if o.kind is bool:
        if not isinstance(v, bool):
            raise OptionError(f"{label} {v!r}", "must be true or false")
        return v
    if o.kind in (int, float):
        return _number(o, v, label)
    if not isinstance(v, str):
        raise OptionError(f"{label} {v!r}", "must be a string")
    if o.choices and v not in o.choices:
        noun = o.name.replace("_", " ")
        raise OptionError(f"unknown {noun} {v!r}", f"choose one of {', '.join(o.choices)}")
    if o.file:
        p = Path(v)
        if not p.is_file():
            what = "a folder, not a file" if p.is_dir() else "no such file"
            raise OptionError(f"{label} {v}", f"{what}")
    if o.check is not None:
        try:
            o.check(v)
        except WseccError:
            raise
        except RecursionError:
            raise OptionError(f"{label} {v}", "nested too deeply to read") from None
        except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else e
            raise OptionError(f"{label} {v}", f"cannot be read ({one_line_reason(why)})") from None
    return v


def one_line_reason(e: object) -> str:
    text = one_line(str(e))
    return text if len(text) <= 160 else text[:157] + "..."


# ---- the command line -------------------------------------------------------------------


def argparse_type(o: Option) -> Callable[[str], Any]:
    """Parse a flag's text into o's value and check it (`check_value`); argparse turns the
    ArgumentTypeError into one usage line, exit 2."""

    def convert(text: str) -> Any:
        try:
            if o.auto and text == "auto":
                return None
            if o.kind is int:
                try:
                    value: Any = int(text)
                except ValueError:
                    raise OptionError(f"{text!r}", "expected an integer") from None
            elif o.kind is float:
                try:
                    value = float(text)
                except ValueError:
                    raise OptionError(f"{text!r}", "expected a number") from None
            else:
                value = text
            return check_value(o, value)
        except OptionError as e:
            raise argparse.ArgumentTypeError(f"{text}: {e.reason}") from None
        except WseccError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = o.kind.__name__  # argparse names it in "invalid int value"
    return convert


def _dim_pair(o: Option) -> Callable[[str], tuple[str, int]]:
    def convert(text: str) -> tuple[str, int]:
        name, sep, val = text.partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE")
        try:
            n = int(val)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: VALUE must be an integer") from None
        try:
            _number(o, n, name)
        except OptionError as e:
            raise argparse.ArgumentTypeError(f"{text}: {e.reason}") from None
        return name, n

    return convert


def add_flags(
    parser: argparse.ArgumentParser,
    command: str,
    defaults: Mapping[str, Any] | None = None,
    table: Iterable[Option] | None = None,
    notes: Mapping[str, str] | None = None,
) -> None:
    """Add the flag of every option `command` takes to `parser`, derived from its `Option`:
    type and checks, choices, default (overridden by `defaults`, e.g. None in `simulate`: the
    compile's), help with the default (and `notes`, e.g. a default another module
    decides). The parsed value lands at `args.<field name>`."""
    overrides = dict(defaults or {})
    for o in option_table() if table is None else table:
        if o.flag is None or command not in o.commands:
            continue
        d = overrides.get(o.name, o.default)
        shown = f" (default {_shown(d)})" if d not in (None, {}) and o.kind is not bool else ""
        shown = " (default auto)" if o.auto and d is None else shown
        note = (notes or {}).get(o.name, "")
        kw: dict[str, Any] = {"dest": o.name, "help": o.help + shown + note}
        if o.metavar:
            kw["metavar"] = o.metavar
        if o.kind is bool and o.nullable:
            kw.update(action=argparse.BooleanOptionalAction, default=d)
        elif o.kind is bool:
            kw.update(action="store_true", default=d)
        elif o.kind is dict:
            kw.update(action="append", type=_dim_pair(o), default=[])
        elif o.choices:
            kw.update(choices=o.choices, default=d)
        else:
            kw.update(type=argparse_type(o), default="auto" if o.auto and d is None else d)
        parser.add_argument(o.flag, **kw)


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def from_args(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """The `Options` keywords of parsed flags (those the command has), `extra` over them."""
    kw = {}
    for o in option_table():
        if not hasattr(args, o.name):
            continue
        value = getattr(args, o.name)
        if o.kind is dict:
            value = dict(value)
        if o.auto and value == "auto":
            value = None
        kw[o.name] = value
    return kw | extra


# ---- the sweep spec ---------------------------------------------------------------------


def spec_keys(table: Iterable[Option] | None = None) -> dict[str, Option]:
    """The keys a sweep spec takes (`wsecc compile`'s long options without dashes) -> option."""
    return {o.key: o for o in (option_table() if table is None else table) if o.flag and o.spec}


def toml_types(o: Option) -> tuple[type, ...]:
    """The TOML value types a spec key takes."""
    kinds: dict[type, tuple[type, ...]] = {
        int: (int,),
        float: (int, float),
        bool: (bool,),
        str: (str,),
        dict: (dict,),
    }
    return kinds[o.kind] + ((str,) if o.auto else ())
