"""Greedy generation through the tiled functional simulator, with the K/V cache it keeps.

The fused Graph of a causal decoder is bound at seq = C, the context, and batch B. Every kernel
but attention is token-wise: its rows are (batch, token) pairs, values shaped [B, C, ...] (or
[1, C, ...], shared by the batch) or flattened [B*C, ...], the features last. So decode step t
is row t of the whole-context program, and a `Session` runs the program one window of tokens
[a, b) at a time, as the wafer runs prefill (the prompt's window [0, P)) and then decode (one
token a step, [t, t + 1)):

    buffers     every value has one full-size buffer that persists across windows; after a
                window [a, b), rows [0, b) of every token-wise buffer hold what the
                whole-context program would (rows beyond b: not yet computed).
    kernels     linear, gated_linear, lm_head, layernorm, rmsnorm, softmax, embedding,
                elementwise, generic: gather the window's rows of each token-wise input, run the
                kernel's tiled implementation (`wsecc.sim.functional`) on them, scatter its
                outputs into their buffers. A constant (or a value computed from constants and
                the non-token inputs) with a token axis, such as GPT-2's position ids [1, C],
                is sliced to the window where the kind broadcasts its inputs (embedding ids,
                elementwise and generic operands); weights are whole. Elementwise and generic
                kernels are checked once, when the session's program is built: on random
                inputs, the window [C/2, C/2 + 1) must give the whole run's row.
    attention   keeps its own cache per batch row: K (rotated) and V of every position so far,
                [B, kv heads, C, head dim]. A window's new K/V rows are rotated with the
                cos/sin rows of their own positions and appended; the window's queries, rotated
                with theirs, are scored against the cache's keys [0, b) only — never recomputed
                — in the kernel's fabric order (key j on region row j mod h, partials merged
                down the column: `AttentionRun.attend`), the causal rule and the mask (keys
                [0, b) of a key-padding mask) deciding the pairs, ALiBi's slope × key
                position added over the cache's keys [0, b).
    views       Reshape, Transpose, Slice, Expand, ... run on the full buffers (they re-address
                data, nothing is computed); each view with a token-wise input is checked once to
                be token-preserving: on random inputs, changing every other row of its inputs
                leaves row C/2 of its output as it was.
    static      a node the token ids do not reach (only constants, masks and position ids,
                which are full-size inputs fixed for the whole generation) runs once, on the
                first window.

The masked keys of the whole-context run add exact zeros to its softmax sums, so a window's rows
equal the whole run's rows up to the order BLAS sums one PE's products in (on the samples they
are bit-identical, in every precision: tests/sim/test_generate.py).

`simulate_generation` runs greedy generation on a `Session`; `generation_verdict` compares its
ids and logits with a reference's, step by step (`GenerationResult`).

What cannot be windowed fails with a SimulationError naming the node: a non-causal attention
(an encoder), a kernel or view whose output has no token axis while an input has one (a pooler,
a reduction over the sequence), a view or kernel that mixes tokens, a kind with no windowing
rule (the contest's conv kernels). A window past the context C fails too.

Faults (`wsecc.options.GENERATE_FAULTS`): the functional simulator's, and "rotary_position": in
every window after the first (decode), the new keys are rotated with the position before their
own (t - 1 for token t), a broken rotary rule prefill cannot show.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

import numpy as np

from wsecc.check.numerics import TOLERANCE, OutputError, compare, make_inputs, vocab_sizes
from wsecc.errors import SimulationError
from wsecc.ir.core import Graph, Node, Value
from wsecc.ir.rules import attention_bias, attention_keep, attention_mask_operand
from wsecc.kernels import KernelGraph, KernelKind, Sizing
from wsecc.options import FAULTS, GENERATE_FAULTS
from wsecc.passes.lower import kernel_names
from wsecc.sim.functional import (
    AttentionRun,
    FunctionalProgram,
    _one_blas_thread,
    _Step,
    compile_functional,
)
from wsecc.vocab import Precision

ROTARY_FAULT = "rotary_position"

# --- where a value holds its rows ------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where a value of `shape` holds its (batch, token) rows for batch B and context C: `flat`
    [B*C, ...], or split [batch, C, ...] with batch B or 1 (one row for every sequence)."""

    B: int
    C: int
    flat: bool

    @staticmethod
    def of(shape: Sequence[int], B: int, C: int) -> Layout | None:
        """The layout of `shape`, or None when it has no token axis."""
        if len(shape) >= 2 and shape[0] in (B, 1) and shape[1] == C:
            return Layout(B, C, flat=False)
        if len(shape) >= 1 and shape[0] == B * C:
            return Layout(B, C, flat=True)
        return None

    def rows(self, x: np.ndarray, a: int, b: int) -> np.ndarray:
        """Token rows [a, b) of x: [batch, b - a, ...], or [B*(b - a), ...] when flat."""
        if not self.flat:
            return x[:, a:b]
        split = x.reshape(self.B, self.C, *x.shape[1:])[:, a:b]
        return split.reshape(self.B * (b - a), *x.shape[1:])

    def put(self, buf: np.ndarray, rows: np.ndarray, a: int, b: int) -> None:
        """buf's token rows [a, b) = rows (shaped as `rows(buf, a, b)` returns them)."""
        if not self.flat:
            buf[:, a:b] = rows
        else:
            split = buf.reshape(self.B, self.C, *buf.shape[1:])
            split[:, a:b] = rows.reshape(self.B, b - a, *buf.shape[1:])

    def window_shape(self, shape: Sequence[int], n: int) -> tuple[int, ...]:
        if self.flat:
            return (self.B * n, *shape[1:])
        return (shape[0], n, *shape[2:])


