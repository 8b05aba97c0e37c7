"""Expert parallelism (`wsecc.passes.split_moe`, `wsecc.core.experts`): a moe block split into
shards of its experts, checked by hand on the bundled Mixtral export; the shards' numerics
against onnxruntime; the split over systems cutting a layer at a shard boundary; a block that
fits left whole; the one-line refusal when one expert does not fit a system."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path

import pytest
from conftest import SAMPLES

import wsecc
from wsecc.cli import main
from wsecc.core import chain
from wsecc.core.flow import lower
from wsecc.kernels import KernelKind
from wsecc.vocab import Precision

MIXTRAL = SAMPLES / "mixtral_dynamo.onnx"  # 2 layers, H 64, 4 experts of F 96, top 2
MOE_SAMPLES = ["mixtral_dynamo.onnx", "qwen2moe_dynamo.onnx", "gptoss_dynamo.onnx",
               "llama4_dynamo.onnx"]  # fmt: skip


def _moes(**options: object) -> list:
    fused = chain.fuse(chain.load(chain.job(MIXTRAL, seq=16, **options)))
    return [k for k in lower(fused.graph).kernels if k.kind == KernelKind.MOE]


def _small(tmp_path: Path, side: int, data_bytes: int) -> str:
    """wse2 renamed "small", side x side PEs of `data_bytes` of data SRAM (the 8,192 B reserve
    kept), written to tmp_path/small.toml."""
    text = (resources.files("wsecc.targets") / "wse2.toml").read_text()
    text = text.replace('name = "wse2"', 'name = "small"', 1)
    for key, old, new in [
        ("program_width", 750, side),
        ("program_height", 994, side),
        ("bytes_per_pe", 49152, 8192 + data_bytes),
    ]:
        assert f"{key} = {old}" in text
        text = text.replace(f"{key} = {old}", f"{key} = {new}", 1)
    path = tmp_path / "small.toml"
    path.write_text(text)
    return str(path)


def test_two_shards_of_mixtral_by_hand() -> None:
    """--expert-shards 2: each of the 2 blocks becomes 2 shards of 2 experts, each holding a
    copy of the router over all 4: (64 x 4 + 3 x 2 x 64 x 96) x 2 B = 74,240 B (mixed), the
    two together the whole block's 147,968 B (its experts' 3 x 4 x 64 x 96 x 2 = 147,456 B and
    its router's 512 B) plus one more router's 512 B.
    Shard 1 reads x and shard 0's running sum, 16 tokens x 64 each."""
    (whole,) = {k.weight_bytes(Precision.MIXED) for k in _moes()}
    shards = _moes(expert_shards=2)
    assert [k.name for k in shards] == ["moe.e0-1", "moe.e2-3", "moe.e0-1.2", "moe.e2-3.2"]
    assert [(k.params["E"], k.params["R"], k.params["accumulate"]) for k in shards] == [
        (2, 4, False), (2, 4, True), (2, 4, False), (2, 4, True),
    ]  # fmt: skip
    assert {k.weight_bytes(Precision.MIXED) for k in shards} == {(64 * 4 + 3 * 2 * 64 * 96) * 2}
    assert whole == (64 * 4 + 3 * 4 * 64 * 96) * 2 == 2 * 74_240 - 64 * 4 * 2
    fused = chain.fuse(chain.load(chain.job(MIXTRAL, seq=16, expert_shards=2)))
    kg = lower(fused.graph)
    into = [(f.src, f.elems_per_sample) for f in kg.flows if f.dst == "moe.e2-3"]
    assert into == [("rms_norm.2", 16 * 64), ("moe.e0-1", 16 * 64)]


def test_a_shard_counts_its_share_of_the_chosen_experts() -> None:
    """A shard's work: the router over all R = 4 experts, and its expected share of a token's
    k = 2 choices, k E / R = 1 of its 2 experts; the two shards' work is the block's plus one
    more router."""
    whole = _moes()[0]
    a, b = _moes(expert_shards=2)[:2]
    router = 2 * 16 * 64 * 4 + 16 * (4 * (8 + 3) + 4 * 2 + 2 * 2)
    assert a.flops_per_sample + b.flops_per_sample == whole.flops_per_sample + router


@pytest.mark.parametrize("sample", MOE_SAMPLES)
def test_a_forced_split_matches_onnxruntime_fp32(sample: str) -> None:
    c = wsecc.compile(SAMPLES / sample, seq=16, placer="greedy", validate=True,
                      precision="fp32", expert_shards=2)  # fmt: skip
    moes = [k for k in c.kernel_graph.kernels if k.kind == KernelKind.MOE]
    assert len(moes) % 2 == 0 and all(k.params["R"] == 2 * k.params["E"] for k in moes)
    assert c.numerics is not None and c.numerics.passed, c.numerics.summary()


