"""Broken and hostile ONNX files made from the committed samples, for `test_hostile.py`.

    cases = generate_cases(seed=0)       # >= 500 Case objects, cheap: nothing is built yet
    root = case.write(tmp_dir)           # builds the bytes (deterministic from seed and name)
                                         # and materializes the folder; returns the model path

Every case is a folder: `model/model.onnx` (the file given to wsecc), sometimes external data
next to it, and `outside/` — files an escaping external-data location would reach. A case
says what a correct wsecc does with it: `expected` is "ok" (exit 0, output folder complete),
"error" (one-line error, exit 2) or "any" (either, as long as it is clean: random bit flips
can hit weights, which is harmless, or structure, which is not).

Run `python tests/hostile/generate.py OUT_DIR [SEED]` to write all cases to disk for debugging.
"""

from __future__ import annotations

import functools
import json
import os
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

SAMPLES_DIR = Path(__file__).resolve().parents[2] / "samples"
SAMPLES = (
    "gpt2_legacy_op14",
    "gpt2_legacy_op17",
    "gpt2_dynamo",
    "bert_legacy_op14",
    "bert_legacy_op17",
    "bert_dynamo",
)
MODEL = "model/model.onnx"
OUTCOMES = ("ok", "error", "any")


@dataclass(frozen=True)
class Bundle:
    """The files of one case, relative to its root folder."""

    files: dict[str, bytes]
    symlinks: dict[str, str] = field(default_factory=dict)  # link -> target (as written)
    hardlinks: dict[str, str] = field(default_factory=dict)  # new name -> existing file
    fifos: tuple[str, ...] = ()
    dirs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Case:
    name: str  # "category/sample/variant", unique
    category: str
    expected: str  # for `wsecc check`: "ok", "error" or "any"
    build: Callable[[], Bundle] = field(repr=False, compare=False)
    args: tuple[str, ...] = ()  # extra command-line arguments for both commands
    expected_compile: str | None = None  # when compile may differ from check (e.g. does not fit)

    @property
    def compile_expected(self) -> str:
        return self.expected_compile or self.expected

    def write(self, root: Path) -> Path:
        """Materialize the case under `root` (which must exist) and return the model path."""
        b = self.build()
        for d in ("model", "outside", *b.dirs):
            (root / d).mkdir(parents=True, exist_ok=True)
        for rel, data in b.files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        for rel, target in b.symlinks.items():
            os.symlink(target, root / rel)
        for rel, existing in b.hardlinks.items():
            os.link(root / existing, root / rel)
        for rel in b.fifos:
            os.mkfifo(root / rel)
        return root / MODEL


# ================================================================ helpers


@functools.cache
def _sample_bytes(sample: str) -> bytes:
    return (SAMPLES_DIR / f"{sample}.onnx").read_bytes()


@functools.cache
def _sample_model(sample: str) -> onnx.ModelProto:
    return onnx.load_from_string(_sample_bytes(sample))


def _copy(sample: str) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(_sample_model(sample))
    return m


def _ser(m: onnx.ModelProto) -> bytes:
    return m.SerializeToString(deterministic=True)


def _one(data: bytes) -> Bundle:
    return Bundle({MODEL: data})


def _model(m: onnx.ModelProto) -> Bundle:
    return _one(_ser(m))


def _rng(seed: int, name: str) -> random.Random:
    return random.Random(f"{seed}:{name}")


def _producers(g: onnx.GraphProto) -> dict[str, int]:
    return {o: i for i, n in enumerate(g.node) for o in n.output if o}


def _consumers(g: onnx.GraphProto) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, n in enumerate(g.node):
        for x in n.input:
            out.setdefault(x, []).append(i)
    return out


def _used_initializers(g: onnx.GraphProto) -> list[int]:
    used = {x for n in g.node for x in n.input}
    return [i for i, t in enumerate(g.initializer) if t.name in used]


def _weights(g: onnx.GraphProto, rank: int | None = None) -> list[int]:
    """Indices of used initializers of at least 1024 bytes (optionally of a given rank)."""
    return [
        i
        for i in _used_initializers(g)
        if len(g.initializer[i].raw_data) >= 1024
        and (rank is None or len(g.initializer[i].dims) == rank)
    ]


def _compute_nodes(g: onnx.GraphProto) -> list[int]:
    """Nodes that read a non-initializer value (the main path, not constant subgraphs)."""
    inits = {t.name for t in g.initializer}
    produced = _producers(g)
    inputs = {i.name for i in g.input}
    return [
        i
        for i, n in enumerate(g.node)
        if n.op_type not in ("Constant", "Shape")
        and any(x and x not in inits and (x in produced or x in inputs) for x in n.input)
    ]


def _real_inputs(g: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in g.initializer}
    return [i for i in g.input if i.name not in inits]


def _rename_values(m: onnx.ModelProto, mapping: Callable[[str], str]) -> None:
    """Rename every value name consistently (inputs, outputs, initializers, node operands)."""
    g = m.graph
    for seq in (g.input, g.output, g.value_info):
        for v in seq:
            v.name = mapping(v.name)
    for t in g.initializer:
        t.name = mapping(t.name)
    for n in g.node:
        n.input[:] = [mapping(x) if x else x for x in n.input]
        n.output[:] = [mapping(x) if x else x for x in n.output]


def _value_names(g: onnx.GraphProto) -> list[str]:
    names = dict.fromkeys(
        [i.name for i in g.input]
        + [t.name for t in g.initializer]
        + [o for n in g.node for o in n.output if o]
    )
    return list(names)


def _add_output(g: onnx.GraphProto, name: str, elem_type: int = TensorProto.FLOAT) -> None:
    g.output.append(helper.make_tensor_value_info(name, elem_type, None))


def _const(name: str, arr: np.ndarray) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], name=f"{name}_node", value=numpy_helper.from_array(arr, name)
    )


def _first_op(g: onnx.GraphProto, *ops: str) -> int | None:
    return next((i for i, n in enumerate(g.node) if n.op_type in ops), None)


def _replace_placeholder(data: bytes, placeholder: str, bad: bytes) -> bytes:
    """Swap a placeholder name for invalid UTF-8 of the same length (length prefixes stay valid)."""
    p = placeholder.encode()
    assert len(bad) == len(p) and p in data
    return data.replace(p, bad)


PLACEHOLDER = "NON_UTF8_PLACEHOLDER_0123"
BAD_UTF8 = b"\xff\xfe\xc3(bad\x80utf8\xed\xa0\x80\xf8\x88\x80\x80\x80name!"[: len(PLACEHOLDER)]
assert len(BAD_UTF8) == len(PLACEHOLDER)


# ================================================================ the case families
# Each family is a function (seed) -> Iterator[Case]. `build` closures capture everything they
# need by value, so a case builds the same bytes whenever (and wherever) it is built.

Family = Callable[[int], Iterator[Case]]
FAMILIES: dict[str, Family] = {}


def family(category: str) -> Callable[[Family], Family]:
    def deco(fn: Family) -> Family:
        FAMILIES[category] = fn
        return fn

    return deco


