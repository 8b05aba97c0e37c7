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


# --- a decode step over a block's shards: the worst split of a token's k choices -------------


def _ctx():  # wse3, mixed: sb 2, ab 4, L 4 B a cycle, f 8, v 1, hop 1, ramp 2 (relay 5)
    from wsecc.targets import load_target

    from wsecc.kernels.costs import CostContext

    return CostContext(load_target("wse3"), Precision.MIXED, 8)


MIXTRAL_SHARD = {"tokens": 1, "H": 64, "F": 96, "E": 2, "R": 4, "k": 2, "router": "softmax",
                 "normalize": True, "S": 0, "shared": "none", "accumulate": True}  # fmt: skip


def test_a_shards_step_at_each_count_of_choices_by_hand() -> None:
    """Mixtral's shard (2 of the router's 4 experts, top 2) on 8 x 24 PEs of wse3, one token:
    2 cells of hs 8 x ws 12, kh 8, ni 8; the router's 4 columns on 4 PEs (rc 1).

    Every c: compute 2 (router matvec, 16 B) + 56 (router_ops(4, 2) = 4 x 11 + 8 + 4);
    reduction 25 (logits down 8 rows: a tree of 2-PE groups, 4 + 3 x 6 + 2) + 6 (gathered
    over 4 columns: 3 hops + 12 B); broadcast 27 (x along 24 columns: 23 + 16 B / 4) + 9 (the
    decision down 8 rows: 7 + 8 B / 4).
    c = 0: the running sum passes the cell, 11 + 32 B / 4 = 19, then the other cell's 12
    hops: (58, 62, 36).
    c = 1: + 48 (384 B of tiles at f 8) and 12 gate ops on compute; gate/up partials down the
    cell column 51 (a chain: 7 relays + 64 B / 4), the W_down partials along the cell 47 (a
    tree of 3-PE groups: 10 + 3 x 7 + 2 x 8), 12 hops and one add (5): 146; h back up the
    column 7 + 16 B / 4 = 11 more broadcast: (118, 146, 47).
    c = 2: the same cell (ep 1 holds one expert) and one more add: (118, 151, 47)."""
    from wsecc.kernels.kinds.moe import moe_step

    ctx = _ctx()
    steps = [moe_step(MIXTRAL_SHARD, 8, 24, ctx, 1, c) for c in range(3)]
    assert [(d.compute, d.reduction, d.broadcast) for d in steps] == [
        (58, 62, 36), (118, 146, 47), (118, 151, 47),
    ]  # fmt: skip
    assert [d.bytes_read for d in steps] == [16, 16 + 384, 16 + 384]
    per_choice = 6 * 64 * 96 + 96 * 12 + 2 * 64
    assert [d.flops for d in steps] == [2 * 64 * 4 + 56 + c * per_choice for c in range(3)]


def test_the_unsplit_blocks_step_is_mains() -> None:
    """The whole block (4 experts, R = E) on 8 x 48 PEs: 4 cells of 8 x 12, its step with all
    k = 2 choices as before the split charge: the shard's c = 2 pieces, the combine across
    36 more columns (reduction 175 = 151 + 24), x along 48 columns (broadcast 71 = 47 + 24);
    `moe_decode` (no `choices`) is `moe_step` at c = k."""
    from wsecc.kernels.kinds.moe import moe_decode, moe_step

    whole = {**MIXTRAL_SHARD, "E": 4, "accumulate": False}
    d = moe_decode(whole, 8, 48, _ctx(), 1)
    assert (d.compute, d.reduction, d.broadcast) == (118, 175, 71)
    assert d == moe_step(whole, 8, 48, _ctx(), 1, 2)


def test_the_worst_split_of_k_choices_over_shards() -> None:
    """Shard steps (cycles at c = 0, 1, 2 choices): concave ones are worst split apart, a
    shard whose first choice costs more takes k = 1; a tie gives the earlier shard more."""
    from wsecc.core.experts import uniform_odds, worst_split

    assert worst_split([(156, 311, 316)] * 2, 2) == (1, 1)  # 622 against 472 for (2, 0)
    assert worst_split([(156, 311, 500)] * 2, 2) == (2, 0)  # 656 against 622
    assert worst_split([(140, 282)] * 4, 2) == (1, 1, 0, 0)
    assert worst_split([(262, 396), (149, 266)], 1) == (1, 0)  # 545 against 528
    assert worst_split([(262, 396)], 1) == (1,)  # unsplit: the one split, c = k
    with pytest.raises(ValueError, match="cannot take 3 choices"):
        worst_split([(1, 2)] * 2, 3)
    # 2 of 4 experts, top 2 uniform: both in (1/6), one (4/6), none (1/6)
    assert uniform_odds(2, 4, 2) == pytest.approx((1 / 6, 4 / 6, 1 / 6))
    assert uniform_odds(64, 128, 1) == pytest.approx((0.5, 0.5))


def _plan(sample: str, shards: int) -> tuple[wsecc.Compilation, list, dict[str, int]]:
    """A 1-system generate compile of `sample` split `shards` ways: the compile, its blocks'
    charges, and each moe stage's decode cycles."""
    from wsecc.core.experts import decode_charges

    c = wsecc.compile(SAMPLES / sample, mode="generate", seq=32, prompt=8, placer="greedy",
                      validate=False, expert_shards=shards, target="wse3")  # fmt: skip
    program = c.simulated.placed.program
    charges, _ = decode_charges(program.kg, [(program, program.kg)])
    g = c.simulated.performance.generation
    stages = {s.name: s.total for s in g.stages if s.kernel_kind == "moe"}
    return c, list(charges), stages


