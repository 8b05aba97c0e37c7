"""Uniform arrays (one element of memory at a full shape, how weights without data are held)
are hashed, compared and laid out by value, like any array, without being expanded."""

from __future__ import annotations

import numpy as np
import pytest
from wsecc.passes.canonicalize import canonicalize

from wsecc.ir.arrays import (
    FirstOfContent,
    all_equal,
    content_key,
    dense,
    is_uniform,
    placeholder,
    same_data,
)
from wsecc.ir.core import DType, Graph, Node, Op, TensorType, Value
from wsecc.pm import PassContext

F32 = np.dtype(np.float32)


def test_a_placeholder_is_one_element_at_its_shape():
    a = placeholder(F32, (50257, 6144), 3)
    assert a.shape == (50257, 6144) and a.base.nbytes == 4 and not a.flags.writeable
    assert is_uniform(a) and is_uniform(a.T) and is_uniform(a.reshape(-1))
    assert float(a[7, 9]) == 4.0
    assert is_uniform(dense(a.T))  # not laid out in full
    assert dense(np.arange(6).reshape(2, 3).T).flags.c_contiguous
    assert not is_uniform(np.zeros((2, 2))) and not is_uniform(placeholder(F32, (1,), 0))


def test_uniform_arrays_compare_by_value():
    a, b = placeholder(F32, (3, 4), 5), placeholder(F32, (3, 4), 5)
    assert same_data(a, b) and content_key(a) == content_key(b)
    full = np.full((3, 4), 6.0, np.float32)  # the same values, laid out
    assert same_data(a, full) and same_data(full, a)
    assert not same_data(a, placeholder(F32, (3, 4), 6)) and not same_data(a, full + 1)
    assert not same_data(a, placeholder(F32, (4, 3), 5))
    assert content_key(a) != content_key(placeholder(F32, (3, 4), 6))
    dense_key = content_key(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert dense_key == content_key(np.arange(12, dtype=np.float32).reshape(3, 4))


def test_a_dtype_without_an_exact_tag_is_refused():
    assert float(placeholder(np.dtype(np.float16), (2,), 2047)[0]) == 2048.0
    with pytest.raises(ValueError, match="float16 holds no exact tag 2049"):
        placeholder(np.dtype(np.float16), (2,), 2048)


def _f32(*shape: int) -> TensorType:
    return TensorType(DType.FLOAT32, shape)


def _two_weight_graph(w1: np.ndarray, w2: np.ndarray) -> Graph:
    x = Value("x", _f32(2, 4))
    c1, c2 = Value.constant("w1", w1), Value.constant("w2", w2)
    h = Value("h", _f32(2, 4))
    y = Value("y", _f32(2, 4))
    nodes = (
        Node(Op.MATMUL, (x, c1), (h,), name="mm1"),
        Node(Op.MATMUL, (h, c2), (y,), name="mm2"),
    )
    return Graph((x,), (y,), nodes)


def test_canonicalize_shares_equal_weights_only():
    """Two weights without data are two weights; two equal constants become one."""
    distinct = canonicalize(
        _two_weight_graph(placeholder(F32, (4, 4), 0), placeholder(F32, (4, 4), 1)),
        PassContext(),
    )
    assert len(distinct.constants()) == 2
    same = np.ones((4, 4), np.float32)
    shared = canonicalize(_two_weight_graph(same, same.copy()), PassContext())
    assert len(shared.constants()) == 1


def test_canonicalize_casts_a_weight_without_data_as_one_element():
    from wsecc.ir.rewrite import make_node

    x = Value("x", _f32(2, 4))
    w16 = Value.constant("w16", placeholder(np.dtype(np.float16), (4, 4), 7))
    cast = make_node(Op.CAST, [w16], "w32", (), to="f32")
    mm = Node(Op.MATMUL, (x, cast.output), (Value("y", _f32(2, 4)),), name="mm")
    g = canonicalize(Graph((x,), mm.outputs, (cast, mm)), PassContext())
    (w,) = g.constants()
    assert w.const.dtype == np.float32 and is_uniform(w.const) and float(w.const[3, 3]) == 8.0


def test_all_equal_is_a_fill_uniform_or_laid_out():
    """One check for "every element the same": a laid-out fill, a uniform array at its one
    element (not expanded); not an empty array, two values, or NaN (equal to nothing)."""
    assert all_equal(np.full((3, 4), 2.0)) and all_equal(np.array(5))
    assert all_equal(placeholder(F32, (50257, 6144), 3))
    assert not all_equal(np.zeros((0, 3))) and not all_equal(np.array([1.0, 1.0, 2.0]))
    assert not all_equal(np.full((2, 2), np.nan))
    assert not all_equal(np.broadcast_to(np.float32(np.nan), (4, 4)))


def _cases() -> list[np.ndarray]:
    """Arrays that are equal, nearly equal and equal only in places: duplicates, views,
    uniform arrays and their dense copies, arrays that differ only in the middle (where
    `_sample` does not look), other dtypes and shapes of the same bytes, NaN and -0.0."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 40)).astype(np.float32)
    middle = w.copy()
    middle[3, 20] += 1  # the same first and last elements as w
    nan = w.copy()
    nan[0, 0] = np.nan
    neg = np.zeros((6, 40), np.float32)
    neg[2, 5] = -0.0
    u = placeholder(F32, (6, 40), 3)
    return [
        w, w.copy(), middle, w.T, np.ascontiguousarray(w.T), w.reshape(40, 6), w.view(np.int32),
        u, dense(u), placeholder(F32, (6, 40), 3), placeholder(F32, (6, 40), 4), middle.copy(),
        nan, nan.copy(), neg, np.zeros((6, 40), np.float32), w[::2], np.ascontiguousarray(w[::2]),
        np.arange(3, dtype=np.int64), np.arange(3, dtype=np.int64), np.arange(20, dtype=np.int64),
    ]  # fmt: skip


def test_first_of_content_answers_as_a_dictionary_of_content_keys():
    """`FirstOfContent.first` gives the same holder as `setdefault(content_key(a), item)`, in
    every order of the arrays."""
    cases = _cases()
    rng = np.random.default_rng(1)
    for _ in range(20):
        order = rng.permutation(len(cases)).tolist() * 2  # each array twice
        by_key: dict = {}
        index: FirstOfContent[int] = FirstOfContent()
        for i in order:
            assert index.first(i, cases[i]) == by_key.setdefault(content_key(cases[i]), i)


def test_first_of_content_hashes_only_arrays_that_agree_where_it_samples(monkeypatch):
    """Distinct weights (they differ in their first elements) are told apart without a hash."""
    from wsecc.ir import arrays

    hashed = []
    monkeypatch.setattr(arrays, "content_key", lambda a: hashed.append(a) or content_key(a))
    rng = np.random.default_rng(2)
    index: FirstOfContent[int] = FirstOfContent()
    weights = [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(12)]
    assert [index.first(i, w) for i, w in enumerate(weights)] == list(range(12))
    assert not hashed
    assert index.first(99, weights[5].copy()) == 5 and len(hashed) == 2
