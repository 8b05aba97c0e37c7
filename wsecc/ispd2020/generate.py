"""Kernel graphs in the contest's `.kgraph` format, generated (seeded, deterministic).

The contest kept most of its benchmarks (I–T) for checking; these stand in for them when we
measure our area bound against our placement. Three families, like the public ones:

- `resnet_blocks`: a ResNet at block level (cblock opening each stage, dblocks after it), as A/B;
- `resnet_convs`: the same ResNet at conv level (1x1, 3x3, 1x1 and the projection shortcut), as
  C/D;
- `conv_chain`: a chain of random convs (R·S ∈ {1, 9}, strides 1 or 2, channels 64…1024);
  `conv_list`: a chain of given convs (VGG-16's, or two big ones that each want half the fabric).

and two with branches, as the held-out set's deeper networks may have: `inception` (GoogLeNet's
modules: four branches with 1x1, 3x3 and 5x5 convs, joined by concatenation) and `densenet`
(every layer of a dense block feeds all later ones: many small kernels, many edges).

Each takes the fabric size and memlimit, so a graph can be made tight (a small fabric, a memlimit
at which memory rather than time decides the shapes) or roomy; `dataclasses.replace` sets the
weights (G21 has the wlength=400 of the public suite's S).
`render` writes the text; `wsecc.ispd2020.kgraph.parse_kgraph` reads it back.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class GenNode:
    kind: str  # input | output | conv | dblock | cblock
    args: tuple[tuple[str, int], ...] = ()
    dims: tuple[int, ...] = ()


@dataclass(frozen=True)
class GenGraph:
    test: str
    width: int
    height: int
    memlimit: int
    nodes: tuple[GenNode, ...]
    edges: tuple[tuple[int, int, tuple[int, ...]], ...]  # (src index, dst index, shape)
    wdeltat: int = 1
    wlength: int = 1


def render(g: GenGraph) -> str:
    """The graph as contest text: header, node definitions, connectivity."""
    lines = [
        "(*",
        f"test={g.test}",
        f"width={g.width}",
        f"height={g.height}",
        f"wdeltat={g.wdeltat}",
        f"wlength={g.wlength}",
        "wadapter=0",
        f"memlimit={g.memlimit}",
        "*)",
        "",
        "(* Node Definitions *)",
    ]
    for i, n in enumerate(g.nodes):
        if n.dims:
            body = "n=[" + " ".join(str(d) for d in n.dims) + "]"
        else:
            body = " ".join(f"{k}={v}" for k, v in n.args)
        lines.append(f"{n.kind}[{i}] {body} name='k{i}'")
    lines += ["", "(* Connectivity *)"]
    for s, d, shape in g.edges:
        src, dst = g.nodes[s], g.nodes[d]
        sport = "_" if src.kind == "input" else "y"
        dport = "_" if dst.kind == "output" else "x"
        dims = "".join(f"[{v}]" for v in shape)
        lines.append(f"{src.kind}[{s}]:{sport} -> {dst.kind}[{d}]:{dport}, shape:{dims}")
    return "\n".join(lines) + "\n"


def _conv(hw: int, r: int, c: int, k: int, t: int) -> GenNode:
    return GenNode(
        "conv",
        (("W", hw), ("H", hw), ("R", r), ("S", r), ("C", c), ("K", k), ("T", t), ("U", t)),
    )


def resnet_blocks(
    blocks: tuple[int, ...] = (3, 4, 6, 3),
    *,
    size: int = 112,
    width: int = 633,
    height: int = 633,
    memlimit: int = 24576,
    test: str = "gen-resnet-blocks",
) -> GenGraph:
    """Stage s has blocks[s] blocks at F = 256·2^s on (size / 2^s)²: a cblock, then dblocks.

    A cblock halves H and W (its stride-2 convs), so each stage opens with a cblock at the
    previous stage's resolution, as in the public A/B.
    """
    nodes = [GenNode("input", dims=(size, size, 128))]
    edges: list[tuple[int, int, tuple[int, ...]]] = []
    prev, hw = 0, size
    for s, count in enumerate(blocks):
        f = 256 * 2**s
        for b in range(count):
            if b == 0:
                nodes.append(GenNode("cblock", (("f", f), ("h", hw), ("w", hw))))
                hw //= 2
            else:
                nodes.append(GenNode("dblock", (("f", f), ("h", hw), ("w", hw))))
            edges.append((prev, len(nodes) - 1, (hw, hw, f)))
            prev = len(nodes) - 1
    nodes.append(GenNode("output", dims=(hw, hw, 256 * 2 ** (len(blocks) - 1))))
    edges.append((prev, len(nodes) - 1, (hw, hw, 256 * 2 ** (len(blocks) - 1))))
    return GenGraph(test, width, height, memlimit, tuple(nodes), tuple(edges))


def resnet_convs(
    blocks: tuple[int, ...] = (2, 2, 2, 2),
    *,
    size: int = 56,
    width: int = 633,
    height: int = 633,
    memlimit: int = 24576,
    test: str = "gen-resnet-convs",
) -> GenGraph:
    """A bottleneck ResNet at conv level: per block 1x1 → 3x3 → 1x1, plus a projection 1x1
    (stride 2 where the stage begins) from the block's input to its last conv's consumer."""
    nodes = [GenNode("input", dims=(size, size, 256))]
    edges: list[tuple[int, int, tuple[int, ...]]] = []
    prev, hw, c_in = 0, size, 256
    for s, count in enumerate(blocks):
        f = 256 * 2**s
        for b in range(count):
            t = 2 if (b == 0 and s > 0) else 1
            out = hw // t
            ids = []
            for node in (
                _conv(hw, 1, c_in, f // 4, 1),
                _conv(hw, 3, f // 4, f // 4, t),
                _conv(out, 1, f // 4, f, 1),
            ):
                nodes.append(node)
                ids.append(len(nodes) - 1)
            edges += [
                (prev, ids[0], (hw, hw, c_in)),
                (ids[0], ids[1], (hw, hw, f // 4)),
                (ids[1], ids[2], (out, out, f // 4)),
            ]
            if b == 0:  # projection shortcut, joins at the block's last conv
                nodes.append(_conv(hw, 1, c_in, f, t))
                edges += [
                    (prev, len(nodes) - 1, (hw, hw, c_in)),
                    (len(nodes) - 1, ids[2], (out, out, f)),
                ]
            prev, hw, c_in = ids[2], out, f
    nodes.append(GenNode("output", dims=(hw, hw, c_in)))
    edges.append((prev, len(nodes) - 1, (hw, hw, c_in)))
    return GenGraph(test, width, height, memlimit, tuple(nodes), tuple(edges))


def conv_chain(
    n: int,
    *,
    seed: int = 0,
    size: int = 56,
    width: int = 633,
    height: int = 633,
    memlimit: int = 24576,
    test: str = "gen-conv-chain",
) -> GenGraph:
    """n convs in a chain: R ∈ {1, 3}, channels 64…1024, a stride-2 conv now and then."""
    rng = random.Random(seed)
    nodes = [GenNode("input", dims=(size, size, 64))]
    edges: list[tuple[int, int, tuple[int, ...]]] = []
    prev, hw, c = 0, size, 64
    for _ in range(n):
        k = rng.choice((64, 128, 256, 512, 1024))
        r = rng.choice((1, 3))
        t = 2 if hw >= 14 and rng.random() < 0.2 else 1
        nodes.append(_conv(hw, r, c, k, t))
        edges.append((prev, len(nodes) - 1, (hw, hw, c)))
        prev, hw, c = len(nodes) - 1, hw // t, k
    nodes.append(GenNode("output", dims=(hw, hw, c)))
    edges.append((prev, len(nodes) - 1, (hw, hw, c)))
    return GenGraph(test, width, height, memlimit, tuple(nodes), tuple(edges))


def conv_list(
    convs: list[tuple[int, int, int, int, int]],
    *,
    width: int = 633,
    height: int = 633,
    memlimit: int = 24576,
    test: str = "gen-conv-list",
) -> GenGraph:
    """A chain of the given convs, each (H = W, R = S, C, K, stride)."""
    hw, _, c, _, _ = convs[0]
    nodes = [GenNode("input", dims=(hw, hw, c))] + [_conv(*spec) for spec in convs]
    edges: list[tuple[int, int, tuple[int, ...]]] = [
        (i, i + 1, (spec[0], spec[0], spec[2])) for i, spec in enumerate(convs)
    ]
    last = convs[-1]
    nodes.append(GenNode("output", dims=(last[0] // last[4], last[0] // last[4], last[3])))
    edges.append((len(convs), len(convs) + 1, nodes[-1].dims))
    return GenGraph(test, width, height, memlimit, tuple(nodes), tuple(edges))


GOOGLENET = (
    (28, 192, (64, 96, 128, 16, 32, 32)),
    (28, 256, (128, 128, 192, 32, 96, 64)),
    (14, 480, (192, 96, 208, 16, 48, 64)),
    (14, 512, (160, 112, 224, 24, 64, 64)),
    (14, 512, (128, 128, 256, 24, 64, 64)),
    (14, 512, (112, 144, 288, 32, 64, 64)),
    (14, 528, (256, 160, 320, 32, 128, 128)),
    (7, 832, (256, 160, 320, 32, 128, 128)),
    (7, 832, (384, 192, 384, 48, 128, 128)),
)
"""GoogLeNet's inception modules: (H = W, input channels, (1x1, 3x3 reduce, 3x3, 5x5 reduce,
5x5, pool projection)); the max-pools between stages are folded into the next module's size."""