@pytest.mark.parametrize(
    ("sample", "shards"),
    [("mixtral_dynamo.onnx", 2), ("mixtral_dynamo.onnx", 4), ("llama4_dynamo.onnx", 2)],
)
def test_a_decode_step_charges_each_block_its_worst_split(sample: str, shards: int) -> None:
    """Each block's shards on their placed regions: the block's step is the largest of
    sum_s step_s(c_s) over every split of the k choices (enumerated here, c_s <= min(k, E_s)),
    each shard's stage in the decode step is its step at the charged c_s, and the step's
    latency is what charging all k on every shard gave less the difference (the shards are
    on the critical path: one after the other)."""
    import itertools

    from wsecc.kernels.costs import CostContext
    from wsecc.kernels.kinds.moe import moe_step
    from wsecc.modes.generate import plan_generation

    c, charges, stages = _plan(sample, shards)
    program = c.simulated.placed.program
    ctx = CostContext(program.target, program.precision, program.chunk_tokens)
    assert len(charges) == 2 if sample.startswith("mixtral") else len(charges) == 1
    saved = 0
    for ch in charges:
        ks = [program.kg.kernel(n) for n in ch.shards]
        rects = [program.placement.rects[n] for n in ch.shards]
        k = int(ks[0].params["k"])

        def step(i: int, c_: int, ks=ks, rects=rects) -> int:
            return moe_step(ks[i].params, rects[i].h, rects[i].w, ctx, 1, c_).latency

        tops = [range(min(k, int(x.params["E"])) + 1) for x in ks]
        splits = [s for s in itertools.product(*tops) if sum(s) == k]
        worst = max(sum(step(i, c_) for i, c_ in enumerate(s)) for s in splits)
        assert ch.cycles == worst == sum(step(i, c_) for i, c_ in enumerate(ch.split))
        assert [stages[n] for n in ch.shards] == [step(i, c_) for i, c_ in enumerate(ch.split)]
        assert ch.all_on_each_cycles == sum(
            step(i, min(k, ks[i].params["E"])) for i in range(shards)
        )
        saved += ch.all_on_each_cycles - ch.cycles
    every = plan_generation(program, 8)  # no charges: every shard all k
    assert c.simulated.performance.generation.decode_cycles == every.decode_cycles - saved
    assert saved > 0


def test_an_unsplit_block_is_charged_as_before() -> None:
    """Unsplit, no block has shards: nothing is charged and each moe stage is its kind's step
    with all k choices, the same step with or without the charges."""
    from wsecc.modes.generate import plan_generation

    c, charges, stages = _plan("mixtral_dynamo.onnx", 1)
    assert charges == [] and sorted(stages) == ["moe", "moe.2"]
    program = c.simulated.placed.program
    again = plan_generation(program, 8)
    assert again.decode_cycles == c.simulated.performance.generation.decode_cycles


def test_shards_on_different_systems_are_charged_one_split(four: wsecc.Compilation) -> None:
    """Over 4 systems each of Mixtral's shards sits alone on a system: the block's split is
    still chosen over both shards, one choice each (their steps are concave in c), and each
    system's shard stage is its step at that one choice on its own placement."""
    from wsecc.core.experts import decode_charges
    from wsecc.kernels.costs import CostContext
    from wsecc.kernels.kinds.moe import moe_step

    placed = four.simulated.placed
    parts = placed.sized.systems.partition.parts
    programs = placed.systems.programs
    charges, choices = decode_charges(
        placed.sized.kernel_graph, [(programs[i], p.graph) for i, p in enumerate(parts)]
    )
    assert [(ch.shards, ch.split) for ch in charges] == [
        (("moe.e0-1", "moe.e2-3"), (1, 1)), (("moe.e0-1.2", "moe.e2-3.2"), (1, 1)),
    ]  # fmt: skip
    # beside the charge: a uniform router puts both choices in a shard 1/6 of the time, one
    # 4/6, none 1/6
    for ch in charges:
        assert ch.uniform_cycles == pytest.approx(sum((a + 4 * b + c) / 6 for a, b, c in ch.steps))
        assert ch.uniform_cycles < ch.cycles
    assert (
        charges[0]
        .describe()
        .startswith(
            f"1 in moe.e0-1 + 1 in moe.e2-3: {charges[0].cycles:,} cycles (each shard all 2: "
        )
    )
    stages = {s.name: s.total for s in four.simulated.performance.generation.stages}
    for i, part in enumerate(parts):
        (shard,) = [k for k in programs[i].kg.kernels if k.kind == KernelKind.MOE]
        assert choices[i] == {shard.name: 1}
        r = programs[i].placement.rects[shard.name]
        ctx = CostContext(programs[i].target, programs[i].precision, programs[i].chunk_tokens)
        step = moe_step(shard.params, r.h, r.w, ctx, 1, 1).latency
        (name,) = [k.name for k in part.graph.kernels if k.kind == KernelKind.MOE]
        assert stages[f"s{i}/{shard.name}"] == step, name


def test_the_summary_says_the_split_blocks_charge(tmp_path: Path, capsys) -> None:
    """The compile's generate lines say how the split blocks were charged; the unsplit compile
    says nothing of it."""
    args = ["compile", str(MIXTRAL), "--mode", "generate", "--seq", "32", "--prompt", "8",
            "--placer", "greedy", "--no-validate", "--target", "wse3"]  # fmt: skip
    assert main([*args, "--expert-shards", "2", "-o", str(tmp_path / "two")]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "expert shards:" in ln]
    assert len(lines) == 1 and lines[0].split()[0] == "generate", lines
    assert "2 moe block(s) charged the worst split of a token's k = 2 choices" in lines[0]
    assert main([*args, "-o", str(tmp_path / "whole")]) == 0
    assert "expert shards:" not in capsys.readouterr().err