@pytest.mark.slow
@pytest.mark.parametrize("sample", MOE_SAMPLES)
def test_a_forced_split_matches_onnxruntime_mixed(sample: str) -> None:
    c = wsecc.compile(SAMPLES / sample, seq=16, placer="greedy", validate=True,
                      precision="mixed", expert_shards=2)  # fmt: skip
    assert c.numerics is not None and c.numerics.passed, c.numerics.summary()


@pytest.fixture(scope="module")
def four() -> wsecc.Compilation:
    """Mixtral's 2 blocks in 2 shards each over 4 systems (generate mode, fp32, numerics on)."""
    return wsecc.compile(MIXTRAL, mode="generate", seq=32, prompt=8, placer="greedy",
                         validate=True, precision="fp32", expert_shards=2, systems=4,
                         target="wse3")  # fmt: skip


def test_shards_over_four_systems_generate_onnxruntimes_ids(four: wsecc.Compilation) -> None:
    """Each layer is cut at its shard boundary, so system 1 holds layer 0's second shard
    alone. The cut carries the block's input x (per sample 32 tokens x 64 x 4 B) and the
    running sum; the ids equal onnxruntime's greedy generation."""
    c = four
    sized = c.simulated.placed.sized.systems
    assert sized is not None and sized.count == 4
    parts = sized.partition.parts
    assert [(p.first, p.last) for p in parts] == [(0, 0), (0, 0), (1, 1), (1, 1)]
    assert [k.name for k in parts[1].graph.kernels] == ["moe.e2-3"]
    into_1 = [(c.src, c.bytes_per_sample) for c in sized.partition.crossings if c.dst_system == 1]
    assert into_1 == [("rms_norm.2", 32 * 64 * 4), ("moe.e0-1", 32 * 64 * 4)]
    rows = c.report()["systems"]
    assert [r.get("expert_shards") for r in rows] == [
        ["moe.e0-1"], ["moe.e2-3"], ["moe.e0-1.2"], ["moe.e2-3.2"],
    ]  # fmt: skip
    check = c.generation_check
    assert check is not None and check.passed and "ids identical" in check.summary()


def test_llama4s_last_moe_layer_is_cut_at_its_shards() -> None:
    """The 2-layer Llama 4 sample (dense, then MoE): its MoE layer is longer than the dense one
    before it, and still its two shards go to systems 1 and 2; the ids are onnxruntime's."""
    c = wsecc.compile(SAMPLES / "llama4_dynamo.onnx", mode="generate", seq=32, prompt=8,
                      placer="greedy", validate=True, precision="fp32", expert_shards=2,
                      systems=3, target="wse3")  # fmt: skip
    rows = c.report()["systems"]
    assert [r.get("expert_shards") for r in rows] == [None, ["moe.e0-1"], ["moe.e2-3"]]
    check = c.generation_check
    assert check is not None and check.passed and "ids identical" in check.summary()


def test_a_folder_with_shards_over_systems_is_resimulated_whole(
    four: wsecc.Compilation, tmp_path: Path
) -> None:
    out = four.write(tmp_path / "four.wsecc")
    assert main(["simulate", str(out), "--sim", "l0", "--no-validate"]) == 0
    again = json.loads((out / "report.json").read_text())
    assert again["performance"] == four.report()["performance"]
    assert again["systems"] == four.report()["systems"]


@pytest.mark.slow
@pytest.mark.parametrize("sample", MOE_SAMPLES)
def test_a_forced_split_generates_onnxruntimes_ids(sample: str) -> None:
    c = wsecc.compile(SAMPLES / sample, mode="generate", seq=32, prompt=8, placer="greedy",
                      validate=True, precision="fp32", expert_shards=2)  # fmt: skip
    check = c.generation_check
    assert check is not None and check.passed and "ids identical" in check.summary()


def test_a_block_that_fits_is_left_whole() -> None:
    """On wse3 Mixtral's blocks fit a system: --systems auto leaves them whole and the compile
    gives the figures --systems 1 gives."""
    auto = wsecc.compile(MIXTRAL, mode="generate", seq=32, prompt=8, placer="greedy",
                         validate=False, target="wse3", systems=None)  # fmt: skip
    one = wsecc.compile(MIXTRAL, mode="generate", seq=32, prompt=8, placer="greedy",
                        validate=False, target="wse3", systems=1)  # fmt: skip
    assert [k.name for k in auto.kernel_graph.kernels if k.kind == KernelKind.MOE] == [
        "moe", "moe.2",
    ]  # fmt: skip
    a, b = auto.report()["performance"], one.report()["performance"]
    assert a["tokens_per_s"] == b["tokens_per_s"] and a["systems"] == b["systems"] == 1


