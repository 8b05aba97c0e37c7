"""Generation graphs: a decoder exported with past key/value inputs imports as the whole-context
causal forward pass it is when its past is empty.

What the exporters write (optimum's `text-generation-with-past`, its merged decoder, onnxruntime's
old GPT-2 exports): per layer a past key and value `[batch, kv_heads, past, head_dim]` (or both
stacked, `[2, batch, heads, past, head_dim]`), a `present` output for each (the past with this
step's keys appended), an `attention_mask` over `past + sequence` keys, often `position_ids`, and
in a merged decoder a bool `use_cache_branch` whose If picks the with-past or the no-cache graph.

`generation_io` reads that interface into a `GenerationIO` (or raises one line when the past
inputs disagree); `bind_generation` then binds it as a fresh prompt:
- the past length is 0: each past input becomes an empty constant, so every Concat(past, k) and
  the mask's key offset fold away (onnxscript's folder drops zero-length Concat operands);
- `position_ids` is `arange(sequence)` in every batch row: a prompt without left padding, which
  is what lets the folder compute rotary cos/sin tables exactly as in a no-past export;
- `use_cache_branch` is False, so the If folds to its no-cache branch;
- the `present*` outputs are dropped: on the wafer the K/V cache is the attention kernels' own
  state, and the logits are the output.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from wsecc.errors import FrontendError

STACKED = "[2, B, H, P, d]"
SPLIT = "[B, H, P, d]"
PAST_AXIS = {SPLIT: 2, STACKED: 3}
"""The past-length axis of a past input in each layout."""


@dataclass(frozen=True)
class CacheLayer:
    """One layer's cache: its past inputs (key then value, or the one stacked input) and the
    present outputs that return them grown by this step's keys (same order; empty when the file
    has no matching output), with the K/V heads and head dim they hold."""

    past: tuple[str, ...]
    present: tuple[str, ...]
    heads: int
    head_dim: int


@dataclass(frozen=True)
class GenerationIO:
    """The generation interface of a decoder exported with past key/values, and what the
    frontend bound it to.

    `layout` is SPLIT (a key and a value input per layer) or STACKED; `past_dim` the name of the
    past-length dim every past input shares; `input_ids`, `attention_mask`, `position_ids`,
    `use_cache_branch` the names of those graph inputs (None when the file has none); `bound`
    what each name was bound to, in words ("0", "arange(16) per row", "False")."""

    layout: str
    layers: tuple[CacheLayer, ...]
    past_dim: str
    input_ids: str | None = None
    attention_mask: str | None = None
    position_ids: str | None = None
    use_cache_branch: str | None = None
    bound: dict[str, str] = field(default_factory=dict)

    @property
    def past_inputs(self) -> tuple[str, ...]:
        return tuple(name for layer in self.layers for name in layer.past)

    @property
    def present_outputs(self) -> tuple[str, ...]:
        return tuple(name for layer in self.layers for name in layer.present)

    def past_shape(self, layer: CacheLayer, batch: int, length: int = 0) -> tuple[int, ...]:
        """The shape of `layer`'s past inputs for `batch` sequences of `length` past tokens."""
        shape = (batch, layer.heads, length, layer.head_dim)
        return (2, *shape) if self.layout == STACKED else shape

    def describe(self) -> str:
        """'past_sequence_length=0 (empty past), position_ids=arange(16) per row, ...'."""
        return ", ".join(f"{k}={v}" for k, v in self.bound.items())


def _dims(vi: onnx.ValueInfoProto) -> list[int | str]:
    """A value's dims: ints where static (> 0 or an explicit 0), names where symbolic, '?'."""
    out: list[int | str] = []
    for d in vi.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        else:
            out.append(d.dim_param or "?")
    return out


