"""The words every stage shares: precisions, simulation levels, placers and where the weights
are, as enums.

They are `StrEnum`s, so `Precision.MIXED == "mixed"` and a string from a file or a script works
wherever an enum is expected; `parse` turns a user's string into one with a one-line error."""

from __future__ import annotations

import enum
from typing import TypeVar

from wsecc.errors import WseccError


class Precision(enum.StrEnum):
    """fp32: fp32 storage and math; mixed: fp16 storage and products, fp32 accumulation; fp16:
    fp16 throughout."""

    FP32 = "fp32"
    MIXED = "mixed"
    FP16 = "fp16"


class SimLevel(enum.StrEnum):
    """l0: analytical (per-kernel bounds, stage time); l1: event-level (chunks through kernels
    and routed links)."""

    L0 = "l0"
    L1 = "l1"


class Mode(enum.StrEnum):
    """infer: forward passes, layer-pipelined; train: a training step (forward, backward, AdamW
    update), `wsecc.modes.train`; generate: token generation, a prompt's prefill then one token per
    decode step with the K/V cache resident beside its attention kernels, `wsecc.modes.generate`."""

    INFER = "infer"
    TRAIN = "train"
    GENERATE = "generate"


class Execution(enum.StrEnum):
    """How a training step runs (`wsecc.modes.train`). pipelined: every layer's forward and backward
    kernels resident on the wafer; weight-streaming: one layer at a time on the whole wafer,
    weights streamed in from external memory; auto: pipelined when it fits, else streaming."""

    AUTO = "auto"
    PIPELINED = "pipelined"
    WEIGHT_STREAMING = "weight-streaming"


class Placer(enum.StrEnum):
    GREEDY = "greedy"
    CPSAT = "cpsat"
    MANUAL = "manual"


class Weights(enum.StrEnum):
    """constants: the weights are in the file (initializers); inputs: graph inputs with static
    shapes and no data are the weights (a weightless export), compiled from their shapes with
    no numerics (`wsecc.frontend.weights`)."""

    CONSTANTS = "constants"
    INPUTS = "inputs"


E = TypeVar("E", bound=enum.StrEnum)


def parse(kind: type[E], value: str, what: str) -> E:
    """`value` as a member of `kind`; WseccError naming `what` and the choices otherwise."""
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise WseccError(f"unknown {what} {value!r}: choose one of {choices}") from None