def test_auto_takes_the_fewest_shards_that_fit(tmp_path: Path) -> None:
    """On 6 x 6 PEs of 4,096 B a system fills 0.85 x 36 = 30 PEs; a whole block's smallest
    fitting shape takes 48 PEs, a shard of 2 experts 24: two shards."""
    from wsecc.targets import load_target

    from wsecc.core.experts import expert_shards, shard_kernel
    from wsecc.kernels import CostContext, smallest_region

    path = _small(tmp_path, 6, 4096)
    target = load_target(path)
    job = chain.job(MIXTRAL, mode="generate", seq=16, prompt=8, systems=1, target=path)
    whole = chain.fuse(chain.load(job)).graph  # one system: the blocks stay whole
    node = next(n for n in whole.nodes if n.op.value == "moe")
    (tmp_path / "big").mkdir()
    big = load_target(_small(tmp_path / "big", 16, 4096))
    shards = [shard_kernel(node, 1, s) for s in (1, 2)]
    smallest = [smallest_region(k, CostContext(big, Precision.MIXED, 1)) for k in shards]
    assert [c.area for c in smallest if c is not None] == [48, 24]
    auto = dataclasses.replace(job.options, systems=None)
    moes = [n.name for n in whole.nodes if n.op.value == "moe"]
    assert expert_shards(whole, target, auto) == dict.fromkeys(moes, 2)


def test_one_expert_that_does_not_fit_is_one_line(tmp_path: Path, capsys) -> None:
    """On 3 x 3 PEs of 4,096 B not even one expert with its router, (64 x 4 + 3 x 64 x 96)
    x 2 = 37,376 B, fits a system: one line, exit 2, nothing written."""
    target = _small(tmp_path, 3, 4096)
    out = tmp_path / "out"
    code = main(["compile", str(MIXTRAL), "--mode", "generate", "--seq", "32", "--systems",
                 "auto", "--target", target, "--placer", "greedy", "-o", str(out)])  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and err[-1].startswith("wsecc: error: ")
    assert "one expert with its router (37,376 B in mixed) does not fit one small system" in err[-1]
    assert not any("Traceback" in line for line in err)
    assert not out.exists()


def test_shards_that_do_not_divide_the_experts_are_one_line(capsys) -> None:
    code = main(["compile", str(MIXTRAL), "--seq", "16", "--expert-shards", "3",
                 "--placer", "greedy", "--no-validate"])  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and "4 experts: 3 shards do not split them evenly" in err[-1]


def test_segments_that_cannot_share_a_system_bound_the_count(tmp_path: Path) -> None:
    """On 6 x 6 PEs of 4,096 B, half of the densest fill is 0.9 x 36 / 2 = 16.2 PEs; each of
    Mixtral's 4 segments (its 2 layers cut at their shard boundaries) holds a shard of 24 PEs
    at its smallest shape, so no two share a system: at least 4 systems."""
    from wsecc.targets import load_target

    from wsecc.core.layers import find_layers
    from wsecc.core.partition import least_pes, lone_segments, segments

    target = load_target(_small(tmp_path, 6, 4096))
    job = chain.job(MIXTRAL, mode="generate", seq=16, prompt=8, expert_shards=2)
    kg = lower(chain.fuse(chain.load(job)).graph)
    layers = find_layers([k.kind for k in kg.kernels])
    assert layers is not None and len(segments(kg, layers)) == 4
    pes = least_pes(kg, target, Precision.MIXED, 1)
    shards = [p for k, p in zip(kg.kernels, pes, strict=True) if k.kind == KernelKind.MOE]
    assert shards == [24, 24, 24, 24]
    assert lone_segments(kg, pes, target) == 4


def test_a_fork_with_other_shards_splits_again() -> None:
    """A sweep shares the fused graph between its points (`chain.fork`); a point asking for
    other shards gets its own split, from the imported graph."""
    fused = chain.fuse(chain.load(chain.job(MIXTRAL, seq=16, expert_shards=2)))
    whole = chain.fork(fused, dataclasses.replace(fused.job.options, expert_shards=None))
    four = chain.fork(fused, dataclasses.replace(fused.job.options, expert_shards=4))
    count = [sum(n.op.value == "moe" for n in f.graph.nodes) for f in (fused, whole, four)]
    assert count == [4, 2, 8]
    same = chain.fork(fused, dataclasses.replace(fused.job.options, placer="greedy"))
    assert same.graph is fused.graph