def _token_axis(shape: Sequence[int], frame: Sequence[int], C: int) -> int | None:
    """The axis of an operand of `shape` that numpy broadcasting aligns with axis 1 (the token
    axis) of the split `frame`, when it has all C entries; None otherwise (broadcast, absent)."""
    axis = 1 - (len(frame) - len(shape))
    return axis if axis >= 0 and shape[axis] == C else None


# --- the windowed program --------------------------------------------------------------------------


class How(Enum):
    """How a step of the program runs in a window (the module docstring's table)."""

    ROWS = "rows"  # a token-wise kernel on the window's rows
    ATTENTION = "attention"  # its window's queries against its cache
    VIEW = "view"  # on the full buffers
    STATIC = "static"  # once: the token ids do not reach it


Frame = Callable[[Node], tuple[int, ...]]

_FRAMES: Mapping[KernelKind, Frame | None] = {
    KernelKind.LINEAR: None,
    KernelKind.LM_HEAD: None,
    KernelKind.GATED_LINEAR: None,
    KernelKind.MOE: None,
    KernelKind.LAYERNORM: None,
    KernelKind.RMSNORM: None,
    KernelKind.SOFTMAX: None,
    KernelKind.EMBEDDING: lambda n: n.output.type.shape[:-1],
    KernelKind.ELEMENTWISE: lambda n: n.outputs[0].type.shape,
    KernelKind.GENERIC: lambda n: n.outputs[0].type.shape,
}
"""How each kind runs on a window of rows: a token-wise input is gathered; a constant operand (or
one computed from the fixed inputs only) is sliced along the axis that broadcasting aligns with the token axis of the kind's frame (its
ids' shape for embedding, its output's for elementwise and generic), or, for a kind with no
frame (None: its other inputs are weights and parameters), passed whole. Attention has its
cache instead; a kind missing here cannot be windowed."""

_CHECKED = frozenset({KernelKind.ELEMENTWISE, KernelKind.GENERIC})
"""Kinds that run an op's reference rule, whatever it is: their window is checked once."""


@dataclass(frozen=True)
class _Windowed:
    step: _Step
    how: How
    kind: KernelKind | None
    # per argument: how the window gets it (gather by layout, slice an axis, whole)
    layouts: tuple[Layout | None, ...] = ()
    slices: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class WindowedProgram:
    """A functional program, run one window of tokens at a time (`Session`), with its context
    C and batch B and each step's windowing."""

    program: FunctionalProgram
    ids: Value  # the token ids input [B, C]
    batch: int
    context: int
    steps: tuple[_Windowed, ...]
    fault: str | None = None

    def session(self, inputs: Mapping[str, np.ndarray]) -> Session:
        """A fresh generation: `inputs` full-size (by graph input name), empty caches."""
        return Session(self, inputs)


