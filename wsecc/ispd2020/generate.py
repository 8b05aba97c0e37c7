"""Kernel graphs in the contest's `.kgraph` format, generated (seeded, deterministic).

The contest kept most of its benchmarks (I–T) for checking; these stand in for them when we
measure our area bound against our placement. Three families, like the public ones:

- `resnet_blocks`: a ResNet at block level (cblock opening each stage, dblocks after it), as A/B;
- `resnet_convs`: the same ResNet at conv level (1x1, 3x3, 1x1 and the projection shortcut), as
  C/D;
- `conv_chain`: a chain of random convs (R·S ∈ {1, 9}, strides 1 or 2, channels 64…1024);
  `conv_list`: a chain of given convs (VGG-16's, or two big ones that each want half the fabric).

Each takes the fabric size and memlimit, so a graph can be made tight (a small fabric) or roomy.
`render` writes the text; `wsecc.ispd2020.kgraph.parse_kgraph` reads it back.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


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


def render(g: GenGraph) -> str:
    """The graph as contest text: header, node definitions, connectivity."""
    lines = [
        "(*",
        f"test={g.test}",
        f"width={g.width}",
        f"height={g.height}",
        "wdeltat=1",
        "wlength=1",
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
    edges = [(i, i + 1, (spec[0], spec[0], spec[2])) for i, spec in enumerate(convs)]
    last = convs[-1]
    nodes.append(GenNode("output", dims=(last[0] // last[4], last[0] // last[4], last[3])))
    edges.append((len(convs), len(convs) + 1, nodes[-1].dims))
    return GenGraph(test, width, height, memlimit, tuple(nodes), tuple(edges))


VGG16 = [
    (224, 3, 3, 64, 1), (224, 3, 64, 64, 1), (112, 3, 64, 128, 1), (112, 3, 128, 128, 1),
    (56, 3, 128, 256, 1), (56, 3, 256, 256, 1), (56, 3, 256, 256, 1), (28, 3, 256, 512, 1),
    (28, 3, 512, 512, 1), (28, 3, 512, 512, 1), (14, 3, 512, 512, 1), (14, 3, 512, 512, 1),
    (14, 3, 512, 512, 1),
]  # fmt: skip
"""VGG-16's convolutions (pooling folded into the next conv's input size)."""

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
}
"""The generated benchmarks of bench/bench_ispd2020.py (`--generated`)."""
