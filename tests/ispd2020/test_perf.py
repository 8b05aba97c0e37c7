"""The cost model on hand-worked cases."""

from __future__ import annotations

from fractions import Fraction

import pytest

from wsecc.ispd2020.kgraph import KNode
from wsecc.ispd2020.perf import (
    Conv,
    ExecParams,
    blockperf,
    cblock_convs,
    cblockperf,
    conv_memory,
    conv_time,
    convperf,
    dblockperf,
    kernel_spec,
)


def test_convperf_by_hand() -> None:
    # conv(H=14,W=14,R=3,S=3,C=256,K=256,T=1) with h'=2 w'=7 c'=16 k'=32:
    # height 2·7·17 = 238, width 96, time 7·2·16·8·9 = 16128,
    # memory 16·8·9 + (16/7)·(16/2)·8 = 1152 + 1024/7
    p = convperf(Conv(14, 14, 3, 3, 256, 256), 2, 7, 16, 32)
    assert (p.height, p.width, p.time) == (238, 96, 16128)
    assert p.memory == Fraction(1152) + Fraction(1024, 7)


def test_stride_two_time_rounds_up() -> None:
    # ceil(7/1)·ceil(7/1)·ceil(3/1)·ceil(1/1)·1·1 / (2·2) = 147/4 = 36.75 -> 37
    assert conv_time(Conv(7, 7, 1, 1, 3, 1, 2, 2), 1, 1, 1, 1) == 37
    # divisible case is exact: 8·8·1·1 / 4 = 16
    assert conv_time(Conv(8, 8, 1, 1, 1, 1, 2, 2), 1, 1, 1, 1) == 16


def test_memory_is_real_division() -> None:
    # C/c'·K/k'·R·S with 10/3 channels per tile stays a fraction
    assert conv_memory(Conv(1, 1, 1, 1, 10, 1), 1, 1, 3, 1) == Fraction(10, 3) + 1


def test_handout_example_kernels() -> None:
    k1 = dblockperf(56, 56, 256, 4, 4, (8, 8, 8), (8, 64, 16))
    k2 = cblockperf(56, 56, 512, 4, 4, (8, 8, 8, 8), (32, 32, 8, 19))
    k3 = dblockperf(28, 28, 512, 4, 4, (8, 8, 8), (8, 32, 8))
    assert (k1.height, k1.width, k1.time) == (144, 24 + 192 + 48, 50176)
    assert (k2.height, k2.width, k2.time) == (144, 96 + 96 + 24 + 57, 50176)
    assert (k3.height, k3.width, k3.time) == (144, 144, 50176)
    # k2's conv2 has stride 2: 14·14·16·4·9 / 4 = 28224 (exact); conv3 runs on 28×28
    convs = cblock_convs(56, 56, 512)
    assert convs[2] == Conv(28, 28, 1, 1, 128, 512, 1, 1)
    assert conv_time(convs[1], 4, 4, 8, 32) == 28224


def test_block_aggregation() -> None:
    convs = (Conv(4, 4, 1, 1, 8, 8), Conv(4, 4, 3, 3, 8, 8))
    p = blockperf(convs, 2, 2, (1, 3), (2, 4))
    parts = [convperf(convs[0], 2, 2, 1, 2), convperf(convs[1], 2, 2, 3, 4)]
    assert p.height == max(q.height for q in parts) == 16
    assert p.width == sum(q.width for q in parts) == 18
    assert p.time == max(q.time for q in parts)
    assert p.memory == max(q.memory for q in parts)


def test_spec_params_round_trip_and_bounds() -> None:
    conv = KNode(
        "conv", 7, "k7", args=tuple(zip("WHRSCKTU", (14, 14, 1, 1, 1024, 512, 1, 1), strict=True))
    )
    spec = kernel_spec(conv)
    p = ExecParams(2, 2, (16,), (32,))
    args = spec.solution_args(p)
    assert args == (14, 14, 1024, 512, 1, 1, 1, 1, 2, 2, 16, 32)  # H W C K R S T U h w c k
    assert spec.params_from_args(args) == p
    assert spec.param_errors(p) == []
    assert spec.param_errors(ExecParams(15, 0, (16,), (600,))) == [
        "k7: h'=15 is not an integer in [1, 14]",
        "k7: w'=0 is not an integer in [1, 14]",
        "k7: k'=600 is not an integer in [1, 512]",
    ]
    with pytest.raises(ValueError, match="do not match"):
        spec.params_from_args((7,) + args[1:])


def test_block_needs_f_divisible_by_4() -> None:
    with pytest.raises(ValueError, match="F=6"):
        dblockperf(7, 7, 6, 1, 1, (1, 1, 1), (1, 1, 1))