def compile_windowed(
    fused: Graph,
    kg: KernelGraph,
    sizing: Sizing,
    precision: Precision,
    *,
    fault: str | None = None,
) -> WindowedProgram:
    """`compile_functional`, and each step's windowing (module docstring). Raises
    SimulationError naming the node for a graph that cannot be windowed."""
    if fault is not None and fault not in GENERATE_FAULTS:
        raise SimulationError(
            f"unknown fault {fault!r} (expected one of {', '.join(GENERATE_FAULTS)})"
        )
    program = compile_functional(
        fused, kg, sizing, precision, fault=fault if fault in FAULTS else None
    )
    B, C = _batch_and_context(fused)
    kinds = {k.name: k.kind for k in kg.kernels}
    names = kernel_names(fused)
    # what the token ids reach changes from window to window; the other inputs (masks, position
    # ids) are full-size arrays fixed for the whole generation
    dynamic: set[Value] = {ids_input(fused)}
    steps = []
    for step in program.steps:
        n = step.node
        kind = kinds[names[n]] if n in names else None
        if not any(v in dynamic for v in n.inputs):
            steps.append(_Windowed(step, How.STATIC, kind))
            continue
        dynamic.update(n.outputs)
        steps.append(_plan(step, kind, dynamic, B, C))
    if fault == ROTARY_FAULT and not any(
        isinstance(w.step.run, AttentionRun) and w.step.run.cos is not None for w in steps
    ):
        raise SimulationError(f"fault {fault!r} needs a rotary attention; {fused.name!r} has none")
    return WindowedProgram(program, ids_input(fused), B, C, tuple(steps), fault)


def _batch_and_context(g: Graph) -> tuple[int, int]:
    """B and C from the token ids input [B, C]."""
    ids = ids_input(g)
    if ids.type.rank != 2:
        raise SimulationError(f"token ids {ids.name!r} are {ids.type.shape}, expected [batch, seq]")
    B, C = ids.type.shape
    return B, C


def ids_input(g: Graph) -> Value:
    """The graph input of token ids: an integer input that indexes a vocabulary table and is not
    a token type, segment or position (`wsecc.check.numerics.vocab_sizes`)."""
    found = [
        v
        for v in g.inputs
        if v.name in vocab_sizes(g)
        and not any(s in v.name.lower() for s in ("type", "segment", "position"))
    ]
    if len(found) != 1:
        raise SimulationError(
            f"cannot tell the token ids among the inputs of {g.name!r} "
            f"({', '.join(v.name for v in g.inputs)}): generation needs exactly one"
        )
    return found[0]


def _plan(
    step: _Step,
    kind: KernelKind | None,
    dynamic: set[Value],
    B: int,
    C: int,
) -> _Windowed:
    n = step.node
    what = f"{n.op.name}, {kind.value} kernel" if kind else n.op.name
    where = f"node {n.name or n.outputs[0].name!r} ({what})"

    def layout(v: Value, what: str) -> Layout:
        lay = Layout.of(v.type.shape, B, C)
        if lay is None:
            raise SimulationError(
                f"cannot window {where}: {what} {v.name!r} {v.type.shape} has no token axis "
                f"(rows [batch, {C}] or [{B * C}]), so it mixes tokens"
            )
        return lay

    token_ins = [v for v in n.inputs if v in dynamic]
    outs = tuple(layout(v, "output") for v in n.outputs)
    if kind is None:  # a view: run on the full buffers, if it keeps each token's row
        lays = tuple(layout(v, "input") for v in token_ins)
        _check_view(step, dynamic, lays + outs, C, where)
        return _Windowed(step, How.VIEW, None)
    if kind is KernelKind.ATTENTION:
        return _plan_attention(step, dynamic, B, C, where)
    if kind not in _FRAMES:
        raise SimulationError(f"cannot window {where}: kind {kind.value!r} has no windowing rule")
    frame = _FRAMES[kind]
    frame_shape = frame(n) if frame is not None else None
    layouts: list[Layout | None] = []
    slices: list[int | None] = []
    for v, arg in zip(n.inputs, step.args, strict=True):
        lay, sliced = None, None
        if v in dynamic:
            lay = layout(v, "input")
        elif arg is None:  # held by the region: weights
            pass
        elif frame_shape is not None:
            if not outs[0].flat:
                sliced = _token_axis(v.type.shape, frame_shape, C)
        elif isinstance(arg, Value):  # computed from the fixed inputs, with its own rows
            lay = Layout.of(v.type.shape, B, C)
        layouts.append(lay)
        slices.append(sliced)
    w = _Windowed(step, How.ROWS, kind, tuple(layouts), tuple(slices))
    if kind in _CHECKED:
        _check_rows(w, B, C, where)
    return w


