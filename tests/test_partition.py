"""Infer and generate modes over several systems (`wsecc.core.partition`): the split checked by
hand, the crossings' bytes and latency, one system as before, auto, and the one-line
refusals."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import pytest
from conftest import SAMPLES

import wsecc
from wsecc.cli import main
from wsecc.core.partition import balanced_bounds, split_layers
from wsecc.report.build import drop_timings
from wsecc.vocab import Precision

LLAMA = SAMPLES / "llama_dynamo.onnx"  # 2 layers, hidden 64, GQA, rotary
GEN = {"mode": "generate", "seq": 64, "prompt": 16, "placer": "greedy", "target": "wse3"}


@pytest.fixture(scope="module")
def two() -> wsecc.Compilation:
    """The sample in generate mode over two systems (numerics on: the split still generates
    onnxruntime's ids)."""
    return wsecc.compile(LLAMA, systems=2, **GEN)


@pytest.mark.parametrize(
    ("costs", "lead", "tail", "n", "bounds"),
    [
        # 3 + k against 6 - k: k = 1 and 2 both give 5; the groups end earliest on a tie
        ([1, 1, 1, 1, 1, 1], 3, 0, 2, (0, 1, 6)),
        # equal layers, no lead or tail: equal groups
        ([2, 2, 2, 2, 2, 2], 0, 0, 3, (0, 2, 4, 6)),
        # a heavy head (tail 10) leaves the last system one layer: max(4 + 4, 4 + 10) = 14
        ([4, 4, 4, 4], 0, 10, 2, (0, 3, 4)),
    ],
)
def test_balanced_bounds_minimise_the_largest_group_by_hand(costs, lead, tail, n, bounds) -> None:
    assert balanced_bounds(costs, lead, tail, n) == bounds


def test_a_split_over_two_systems_by_hand(two: wsecc.Compilation) -> None:
    """Layer 0 on system 0, layer 1, the final norm and the head on system 1; the embedding
    that leads layer 0 is the host's (`host_lookups`): system 0 reads its rows, 64 tokens x 64
    x 2 bytes (mixed) = 8,192 B per sample, from an input port. The residual stream crosses as
    the two tensors the fused kernels pass on (the residual and the MLP's output, added in the
    next RMSNorm): 64 tokens x 64 hidden x 2 bytes = 8,192 B each, 16,384 B per sample."""
    sized = two.simulated.placed.sized.systems
    assert sized is not None and sized.count == 2
    s0, s1 = sized.partition.parts
    assert (s0.first, s0.last, s1.first, s1.last) == (0, 0, 1, 1)
    assert sized.partition.host_held == ("embedding",)
    assert [k.kind.value for k in s0.graph.kernels][0] == "rmsnorm"
    assert {p.name: p.elems_per_sample for p in s0.graph.inputs}["host:embedding"] == 64 * 64
    assert [k.kind.value for k in s1.graph.kernels][-1] == "lm_head"
    assert len(s0.graph.kernels) + len(s1.graph.kernels) == len(two.kernel_graph.kernels) - 1
    crossings = two.simulated.placed.systems.crossings
    assert [(c.src_system, c.dst_system, c.bytes_per_sample) for c in crossings] == [
        (0, 1, 64 * 64 * 2),
        (0, 1, 64 * 64 * 2),
    ]
    # each crossing tensor is an output port of system 0 and an input port of system 1
    assert len(s0.graph.outputs) == 2 and {p.name for p in s0.graph.outputs} == {
        "s1:" + p.name.split(":", 1)[1] for p in s1.graph.inputs if p.name.startswith("s0:")
    }


def test_the_host_holds_the_embedding_by_hand() -> None:
    """The sample's embedding, 256 rows x 64 x 2 bytes = 32,768 B resident, becomes an input
    port of its output's size: per sample the host sends 64 tokens x 64 x 2 B = 8,192 B of
    rows in place of 64 x 4 B = 256 B of ids. The ids port goes (only the embedding read it),
    the attention mask stays; nothing else changes. One system keeps the embedding."""
    from wsecc.core import chain
    from wsecc.core.flow import lower
    from wsecc.core.partition import host_lookups

    kg = lower(chain.fuse(chain.load(chain.job(LLAMA, **GEN))).graph)
    host = host_lookups(kg, Precision.MIXED)
    assert host.kernels == ("embedding",)
    assert (host.resident_bytes, host.rows_bytes_per_sample, host.ids_bytes_per_sample) == (
        256 * 64 * 2,
        64 * 64 * 2,
        64 * 4,
    )
    assert [p.name for p in host.graph.inputs] == ["attention_mask", "host:embedding"]
    assert [k.name for k in host.graph.kernels] == [k.name for k in kg.kernels[1:]]
    host.graph.verify()
    assert host_lookups(host.graph, Precision.MIXED).kernels == ()  # nothing left to hold


def _wse2_as(tmp_path: Path, **edits: int) -> str:
    """wse2 renamed "small" with `edits` (program_width, program_height, bytes_per_pe,
    max_systems) in place of its own figures, written to tmp_path/small.toml."""
    text = (
        (resources.files("wsecc.targets") / "wse2.toml")
        .read_text()
        .replace('name = "wse2"', 'name = "small"', 1)
    )
    wse2 = {"program_width": 750, "program_height": 994, "bytes_per_pe": 49152, "max_systems": 192}
    for key, value in edits.items():
        old = f"{key} = {wse2[key]}"
        assert old in text
        text = text.replace(old, f"{key} = {value}", 1)
    path = tmp_path / "small.toml"
    path.write_text(text)
    return str(path)


def _small(tmp_path: Path, side: int, data_bytes: int) -> str:
    """wse2 with a side x side program rectangle and `data_bytes` of data SRAM per PE (the
    8,192 B reserve kept)."""
    return _wse2_as(
        tmp_path, program_width=side, program_height=side, bytes_per_pe=8192 + data_bytes
    )


def test_auto_chooses_two_systems_by_hand(tmp_path: Path) -> None:
    """The sample in generate mode (context 64, mixed) on 8 x 8 PEs of 4,096 B of data SRAM:
    a system holds 0.85 x 64 x 4,096 = 222,822 B at sizing's fill. Resident: the embedding
    32,768 B; each layer 128 + 8,192 + 2 x 4,096 + 8,320 (K/V: 2 x 2 heads x 16 x 64 x 2 B, and
    the padding mask's 64 x 2 B) + 8,192 + 128 + 44,032 + 22,016 = 99,200 B; the final norm and
    head 128 + 32,768 = 32,896 B: 264,064 B in all, over one system's 222,822, so auto splits.
    The host then holds the embedding: 231,296 B, two systems (layer 0: 99,200 B; layer 1 and
    the head: 132,096 B). At 8 tokens per chunk a group's buffers do not fit its 54 PEs, so both
    are sized at one token per chunk (a decode step's)."""
    from wsecc.targets import load_target

    from wsecc.core import chain
    from wsecc.core.flow import ForDecode, lower
    from wsecc.core.partition import size_over_systems

    kg = lower(chain.fuse(chain.load(chain.job(LLAMA, **GEN))).graph)
    target = load_target(_small(tmp_path, 8, 4096))
    over = size_over_systems(kg, target, Precision.MIXED, ForDecode(1), 8, None)
    parts = over.partition.parts
    assert over.count == 2
    assert [(p.first, p.last, p.resident_bytes) for p in parts] == [(0, 0, 99_200), (1, 1, 132_096)]
    assert [s.chunk_tokens for s in over.sizings] == [1, 1]
    assert "the fewest that hold it: 231,296 B" in over.why
    assert "222,822 B per small system" in over.why and "sized at 1 token per chunk" in over.why
    assert [(c.src_system, c.dst_system, c.bytes_per_sample) for c in over.partition.crossings] == [
        (0, 1, 64 * 64 * 2),
        (0, 1, 64 * 64 * 2),
    ]


def test_a_split_that_does_not_fit_says_which_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On 10 x 10 PEs of 1,900 B: two systems hold the bytes (0.85 x 100 x 1,900 = 161,500 B
    each) but system 1's group needs more PEs than 85 at its smallest shapes, even
    single-buffered; the refusal says so, and what the PEs' SRAM holds: its shortfall is
    written once, for the message."""
    from wsecc.targets import load_target

    from wsecc.core import chain, partition
    from wsecc.core.flow import ForDecode, lower
    from wsecc.core.partition import PartitionError, size_over_systems

    kg = lower(chain.fuse(chain.load(chain.job(LLAMA, **GEN))).graph)
    target = load_target(_small(tmp_path, 10, 1900))
    calls = []
    written = partition.shortfall
    monkeypatch.setattr(partition, "shortfall", lambda *a: calls.append(a) or written(*a))
    with pytest.raises(PartitionError) as e:
        size_over_systems(kg, target, Precision.MIXED, ForDecode(1), 8, None)
    assert len(calls) == 1
    line = str(e.value)
    assert "\n" not in line and "no split over 2 to 2 systems fits" in line
    assert "system 1's group needs" in line and "over 85% of 100 usable PEs = 85" in line
    assert "231,296 B of weights and K/V cache" in line and "(8,192 B a PE)" in line


def test_the_decode_step_is_each_systems_step_plus_the_crossing(two: wsecc.Compilation) -> None:
    """One crossing of 2 us (the target's `system.crossing_s`) at 1.1 GHz is 2,200 cycles;
    the step is system 0's plus that plus system 1's, and the time to first token likewise."""
    from wsecc.modes.generate import plan_generation

    g, placed = two.generation, two.simulated.placed
    assert g is not None
    own = [plan_generation(p, 16) for p in placed.systems.programs]
    crossing = math.ceil(2e-6 * 1.1e9)
    assert crossing == 2_200
    assert g.decode_cycles == own[0].decode_cycles + crossing + own[1].decode_cycles
    assert g.ttft_s == pytest.approx(own[0].ttft_s + 2e-6 + own[1].ttft_s, rel=1e-12)
    assert g.phases()["crossings"] == crossing
    rep = two.report()
    assert rep["performance"]["systems"] == 2
    rows = rep["systems"]
    assert [(r["first_layer"], r["last_layer"]) for r in rows] == [(0, 0), (1, 1)]
    assert [r["seconds"] for r in rows] == pytest.approx(
        [x.decode_latency_s for x in own], rel=1e-12
    )
    assert sum(r["time_share"] for r in rows) == pytest.approx(1.0)
    assert rows[1]["crossing_in_bytes"] == 2 * 64 * 64 * 2
    assert two.generation_check is not None and two.generation_check.passed


def test_the_report_over_systems_is_schema_valid(two: wsecc.Compilation) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((resources.files("wsecc.report") / "report.schema.json").read_text())
    rep = two.report()
    jsonschema.validate(rep, schema)
    assert rep["partition"]["split"] == "pipeline"
    assert "not modelled" in rep["partition"]["why"]
    # the host's embedding: 256 x 64 x 2 B; a token's row 64 x 2 B against an int32 id
    assert "the host holds the embedding (embedding, 32,768 B" in rep["partition"]["why"]
    assert "128 B per token in place of 4 B of ids" in rep["partition"]["why"]
    assert "it fits one wafer" in rep["partition"]["count_why"]
    bad = json.loads(json.dumps(rep))
    bad["systems"][0]["time_share"] = 2.0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_auto_on_a_model_that_fits_is_one_system_as_before() -> None:
    """--systems auto on a sample that fits one wafer gives one system, and the very report
    of --systems 1 (the option itself aside)."""
    one = wsecc.compile(LLAMA, systems=1, validate=False, **GEN).report(timings=False)
    auto = wsecc.compile(LLAMA, systems=None, validate=False, **GEN).report(timings=False)
    assert auto["performance"]["systems"] == 1 and len(auto["systems"]) == 1
    assert "partition" not in auto
    one.pop("options"), auto.pop("options")
    drop_timings(one), drop_timings(auto)
    assert auto == one


def test_infer_over_two_systems_is_the_slowest_systems_rate() -> None:
    c = wsecc.compile(LLAMA, seq=32, systems=2, placer="greedy", sim="l0", validate=False)
    perf = c.report()["performance"]
    assert perf["systems"] == 2
    each = c.simulated.performance.perfs
    assert perf["samples_per_s"] == min(p.samples_per_s for p in each)
    assert perf["latency_s"] == pytest.approx(sum(p.latency_s for p in each) + 2e-6)


def _target(tmp_path: Path, width: int, height: int, max_systems: int) -> str:
    return _wse2_as(tmp_path, program_width=width, program_height=height, max_systems=max_systems)


@pytest.mark.parametrize(
    ("systems", "max_systems", "message"),
    [
        ("auto", 1, "need at least 2 systems and the target allows 1"),
        ("1", 4, "at least 2 systems: compile it with --systems auto"),
    ],
)
def test_too_many_systems_needed_is_one_line(
    tmp_path: Path, capsys, systems: str, max_systems: int, message: str
) -> None:
    """The sample's 251,520 B of mixed-precision weights on a 2 x 2 program rectangle."""
    target = _target(tmp_path, 2, 2, max_systems)
    out = tmp_path / "out"
    code = main(["compile", str(LLAMA), "--mode", "generate", "--seq", "64", "--systems",
                 systems, "--target", target, "--placer", "greedy", "-o", str(out)])  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and message in err[-1] and err[-1].startswith("wsecc: error: ")
    assert not any("Traceback" in line for line in err)
    assert not out.exists()


def test_more_systems_than_layers_is_refused() -> None:
    from wsecc.core import chain
    from wsecc.core.flow import lower
    from wsecc.errors import WseccError

    fused = chain.fuse(chain.load(chain.job(LLAMA, seq=32)))
    with pytest.raises(WseccError, match="3 systems for 2 layers"):
        split_layers(lower(fused.graph), "mixed", 3)


def test_a_sweep_takes_systems_in_an_infer_point(tmp_path: Path) -> None:
    from wsecc.sweep import load_spec, read_table, run_sweep

    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[[models]]\npath = "{LLAMA}"\nname = "llama"\n[axes]\nsystems = [1, 2]\n'
        '[fixed]\nseq = 32\nplacer = "greedy"\nvalidate = false\nsim = "l0"\n'
    )
    summary = run_sweep(load_spec(spec), tmp_path / "out", workers=1)
    assert (summary.points, summary.ran) == (2, 2)
    rows = read_table(tmp_path / "out")
    assert [(r["systems"], r["systems_used"], r["status"]) for r in rows] == [
        (1, 1, "ok"),
        (2, 2, "ok"),
    ]


def test_a_folder_over_systems_is_resimulated_whole(two: wsecc.Compilation, tmp_path: Path) -> None:
    """The folder keeps every system's products (system 0's at the top, kernels.json and
    sizing.json agreeing on it; system 1's in systems/1/, issue 30), so re-simulating it gives
    the compile's figures over both systems (tests/test_folders.py covers the rest)."""
    out = two.write(tmp_path / "two.wsecc")
    kernels = json.loads((out / "kernels.json").read_text())
    sizing = json.loads((out / "sizing.json").read_text())
    assert {k["name"] for k in kernels["kernels"]} == {k["name"] for k in sizing["kernels"]}
    assert (out / "systems" / "1" / "placement.json").is_file()
    assert main(["simulate", str(out), "--sim", "l0", "--no-validate"]) == 0
    again = json.loads((out / "report.json").read_text())
    assert again["performance"] == two.report()["performance"]
    assert again["systems"] == two.report()["systems"]
    html = (out / "viewer.html").read_text()
    assert '"systems":[{"system":0' in html


def test_a_group_that_does_not_pack_is_one_line_with_systems_n(monkeypatch) -> None:
    """With --systems N, a layer group whose regions do not pack is refused in one line naming
    --systems (auto takes one more system instead)."""
    from wsecc.core import chain
    from wsecc.errors import WseccError
    from wsecc.place.problem import PlacementError

    def no_room(*args: object, **kw: object) -> None:
        raise PlacementError("regions do not pack")

    monkeypatch.setattr(chain, "place_systems", no_room)
    with pytest.raises(WseccError, match="does not pack on one of 2 systems.*--systems auto"):
        wsecc.compile(LLAMA, systems=2, validate=False, **GEN)


def test_least_pes_are_each_kernels_smallest_region() -> None:
    """`least_pes`: one count per kernel, the two layers' kernels alike, together the PEs
    `fit_bounds` finds the model needs at least (what a group needs of a system's area, the
    balance tried when a split by resident bytes does not fit)."""
    from wsecc.targets import load_target

    from wsecc.core import chain
    from wsecc.core.flow import lower
    from wsecc.core.partition import least_pes
    from wsecc.kernels import fit_bounds

    kg = lower(chain.fuse(chain.load(chain.job(LLAMA, **GEN))).graph)
    target = load_target("wse3")
    pes = least_pes(kg, target, Precision.MIXED, 8)
    assert len(pes) == len(kg.kernels) and min(pes) >= 1
    names = [k.name for k in kg.kernels]
    one = dict(zip(names, pes, strict=True))
    assert one["gated_linear"] == one["gated_linear.2"] and one["attention"] == one["attention.2"]
    assert sum(pes) == fit_bounds(kg, target, Precision.MIXED, chunk_tokens=8).min_pes


def test_placement_falls_back_from_a_denser_fill() -> None:
    """A sizing at FILL_STEPS' first fill tries FILL_STEPS as before; one at the denser fill a
    split over systems may take (DENSE_FILL) tries it first, then every lower step."""
    from wsecc.core.flow import FILL_STEPS, fills_from
    from wsecc.core.partition import DENSE_FILL

    assert fills_from(FILL_STEPS[0]) == FILL_STEPS
    assert fills_from(DENSE_FILL) == (0.9, 0.85, 0.75, 0.65, 0.55)


def test_a_saved_split_is_read_back_as_it_was_made() -> None:
    """`regroup` rebuilds the split a compile made from the kernels each system holds, with the
    host's embedding (the model's kernel no group names) held again: the same groups, layers,
    resident bytes and crossings as `split_layers` gave, whatever that split was balanced by
    (a split balanced by PEs cannot be made again by bytes). Groups out of order are refused."""
    from wsecc.core import chain
    from wsecc.core.flow import lower
    from wsecc.core.partition import PartitionError, host_lookups, regroup

    kg = lower(chain.fuse(chain.load(chain.job(LLAMA, **GEN))).graph)
    host = host_lookups(kg, Precision.MIXED)
    made = split_layers(host.graph, Precision.MIXED, 2)
    groups = [[k.name for k in p.graph.kernels] for p in made.parts]
    back = regroup(kg, Precision.MIXED, groups, [(p.first, p.last) for p in made.parts])
    assert back.host_held == ("embedding",)
    assert back.parts == made.parts
    assert back.crossings == made.crossings
    with pytest.raises(PartitionError, match="not a split of its kernels in order"):
        regroup(kg, Precision.MIXED, groups[::-1], [(1, 1), (0, 0)])


def test_auto_says_once_why_it_passed_over_counts_that_did_not_pack() -> None:
    """Auto adds a system each time a group does not pack; its reason names the first sizing
    once and the counts passed over, not one reason nested in the next."""
    from wsecc.core.chain import unpacked_why

    why = unpacked_why("139.7 GB of weights ... sized at 90% fill", [7, 8, 9])
    assert why == (
        "139.7 GB of weights ... sized at 90% fill; over 7, 8, 9 system(s) a group's regions "
        "did not pack at any fill, so 10"
    )