def _is_past(vi: onnx.ValueInfoProto) -> bool:
    """A past key/value input: a float tensor named past... or ...cache... with key/value
    (not `use_cache_branch`, not an integer `cache_position`)."""
    name = vi.name.lower()
    floats = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)
    named = "past" in name or ("cache" in name and ("key" in name or "value" in name))
    return named and vi.type.tensor_type.elem_type in floats


def _present_name(past: str) -> str:
    return past.replace("past_key_values", "present").replace("past", "present")


def generation_io(model: onnx.ModelProto) -> GenerationIO | None:
    """The generation interface of `model`, or None when it has no past key/value inputs.
    Raises FrontendError (one line) when the past inputs have a layout wsecc does not read or
    disagree on the past length."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    inputs = [i for i in g.input if i.name not in inits]
    past = [i for i in inputs if _is_past(i)]
    if not past:
        return None
    shapes = {i.name: _dims(i) for i in past}
    layouts = set()
    for i in past:
        s = shapes[i.name]
        if len(s) == 4:
            layouts.add(SPLIT)
        elif len(s) == 5 and s[0] == 2:
            layouts.add(STACKED)
        else:
            raise FrontendError(
                f"past input {i.name!r} has shape {s}: wsecc reads past key/values as "
                f"{SPLIT} or stacked {STACKED} (batch, heads, past length, head dim)"
            )
    if len(layouts) > 1:
        raise FrontendError(
            f"past inputs mix the layouts {SPLIT} and {STACKED}: every past key/value must "
            "have one layout"
        )
    layout = layouts.pop()
    axis = PAST_AXIS[layout]
    past_dims = {i.name: shapes[i.name][axis] for i in past}
    past_dim = _one_past_dim(past_dims)
    outputs = [o.name for o in g.output]
    layers = _layers([i.name for i in past], layout, shapes, outputs)
    rest = [i for i in inputs if not _is_past(i)]

    def named(*words: str) -> str | None:
        return next((i.name for i in rest if any(w in i.name.lower() for w in words)), None)

    use_cache = next((i.name for i in rest if i.name.lower() == "use_cache_branch"), None)
    others = [i.name for i in rest if i.name not in (use_cache,)]
    mask, positions = named("mask"), named("position")
    ids = next((n for n in others if n not in (mask, positions)), None)
    return GenerationIO(layout, layers, past_dim, ids, mask, positions, use_cache)


def _one_past_dim(past_dims: Mapping[str, int | str]) -> str:
    """The one symbolic past length every past input shares, or a one-line error."""
    fixed = {n: d for n, d in past_dims.items() if isinstance(d, int)}
    if fixed:
        name, d = next(iter(fixed.items()))
        raise FrontendError(
            f"past input {name!r} has a fixed past length of {d}: wsecc imports a generation "
            "graph with an empty past (length 0, a fresh prompt); export it with a dynamic past "
            "length"
        )
    unnamed = [n for n, d in past_dims.items() if d == "?"]
    if unnamed:
        raise FrontendError(
            f"past input {unnamed[0]!r} has an unnamed past length: wsecc binds a named "
            "past-length dim to 0; name it (the past inputs share one name)"
        )
    names = sorted({str(d) for d in past_dims.values()})
    if len(names) > 1:
        where = ", ".join(f"{n} has {d!r}" for n, d in past_dims.items())
        raise FrontendError(
            f"past inputs disagree on the past length ({where}): every past key/value must "
            "share one named past-length dim"
        )
    return names[0]


def _layers(
    past: list[str], layout: str, shapes: Mapping[str, list[int | str]], outputs: list[str]
) -> tuple[CacheLayer, ...]:
    """Past inputs grouped by layer (key with value, by name, else in order) and matched with
    their present outputs (by name, else in order)."""
    groups: list[tuple[str, ...]]
    if layout == STACKED:
        groups = [(p,) for p in past]
    else:
        groups = []
        left = list(past)
        while left:
            key = left.pop(0)
            value = key.replace("key", "value") if "key" in key else ""  # "": no such name
            if value not in left:
                if not left:
                    raise FrontendError(
                        f"past input {key!r} has no value to pair with: a {SPLIT} past needs "
                        "a key and a value input per layer"
                    )
                value = left[0]
            left.remove(value)
            groups.append((key, value))
    names = [_present_name(p) for p in past]
    presents = [o for o in outputs if "present" in o.lower()]
    if all(n in outputs for n in names):
        match = dict(zip(past, names, strict=True))
    elif len(presents) == len(past):
        match = dict(zip(past, presents, strict=True))
    else:
        match = {}
    layers = []
    for group in groups:
        s = shapes[group[0]]
        heads, head_dim = s[-3], s[-1]
        if not (isinstance(heads, int) and isinstance(head_dim, int)):
            raise FrontendError(
                f"past input {group[0]!r} has shape {s}: its heads and head dim must be fixed"
            )
        present = tuple(match[p] for p in group) if match else ()
        layers.append(CacheLayer(group, present, heads, head_dim))
    return tuple(layers)


# ================================================================ binding


def bind_generation(model: onnx.ModelProto, gen: GenerationIO) -> GenerationIO:
    """Bind `model`'s generation inputs as a fresh prompt, in place (module docstring): its
    dims must be bound already (`bind_dims`, the past length to 0). Returns `gen` with what was
    bound in `bound`."""
    g = model.graph
    by_name = {i.name: i for i in g.input}
    consts: list[onnx.NodeProto] = []
    bound = {gen.past_dim: "0 (empty past)"}
    for name in gen.past_inputs:
        vi = by_name[name]
        shape = [int(d) for d in _dims(vi)]
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        consts.append(_constant(name, np.zeros(shape, dtype)))
    if gen.position_ids is not None:
        vi = by_name[gen.position_ids]
        shape = [int(d) for d in _dims(vi)]
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        seq = shape[-1]
        # arange(seq) as one row, expanded to every row: the folder sees the arange and the
        # constant stays small at any batch
        row = np.arange(seq, dtype=dtype).reshape([1] * (len(shape) - 1) + [seq])
        consts.append(_constant(f"{gen.position_ids}__row", row))
        consts.append(_constant(f"{gen.position_ids}__shape", np.array(shape, np.int64)))
        consts.append(
            helper.make_node(
                "Expand",
                [f"{gen.position_ids}__row", f"{gen.position_ids}__shape"],
                [gen.position_ids],
                name=f"{gen.position_ids}__arange",
            )
        )
        bound[gen.position_ids] = f"arange({seq}) per row"
    if gen.use_cache_branch is not None:
        vi = by_name[gen.use_cache_branch]
        shape = [int(d) for d in _dims(vi)]
        consts.append(_constant(gen.use_cache_branch, np.zeros(shape, bool)))
        bound[gen.use_cache_branch] = "False"
    taken = set(gen.past_inputs) | {gen.position_ids, gen.use_cache_branch}
    keep_inputs = [i for i in g.input if i.name not in taken]
    del g.input[:]
    g.input.extend(keep_inputs)
    dropped = set(gen.present_outputs) or {o.name for o in g.output if "present" in o.name.lower()}
    keep_outputs = [o for o in g.output if o.name not in dropped]
    if not keep_outputs:
        raise FrontendError(
            "the graph's only outputs are present key/values: wsecc compiles a decoder's "
            "logits (or hidden states), with the K/V cache kept on the wafer"
        )
    del g.output[:]
    g.output.extend(keep_outputs)
    nodes = consts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    return GenerationIO(
        gen.layout, gen.layers, gen.past_dim, gen.input_ids, gen.attention_mask,
        gen.position_ids, gen.use_cache_branch, bound,
    )  # fmt: skip


def _constant(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node(
        "Constant",
        [],
        [name],
        name=f"{re.sub(r'[^0-9A-Za-z_.]', '_', name)}__bound",
        value=numpy_helper.from_array(value, name),
    )