def _plan_attention(step: _Step, dynamic: set[Value], B: int, C: int, where: str) -> _Windowed:
    run = step.run
    assert isinstance(run, AttentionRun)
    a = run.attrs
    if not a["causal"]:
        raise SimulationError(
            f"cannot window {where}: it is not causal (an encoder's): a token's output depends "
            "on later tokens, so there is no cache to decode from"
        )
    layouts: list[Layout | None] = []
    for i, v in enumerate(step.node.inputs[:3]):
        lay = Layout.of(v.type.shape, B, C)
        rows = [(B * C,), (B, C)][0 if lay is not None and lay.flat else 1]
        if v not in dynamic or lay is None or v.type.shape[:-1] != rows:  # one row per token
            raise SimulationError(
                f"cannot window {where}: its {'qkv'[i]} source {v.name!r} {v.type.shape} is not "
                f"token rows [{B}, {C}, features] or [{B * C}, features]"
            )
        layouts.append(lay)
    return _Windowed(step, How.ATTENTION, KernelKind.ATTENTION, tuple(layouts))


def _probe_inputs(
    node: Node, args: Sequence[Any], rng: np.random.Generator
) -> list[np.ndarray | None]:
    """Random values for a node's computed inputs (constants as the program holds them)."""
    out: list[np.ndarray | None] = []
    for v, arg in zip(node.inputs, args, strict=True):
        if not isinstance(arg, Value):
            out.append(arg)
            continue
        dt = v.type.dtype
        if dt.is_float:
            out.append(rng.standard_normal(v.type.shape).astype(np.float32))
        elif dt.numpy == np.bool_:
            out.append(rng.random(v.type.shape) < 0.5)
        else:  # ids and indices: 0 and 1 are in range of any table with two rows
            out.append(rng.integers(0, 2, v.type.shape).astype(dt.numpy))
    return out


def _check_view(
    step: _Step, dynamic: set[Value], lays: tuple[Layout, ...], C: int, where: str
) -> None:
    """Raise unless output row j (j = C // 2) of the view depends only on its inputs' row j:
    on random inputs, replacing every other row of the token-wise inputs keeps it."""
    n, rng, j = step.node, np.random.default_rng(0), C // 2
    first = _probe_inputs(n, step.args, rng)
    second = _probe_inputs(n, step.args, rng)
    token_ins = [i for i, v in enumerate(n.inputs) if v in dynamic and v.const is None]
    for i, lay in zip(token_ins, lays, strict=False):
        x, y = first[i], second[i]
        assert x is not None and y is not None
        lay.put(y, lay.rows(x, j, j + 1), j, j + 1)
    for i in range(len(n.inputs)):
        if i not in token_ins:
            second[i] = first[i]
    outs = zip(step.run(first), step.run(second), lays[len(token_ins) :], strict=True)
    for p, q, lay in outs:
        if not np.array_equal(lay.rows(np.asarray(p), j, j + 1), lay.rows(np.asarray(q), j, j + 1)):
            raise SimulationError(
                f"cannot window {where}: it mixes tokens (row {j} of its output changes with "
                "other rows of its input)"
            )


