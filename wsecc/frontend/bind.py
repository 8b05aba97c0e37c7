"""Binding symbolic dims: every symbolic input dim bound to an int (`resolve_bindings`,
`bind_dims`), or one error naming all that are left."""

from __future__ import annotations

import ast
import math
import os
import re
import resource
from collections.abc import Collection, Iterator, Mapping

import numpy as np
import onnx
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

from wsecc.errors import FrontendError
from wsecc.frontend.common import DTYPES, MAX_TENSOR_BYTES, as_stored, left_inline
from wsecc.frontend.generation import GenerationIO, generation_io

BATCH_NAMES = frozenset({"batch", "batch_size", "batchsize", "bs", "n", "b", "batch_dim"})
SEQ_NAMES = frozenset(
    {
        "sequence",
        "sequence_length",
        "sequence_len",
        "seq",
        "seq_len",
        "seq_length",
        "seqlen",
        "s",
        "length",
        "max_seq_len",
        "num_tokens",
        "tokens",
        "input_length",
    }
)


def _unbound_dims(
    model: onnx.ModelProto,
) -> Iterator[tuple[str, str, onnx.TensorShapeProto.Dimension]]:
    """(dim name, 'input[axis]', the dim) for every input dim without a positive value;
    an unnamed dim is named by its place."""
    inits = {i.name for i in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        for ax, d in enumerate(inp.type.tensor_type.shape.dim):
            if not (d.HasField("dim_value") and d.dim_value > 0):
                place = f"{inp.name}[{ax}]"
                yield d.dim_param or place, place, d


def symbolic_dims(model: onnx.ModelProto) -> dict[str, list[str]]:
    """Symbolic dim name -> the 'input[axis]' places it appears."""
    out: dict[str, list[str]] = {}
    for name, place, _ in _unbound_dims(model):
        out.setdefault(name, []).append(place)
    return out


def resolve_bindings(
    model: onnx.ModelProto,
    batch: int | None = None,
    seq: int | None = None,
    dims: Mapping[str, int] | None = None,
    unallocated: Collection[str] = (),
) -> dict[str, int]:
    """Map every symbolic input dim to a value, or raise one error naming all unbound dims.
    `unallocated` names inputs never materialized (weights without data, `--weights inputs`):
    their size is not held against the tensor budget.

    A generation graph's past length is 0 (`wsecc.frontend.generation`); a dim named by an
    expression of other dims (`past_sequence_length + sequence_length`) is its value; in a
    generation graph, the attention mask's key length under a name of its own is the whole
    context, past (0) + sequence."""
    dims = dict(dims or {})
    gen = generation_io(model)
    past = gen.past_dim if gen else None
    if past is not None and dims.get(past, 0) != 0:
        raise FrontendError(
            f"--dim {past}={dims[past]}: a generation graph's past length is bound to 0 (it "
            f"imports as the forward pass over the whole context); drop --dim {past}"
        )
    known = symbolic_dims(model)
    unknown = sorted(set(dims) - set(known))
    if unknown:
        have = ", ".join(known) if known else "none: every input's shape is fixed"
        raise FrontendError(
            f"--dim {unknown[0]}={dims[unknown[0]]}: the file has no symbolic input dim named "
            f"{unknown[0]!r} (its symbolic dims: {have}); check the name or drop it"
        )
    context = _mask_context_dim(model, gen)
    bound: dict[str, int] = {}
    unbound: list[str] = []
    expressions: dict[str, list[str]] = {}
    for name, places in known.items():
        key = name.lower()
        if name == past:
            bound[name] = 0
        elif _EXPRESSION.search(name):
            expressions[name] = places
        elif name in dims:
            bound[name] = dims[name]
        elif batch is not None and key in BATCH_NAMES:
            bound[name] = batch
        elif seq is not None and key in SEQ_NAMES:
            bound[name] = seq
        elif name == context and seq is not None:
            bound[name] = seq
        else:
            unbound.append(f"{name} (at {', '.join(places)})")
    for name, places in expressions.items():
        value = _evaluate_dim(name, bound)
        if value is not None and name in dims and dims[name] != value:
            raise FrontendError(
                f"--dim {name!r}={dims[name]} disagrees with the dims it names ({value}); "
                "drop it: a dim named by an expression of others is bound to its value"
            )
        if value is None and name in dims:
            value = dims[name]
        if value is None:
            unbound.append(f"{name} (at {', '.join(places)})")
        else:
            bound[name] = value
    if unbound:
        raise FrontendError(
            "unbound dims: " + "; ".join(unbound) + " — bind each with --dim NAME=VALUE "
            "(--batch N and --seq N bind only the usual batch and sequence names)"
        )
    for name, v in bound.items():
        if not isinstance(v, int) or v <= 0 and name != past:
            raise FrontendError(f"dim {name} must be bound to a positive integer, got {v!r}")
    _check_input_sizes(model, bound, unallocated)
    return bound


_EXPRESSION = re.compile(r"[-+*/()]")


def _evaluate_dim(name: str, bound: Mapping[str, int]) -> int | None:
    """The value of a dim named by an integer expression of other dims' names
    ('past_sequence_length + sequence_length'), or None when it is not one or names a dim
    that is not bound."""
    try:
        tree = ast.parse(name.strip(), mode="eval")
    except SyntaxError:
        return None
    ops = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__}
    ops[ast.FloorDiv] = ops[ast.Div] = int.__floordiv__

    def value(node: ast.expr) -> int | None:
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            a, b = value(node.left), value(node.right)
            if a is None or b is None or (b == 0 and isinstance(node.op, ast.Div | ast.FloorDiv)):
                return None
            return ops[type(node.op)](a, b)
        return None

    return value(tree.body)


