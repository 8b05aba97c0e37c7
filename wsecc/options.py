"""`Options`: every knob of a compile, the one place its choices and defaults are written.

`wsecc compile`'s flags take their choices and defaults from here (`default`, `choices`), and so
do `wsecc.compile(...)`'s keywords, so the two cannot drift apart."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wsecc.errors import WseccError
from wsecc.kernels.costs import DEFAULT_CHUNK_TOKENS
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
TRAIN_FAULTS = ("layernorm_gamma", "grad_scale=F")
"""Faults for train mode's gradient check (`wsecc.ir.grad`): layernorm_gamma breaks the gradient
rule of LayerNorm's scale; grad_scale=F (F a positive number, e.g. grad_scale=1.05) multiplies
the last Linear's weight gradient by F, a wrong scale."""


@dataclass(frozen=True)
class Options:
    """Every knob of a compile; the defaults are `wsecc compile`'s. Enum fields accept their
    string values ("mixed", "l1", "cpsat")."""

    target: str = "wse2"
    mode: Mode = Mode.INFER
    batch: int | None = None  # None: 1 in infer mode; in train mode the global batch is chosen
    seq: int | None = None  # None: the model's context where the graph shows it, else 128
    dims: Mapping[str, int] = field(default_factory=dict)
    weights: Weights = Weights.CONSTANTS  # inputs: a weightless export, compiled from shapes
    precision: Precision = Precision.MIXED
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    placer: Placer = Placer.CPSAT
    time_budget_s: float = 10.0  # CP-SAT's wall-clock budget for placement, seconds
    seed: int = 0
    deterministic: bool = False
    pins: str | None = None
    validate: bool | None = None  # None: on when the model is small enough to run quickly
    sim: SimLevel = SimLevel.L1
    sim_samples: int = 4
    execution: Execution = Execution.AUTO  # train mode: pipelined, weight-streaming or auto
    systems: int = 1  # train mode: data parallel over this many systems
    prompt: int | None = None  # generate mode: prompt tokens (None: min(128, context / 2))
    new_tokens: int = (
        DEFAULT_NEW_TOKENS  # generate mode: tokens --validate generates after the prompt
    )
    # infer mode: data-parallel copies on the wafer (`wsecc.replicas`); None or "auto": as many
    # as raise the throughput and fit
    replicas: int | None = None
    inputs: str | None = None  # an .npz of model inputs for the numerics
    inject_fault: str | None = None  # a check of the checks: break the functional simulation
    save_outputs: bool = False
    check_each_pass: bool = False
    explain: bool = False  # report why each fusion did not fire where it did not
    print_after_all: bool = False
    dump_dir: str | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "precision", parse(Precision, self.precision, "precision"))
        set_(self, "sim", parse(SimLevel, self.sim, "simulator level"))
        set_(self, "placer", parse(Placer, self.placer, "placer"))
        set_(self, "mode", parse(Mode, self.mode, "mode"))
        set_(self, "execution", parse(Execution, self.execution, "execution"))
        if self.batch is None and self.mode in (Mode.INFER, Mode.GENERATE):
            set_(self, "batch", 1)
        if self.batch is not None and self.batch < 1:
            raise WseccError(f"batch must be at least 1, got {self.batch}")
        if self.systems < 1:
            raise WseccError(f"systems must be at least 1, got {self.systems}")
        if self.replicas == "auto":
            set_(self, "replicas", None)
        if self.replicas is not None and (
            isinstance(self.replicas, bool)
            or not isinstance(self.replicas, int)
            or self.replicas < 1
        ):
            raise WseccError(
                f"replicas must be a positive integer or 'auto', got {self.replicas!r}"
            )
        if self.mode is Mode.TRAIN and self.replicas not in (None, 1):
            raise WseccError(
                "--replicas is an infer-mode option; training is data parallel over --systems"
            )
        if self.mode is Mode.GENERATE and self.replicas not in (None, 1):
            raise WseccError(
                "--replicas is an infer-mode option; generate mode serves its --batch "
                "sequences from one placement"
            )
        if self.mode is not Mode.TRAIN and (
            self.systems != 1 or self.execution is not Execution.AUTO
        ):
            raise WseccError("--execution and --systems are train-mode options (--mode train)")
        if self.mode is not Mode.GENERATE and (
            self.prompt is not None or self.new_tokens != DEFAULT_NEW_TOKENS
        ):
            raise WseccError(
                "--prompt and --new-tokens are generate-mode options (--mode generate)"
            )
        if self.prompt is not None and self.prompt < 1:
            raise WseccError(f"prompt must be at least 1 token, got {self.prompt}")
        if self.new_tokens < 1:
            raise WseccError(f"new tokens must be at least 1, got {self.new_tokens}")
        if self.prompt is not None and self.seq is not None and self.prompt >= self.seq:
            raise WseccError(
                f"the prompt ({self.prompt} tokens) must be shorter than the context "
                f"({self.seq}): raise --context or lower --prompt"
            )
        set_(self, "weights", parse(Weights, self.weights, "weights"))
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
            from wsecc.ir.core import IRError
            from wsecc.ir.grad import grad_scale_factor

            try:
                grad_scale_factor(kind)
            except IRError as e:  # a factor that is no positive number
                raise WseccError(str(e)) from None
            kind = "grad_scale=F"
        if kind is not None and kind not in faults:
            raise WseccError(
                f"unknown fault {self.inject_fault!r} in {self.mode} mode: choose one of "
                + ", ".join(faults)
            )
        if self.time_budget_s <= 0:
            raise WseccError(f"time budget must be positive, got {self.time_budget_s}")


_FIELDS = {f.name: f for f in dataclasses.fields(Options)}


def default(name: str) -> Any:
    """The default of option `name` (what the CLI flag defaults to)."""
    f = _FIELDS[name]
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def choices(name: str) -> tuple[str, ...]:
    """The values an enum option takes, in order."""
    kind = Options.__annotations__[name]
    enums = {
        "Precision": Precision,
        "SimLevel": SimLevel,
        "Placer": Placer,
        "Mode": Mode,
        "Execution": Execution,
        "Weights": Weights,
    }
    e: type[enum.StrEnum] = enums[kind]
    return tuple(m.value for m in e)