def inception(
    modules: tuple[tuple[int, int, tuple[int, ...]], ...] = GOOGLENET,
    *,
    width: int = 633,
    height: int = 633,
    memlimit: int = 24576,
    test: str = "gen-inception",
) -> GenGraph:
    """Inception modules in a row: per module four branches (1x1; 1x1 → 3x3; 1x1 → 5x5; a 1x1
    pool projection), and every branch's last conv feeds the four first convs of the next module
    (the concatenation), so the graph forks four ways and joins sixteen."""
    hw0, c0, _ = modules[0]
    nodes = [GenNode("input", dims=(hw0, hw0, c0))]
    edges: list[tuple[int, int, tuple[int, ...]]] = []
    ends, hw_prev = [0], hw0
    for hw, c, (b1, r3, b3, r5, b5, bp) in modules:
        heads = [_conv(hw, 1, c, k, 1) for k in (b1, r3, r5, bp)]
        first = len(nodes)
        nodes += heads
        for e in ends:
            edges += [(e, first + i, (hw_prev, hw_prev, c)) for i in range(4)]
        nodes += [_conv(hw, 3, r3, b3, 1), _conv(hw, 5, r5, b5, 1)]
        edges += [(first + 1, first + 4, (hw, hw, r3)), (first + 2, first + 5, (hw, hw, r5))]
        ends, hw_prev = [first, first + 4, first + 5, first + 3], hw
    hw, _, t = modules[-1]
    out = (hw, hw, t[0] + t[2] + t[4] + t[5])
    nodes.append(GenNode("output", dims=out))
    edges += [(e, len(nodes) - 1, out) for e in ends]
    return GenGraph(test, width, height, memlimit, tuple(nodes), tuple(edges))