def _mask_context_dim(model: onnx.ModelProto, gen: GenerationIO | None) -> str | None:
    """In a generation graph, the name of the attention mask's last dim (the keys: past +
    sequence) when it is a plain name; None otherwise."""
    if gen is None or gen.attention_mask is None:
        return None
    mask = next(i for i in model.graph.input if i.name == gen.attention_mask)
    dims = mask.type.tensor_type.shape.dim
    if len(dims) != 2 or dims[1].HasField("dim_value") or not dims[1].dim_param:
        return None
    return dims[1].dim_param


def binding_sources(
    bindings: Mapping[str, int],
    dims: Collection[str],
    seq_source: str,
    gen: GenerationIO | None,
) -> dict[str, str]:
    """Where each bound dim's value came from: --dim, --batch, --seq (or the position table),
    the empty past, an expression of the others, the whole context (past + sequence)."""
    out = {}
    for k in bindings:
        if gen is not None and k == gen.past_dim:
            out[k] = "empty past"
        elif k in dims:
            out[k] = "--dim"
        elif k.lower() in SEQ_NAMES:
            out[k] = seq_source
        elif k.lower() in BATCH_NAMES:
            out[k] = "--batch"
        else:
            out[k] = "past + sequence" if gen is not None else "expression"
    return out


MEMORY_SHARE = 32
"""One tensor wsecc materializes (an input, a folded constant such as the int64 positions a
Range makes from the sequence dim) may take at most 1/32 of the memory this process may use:
folding keeps several such arrays alive at once (the positions, their casts, offsets and
masks; measured: `--seq 300000000` on llama_dynamo, 2.2 GiB of positions, peaked at 4.9 GB
before its unsupported ops stopped it), and the OOM killer must never be the one to stop a
compile (issue 35: `--seq 2147483648` was killed at 24 GB)."""