def _check_rows(w: _Windowed, B: int, C: int, where: str) -> None:
    """Raise unless the kernel run on the window [j, j + 1) (j = C // 2) gives row j of its run
    on the whole context, on random inputs."""
    n, j = w.step.node, C // 2
    full = _probe_inputs(n, w.step.args, np.random.default_rng(0))
    try:
        whole = w.step.run(full)
        part = w.step.run(_window_args(w, full, j, j + 1))
        outs = [np.asarray(p) for p in part]
        ok = all(
            np.allclose(
                o.reshape(lay.window_shape(v.type.shape, 1)),
                lay.rows(np.asarray(f).reshape(v.type.shape), j, j + 1),
                rtol=1e-5,
                atol=1e-6,
                equal_nan=True,
            )  # fmt: skip
            for o, f, v, lay in zip(outs, whole, n.outputs, _out_layouts(n, B, C), strict=True)
        )
    except (ValueError, IndexError) as e:  # the rule refuses a window's shapes
        raise SimulationError(f"cannot window {where}: on one token's row it fails ({e})") from e
    if not ok:
        raise SimulationError(
            f"cannot window {where}: it mixes tokens (its row {j} differs when run alone)"
        )


def _out_layouts(n: Node, B: int, C: int) -> list[Layout]:
    lays = [Layout.of(v.type.shape, B, C) for v in n.outputs]
    assert all(lay is not None for lay in lays)  # _plan checked
    return lays  # type: ignore[return-value]


def _window_args(w: _Windowed, args: Sequence[Any], a: int, b: int) -> list[Any]:
    """A ROWS step's arguments for the window [a, b): token-wise inputs' rows, constants with a
    token axis sliced, the rest whole."""
    out = []
    for arg, lay, axis in zip(args, w.layouts, w.slices, strict=True):
        if lay is not None:
            arg = lay.rows(arg, a, b)
        elif axis is not None:
            arg = np.asarray(arg)[(slice(None),) * axis + (slice(a, b),)]
        out.append(arg)
    return out


# --- a generation in progress ----------------------------------------------------------------------


