"""wsecc.limits: the one statement of what limits a compile, from any report it can find."""

from __future__ import annotations

from wsecc.limits import Limits, si, stage_kind

SIZING = {"bottleneck": "L2.attention", "samples_per_s": 6505.0}
PERF = {
    "model": "l0",
    "samples_per_s": 1900.0,
    "bottleneck": "host-out",
    "bottleneck_kind": "host",
    "on_wafer_bottleneck": "embedding->L0.layer_norm.2",
    "on_wafer_bottleneck_kind": "flow",
    "on_wafer_samples_per_s": 2162.0,
}


def test_the_simulations_bottleneck_and_the_on_wafer_limit():
    limits = Limits.from_report({"sizing": SIZING, "performance": PERF})
    assert limits is not None
    assert limits.lines() == [
        "bottleneck host-out (host)",
        "on-wafer limit embedding->L0.layer_norm.2 (flow): 2.16 ksamples/s achieved (L0) of "
        "6.5 ksamples/s balanced (33.2%)",
    ]
    assert limits.highlight == ("embedding->L0.layer_norm.2", "flow")
    assert limits.highlight_label == "on-wafer limit"


def test_without_a_simulation_it_is_sizings():
    limits = Limits.from_report({"sizing": SIZING})
    assert limits == Limits("L2.attention", "kernel", False, 6505.0)
    assert limits.lines() == [
        "bottleneck L2.attention (sizing's slowest kernel; not simulated)",
        "balanced 6.5 ksamples/s",
    ]
    assert limits.highlight == ("L2.attention", "kernel")
    assert limits.highlight_label == "sizing's bottleneck"
    assert Limits.from_report({}) is None


def test_a_report_without_the_on_wafer_kind_gets_it_from_the_name():
    old = {k: v for k, v in PERF.items() if k != "on_wafer_bottleneck_kind"}
    limits = Limits.from_report({"sizing": SIZING, "performance": old})
    assert limits is not None and limits.on_wafer_kind == "flow"
    assert [stage_kind(n) for n in ("host-in", "a->b", "L0.linear")] == ["host", "flow", "kernel"]


def test_train_mode_names_the_steps_term_and_highlights_nothing():
    perf = {
        "model": "train",
        "samples_per_s": 10.0,
        "bottleneck": "compute",
        "bottleneck_kind": "step",
    }
    limits = Limits.from_report({"sizing": SIZING, "performance": perf})
    assert limits is not None and limits.highlight is None
    assert limits.lines() == ["bottleneck compute (the training step's largest term)"]


def test_si():
    assert [si(x, "samples/s") for x in (12.5, 885416, 1.6e6)] == [
        "12.5 samples/s",
        "885 ksamples/s",
        "1.6 Msamples/s",
    ]