def _case(
    category: str,
    sample: str,
    variant: str,
    expected: str,
    build: Callable[[], Bundle],
    args: tuple[str, ...] = (),
    expected_compile: str | None = None,
) -> Case:
    assert expected in OUTCOMES and (expected_compile is None or expected_compile in OUTCOMES)
    return Case(f"{category}/{sample}/{variant}", category, expected, build, args, expected_compile)


def _mutation(
    category: str,
    sample: str,
    variant: str,
    expected: str,
    mutate: Callable[[onnx.ModelProto], None],
    **kw: object,
) -> Case:
    """A case made by mutating a copy of a sample in place."""

    def build() -> Bundle:
        m = _copy(sample)
        mutate(m)
        return _model(m)

    return _case(category, sample, variant, expected, build, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- bytes


@family("truncated")
def truncated(seed: int) -> Iterator[Case]:
    for s in SAMPLES:
        n = len(_sample_bytes(s))
        rng = _rng(seed, f"truncated/{s}")
        cuts = {1, 16, 200, n // 100, n // 2, n - 64}
        while len(cuts) < 8:
            cuts.add(rng.randrange(1, n))
        for cut in sorted(cuts):
            data = _sample_bytes(s)[:cut]
            # a cut on a field boundary can still parse; then only a clean outcome is required
            try:
                onnx.load_from_string(data)
                expected = "any"
            except Exception:
                expected = "error"
            yield _case("truncated", s, f"cut{cut}", expected, functools.partial(_one, data))


def _node_region(sample: str) -> int:
    """Bytes from the file's start to the end of the node list (the structural part)."""
    m = _copy(sample)
    del m.graph.initializer[:]
    return min(len(_ser(m)), len(_sample_bytes(sample)))


@family("bitflip")
def bitflip(seed: int) -> Iterator[Case]:
    for s in SAMPLES:
        for k, region, flips in (
            (0, "anywhere", 1),
            (1, "anywhere", 8),
            (3, "structure", 1),
            (5, "structure", 4),
            (6, "structure", 16),
            (7, "structure", 64),
            (8, "header", 1),
            (9, "header", 4),
        ):
            name = f"{region}{k}x{flips}"

            def build(s: str = s, name: str = name, region: str = region, flips: int = flips):
                data = bytearray(_sample_bytes(s))
                end = {"anywhere": len(data), "structure": _node_region(s), "header": 64}[region]
                rng = _rng(seed, f"bitflip/{s}/{name}")
                for _ in range(flips):
                    pos = rng.randrange(end)
                    data[pos] ^= 1 << rng.randrange(8)
                return _one(bytes(data))

            yield _case("bitflip", s, name, "any", build)


@family("garbage")
def garbage(seed: int) -> Iterator[Case]:
    rng = _rng(seed, "garbage")
    n = len(_sample_bytes("gpt2_dynamo"))
    tensor = numpy_helper.from_array(np.ones((4, 4), np.float32), "t").SerializeToString()
    varint_bomb = b"\x3a" + b"\xff" * 9 + b"\x01"  # graph field, length ~2^63
    nested = b""
    for _ in range(20000):  # graph -> node -> ... nested length-delimited fields
        nested = b"\x3a" + _varint(len(nested)) + nested
    items = {
        "empty": b"",
        "one-byte": b"\x08",
        "zeros": bytes(4096),
        "ones": b"\xff" * 4096,
        "random": rng.randbytes(n),
        "text": b"hello, I am not a model\n" * 10,
        "json": json.dumps({"graph": {"node": []}}).encode(),
        "tensor-proto": tensor,
        "varint-length-bomb": varint_bomb,
        "wire-nesting-20000": nested,
        "onnx-text-format": onnx.printer.to_text(_sample_model("bert_dynamo").graph).encode()[
            :100_000
        ],
        "gzip-of-model": __import__("gzip").compress(_sample_bytes("gpt2_legacy_op17"), 1),
    }
    for variant, data in items.items():
        yield _case("garbage", "none", variant, "error", functools.partial(_one, data))


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


# ---------------------------------------------------------------- shapes and sizes


def _set_input_dim(index: int, axis: int, value: int) -> Callable[[onnx.ModelProto], None]:
    def mutate(m: onnx.ModelProto) -> None:
        d = _real_inputs(m.graph)[index].type.tensor_type.shape.dim[axis]
        d.Clear()
        d.dim_value = value

    return mutate


@family("bad-dims")
def bad_dims(seed: int) -> Iterator[Case]:
    for s in SAMPLES:
        rng = _rng(seed, f"bad-dims/{s}")
        w2 = _weights(_sample_model(s).graph, rank=2)
        w2 = [i for i in w2 if len(set(_sample_model(s).graph.initializer[i].dims)) == 2]
        pick = rng.choice(w2)

        def negative(m: onnx.ModelProto, i: int = pick) -> None:
            t = m.graph.initializer[i]
            t.dims[1] = -t.dims[1]

        def plus_one(m: onnx.ModelProto, i: int = pick) -> None:
            m.graph.initializer[i].dims[1] += 1

        def transposed(m: onnx.ModelProto, i: int = pick) -> None:
            t = m.graph.initializer[i]
            t.dims[:] = [t.dims[1], t.dims[0]]

        def flattened(m: onnx.ModelProto, i: int = pick) -> None:
            t = m.graph.initializer[i]
            t.dims[:] = [t.dims[0] * t.dims[1]]

        def scalar(m: onnx.ModelProto, i: int = pick) -> None:
            del m.graph.initializer[i].dims[:]

        def input_rank3(m: onnx.ModelProto) -> None:
            _real_inputs(m.graph)[0].type.tensor_type.shape.dim.add().dim_value = 3

        def mismatched_seq(m: onnx.ModelProto) -> None:
            _set_input_dim(0, 1, 16)(m)
            _set_input_dim(1, 1, 8)(m)

        for variant, mutate in (
            ("weight-negative-dim", negative),
            ("weight-dim-plus-one", plus_one),
            ("weight-transposed", transposed),
            ("weight-flattened", flattened),
            ("weight-scalar-dims", scalar),
            ("input-negative-dim", _set_input_dim(0, 1, -16)),
            ("input-rank3", input_rank3),
            ("inputs-disagree-on-seq", mismatched_seq),
        ):
            yield _mutation("bad-dims", s, variant, "error", mutate)


@family("absurd-dims")
def absurd_dims(seed: int) -> Iterator[Case]:
    big = 1 << 62
    for s in SAMPLES:
        pick = _weights(_sample_model(s).graph, rank=2)[0]

        def dims(values: list[int], i: int = pick) -> Callable[[onnx.ModelProto], None]:
            def edit(m: onnx.ModelProto) -> None:
                m.graph.initializer[i].dims[:] = values

            return edit

        def both_inputs_huge(m: onnx.ModelProto) -> None:
            _set_input_dim(0, 0, 1 << 32)(m)
            _set_input_dim(0, 1, 1 << 32)(m)

        for variant, mutate in (
            ("weight-dims-overflow-int64", dims([1 << 31, 1 << 31, 1 << 31])),
            ("weight-dims-2^62", dims([big, 4])),
            ("weight-dims-int64-max", dims([(1 << 63) - 1])),
            ("input-batch-2^40", _set_input_dim(0, 0, 1 << 40)),
            ("input-seq-2^62", _set_input_dim(0, 1, big)),
            ("input-dims-product-2^64", both_inputs_huge),
        ):
            yield _mutation("absurd-dims", s, variant, "error", mutate)
        # a huge binding on the command line: the model is fine, the request is not
        yield _mutation(
            "absurd-dims", s, "cli-seq-2^40", "error", lambda m: None, args=("--seq", str(1 << 40))
        )
        yield _mutation(
            "absurd-dims",
            s,
            "cli-batch-2^62",
            "error",
            lambda m: None,
            args=("--dim", f"batch={big}"),
        )


@family("zero-dims")
def zero_dims(seed: int) -> Iterator[Case]:
    for s in SAMPLES:
        pick = _weights(_sample_model(s).graph, rank=2)[0]

        def empty_weight(m: onnx.ModelProto, i: int = pick) -> None:
            t = m.graph.initializer[i]
            t.dims[0] = 0
            t.raw_data = b""

        for variant, mutate, args in (
            ("input-batch-0", _set_input_dim(0, 0, 0), ()),
            ("input-seq-0", _set_input_dim(0, 1, 0), ()),
            ("weight-rows-0", empty_weight, ()),
            ("cli-dim-batch-0", lambda m: None, ("--dim", "batch=0")),
        ):
            yield _mutation("zero-dims", s, variant, "error", mutate, args=args)


@family("huge-tensor")
def huge_tensor(seed: int) -> Iterator[Case]:
    for s in SAMPLES:
        pick = _weights(_sample_model(s).graph, rank=2)[0]

        def declared(m: onnx.ModelProto, i: int = pick) -> None:
            m.graph.initializer[i].dims[:] = [1 << 20, 1 << 20]

        def declared_float_data(m: onnx.ModelProto, i: int = pick) -> None:
            t = m.graph.initializer[i]
            t.ClearField("raw_data")
            t.dims[:] = [1 << 24, 1 << 16]
            t.float_data.extend([1.0] * 16)

        def constant_attr(m: onnx.ModelProto) -> None:
            t = TensorProto(name="big", data_type=TensorProto.FLOAT, dims=[1 << 22, 1 << 22])
            t.raw_data = b"\0" * 64
            m.graph.node.append(helper.make_node("Constant", [], ["big"], name="big", value=t))
            _add_output(m.graph, "big")

        def bomb(nodes: list[onnx.NodeProto], out: str, elem: int = TensorProto.FLOAT):
            def edit(m: onnx.ModelProto) -> None:
                m.graph.node.extend(nodes)
                _add_output(m.graph, out, elem)

            return edit

        i64 = np.int64
        range_bomb = [
            _const("rb_start", np.array(0, i64)),
            _const("rb_limit", np.array(1 << 40, i64)),
            _const("rb_delta", np.array(1, i64)),
            helper.make_node("Range", ["rb_start", "rb_limit", "rb_delta"], ["rb"], name="rb"),
        ]
        cos_bomb = [
            _const("cb_shape", np.array([1 << 20, 1 << 20], i64)),
            helper.make_node(
                "ConstantOfShape",
                ["cb_shape"],
                ["cb"],
                name="cb",
                value=numpy_helper.from_array(np.ones(1, np.float32)),
            ),
        ]
        expand_bomb = [
            _const("eb_x", np.ones((1, 1), np.float32)),
            _const("eb_shape", np.array([1 << 18, 1 << 18], i64)),
            helper.make_node("Expand", ["eb_x", "eb_shape"], ["eb"], name="eb"),
        ]
        tile_bomb = [
            _const("tb_x", np.ones((4, 4), np.float32)),
            _const("tb_reps", np.array([1 << 16, 1 << 16], i64)),
            helper.make_node("Tile", ["tb_x", "tb_reps"], ["tb"], name="tb"),
        ]
        for variant, mutate in (
            ("initializer-declares-4TiB", declared),
            ("float-data-declares-4TiB", declared_float_data),
            ("constant-attribute-64TiB", constant_attr),
            ("range-2^40", bomb(range_bomb, "rb", TensorProto.INT64)),
            ("constant-of-shape-2^40", bomb(cos_bomb, "cb")),
            ("expand-2^36", bomb(expand_bomb, "eb")),
            ("tile-2^36", bomb(tile_bomb, "tb")),
        ):
            yield _mutation("huge-tensor", s, variant, "error", mutate)


# ---------------------------------------------------------------- graph structure


@family("dangling")
def dangling(seed: int) -> Iterator[Case]:
    for s in SAMPLES:
        g = _sample_model(s).graph
        rng = _rng(seed, f"dangling/{s}")
        nodes = rng.sample([i for i, n in enumerate(g.node) if n.input and n.input[0]], 3)
        for k, i in enumerate(nodes):

            def mutate(m: onnx.ModelProto, i: int = i) -> None:
                m.graph.node[i].input[0] = "no_such_value"

            yield _mutation("dangling", s, f"node-input-{k}", "error", mutate)

        def output(m: onnx.ModelProto) -> None:
            m.graph.output[0].name = "no_such_output"

        def required_input_empty(m: onnx.ModelProto) -> None:
            i = _compute_nodes(m.graph)[0]
            m.graph.node[i].input[0] = ""

        def input_removed(m: onnx.ModelProto) -> None:
            inits = {t.name for t in m.graph.initializer}
            k = next(j for j, v in enumerate(m.graph.input) if v.name not in inits)
            del m.graph.input[k]

        yield _mutation("dangling", s, "graph-output", "error", output)
        yield _mutation("dangling", s, "required-input-empty", "error", required_input_empty)
        yield _mutation("dangling", s, "graph-input-removed", "error", input_removed)


@family("cycle")
def cycle(seed: int) -> Iterator[Case]:
    for s in SAMPLES:
        g = _sample_model(s).graph
        cons = _consumers(g)
        compute = _compute_nodes(g)
        rng = _rng(seed, f"cycle/{s}")
        a = rng.choice(compute[: len(compute) // 2])
        b = cons[g.node[a].output[0]][0]
        last = compute[-1]

        def self_loop(m: onnx.ModelProto, a: int = a) -> None:
            n = m.graph.node[a]
            n.input[0] = n.output[0]

        def two_cycle(m: onnx.ModelProto, a: int = a, b: int = b) -> None:
            m.graph.node[a].input[0] = m.graph.node[b].output[0]

        def long_cycle(m: onnx.ModelProto, a: int = compute[0], z: int = last) -> None:
            m.graph.node[a].input[0] = m.graph.node[z].output[0]

        for variant, mutate in (
            ("self-loop", self_loop),
            ("two-nodes", two_cycle),
            ("whole-graph", long_cycle),
        ):
            yield _mutation("cycle", s, variant, "error", mutate)


@family("duplicate-names")
def duplicate_names(seed: int) -> Iterator[Case]:
    for s in SAMPLES:
        g = _sample_model(s).graph
        compute = _compute_nodes(g)
        rng = _rng(seed, f"duplicate-names/{s}")
        a, b = sorted(rng.sample(compute, 2))
        w = _weights(g)

        def node_names(m: onnx.ModelProto) -> None:
            for n in m.graph.node:
                n.name = "same"

        def value(m: onnx.ModelProto, a: int = a, b: int = b) -> None:
            m.graph.node[b].output[0] = m.graph.node[a].output[0]

        def initializer(m: onnx.ModelProto, i: int = w[0], j: int = w[-1]) -> None:
            t = m.graph.initializer.add()
            t.CopyFrom(m.graph.initializer[j])
            t.name = m.graph.initializer[i].name

        def initializer_same_content(m: onnx.ModelProto, i: int = w[0]) -> None:
            m.graph.initializer.add().CopyFrom(m.graph.initializer[i])

        def initializer_shadows_node(m: onnx.ModelProto, a: int = a, i: int = w[0]) -> None:
            t = m.graph.initializer.add()
            t.CopyFrom(m.graph.initializer[i])
            t.name = m.graph.node[a].output[0]

        def graph_input(m: onnx.ModelProto) -> None:
            m.graph.input.add().CopyFrom(_real_inputs(m.graph)[0])

        def graph_output(m: onnx.ModelProto) -> None:
            m.graph.output.add().CopyFrom(m.graph.output[0])

        def input_and_node(m: onnx.ModelProto, a: int = a) -> None:
            m.graph.node[a].output[0] = _real_inputs(m.graph)[0].name

        yield _mutation("duplicate-names", s, "all-node-names-equal", "ok", node_names)
        for variant, mutate in (
            ("value-produced-twice", value),
            ("initializer-twice-different", initializer),
            ("initializer-twice-same", initializer_same_content),
            ("initializer-shadows-node-output", initializer_shadows_node),
            ("graph-input-twice", graph_input),
            ("graph-output-twice", graph_output),
            ("node-output-shadows-input", input_and_node),
        ):
            yield _mutation("duplicate-names", s, variant, "error", mutate)


@family("missing-initializer")
def missing_initializer(seed: int) -> Iterator[Case]:
    for s in SAMPLES:
        g = _sample_model(s).graph
        rng = _rng(seed, f"missing-initializer/{s}")
        used = _used_initializers(g)
        for k, i in enumerate(sorted(rng.sample(used, 3))):

            def mutate(m: onnx.ModelProto, i: int = i) -> None:
                del m.graph.initializer[i]

            yield _mutation("missing-initializer", s, f"one-{k}", "error", mutate)

        def all_of_them(m: onnx.ModelProto) -> None:
            del m.graph.initializer[:]

        yield _mutation("missing-initializer", s, "all", "error", all_of_them)


@family("empty-graph")
def empty_graph(seed: int) -> Iterator[Case]:
    for s in ("gpt2_dynamo", "bert_legacy_op17"):

        def no_nodes(m: onnx.ModelProto) -> None:
            del m.graph.node[:]

        def no_outputs(m: onnx.ModelProto) -> None:
            del m.graph.output[:]

        def no_inputs(m: onnx.ModelProto) -> None:
            del m.graph.input[:]

        def input_is_output(m: onnx.ModelProto) -> None:
            del m.graph.node[:]
            del m.graph.output[:]
            m.graph.output.add().CopyFrom(m.graph.input[0])

        def constant_only(m: onnx.ModelProto) -> None:
            del m.graph.node[:]
            del m.graph.output[:]
            del m.graph.input[:]
            m.graph.node.append(_const("c", np.ones((2, 3), np.float32)))
            _add_output(m.graph, "c")

        def identity_only(m: onnx.ModelProto) -> None:
            del m.graph.node[:]
            del m.graph.output[:]
            m.graph.node.append(helper.make_node("Identity", [m.graph.input[0].name], ["y"]))
            _add_output(m.graph, "y", TensorProto.INT64)

        def no_graph(m: onnx.ModelProto) -> None:
            m.ClearField("graph")

        def output_is_initializer(m: onnx.ModelProto) -> None:
            del m.graph.output[:]
            _add_output(m.graph, m.graph.initializer[_weights(m.graph)[0]].name)

        for variant, expected, mutate in (
            ("no-nodes", "error", no_nodes),
            ("no-outputs", "error", no_outputs),
            ("no-inputs", "error", no_inputs),
            ("input-is-output", "error", input_is_output),
            ("constant-only", "error", constant_only),
            ("identity-only", "any", identity_only),  # computes nothing: either is fine
            ("no-graph", "error", no_graph),
            ("output-is-initializer", "error", output_is_initializer),
        ):
            yield _mutation("empty-graph", s, variant, expected, mutate)


# ---------------------------------------------------------------- ops, attributes, opsets


@family("unsupported-op")
def unsupported_op(seed: int) -> Iterator[Case]:
    for s in SAMPLES:
        g = _sample_model(s).graph
        rng = _rng(seed, f"unsupported-op/{s}")
        i = rng.choice(_compute_nodes(g))

        def op(op_type: str | None = None, domain: str | None = None, i: int = i):
            def edit(m: onnx.ModelProto) -> None:
                n = m.graph.node[i]
                if op_type is not None:
                    n.op_type = op_type
                if domain is not None:
                    n.domain = domain

            return edit

        def imported(m: onnx.ModelProto, i: int = i) -> None:
            m.graph.node[i].domain = "com.evil"
            m.opset_import.append(helper.make_opsetid("com.evil", 1))

        for variant, mutate in (
            ("unknown-op", op("FooBar")),
            ("real-onnx-op-not-supported", op("Sin")),
            ("control-flow-if", op("If")),
            ("ml-domain", op("LinearRegressor", "ai.onnx.ml")),
            ("undeclared-domain", op(domain="com.evil")),
            ("declared-unknown-domain", imported),
            ("onnx-op-in-contrib-domain", op(domain="com.microsoft")),
            ("empty-op-type", op("")),
            ("op-type-with-newline", op("Add\nFooBar")),
        ):
            yield _mutation("unsupported-op", s, variant, "error", mutate)


def _set_attr(m: onnx.ModelProto, op: str, name: str, attr: AttributeProto) -> None:
    """Replace (or add) attribute `name` on every node of type `op`."""
    found = False
    for n in m.graph.node:
        if n.op_type != op:
            continue
        found = True
        keep = [a for a in n.attribute if a.name != name]
        del n.attribute[:]
        n.attribute.extend(keep)
        a = n.attribute.add()
        a.CopyFrom(attr)
        a.name = name
    assert found, op


def _attr_cases(model: onnx.ModelProto) -> Iterator[tuple[str, str, Callable]]:
    ops = {n.op_type for n in model.graph.node}
    t = AttributeProto
    table: list[tuple[str, str, str, AttributeProto]] = [
        ("softmax-axis-float", "Softmax", "axis", helper.make_attribute("axis", 1.5)),
        ("softmax-axis-99", "Softmax", "axis", helper.make_attribute("axis", 99)),
        ("transpose-perm-string", "Transpose", "perm", helper.make_attribute("perm", "0213")),
        ("transpose-perm-repeats", "Transpose", "perm", helper.make_attribute("perm", [0, 0, 1, 2])),
        ("cast-to-float", "Cast", "to", helper.make_attribute("to", 1.0)),
        ("cast-to-999", "Cast", "to", helper.make_attribute("to", 999)),
        ("gemm-alpha-string", "Gemm", "alpha", helper.make_attribute("alpha", "one")),
        ("gemm-transB-ints", "Gemm", "transB", helper.make_attribute("transB", [1, 0])),
        ("concat-axis-2^62", "Concat", "axis", helper.make_attribute("axis", 1 << 62)),
        ("gather-axis-99", "Gather", "axis", helper.make_attribute("axis", 99)),
        ("layernorm-eps-ints", "LayerNormalization", "epsilon", helper.make_attribute("epsilon", [1, 2])),
        ("layernorm-axis-tensor", "LayerNormalization", "axis", helper.make_attribute("axis", numpy_helper.from_array(np.array(1)))),
        ("reducemean-keepdims-graph", "ReduceMean", "keepdims", helper.make_attribute("keepdims", helper.make_graph([], "g", [], []))),
        ("unsqueeze-axes-floats", "Unsqueeze", "axes", helper.make_attribute("axes", [0.5])),
    ]  # fmt: skip
    for variant, op, name, attr in table:
        if op in ops:
            yield variant, op, lambda m, op=op, name=name, attr=attr: _set_attr(m, op, name, attr)
    # structural damage that helper.make_attribute cannot produce
    i = next(i for i, n in enumerate(model.graph.node) if n.attribute and n.op_type != "Constant")

    def undefined_type(m: onnx.ModelProto, i: int = i) -> None:
        m.graph.node[i].attribute[0].type = t.UNDEFINED

    def type_says_int_holds_float(m: onnx.ModelProto, i: int = i) -> None:
        a = m.graph.node[i].attribute[0]
        a.Clear()
        a.name, a.type, a.f = "axis", t.INT, 2.5

    def duplicate_attribute(m: onnx.ModelProto, i: int = i) -> None:
        n = m.graph.node[i]
        n.attribute.add().CopyFrom(n.attribute[0])

    def empty_attr_name(m: onnx.ModelProto, i: int = i) -> None:
        m.graph.node[i].attribute[0].name = ""

    yield "undefined-attribute-type", "", undefined_type
    yield "int-attribute-holding-float", "", type_says_int_holds_float
    yield "attribute-twice", "", duplicate_attribute
    yield "attribute-without-name", "", empty_attr_name


@family("attribute-type")
def attribute_type(seed: int) -> Iterator[Case]:
    for s in SAMPLES:
        for variant, _, mutate in _attr_cases(_sample_model(s)):
            yield _mutation("attribute-type", s, variant, "error", mutate)


@family("opset")
def opset(seed: int) -> Iterator[Case]:
    for s in SAMPLES:

        def default(version: int) -> Callable[[onnx.ModelProto], None]:
            def edit(m: onnx.ModelProto) -> None:
                for o in m.opset_import:
                    if o.domain in ("", "ai.onnx"):
                        o.version = version

            return edit

        def no_default(m: onnx.ModelProto) -> None:
            keep = [o for o in m.opset_import if o.domain not in ("", "ai.onnx")]
            del m.opset_import[:]
            m.opset_import.extend(keep)

        def twice(m: onnx.ModelProto) -> None:
            m.opset_import.append(helper.make_opsetid("", 13))

        def ir(version: int) -> Callable[[onnx.ModelProto], None]:
            def edit(m: onnx.ModelProto) -> None:
                m.ir_version = version

            return edit

        def extra_domain(m: onnx.ModelProto) -> None:
            m.opset_import.append(helper.make_opsetid("com.example.unused", 3))

        def explicit_ai_onnx(m: onnx.ModelProto) -> None:
            for o in m.opset_import:
                if o.domain == "":
                    o.domain = "ai.onnx"
            for n in m.graph.node:
                if n.domain == "":
                    n.domain = "ai.onnx"

        for variant, expected, mutate in (
            ("default-opset-1", "error", default(1)),
            ("default-opset-0", "error", default(0)),
            ("default-opset-negative", "error", default(-3)),
            ("default-opset-99", "error", default(99)),
            ("default-opset-2^62", "error", default(1 << 62)),
            ("no-default-domain", "error", no_default),
            ("default-domain-twice", "error", twice),
            ("ir-version-0", "error", ir(0)),
            ("ir-version-999", "error", ir(999)),
            ("unused-domain-imported", "ok", extra_domain),
            ("explicit-ai.onnx-domain", "ok", explicit_ai_onnx),
        ):
            yield _mutation("opset", s, variant, expected, mutate)


@family("input-mismatch")
def input_mismatch(seed: int) -> Iterator[Case]:
    for s in SAMPLES:

        def elem(index: int, elem_type: int) -> Callable[[onnx.ModelProto], None]:
            def edit(m: onnx.ModelProto) -> None:
                _real_inputs(m.graph)[index].type.tensor_type.elem_type = elem_type

            return edit

        def no_type(m: onnx.ModelProto) -> None:
            _real_inputs(m.graph)[0].ClearField("type")

        def no_shape(m: onnx.ModelProto) -> None:
            _real_inputs(m.graph)[0].type.tensor_type.ClearField("shape")

        def sequence_type(m: onnx.ModelProto) -> None:
            v = _real_inputs(m.graph)[0]
            v.type.CopyFrom(
                helper.make_sequence_type_proto(
                    helper.make_tensor_type_proto(TensorProto.INT64, [])
                )
            )

        def output_elem(m: onnx.ModelProto) -> None:
            m.graph.output[0].type.tensor_type.elem_type = TensorProto.STRING

        for variant, mutate in (
            ("ids-float", elem(0, TensorProto.FLOAT)),
            ("ids-string", elem(0, TensorProto.STRING)),
            ("ids-undefined", elem(0, TensorProto.UNDEFINED)),
            ("ids-bfloat16", elem(0, TensorProto.BFLOAT16)),
            ("ids-elem-type-12345", elem(0, 12345)),
            ("ids-no-type", no_type),
            ("ids-no-shape", no_shape),
            ("ids-sequence-type", sequence_type),
            ("output-declared-string", output_elem),
        ):
            yield _mutation("input-mismatch", s, variant, "error", mutate)


# ---------------------------------------------------------------- names


@family("non-utf8")
def non_utf8(seed: int) -> Iterator[Case]:
    for s in SAMPLES:
        g = _sample_model(s).graph
        i = _compute_nodes(g)[0]
        value = g.node[i].output[0]

        def node_name(m: onnx.ModelProto, i: int = i) -> None:
            m.graph.node[i].name = PLACEHOLDER

        def value_name(m: onnx.ModelProto, value: str = value) -> None:
            _rename_values(m, lambda x: PLACEHOLDER if x == value else x)

        def input_name(m: onnx.ModelProto) -> None:
            old = _real_inputs(m.graph)[0].name
            _rename_values(m, lambda x: PLACEHOLDER if x == old else x)

        def initializer_name(m: onnx.ModelProto) -> None:
            old = m.graph.initializer[_weights(m.graph)[0]].name
            _rename_values(m, lambda x: PLACEHOLDER if x == old else x)

        def op_type(m: onnx.ModelProto, i: int = i) -> None:
            m.graph.node[i].op_type = PLACEHOLDER

        def domain(m: onnx.ModelProto, i: int = i) -> None:
            m.graph.node[i].domain = PLACEHOLDER

        def dim_param(m: onnx.ModelProto) -> None:
            for v in _real_inputs(m.graph):
                for d in v.type.tensor_type.shape.dim:
                    if d.dim_param == "sequence":
                        d.dim_param = PLACEHOLDER

        def doc_string(m: onnx.ModelProto) -> None:
            m.doc_string = PLACEHOLDER
            m.producer_name = PLACEHOLDER

        def attr_name(m: onnx.ModelProto) -> None:
            n = next(n for n in m.graph.node if n.attribute and n.op_type != "Constant")
            n.attribute[0].name = PLACEHOLDER

        for variant, mutate in (
            ("node-name", node_name),
            ("value-name", value_name),
            ("input-name", input_name),
            ("initializer-name", initializer_name),
            ("op-type", op_type),
            ("domain", domain),
            ("dim-param", dim_param),
            ("doc-string-and-producer", doc_string),
            ("attribute-name", attr_name),
        ):

            def build(s: str = s, mutate: Callable = mutate) -> Bundle:
                m = _copy(s)
                mutate(m)
                return _one(_replace_placeholder(_ser(m), PLACEHOLDER, BAD_UTF8))

            # ONNX strings are UTF-8; a file that breaks that is malformed, whatever the field
            yield _case("non-utf8", s, variant, "error", build)


@family("harmless")
def harmless(seed: int) -> Iterator[Case]:
    """Legal changes that must not matter: wsecc has to compile all of them."""
    for s in SAMPLES:
        rng = _rng(seed, f"harmless/{s}")
        order = list(range(len(_sample_model(s).graph.node)))
        rng.shuffle(order)
        inputs = {v.name for v in _real_inputs(_sample_model(s).graph)}

        def renamed(m: onnx.ModelProto, inputs: set[str] = inputs) -> None:
            names = {x: f"v{k}" for k, x in enumerate(_value_names(m.graph)) if x not in inputs}
            _rename_values(m, lambda x: names.get(x, x))

        def unicode_names(m: onnx.ModelProto, inputs: set[str] = inputs) -> None:
            names = {x: f"знач/∂{k}:ß" for k, x in enumerate(_value_names(m.graph))}
            _rename_values(m, lambda x: names.get(x, x) if x not in inputs else x)
            for k, n in enumerate(m.graph.node):
                n.name = f"узел %{k} with spaces"

        def odd_node_names(m: onnx.ModelProto) -> None:
            for k, n in enumerate(m.graph.node):
                n.name = f'node\n{k}\t"quoted" {{braces}} \\ back' if k % 2 else ""

        def cleared_names(m: onnx.ModelProto) -> None:
            for n in m.graph.node:
                n.name = ""

        def shuffled(m: onnx.ModelProto, order: list[int] = order) -> None:
            nodes = [m.graph.node[i] for i in order]
            copies = [onnx.NodeProto() for _ in nodes]
            for c, n in zip(copies, nodes, strict=True):
                c.CopyFrom(n)
            del m.graph.node[:]
            m.graph.node.extend(copies)

        def reversed_initializers(m: onnx.ModelProto) -> None:
            ts = [TensorProto() for _ in m.graph.initializer]
            for t, src in zip(ts, reversed(m.graph.initializer), strict=True):
                t.CopyFrom(src)
            del m.graph.initializer[:]
            m.graph.initializer.extend(ts)

        def unused(m: onnx.ModelProto) -> None:
            m.graph.initializer.append(numpy_helper.from_array(np.ones((64, 64), np.float32), "u"))
            m.graph.node.append(helper.make_node("Relu", ["u"], ["u_relu"], name="dead"))

        def lying_value_info(m: onnx.ModelProto) -> None:
            del m.graph.value_info[:]
            for n in m.graph.node[:50]:
                m.graph.value_info.append(
                    helper.make_tensor_value_info(n.output[0], TensorProto.DOUBLE, [7, 7, 7])
                )

        def metadata(m: onnx.ModelProto) -> None:
            m.doc_string = "a" * 10_000
            m.producer_name, m.producer_version = "evil\nproducer", "9" * 100
            helper.set_model_props(m, {f"k{k}": "v" * 100 for k in range(1000)})
            for n in m.graph.node:
                n.doc_string = "doc"

        for variant, mutate in (
            ("values-renamed", renamed),
            ("unicode-names", unicode_names),
            ("odd-node-names", odd_node_names),
            ("node-names-cleared", cleared_names),
            ("nodes-shuffled", shuffled),
            ("initializers-reversed", reversed_initializers),
            ("unused-initializer-and-dead-node", unused),
            ("lying-value-info", lying_value_info),
            ("metadata-and-doc-strings", metadata),
        ):
            yield _mutation("harmless", s, variant, "ok", mutate)


# ---------------------------------------------------------------- external data

EXT = "weights.bin"


def _externalize(m: onnx.ModelProto, location: str = EXT) -> bytes:
    """Move every initializer of >= 1 KiB to one external file (64-byte aligned); return it."""
    blob = bytearray()
    for t in m.graph.initializer:
        if len(t.raw_data) < 1024:
            continue
        blob += b"\0" * (-len(blob) % 64)
        offset, data = len(blob), t.raw_data
        blob += data
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(len(data)))):
            t.external_data.add(key=k, value=v)
    return bytes(blob)


def _ext_entry(t: TensorProto, key: str, value: str | None) -> None:
    keep = [(e.key, e.value) for e in t.external_data if e.key != key]
    del t.external_data[:]
    for k, v in keep + ([(key, value)] if value is not None else []):
        t.external_data.add(key=k, value=v)


def _external_bundle(
    sample: str,
    location: str = EXT,
    data_at: str | None = f"model/{EXT}",
    edit: Callable[[onnx.ModelProto], None] | None = None,
    **extra: object,
) -> Bundle:
    m = _copy(sample)
    blob = _externalize(m, location)
    if edit is not None:
        edit(m)
    files = {MODEL: _ser(m)}
    if data_at is not None:
        files[data_at] = blob
    return Bundle(files, **extra)  # type: ignore[arg-type]


def _first_external(m: onnx.ModelProto) -> TensorProto:
    return next(t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL)


def _external_variants() -> Iterator[tuple[str, str, Callable[[str], Bundle]]]:
    out = f"outside/{EXT}"
    B = _external_bundle

    def entry(key: str, value: str | None) -> Callable[[onnx.ModelProto], None]:
        return lambda m: _ext_entry(_first_external(m), key, value)

    def all_at_offset_zero(m: onnx.ModelProto) -> None:
        for t in m.graph.initializer:
            if t.data_location == TensorProto.EXTERNAL:
                _ext_entry(t, "offset", "0")

    def sparse(m: onnx.ModelProto) -> None:
        t = _first_external(m)
        sp = m.graph.sparse_initializer.add()
        sp.values.CopyFrom(t)
        sp.values.name = t.name
        sp.values.dims[:] = [1]
        _ext_entry(sp.values, "location", f"../{out}")
        sp.indices.CopyFrom(numpy_helper.from_array(np.array([0], np.int64), t.name + "_idx"))
        sp.dims.extend(t.dims)
        m.graph.initializer.remove(t)

    yield "same-folder", "ok", lambda s: B(s)
    yield "subfolder", "ok", lambda s: B(s, "data/w.bin", "model/data/w.bin")
    yield "dot-slash", "ok", lambda s: B(s, f"./{EXT}")
    # every tensor reads the start of the file: legal bytes, garbage values (index tables
    # included), so compile may fail cleanly later on
    yield "shared-offset-zero", "any", lambda s: B(s, edit=all_at_offset_zero)
    yield "unknown-keys", "ok", lambda s: B(s, edit=entry("__class__", "x"))
    yield "dotdot", "error", lambda s: B(s, f"../{out}", out)
    yield "nested-dotdot", "error", lambda s: B(s, f"data/../../{out}", out, dirs=("model/data",))
    yield "absolute-etc-passwd", "error", lambda s: B(s, "/etc/passwd", None)
    yield "absolute-dev-zero", "error", lambda s: B(s, "/dev/zero", None)
    yield "absolute-proc-self", "error", lambda s: B(s, "/proc/self/environ", None)
    yield "windows-drive", "error", lambda s: B(s, "C:\\weights.bin", None)
    yield "windows-unc", "error", lambda s: B(s, "\\\\server\\share\\w.bin", None)
    yield "backslash-dotdot", "error", lambda s: B(s, f"..\\outside\\{EXT}", out)
    yield (
        "symlink-file-outside",
        "error",
        lambda s: B(s, data_at=out, symlinks={f"model/{EXT}": f"../{out}"}),
    )
    yield (
        "symlink-dir-outside",
        "error",
        lambda s: B(s, f"d/{EXT}", out, symlinks={"model/d": "../outside"}),
    )
    yield "symlink-inside", "error", lambda s: B(s, "link.bin", symlinks={"model/link.bin": EXT})
    yield (
        "symlink-to-dev-zero",
        "error",
        lambda s: B(s, data_at=None, symlinks={f"model/{EXT}": "/dev/zero"}),
    )
    yield "hardlink-outside", "error", lambda s: B(s, data_at=out, hardlinks={f"model/{EXT}": out})
    yield "hardlink-inside", "error", lambda s: B(s, hardlinks={"model/copy.bin": f"model/{EXT}"})
    yield "fifo", "error", lambda s: B(s, data_at=None, fifos=(f"model/{EXT}",))
    yield "directory", "error", lambda s: B(s, "data", None, dirs=("model/data",))
    yield "missing-file", "error", lambda s: B(s, data_at=None)
    yield "empty-location", "error", lambda s: B(s, edit=entry("location", ""))
    yield "no-location", "error", lambda s: B(s, edit=entry("location", None))
    yield (
        "nul-in-location",
        "error",
        lambda s: B(s, edit=entry("location", f"{EXT}\0../../etc/passwd")),
    )
    yield "offset-past-end", "error", lambda s: B(s, edit=entry("offset", str(1 << 40)))
    yield "offset-negative", "error", lambda s: B(s, edit=entry("offset", "-64"))
    yield "offset-not-a-number", "error", lambda s: B(s, edit=entry("offset", "0x10"))
    yield "length-short", "error", lambda s: B(s, edit=entry("length", "4"))
    yield "length-huge", "error", lambda s: B(s, edit=entry("length", str(1 << 62)))
    yield "length-negative", "error", lambda s: B(s, edit=entry("length", "-1"))
    yield "file-truncated", "error", lambda s: _truncated_data(s)
    yield "sparse-initializer-escape", "error", lambda s: B(s, data_at=out, edit=sparse)
    yield "constant-node-inside", "ok", lambda s: _constant_node_external(s)
    yield "function-constant-escape", "error", lambda s: _escape_bundle(s, _function_escape)
    yield "sparse-constant-escape", "error", lambda s: _escape_bundle(s, _sparse_constant_escape)
    yield "raw-data-and-external", "error", lambda s: B(s, edit=lambda m: setattr(_first_external(m), "raw_data", b"\0" * 4))  # fmt: skip


def _escaping_tensor(name: str, n: int) -> TensorProto:
    """A float tensor of n elements whose data is outside the model folder."""
    t = numpy_helper.from_array(np.ones(n, np.float32), name)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", f"../outside/{EXT}"), ("offset", "0"), ("length", str(4 * n))):
        t.external_data.add(key=k, value=v)
    return t


def _constant_node_external(sample: str) -> Bundle:
    """Legal: a weight held by a Constant node (not an initializer) whose data is external."""

    def edit(m: onnx.ModelProto) -> None:
        t = next(t for t in m.graph.initializer if len(t.dims) == 2 and t.external_data)
        m.graph.node.insert(0, helper.make_node("Constant", [], [t.name], name="c", value=t))
        m.graph.initializer.remove(t)

    return _external_bundle(sample, edit=edit)


def _function_escape(m: onnx.ModelProto) -> None:
    """A model-local function whose body holds a Constant with escaping external data: inlining
    the function would read the outside file into the graph."""
    opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    body = helper.make_node("Constant", [], ["y"], value=_escaping_tensor("leak_t", 16))
    m.functions.append(
        helper.make_function(
            "local.evil", "Leak", [], ["y"], [body], [helper.make_opsetid("", opset)]
        )
    )
    m.opset_import.append(helper.make_opsetid("local.evil", 1))
    m.graph.node.append(helper.make_node("Leak", [], ["leak"], domain="local.evil", name="leak"))
    _add_output(m.graph, "leak")


def _sparse_constant_escape(m: onnx.ModelProto) -> None:
    """A Constant whose sparse_value has escaping external values."""
    sp = onnx.SparseTensorProto(dims=[16])
    sp.values.CopyFrom(_escaping_tensor("leak_v", 4))
    sp.indices.CopyFrom(numpy_helper.from_array(np.arange(4, dtype=np.int64), "leak_i"))
    m.graph.node.append(helper.make_node("Constant", [], ["leak"], name="leak", sparse_value=sp))
    _add_output(m.graph, "leak")


def _escape_bundle(sample: str, edit: Callable[[onnx.ModelProto], None]) -> Bundle:
    """External weights in the model folder, plus a copy of them outside it."""
    b = _external_bundle(sample, edit=edit)
    return Bundle({**b.files, f"outside/{EXT}": b.files[f"model/{EXT}"]})


def _truncated_data(sample: str) -> Bundle:
    b = _external_bundle(sample)
    files = dict(b.files)
    files[f"model/{EXT}"] = files[f"model/{EXT}"][:-100]
    return Bundle(files)


@family("external-data")
def external_data(seed: int) -> Iterator[Case]:
    pairs = (("gpt2_dynamo", "bert_legacy_op14"), ("bert_dynamo", "gpt2_legacy_op17"))
    for k, (variant, expected, make) in enumerate(_external_variants()):
        for s in pairs[k % 2]:
            yield _case("external-data", s, variant, expected, functools.partial(make, s))


# ---------------------------------------------------------------- big and deep


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _nested_if_graph(depth: int) -> bytes:
    """A serialized GraphProto holding `deep_cond`, and an If whose then-branch holds an If
    whose then-branch ... `depth` levels down, with output `deep_out`.

    Written at the wire level: protobuf's own serializer refuses to nest past its recursion
    limit, which is the point of the deeper cases. Appended to a model's bytes as a second
    `graph` field, protobuf merges it into the model's graph.
    """
    out = helper.make_tensor_value_info("deep_out", TensorProto.FLOAT, [1]).SerializeToString()
    leaf = helper.make_graph(
        [_const("deep_out", np.ones(1, np.float32))], "leaf", [], []
    ).SerializeToString() + _field(12, out)
    inner = leaf
    for level in range(depth):
        attrs = b"".join(
            _field(5, _field(1, name.encode()) + _varint(20 << 3) + _varint(5) + _field(6, g))
            for name, g in (("then_branch", inner), ("else_branch", leaf))
        )  # AttributeProto: name=1, type=20 (GRAPH=5), g=6
        node = _field(1, b"deep_cond") + _field(2, b"deep_out") + _field(3, f"if{level}".encode())
        node += _field(4, b"If") + attrs
        inner = _field(1, node) + _field(2, f"g{level}".encode()) + _field(12, out)
    cond = _const("deep_cond", np.array(True)).SerializeToString()
    return _field(1, cond) + inner  # the top level's node + output, next to deep_cond


COMPUTE_OPS = frozenset(
    {"MatMul", "Gemm", "Softmax", "Tanh", "Erf", "Gelu", "LayerNormalization", "Pow", "Sqrt"}
)


@family("giant")
def giant(seed: int) -> Iterator[Case]:
    for s in ("gpt2_legacy_op17", "bert_dynamo"):
        out = _sample_model(s).graph.output[0].name

        def chain(op: str, length: int, out: str = out) -> Callable[[onnx.ModelProto], None]:
            def edit(m: onnx.ModelProto) -> None:
                prev = out
                for k in range(length):
                    m.graph.node.append(helper.make_node(op, [prev], [f"c{k}"], name=f"c{k}"))
                    prev = f"c{k}"
                m.graph.output[0].name = prev

            return edit

        def many_initializers(m: onnx.ModelProto) -> None:
            for k in range(20_000):
                m.graph.initializer.append(
                    numpy_helper.from_array(np.array([k], np.int64), f"u{k}")
                )

        def huge_doc(m: onnx.ModelProto) -> None:
            m.graph.doc_string = "x" * (10 << 20)

        def long_names(m: onnx.ModelProto) -> None:
            inputs = {v.name for v in _real_inputs(m.graph)}
            _rename_values(m, lambda x: x if x in inputs or not x else x + "_" + "n" * 4096)
            for n in m.graph.node:
                n.name = "N" * 100_000

        def every_value_an_output(m: onnx.ModelProto) -> None:
            listed = {o.name for o in m.graph.output}
            for n in m.graph.node:  # ops of the compute path only: their values are not constant
                if n.op_type in COMPUTE_OPS and n.output[0] not in listed:
                    _add_output(m.graph, n.output[0], TensorProto.UNDEFINED)  # untyped

        for depth in (20, 200):

            def build(s: str = s, depth: int = depth) -> Bundle:
                return _one(_sample_bytes(s) + _field(7, _nested_if_graph(depth)))

            yield _case("giant", s, f"if-nested-{depth}", "error", build)
        for variant, expected, mutate in (
            ("identity-chain-20000", "ok", chain("Identity", 20_000)),
            ("relu-chain-3000", "any", chain("Relu", 3_000)),
            ("unused-initializers-20000", "ok", many_initializers),
            ("doc-string-10MiB", "ok", huge_doc),
            ("names-4KiB-and-100KB", "ok", long_names),
            ("every-compute-value-an-output", "any", every_value_an_output),
        ):
            yield _mutation("giant", s, variant, expected, mutate)


# ================================================================ entry points


# Families whose variants are the same edit on each sample: each variant runs on ROTATION of
# the six samples, in rotation, so every sample and every variant is covered at half the cost.
ROTATED = frozenset(
    {
        "bad-dims", "absurd-dims", "zero-dims", "huge-tensor", "dangling", "cycle",
        "duplicate-names", "missing-initializer", "unsupported-op", "attribute-type", "opset",
        "input-mismatch", "non-utf8", "harmless",
    }
)  # fmt: skip
ROTATION = 3


def _rotate(cases: list[Case]) -> list[Case]:
    variants: dict[str, list[str]] = {}
    for c in cases:
        names = variants.setdefault(c.category, [])
        if c.name.split("/")[2] not in names:
            names.append(c.name.split("/")[2])
    keep, seen = [], set()
    for c in cases:
        _, sample, variant = c.name.split("/")
        j = variants[c.category].index(variant)
        i = SAMPLES.index(sample) if sample in SAMPLES else 0
        if c.category not in ROTATED or (j - i) % len(SAMPLES) < ROTATION:
            keep.append(c)
            seen.add((c.category, variant))
    # a variant that exists on few samples (the op is missing elsewhere) keeps its first case
    for c in cases:
        key = (c.category, c.name.split("/")[2])
        if key not in seen:
            keep.append(c)
            seen.add(key)
    return keep


def generate_cases(seed: int = 0) -> list[Case]:
    """All cases, in a fixed order; names are unique. Nothing is built until `Case.write`."""
    cases = _rotate([c for fam in FAMILIES.values() for c in fam(seed)])
    names = [c.name for c in cases]
    assert len(set(names)) == len(names), "case names must be unique"
    return cases


def stratified_sample(cases: list[Case], n: int = 40, seed: int = 0) -> list[Case]:
    """A fixed subset of about `n` cases with every category represented, in proportion."""
    by_cat: dict[str, list[Case]] = {}
    for c in cases:
        by_cat.setdefault(c.category, []).append(c)
    rng = random.Random(f"sample:{seed}")
    out: list[Case] = []
    for cs in by_cat.values():
        k = max(1, round(n * len(cs) / len(cases)))
        out += rng.sample(cs, min(k, len(cs)))
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    root, seed = Path(argv[0]), int(argv[1]) if len(argv) > 1 else 0
    cases = generate_cases(seed)
    for c in cases:
        d = root / c.name.replace("/", "__")
        d.mkdir(parents=True, exist_ok=True)
        c.write(d)
        (d / "expected.json").write_text(
            json.dumps(
                {"name": c.name, "check": c.expected, "compile": c.compile_expected, "args": c.args}
            )
        )
    counts: dict[str, int] = {}
    for c in cases:
        counts[c.category] = counts.get(c.category, 0) + 1
    print(f"{len(cases)} cases in {len(counts)} categories: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
