"""L0: a hand-worked two-kernel program on tiny32, the memory-port model, compiled samples, plots."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources

import pytest
from wsecc.targets import load_target, parse_target

from wsecc.kernels import Flow, Kernel, KernelKind, Port
from wsecc.place.problem import Rect
from wsecc.sim.perf import SimulationError, memory_port_demand, simulate_l0
from wsecc.sim.roofline import roofline
from wsecc.view.png import write_roofline_png

HZ = 850e6  # tiny32's clock


def two_kernels(build, target=None, lanes=1):
    """x -> A (linear 64x64, no bias, 2x4 PEs) -> B (layernorm, 1x4 PEs) -> y, mixed, 32 tokens.

    A's lanes run south from its S edge (row 1) to B's N edge (row 4): 3 hops each."""
    target = target or load_target("tiny32")
    a = Kernel(
        "A",
        KernelKind.LINEAR,
        dict(tokens=32, K=64, N=64, has_bias=False, activation="", residual=False),
    )
    b = Kernel("B", KernelKind.LAYERNORM, dict(rows=32, dim=64, has_residual=False))
    x, y = Port("x", 32 * 64), Port("y", 32 * 64)
    flows = [Flow.between(x, a, 2048), Flow.between(a, b, 2048), Flow.between(b, y, 2048)]
    rects = {"A": Rect(0, 0, 4, 2), "B": Rect(0, 4, 4, 1)}
    paths = [tuple((c, r) for r in range(1, 5)) for c in range(1, 1 + lanes)]
    return build.program(
        target, [a, b], flows, rects, {"A->B": paths}, tokens=32, inputs=[x], outputs=[y]
    )


def test_hand_worked_l0(build):
    """mixed on tiny32: sb 2, ab 4, f 4 flop/cycle, v 1 op/cycle, L 4 B/cycle, chunk 8 tokens,
    io 150e9 B/s / 850 MHz = 176.47 B/cycle, hop 1 cycle, ramp 2 cycles.

    A (linear, `_matmul`, h 2 x w 4): kh = 64/2 = 32, nw = 64/4 = 16
        compute = 2 * 32 tokens * 32 * 16 / 4 = 8192; link = max(32*32*2, 32*16*4, 32*16*2) / 4 = 512
        memory = 8192 * demand 1.0 (`memory_port_demand`) = 8192 -> 8192 cycles, compute-bound
    B (layernorm, `_rowwise`, 1 x 4): dw = 16; compute = 32 * 16 * 6 ops / 1 = 3072;
        link = max(32*16*2/4, same, 2*32*2*4/4) = 256 -> 3072
    A->B: 2048 elems * 2 B = 4096 B over 1 lane of 4 B/cycle = 1024; latency 3 hops * 1 + 2 * 2 = 7
    host-in, host-out: 4096 B / 176.47 B/cycle = 23.2 -> 24
    Throughput: 850e6 / 8192 = 103,759.77 samples/s, x 32 tokens.
    Latency, n = 32 / 8 = 4 chunks, per chunk 6, 2048, 256 (+7), 768, 6:
        (6 + 2048 + 256 + 7 + 768 + 6) + (4 - 1) * 2048 = 3091 + 6144 = 9235 cycles
    Flops: A 2 * 32 * 64 * 64 = 262,144; B 32 * 64 * 6 = 12,288 -> 274,432 per sample.
    """
    prog = two_kernels(build)
    r = simulate_l0(prog, batch=3)
    assert [k.cycles_per_sample for k in r.kernels] == [8192, 3072]
    a, b = r.kernels
    assert (a.compute_cycles, a.link_cycles, a.memory_cycles, a.bound) == (
        8192,
        512,
        8192,
        "compute",
    )
    assert (b.compute_cycles, b.link_cycles, b.bound) == (3072, 256, "compute")
    assert [(f.name, f.cycles_per_sample, f.latency_cycles, f.hops) for f in r.flows] == [
        ("host-in", 24, 0, 0),
        ("A->B", 1024, 7, 3),
        ("host-out", 24, 0, 0),
    ]
    assert r.stage_cycles == 8192 and r.bottleneck == "A" and r.bottleneck_kind == "kernel"
    assert r.samples_per_s == pytest.approx(850e6 / 8192)
    assert r.tokens_per_s == pytest.approx(32 * 850e6 / 8192)
    assert r.n_chunks == 4
    assert r.latency_cycles == pytest.approx(9235)
    assert r.latency_s == pytest.approx(9235 / HZ)
    assert r.batch_latency_s == pytest.approx((9235 + 2 * 8192) / HZ)
    assert r.critical_path == ("host-in", "A", "A->B", "B", "host-out")
    assert r.flops_per_sample == 274_432
    assert r.utilization == pytest.approx(274_432 / (8192 * 1024 * 4))
    assert r.pes_used == 12
    assert r.utilization_used == pytest.approx(274_432 / (8192 * 12 * 4))
    assert a.intensity == pytest.approx(262_144 / (2 * 4096))  # in + out bytes: 4096 each
    assert a.busy == 1.0 and b.busy == pytest.approx(3072 / 8192)
    json.dumps(r.to_json())  # serialisable


def test_more_lanes_shorten_a_flow_and_host_io_can_be_left_out(build):
    r = simulate_l0(two_kernels(build, lanes=2))
    assert r.flow("A->B").cycles_per_sample == 4096 // (2 * 4) and r.flow("A->B").lanes == 2
    no_io = simulate_l0(two_kernels(build), host_io=False)
    assert no_io.flow("host-in").cycles_per_sample == 0
    assert no_io.latency_cycles == pytest.approx(9235 - 12)  # two 6-cycle host chunks fewer


def test_memory_port_demand():
    wse2 = load_target("wse2")
    # mixed FMAC: 2 FMAs x 4 B accumulator written per cycle = the 8 B write port
    assert memory_port_demand(wse2, "mixed") == 1.0
    assert memory_port_demand(wse2, "fp16") == 1.0  # 4 x (2 + 2) B read = 16 B of 2 x 8 B ports
    assert memory_port_demand(wse2, "fp32") == 0.5
    assert memory_port_demand(load_target("wse3"), "fp16") == 1.0


def test_narrow_memory_ports_make_kernels_memory_bound(build):
    text = (resources.files("wsecc.targets") / "tiny32.toml").read_text()
    narrow = parse_target(text.replace("width_bits = 64", "width_bits = 16"), "narrow.toml")
    assert memory_port_demand(narrow, "mixed") == 4.0  # 2 FMAs x 4 B written vs a 2 B port
    r = simulate_l0(two_kernels(build, target=narrow))
    assert [k.bound for k in r.kernels] == ["memory", "memory"]
    assert r.kernel("A").memory_cycles == 4 * 8192 == r.stage_cycles


def test_products_must_agree(build):
    prog = two_kernels(build)
    no_lanes = replace(prog, routing=type(prog.routing).of((), 21, 0))
    with pytest.raises(SimulationError, match="flow 'A->B' has no routed lanes"):
        simulate_l0(no_lanes)
    with pytest.raises(SimulationError, match=r"sizing is for tiny32, not small64"):
        simulate_l0(replace(prog, target=load_target("small64")))


@pytest.mark.parametrize("sample", ["gpt2_dynamo.onnx", "bert_dynamo.onnx"])
@pytest.mark.pictures  # draws its PNG for real (tests/conftest.py)
def test_samples(compiled, sample, tmp_path):
    prog = compiled(sample)
    r = simulate_l0(prog, batch=8)
    assert 0 < r.utilization <= r.utilization_used <= 1
    names = {k.name for k in prog.kg.kernels} | {f.name for f in r.flows}
    assert r.bottleneck in names and r.critical_path[0] == "host-in"
    assert r.critical_path[-1] == "host-out"
    assert r.stage_cycles == max(
        [k.cycles_per_sample for k in r.kernels] + [f.cycles_per_sample for f in r.flows]
    )
    assert r.batch_latency_s > r.latency_s > 0
    json.dumps(r.to_json())
    write_roofline_png(tmp_path / "roofline.png", r, prog.target)
    assert (tmp_path / "roofline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_roofline_data():
    roof = roofline(load_target("wse2"), "fp16")
    assert roof.flops_per_pe_s == 8 * 850e6
    assert roof.link_bytes_per_s == 4 * 850e6
    assert roof.sram_bytes_per_pe_s == 3 * 8 * 850e6
    assert roof.peak_flops_per_s == 750 * 994 * 8 * 850e6
    assert roof.ridge_intensity() == 2.0


def _crossings_by_definition(rects, lanes, pair_bytes, L):
    """`crossing_cycles` step by step: each lane step with both routers in one region that is
    not its flow's source or destination adds the lane's load to that (region, link); each
    region's busiest link, rounded up."""
    import itertools
    import math

    from wsecc.sim.perf import flow_name

    width = max(r.x + r.w for r in rects.values()) + 1
    height = max(r.y + r.h for r in rects.values()) + 1

    def region(x, y):
        x, y = min(max(x, 0), width), min(max(y, 0), height)
        inside = [n for n, r in rects.items() if r.x <= x < r.x + r.w and r.y <= y < r.y + r.h]
        return (inside[-1] if inside else None), (x, y)  # overlapping: the last region

    load: dict[tuple[str, object], float] = {}
    for (src, dst), total in pair_bytes.items():
        paths = lanes.get(flow_name(src, dst), [])
        for path in paths:
            for a, b in itertools.pairwise(path):
                (ra, pa), (rb, pb) = region(*a), region(*b)
                if ra is not None and ra == rb and ra not in (src, dst):
                    key = (ra, (pa, pb))
                    load[key] = load.get(key, 0.0) + total / len(paths) / L
    out: dict[str, int] = {}
    for (name, _), cycles in load.items():
        out[name] = max(out.get(name, 0), math.ceil(cycles - 1e-9))
    return out


