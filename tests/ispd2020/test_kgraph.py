"""The .kgraph reader: the six corpus files, and exact errors for malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ISPD_CORPUS

from wsecc.ispd2020.kgraph import KGraphError, parse_kgraph, read_kgraph

CORPUS = ISPD_CORPUS

# file -> (kernels, edges, kernel->kernel edges, kernel kinds)
EXPECTED = {
    "A.kgraph": (16, 17, 15, {"cblock", "dblock"}),
    "B.kgraph": (32, 33, 31, {"cblock", "dblock"}),
    "C.kgraph": (100, 133, 131, {"conv"}),
    "D.kgraph": (52, 69, 67, {"conv"}),
    "ConvBlock_conv.txt": (2, 3, 1, {"conv"}),
    "Fork_fork.txt": (4, 6, 4, {"dblock"}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_reads_corpus(name: str) -> None:
    g = read_kgraph(CORPUS / name)
    kernels, edges, kernel_edges, kinds = EXPECTED[name]
    assert (g.width, g.height, g.memlimit) == (633, 633, 24576)
    assert (g.wdeltat, g.wlength, g.wadapter) == (1, 1, 0)
    assert len(g.kernels) == kernels
    assert len(g.edges) == edges
    assert len(g.kernel_edges) == kernel_edges
    assert {k.kind for k in g.kernels} == kinds
    assert len({k.name for k in g.kernels}) == kernels  # names are unique


def test_node_details() -> None:
    a = read_kgraph(CORPUS / "A.kgraph")
    k1 = a.node(1)
    assert (k1.kind, k1.name, k1.args) == ("cblock", "k1", (("f", 2048), ("h", 14), ("w", 14)))
    assert a.node(0).dims == (112, 112, 128)
    b = read_kgraph(CORPUS / "B.kgraph")
    assert b.node(0).name == "k0"  # `name='x' name='k0'`: the last one wins
    d = read_kgraph(CORPUS / "D.kgraph")  # tab-separated connectivity
    assert d.edges[0].src == 1 and d.edges[0].dst == 2 and d.edges[0].shape == (14, 14, 512)
    conv = read_kgraph(CORPUS / "ConvBlock_conv.txt")
    assert conv.node(2).arg("R") == 3 and conv.node(2).name == "k2"  # default name


HEADER = "(*\nwidth=633\nheight=633\nwdeltat=1\nwlength=1\nwadapter=0\nmemlimit=24576\n*)\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "conv[1] W=14 H=14 R=1 C=64 K=64 T=1 U=1\n",
            "t.kgraph:9: expected 'conv[N] W=.. H=.. R=.. S=.. C=.. K=.. T=.. U=..', "
            "got 'conv[1] W=14 H=14 R=1 C=64 K=64 T=1 U=1'",
        ),
        (
            "dblock[1] f=256 h=56 w=0\n",
            "t.kgraph:9: expected 'dblock[N] f=.. h=.. w=..' with w a positive integer, "
            "got 'dblock[1] f=256 h=56 w=0'",
        ),
        (
            "pool[1] k=3\n",
            "t.kgraph:9: expected a node line 'conv|dblock|cblock|input|output[N] key=value ...', "
            "got 'pool[1] k=3'",
        ),
        (
            "dblock[1] f=256 h=56 w=56\ndblock[1] f=256 h=56 w=56\n",
            "t.kgraph:10: expected a new node index (index 1 is already defined), "
            "got 'dblock[1] f=256 h=56 w=56'",
        ),
        (
            "dblock[1] f=256 h=56 w=56\ndblock[1]:y -> dblock[2]:x, shape:[1]\n",
            "t.kgraph:10: expected an edge between defined nodes (dblock[2] is not defined), "
            "got 'dblock[1]:y -> dblock[2]:x, shape:[1]'",
        ),
        (
            "dblock[1] f=256 h=56 w=56\ncblock[1]:y -> dblock[1]:x, shape:[1]\n",
            "t.kgraph:10: expected dblock[1] (as defined on line 9), "
            "got 'cblock[1]:y -> dblock[1]:x, shape:[1]'",
        ),
        (
            "dblock[1] f=256 h=56 w=56 name='a'\ndblock[2] f=256 h=56 w=56 name='a'\n",
            "t.kgraph:10: expected a unique node name, got 'a' again (first on line 9)",
        ),
        (
            "dblock[1] f=256 h=56 w=56\ndblock[1]:y -> dblock[1]:x\n",
            "t.kgraph:10: expected 'src[i]:port -> dst[j]:port, shape:[..]', "
            "got 'dblock[1]:y -> dblock[1]:x'",
        ),
    ],
)
def test_malformed_body(body: str, message: str) -> None:
    with pytest.raises(KGraphError) as err:
        parse_kgraph(HEADER + body, source="t.kgraph")
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "dblock[1] f=256 h=56 w=56\n",
            "t.kgraph:1: expected a '(* key=value ... *)' header, found none",
        ),
        ("(*\nwidth=633\n", "t.kgraph:1: header '(*' is never closed by '*)'"),
        (
            "(*\nwidth 633\n*)\n",
            "t.kgraph:2: expected 'key=value' or '*)' in the header, got 'width 633'",
        ),
        (
            "(*\nwidth=633\n*)\ndblock[1] f=4 h=1 w=1\n",
            "t.kgraph:1: header lacks height, memlimit, wdeltat, wlength, wadapter",
        ),
        (
            HEADER.replace("width=633", "width=wide") + "dblock[1] f=4 h=1 w=1\n",
            "t.kgraph:1: expected a number for width, got 'wide'",
        ),
        (HEADER + "input[0] n=[1 1 1]\n", "t.kgraph: no conv, dblock or cblock node"),
    ],
)
def test_malformed_header(text: str, message: str) -> None:
    with pytest.raises(KGraphError) as err:
        parse_kgraph(text, source="t.kgraph")
    assert str(err.value) == message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(KGraphError, match=r"nope.kgraph: cannot read"):
        read_kgraph(tmp_path / "nope.kgraph")