def densenet(
    blocks: tuple[int, ...] = (6, 12, 24, 16),
    *,
    growth: int = 32,
    size: int = 56,
    width: int = 633,
    height: int = 633,
    memlimit: int = 24576,
    test: str = "gen-densenet",
) -> GenGraph:
    """DenseNet: in a dense block, layer i is a 1x1 conv (c0 + i·growth → 4·growth channels)
    then a 3x3 conv (→ growth), and every earlier layer's 3x3 (and the block's input) feeds
    layer i's 1x1; a 1x1 transition halves the channels between blocks and its output is
    pooled (folded into the next block's size). Many small kernels and many edges."""
    nodes = [GenNode("input", dims=(size, size, 2 * growth))]
    edges: list[tuple[int, int, tuple[int, ...]]] = []
    block_in, hw, c0 = 0, size, 2 * growth
    for b, layers in enumerate(blocks):
        sources, c = [block_in], c0
        for _ in range(layers):
            nodes.append(_conv(hw, 1, c, 4 * growth, 1))
            one = len(nodes) - 1
            edges += [(s, one, (hw, hw, c)) for s in sources]
            nodes.append(_conv(hw, 3, 4 * growth, growth, 1))
            edges.append((one, one + 1, (hw, hw, 4 * growth)))
            sources.append(one + 1)
            c += growth
        if b + 1 < len(blocks):
            nodes.append(_conv(hw, 1, c, c // 2, 1))
            edges += [(s, len(nodes) - 1, (hw, hw, c)) for s in sources]
            block_in, hw, c0 = len(nodes) - 1, hw // 2, c // 2
        else:
            nodes.append(GenNode("output", dims=(hw, hw, c)))
            edges += [(s, len(nodes) - 1, (hw, hw, c)) for s in sources]
    return GenGraph(test, width, height, memlimit, tuple(nodes), tuple(edges))


VGG16 = [
    (224, 3, 3, 64, 1), (224, 3, 64, 64, 1), (112, 3, 64, 128, 1), (112, 3, 128, 128, 1),
    (56, 3, 128, 256, 1), (56, 3, 256, 256, 1), (56, 3, 256, 256, 1), (28, 3, 256, 512, 1),
    (28, 3, 512, 512, 1), (28, 3, 512, 512, 1), (14, 3, 512, 512, 1), (14, 3, 512, 512, 1),
    (14, 3, 512, 512, 1),
]  # fmt: skip
"""VGG-16's convolutions (pooling folded into the next conv's input size)."""

TINY_AND_HUGE = (
    [(14, 3, 1024, 1024, 1)] * 2 + [(7, 1, 64, 64, 1)] * 30 + [(14, 3, 1024, 1024, 1)]
    + [(7, 1, 128, 64, 1)] * 30
)  # fmt: skip
"""Three 3x3 convs of 1024 channels among sixty 1x1 convs of 64 channels on 7×7."""

GENERATED: dict[str, GenGraph] = {
    "G1": resnet_blocks((3, 4, 6, 3), test="gen-resnet50-blocks"),
    "G2": resnet_blocks((3, 4, 23, 3), test="gen-resnet101-blocks"),
    "G3": resnet_convs((2, 2, 2, 2), test="gen-resnet-convs"),
    "G4": conv_chain(12, seed=1, test="gen-conv-chain-12"),
    "G5": resnet_blocks((3, 4, 6, 3), width=400, height=400, test="gen-resnet50-blocks-400"),
    "G6": conv_chain(6, seed=2, size=28, width=300, height=300, test="gen-conv-chain-6-300"),
    "G7": conv_list(VGG16, test="gen-vgg16-convs"),
    "G8": resnet_blocks((3, 4, 6, 3), width=316, height=1266, test="gen-resnet50-blocks-316x1266"),
    "G9": conv_list([(14, 3, 1024, 1024, 1)] * 2, test="gen-two-big-convs"),
    "G10": resnet_convs((3, 4, 23, 3), test="gen-resnet101-convs"),
    "G11": resnet_convs((3, 8, 36, 3), test="gen-resnet152-convs"),
    "G12": inception(test="gen-googlenet-inception"),
    "G13": densenet(test="gen-densenet121"),
    "G14": resnet_convs((3, 4, 6, 3), memlimit=1024, test="gen-resnet50-convs-mem1024"),
    "G15": resnet_convs((3, 4, 6, 3), memlimit=1536, test="gen-resnet50-convs-mem1536"),
    "G16": resnet_blocks((3, 4, 6, 3), memlimit=2048, test="gen-resnet50-blocks-mem2048"),
    "G17": resnet_convs((3, 4, 6, 3), width=200, height=2000, test="gen-resnet50-convs-200x2000"),
    "G18": resnet_convs((3, 4, 23, 3), width=400, height=400, test="gen-resnet101-convs-400"),
    "G19": conv_list(TINY_AND_HUGE, test="gen-tiny-and-huge"),
    "G20": conv_chain(60, seed=5, size=112, test="gen-conv-chain-60"),
    "G21": replace(resnet_blocks((3, 4, 6, 3)), wlength=400, test="gen-resnet50-blocks-wl400"),
}
"""The generated benchmarks of bench/bench_ispd2020.py (`--generated`)."""