def test_crossing_cycles_follow_their_definition():
    """The vectorised `crossing_cycles` (a million lane steps for GPT-2 small) gives what the
    definition gives step by step, on random regions and random walks: lanes leaving the
    fabric's edge, through their own flow's regions, from ports, of one point or none."""
    import random
    from types import SimpleNamespace

    from wsecc.sim.perf import crossing_cycles, flow_name

    rng = random.Random(0)
    for _ in range(300):
        rects = {}
        for i in range(rng.randint(1, 6)):
            w, h = rng.randint(1, 7), rng.randint(1, 7)
            rects[f"k{i}"] = Rect(rng.randint(0, 24 - w), rng.randint(0, 16 - h), w, h)
        ends = [*rects, "port"]
        pair_bytes, lanes = {}, {}
        for _ in range(rng.randint(1, 8)):
            src, dst = rng.sample(ends, 2)
            pair_bytes[(src, dst)] = rng.choice([0.0, 1e-12, 3.0, rng.uniform(1, 1e5)])
            paths = []
            for _ in range(rng.randint(0, 3)):
                x, y = rng.randint(-1, 25), rng.randint(-1, 17)
                path = [(x, y)]
                for _ in range(rng.randint(-1, 40)):
                    dx, dy = rng.choice([(1, 0), (-1, 0), (0, 1), (0, -1)])
                    x, y = x + dx, y + dy
                    path.append((x, y))
                paths.append(tuple(path[: rng.choice([0, len(path)])]))
            lanes[flow_name(src, dst)] = paths
        got = crossing_cycles(SimpleNamespace(rects=rects), lanes, pair_bytes, 4)
        assert got == _crossings_by_definition(rects, lanes, pair_bytes, 4)
        assert all(type(v) is int for v in got.values())