def memory_bytes() -> int:
    """The memory this process may use: the machine's physical memory, or less where a cgroup
    (`memory.max`) or an address-space limit (`ulimit -v`, `prlimit --as`) caps it."""
    limits = [os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(soft)
    try:
        text = open("/sys/fs/cgroup/memory.max").read().strip()  # noqa: SIM115
        if text.isdigit():
            limits.append(int(text))
    except OSError:
        pass
    return min(limits)


def tensor_budget_bytes() -> int:
    """What one materialized tensor may take here: MAX_TENSOR_BYTES, or 1/MEMORY_SHARE of
    `memory_bytes()` where that is less."""
    return min(MAX_TENSOR_BYTES, memory_bytes() // MEMORY_SHARE)


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _too_big(what: str, nbytes: int) -> FrontendError:
    memory = memory_bytes()
    return FrontendError(
        f"{what} ({_gib(nbytes)}) is over the {_gib(tensor_budget_bytes())} one tensor may take "
        f"here (1/{MEMORY_SHARE} of the {_gib(memory)} this process may use, at most "
        f"{MAX_TENSOR_BYTES >> 30} GiB); bind smaller dims (--batch, --seq, --dim)"
    )


def _check_input_sizes(
    model: onnx.ModelProto, bound: Mapping[str, int], unallocated: Collection[str] = ()
) -> None:
    """No input, and no int64 vector as long as a bound dim (the positions a Range makes from
    it), may exceed `tensor_budget_bytes()` once the dims are bound: checked before anything is
    allocated, and before a dim overflows int64."""
    budget = tensor_budget_bytes()
    for name, v in bound.items():
        if v * 8 > budget:
            raise _too_big(f"dim {name} = {v:,}: a vector of as many int64 positions", v * 8)
    skip = {i.name for i in model.graph.initializer} | set(unallocated)
    for inp in model.graph.input:
        if inp.name in skip:
            continue
        t = inp.type.tensor_type
        shape = [
            d.dim_value
            if d.HasField("dim_value") and d.dim_value > 0
            else bound[d.dim_param or f"{inp.name}[{ax}]"]  # named as in `_unbound_dims`
            for ax, d in enumerate(t.shape.dim)
        ]
        item = DTYPES[t.elem_type].itemsize if t.elem_type in DTYPES else 1
        if math.prod(shape) * item > budget:
            raise _too_big(f"input {inp.name!r} of shape {shape}", math.prod(shape) * item)


def bind_dims(model: onnx.ModelProto, bindings: Mapping[str, int]) -> onnx.ModelProto:
    """Make `model`'s input dims static, in place (no copy of the weights), and return it.

    Stale value_info and output shapes are dropped; initializers that old exporters also list
    as graph inputs become plain constants."""
    m = model
    for name, _, d in list(_unbound_dims(m)):
        d.Clear()
        d.dim_value = bindings[name]
    inits = {i.name for i in m.graph.initializer}
    del m.graph.value_info[:]
    for out in m.graph.output:
        out.type.tensor_type.ClearField("shape")
    keep = [i for i in m.graph.input if i.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return m


# ================================================================ folding


DEFAULT_SEQ = 128
"""The sequence length bound when neither --seq nor the graph's position table says one."""

_INDEX_VIEWS = frozenset({"Cast", "Unsqueeze", "Squeeze", "Reshape", "Identity", "Flatten"})


def position_table_rows(
    model: onnx.ModelProto, weights: Collection[str] = ()
) -> tuple[int, str] | None:
    """Rows of the model's learned position table and the name of the indices it is read
    with, or None.

    A position table is a 2-D float initializer (or one of the graph inputs named in `weights`:
    `--weights inputs`) read by a Gather (axis 0) whose indices are computed in the graph (a
    Range, a slice of a constant buffer, an offset) or come from an input named like position
    ids; a table read with a graph input's own ids (tokens, token types) is not one; or an
    onnxruntime EmbedLayerNormalization's position_embedding (its position_ids input, or "").
    With several, the one with the most rows."""
    floats = (TensorProto.FLOAT, TensorProto.FLOAT16)
    tables = {
        i.name: int(i.dims[0])
        for i in model.graph.initializer
        if len(i.dims) == 2 and i.data_type in floats
    }
    for i in model.graph.input:
        dims = i.type.tensor_type.shape.dim
        if i.name in weights and len(dims) == 2 and i.type.tensor_type.elem_type in floats:
            tables[i.name] = int(dims[0].dim_value)
    inputs = {i.name for i in model.graph.input} - {i.name for i in model.graph.initializer}
    inputs -= set(weights)
    producer = {o: n for n in model.graph.node for o in n.output}

    def index_source(name: str) -> str | None:
        """The graph input the indices are, seen through views; None if computed."""
        while name not in inputs:
            n = producer.get(name)
            if n is None or n.op_type not in _INDEX_VIEWS or not n.input:
                return None
            name = n.input[0]
        return name

    found = []
    for n in model.graph.node:
        if n.op_type == "EmbedLayerNormalization" and len(n.input) > 3 and n.input[3] in tables:
            ids = n.input[8] if len(n.input) > 8 else ""  # its position_ids, if it has them
            found.append((tables[n.input[3]], ids))
            continue
        if n.op_type != "Gather" or len(n.input) < 2 or n.input[0] not in tables:
            continue
        if any(a.name == "axis" and a.i != 0 for a in n.attribute):
            continue
        source = index_source(n.input[1])
        if source is None or "position" in source.lower():
            found.append((tables[n.input[0]], n.input[1]))
    return max(found) if found else None


TOKEN_ID = 5
"""A token id no exporter pads with (BERT pads with 0, RoBERTa and MPNet with 1, GPT-2-like
vocabularies with one of their last ids): positions are counted over real tokens."""


def _largest_position(model: onnx.ModelProto, indices: str, seq: int) -> int | None:
    """The largest index the position lookup reads for one sample of `seq` tokens, all of
    them attended: the subgraph computing `indices` run by onnx's reference evaluator on a
    mask of ones, position ids 0..seq-1 (what a generation graph's are bound to) and token ids
    of `TOKEN_ID` (RoBERTa and MPNet number the tokens that are not their padding id, 1, from
    padding id + 1). None when it cannot be run."""
    try:
        g = model.graph
        producer = {o: n for n in g.node for o in n.output}
        nodes, todo, seen = [], [indices], set()
        while todo:  # the nodes `indices` depends on
            name = todo.pop()
            n = producer.get(name)
            if n is None or id(n) in seen:
                continue
            seen.add(id(n))
            nodes.append(n)
            todo.extend(n.input)
        used = {i for n in nodes for i in n.input}
        order = {id(n): k for k, n in enumerate(g.node)}
        sub_graph = onnx.helper.make_graph(
            sorted(nodes, key=lambda n: order[id(n)]),
            "positions",
            [i for i in g.input if i.name in used],
            [onnx.helper.make_tensor_value_info(indices, TensorProto.INT64, None)],
            _small_initializers(g, used),
        )
        sub = onnx.helper.make_model(sub_graph, opset_imports=model.opset_import)
        feeds = {}
        for i in sub.graph.input:
            rank = len(i.type.tensor_type.shape.dim)
            shape = (1, seq)[:rank] + (1,) * max(0, rank - 2)
            dtype = onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
            name = i.name.lower()
            feeds[i.name] = np.full(shape, 1 if "mask" in name else TOKEN_ID, dtype)
            if "position" in name and rank:  # position ids: 0..seq-1, as bound
                feeds[i.name] = np.broadcast_to(np.arange(shape[-1], dtype=dtype), shape)
        (out,) = ReferenceEvaluator(sub).run(None, feeds)
        return int(np.max(out))
    except Exception:  # an exotic subgraph: fall back to the table's rows
        return None


def _small_initializers(g: onnx.GraphProto, names: Collection[str]) -> list[TensorProto]:
    """The initializers of `g` named in `names` that take under 1 MiB as onnx.load reads them,
    each as onnx.load gives it (`as_stored`: an inline weight that load_model left in the file
    with its bytes read in), so that the reference evaluator gets what a whole parse gave it."""
    out = []
    for t in g.initializer:
        if t.name not in names:
            continue
        if left_inline(t):
            if _stored_bytes(t) >= 1 << 20:
                continue  # parsed whole, its ByteSize is larger still
            t = as_stored(t)
        if t.ByteSize() < 1 << 20:
            out.append(t)
    return out


def _stored_bytes(t: TensorProto) -> int:
    return math.prod(t.dims) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize


def default_seq(model: onnx.ModelProto, weights: Collection[str] = ()) -> tuple[int, str]:
    """The sequence length to bind when the user gave none, and where it came from: the
    position table's rows, less the offset its lookup adds (OPT reads row position + 2,
    RoBERTa position + padding index + 1), else DEFAULT_SEQ. `weights`: graph inputs that are
    weights (`position_table_rows`)."""
    table = position_table_rows(model, weights)
    if table is None:
        return DEFAULT_SEQ, "default"
    rows, indices = table
    largest = _largest_position(model, indices, rows) if indices else None
    if largest is not None and largest >= rows:
        return rows - (largest - rows + 1), "position table"
    return rows, "position table"