class Session:
    """One generation on a `WindowedProgram`: the persistent buffers and each attention's K/V
    cache. Each `step` runs the next window of tokens."""

    def __init__(self, wp: WindowedProgram, inputs: Mapping[str, np.ndarray]) -> None:
        self.program = wp
        self.length = 0  # rows [0, length) of every token-wise buffer are computed
        # copies: the windows write the token ids into their buffer
        self.env = {v: np.array(x) for v, x in wp.program.stored_inputs(inputs).items()}
        self.caches: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def step(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """Run the window of `tokens` [B, n]: they become the token ids of positions
        [length, length + n); returns the graph's outputs' rows of the window by name."""
        tokens = np.asarray(tokens)
        wp, a = self.program, self.length
        if tokens.ndim != 2 or tokens.shape[0] != wp.batch:
            raise SimulationError(f"tokens are {tokens.shape}, a window wants [{wp.batch}, n]")
        self._check_window(a, a + tokens.shape[1])
        lay, ids = Layout(wp.batch, wp.context, flat=False), wp.ids
        lay.put(self.env[ids], tokens.astype(ids.type.dtype.numpy), a, a + tokens.shape[1])
        return self._run(a + tokens.shape[1])

    def _check_window(self, a: int, b: int) -> None:
        C = self.program.context
        if not a < b <= C:
            raise SimulationError(
                f"window [{a}, {b}) is outside the context: the program is bound at seq {C}, "
                f"{a} tokens computed so far"
            )

    def _run(self, b: int) -> dict[str, np.ndarray]:
        """Compute the window [length, b); the graph's outputs' rows [length, b) by name."""
        a, env = self.length, self.env
        with _one_blas_thread():
            for i, w in enumerate(self.program.steps):
                if w.how is How.STATIC and a > 0:
                    continue
                args = [env[x] if isinstance(x, Value) else x for x in w.step.args]
                node = w.step.node
                if w.how is How.ROWS:
                    results = w.step.run(_window_args(w, args, a, b))
                    self._scatter(node, results, a, b)
                elif w.how is How.ATTENTION:
                    self._scatter(node, [self._attend(i, w, args, a, b)], a, b)
                else:
                    for v, r in zip(node.outputs, w.step.run(args), strict=True):
                        env[v] = np.asarray(r, dtype=v.type.dtype.numpy).reshape(v.type.shape)
        self.length = b
        B, C = self.program.batch, self.program.context
        out = {}
        for v in self.program.program.graph.outputs:
            full = v.const if v.const is not None else env[v]
            lay = Layout.of(v.type.shape, B, C)
            out[v.name] = lay.rows(full, a, b).copy() if lay is not None else full
        return out

    def _scatter(self, node: Node, results: Sequence[Any], a: int, b: int) -> None:
        B, C = self.program.batch, self.program.context
        for v, r in zip(node.outputs, results, strict=True):
            lay = Layout.of(v.type.shape, B, C)
            assert lay is not None  # _plan checked
            if v not in self.env:
                self.env[v] = np.zeros(v.type.shape, v.type.dtype.numpy)
            rows = np.asarray(r, dtype=v.type.dtype.numpy)
            try:
                rows = rows.reshape(lay.window_shape(v.type.shape, b - a))
            except ValueError as e:
                raise SimulationError(
                    f"node {node.name or v.name!r} gave {rows.shape} for the window [{a}, {b}) of "
                    f"{v.name!r} {v.type.shape}: it does not keep its token rows"
                ) from e
            lay.put(self.env[v], rows, a, b)

    def _attend(self, i: int, w: _Windowed, args: Sequence[Any], a: int, b: int) -> np.ndarray:
        """The window's attention output [B, n, H d]: its K/V rows appended to the cache, its
        queries scored against the cache's keys [0, b)."""
        run = w.step.run
        assert isinstance(run, AttentionRun)
        B, C, n = self.program.batch, self.program.context, b - a
        qkv = []
        for x, lay in zip(args[:3], w.layouts, strict=True):
            assert lay is not None  # _plan_attention checked
            qkv.append(lay.rows(x, a, b).reshape(B, n, -1))
        positions = np.arange(a, b)
        key_positions = positions
        if self.program.fault == ROTARY_FAULT and a > 0:
            key_positions = positions - 1  # the broken rule: rotated as the token before
        q, k, v = run.heads(qkv, positions, key_positions)
        if i not in self.caches:
            shape = (B, k.shape[1], C, k.shape[3])
            self.caches[i] = (np.zeros(shape, np.float32), np.zeros(shape, np.float32))
        k_cache, v_cache = self.caches[i]
        k_cache[:, :, a:b], v_cache[:, :, a:b] = k, v
        mask = attention_mask_operand(args, run.attrs)
        if run.attrs["mask"] == "key_padding":
            mask = mask[:, :b]
        keep = attention_keep(run.attrs, B, n, b, mask)
        bias = attention_bias(run.attrs, B, b, mask)  # ALiBi over the cache's keys [0, b)
        return run.attend(q, k_cache[:, :, :b], v_cache[:, :, :b], keep, bias)


# --- greedy generation -----------------------------------------------------------------------------


def logits_output(g: Graph) -> Value:
    """The graph's output that holds the logits: float, its last dim the vocabulary."""
    vocab = vocab_sizes(g)[ids_input(g).name]
    found = [v for v in g.outputs if v.type.dtype.is_float and v.type.shape[-1:] == (vocab,)]
    if len(found) != 1:
        raise SimulationError(
            f"cannot tell the logits among the outputs of {g.name!r}: "
            f"{len(found)} float outputs end in the vocabulary ({vocab})"
        )
    return found[0]


def generation_inputs(
    g: Graph, extra_inputs: Mapping[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """Full-size inputs [B, C, ...] for a fresh generation: the token ids zero (filled as the
    windows run), masks all ones, position ids 0 .. C - 1 (`wsecc.check.numerics.make_inputs`, not
    padded), then `extra_inputs` by name."""
    feeds = make_inputs(g, padded=False)
    ids = ids_input(g)
    feeds[ids.name] = np.zeros(ids.type.shape, ids.type.dtype.numpy)
    for name, x in (extra_inputs or {}).items():
        if name not in feeds:
            raise SimulationError(f"extra input {name!r} is not an input of {g.name!r}")
        feeds[name] = np.asarray(x)
    return feeds


def simulate_generation(
    fused: Graph,
    kg: KernelGraph,
    sizing: Sizing,
    precision: Precision,
    prompt_ids: np.ndarray,
    steps: int,
    *,
    extra_inputs: Mapping[str, np.ndarray] | None = None,
    fault: str | None = None,
    forced: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy generation of `steps` tokens after `prompt_ids` [B, P]: prefill (the window
    [0, P)), then one decode window per token. Returns generated_ids [B, steps] int64 and
    logits [B, steps, vocab] float32, logits[:, i] those whose argmax is generated_ids[:, i]
    (the first from the prompt's last position). With `forced` ids [B, steps] (teacher
    forcing), each decode window is fed forced[:, i] instead of the program's own choice, so
    every step's logits follow the forced prefix (a reference's generation) and stay comparable
    with its logits after the two choose differently. The windows must fit the context the
    graph is bound at: P + steps - 1 <= C (the last token is never fed back)."""
    wp = compile_windowed(fused, kg, sizing, precision, fault=fault)
    return generate(wp, prompt_ids, steps, extra_inputs=extra_inputs, forced=forced)


def generate(
    wp: WindowedProgram,
    prompt_ids: np.ndarray,
    steps: int,
    *,
    extra_inputs: Mapping[str, np.ndarray] | None = None,
    forced: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """`simulate_generation` on a compiled windowed program (compile once, generate many)."""
    g = wp.program.graph
    prompt = np.asarray(prompt_ids)
    B, C = wp.batch, wp.context
    if prompt.ndim != 2 or prompt.shape[0] != B or prompt.shape[1] < 1:
        raise SimulationError(f"prompt ids are {prompt.shape}, the program wants [{B}, P >= 1]")
    P = prompt.shape[1]
    if steps < 1 or P + steps - 1 > C:
        raise SimulationError(
            f"{steps} steps after a prompt of {P} need a context of {P + steps - 1}; "
            f"the program is bound at seq {C}"
        )
    if forced is not None and np.shape(forced) != (B, steps):
        raise SimulationError(f"forced ids are {np.shape(forced)}, the generation is {(B, steps)}")
    out = logits_output(g)
    session = wp.session(generation_inputs(g, extra_inputs))
    generated = np.zeros((B, steps), np.int64)
    logits = np.zeros((B, steps, out.type.shape[-1]), np.float32)
    tokens = prompt
    for i in range(steps):
        rows = session.step(tokens)[out.name]
        last = rows.reshape(B, tokens.shape[1], -1)[:, -1]
        logits[:, i] = last
        generated[:, i] = np.argmax(last, axis=-1)
        tokens = (generated if forced is None else forced)[:, i : i + 1]
    return generated, logits


# --- the verdict -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationResult:
    """Simulated greedy generation against a reference's (onnxruntime's), step by step.

    steps       each compared step's logits [B, vocab] (`wsecc.check.numerics.compare`: max abs and
                rel error, PCC, within the precision's tolerance), up to and including the first
                step whose ids differ in any sequence (after it, the prefixes differ) — or every
                step when `forced`: the simulation was fed the reference's ids (teacher
                forcing), so its prefixes are the reference's throughout
    diverged    the first step whose ids differ, or None when every id is the reference's
    forced      whether the simulation was teacher-forced on the reference's ids
    structure   optionally, the same program's generation in fp32 against the same reference,
                judged as fp32 (the infer verdict's structure check, `NumericsResult`): a broken
                rule moves fp32 logits far beyond fp32's tolerance while mixed precision's PCC
                lets it through (rotary_position: PCC 0.99998 on the rotary samples, max rel err
                7e-3 against fp32's 1e-5)

    Passes in fp32 when every id is the reference's and every step's logits are within fp32's
    tolerance; in mixed and fp16 when every id is the reference's, or every compared step's
    logits PCC is at least the precision's (0.999 in mixed: the issue's goal); and, when there
    is one, the structure check passes."""

    precision: Precision
    generated: int  # tokens per sequence
    steps: tuple[OutputError, ...]
    diverged: int | None
    reference: str = "onnxruntime greedy generation"
    fault: str | None = None
    structure: GenerationResult | None = None
    forced: bool = False

    @property
    def ids_equal(self) -> bool:
        return self.diverged is None

    @property
    def min_pcc(self) -> float:
        return min((e.pcc for e in self.steps), default=1.0)

    @property
    def precision_passed(self) -> bool:
        if self.precision == Precision.FP32:
            return self.ids_equal and all(e.passed for e in self.steps)
        pcc = TOLERANCE[self.precision].get("pcc", 1.0)
        return self.ids_equal or all(e.pcc >= pcc for e in self.steps)

    @property
    def passed(self) -> bool:
        return self.precision_passed and (self.structure is None or self.structure.passed)

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "precision": self.precision,
            "generated": self.generated,
            "ids_equal": self.ids_equal,
            "diverged_at_step": self.diverged,
            "steps": [asdict(e) for e in self.steps],
            "min_pcc": self.min_pcc,
            "passed": self.passed,
            "precision_passed": self.precision_passed,
            "structure": self.structure.to_json() if self.structure else None,
            "fault": self.fault,
            "forced": self.forced,
            "summary": self.summary(),
        }

    def summary(self) -> str:
        """One line, as `wsecc.check.numerics.verdict_line`: 'PASS: generation mixed PASS, 16 tokens,
        ids identical (worst step 3: max rel err ..., PCC ...; min PCC ...) vs onnxruntime greedy
        generation; structure fp32 PASS, 16 tokens, ...'."""
        line = f"{'PASS' if self.passed else 'FAIL'}: generation {self.precision} "
        line += f"{'PASS' if self.precision_passed else 'FAIL'}, {self._details()}"
        line += f" vs {self.reference}"
        if self.forced:
            line += " (fed its ids)"
        if self.structure:
            s = self.structure
            line += f"; structure fp32 {'PASS' if s.passed else 'FAIL'}, {s._details()}"
        return line + (f"; fault {self.fault} injected" if self.fault else "")

    def _details(self) -> str:
        text = f"{self.generated} tokens, "
        if self.ids_equal:
            text += "ids identical"
        else:
            text += f"ids diverge at step {self.diverged} of {self.generated}"
        if self.steps:
            i, w = max(enumerate(self.steps), key=lambda e: e[1].max_rel_err)
            text += f" (worst step {i}: max rel err {w.max_rel_err:.2e}, PCC {w.pcc:.6f}"
            text += f"; min PCC {self.min_pcc:.6f})"
        return text


def generation_verdict(
    sim_ids: np.ndarray,
    sim_logits: np.ndarray,
    ref_ids: np.ndarray,
    ref_logits: np.ndarray,
    precision: Precision,
    *,
    exact: tuple[np.ndarray, np.ndarray] | None = None,
    reference: str = "onnxruntime greedy generation",
    fault: str | None = None,
    forced: bool = False,
) -> GenerationResult:
    """Compare simulated ids [B, N] and logits [B, N, vocab] with the reference's, step by step
    (`GenerationResult`); `exact`, the same program's fp32 (ids, logits), for the structure
    check (ignored in fp32, where the run is its own). `forced`: both runs were fed the
    reference's ids (`simulate_generation(..., forced=ref_ids)`), so every step is compared."""
    sim_ids, ref_ids = np.asarray(sim_ids), np.asarray(ref_ids)
    if sim_ids.shape != ref_ids.shape or sim_logits.shape != ref_logits.shape:
        raise SimulationError(
            f"generation shapes differ: ids {sim_ids.shape} vs {ref_ids.shape}, "
            f"logits {sim_logits.shape} vs {ref_logits.shape}"
        )
    differs = np.flatnonzero((sim_ids != ref_ids).any(axis=0))
    diverged = int(differs[0]) if differs.size else None
    last = sim_ids.shape[1] if diverged is None or forced else diverged + 1
    errors = tuple(
        compare(f"logits[{i}]", sim_logits[:, i], ref_logits[:, i], precision) for i in range(last)
    )
    structure = None
    if exact is not None and precision != Precision.FP32:
        structure = generation_verdict(
            *exact, ref_ids, ref_logits, Precision.FP32, reference=reference, forced=forced
        )
    return GenerationResult(
        precision, sim_ids.shape[1], errors, diverged, reference, fault, structure, forced
    )
