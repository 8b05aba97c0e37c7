"""The sweep spec: its keys are wsecc compile's options, its points the product of the axes,
and anything wrong fails in one line before a compile runs."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from conftest import SAMPLES

from wsecc.cli import build_parser, main
from wsecc.sweep.spec import SPEC_KEYS, SpecError, load_spec

GPT2 = SAMPLES / "gpt2_legacy_op17.onnx"
BERT = SAMPLES / "bert_dynamo.onnx"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "spec.toml"
    p.write_text(text)
    return p


def models(*paths: Path) -> str:
    return "".join(f'[[models]]\npath = "{p}"\n' for p in paths)


def test_every_key_is_a_long_option_of_compile() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    compile_options = {
        s[2:] for a in sub.choices["compile"]._actions for s in a.option_strings if s[:2] == "--"
    }
    assert set(SPEC_KEYS) <= compile_options


def test_points_are_the_product_of_the_axes_model_by_model(tmp_path: Path) -> None:
    spec = load_spec(
        write(
            tmp_path,
            models(GPT2, BERT)
            + '[axes]\nbatch = [1, 8]\ntarget = ["wse2", "wse3"]\n[fixed]\nplacer = "greedy"\n'
            + "time_budget = 5\n",
        )
    )
    points = spec.points()
    assert [(p.model.name, p.axes["batch"], p.axes["target"]) for p in points] == [
        (m, b, t)
        for m in ("gpt2_legacy_op17", "bert_dynamo")
        for b in (1, 8)
        for t in ("wse2", "wse3")
    ]
    o = points[-1].options()
    assert (o.batch, o.target, o.placer, o.time_budget_s) == (8, "wse3", "greedy", 5.0)
    assert len({p.config_hash for p in points}) == len(points)
    again = load_spec(spec.path).points()
    assert [p.config_hash for p in again] == [p.config_hash for p in points]


def test_a_models_own_options_bind_it(tmp_path: Path) -> None:
    text = f'[[models]]\npath = "{GPT2}"\nname = "g"\nseq = 16\n[axes]\nbatch = [1, 2]\n'
    points = load_spec(write(tmp_path, text)).points()
    assert [(p.model.name, p.options().seq, p.options().batch) for p in points] == [
        ("g", 16, 1),
        ("g", 16, 2),
    ]


def test_a_list_under_a_model_is_its_own_axis(tmp_path: Path) -> None:
    text = (
        f'[[models]]\npath = "{GPT2}"\nname = "g"\nseq = [16, 32]\n'
        f'[[models]]\npath = "{BERT}"\nname = "b"\nseq = 8\nbatch = [2, 4, 8]\n'
        '[axes]\ntarget = ["wse2", "wse3"]\n'
    )
    points = load_spec(write(tmp_path, text)).points()
    got = [(p.model.name, p.options().seq, p.options().batch, p.options().target) for p in points]
    assert got == [("g", s, 1, t) for t in ("wse2", "wse3") for s in (16, 32)] + [
        ("b", 8, b, t) for t in ("wse2", "wse3") for b in (2, 4, 8)
    ]
    assert points[0].axes == {"target": "wse2", "seq": 16}
    with pytest.raises(SpecError, match="seq = 0: must be from 1 to"):
        load_spec(write(tmp_path, f'[[models]]\npath = "{GPT2}"\nseq = [16, 0]\n'))
    with pytest.raises(SpecError, match="batch is both an axis and this model's own"):
        load_spec(
            write(tmp_path, f'[[models]]\npath = "{GPT2}"\nbatch = [1]\n[axes]\nbatch = [2]\n')
        )
    with pytest.raises(SpecError, match="mode = 'fly': choose one of infer"):
        load_spec(write(tmp_path, models(BERT) + f'[[models]]\npath = "{GPT2}"\nmode = ["fly"]\n'))


@pytest.mark.parametrize(
    "body, message",
    [
        ("[axes]\nwafers = [2]\n", "unknown option 'wafers'"),
        ("[axes]\nmode = ['fly']\n", "mode = 'fly': choose one of infer, train, generate"),
        ("[axes]\nbatch = [1, 'two']\n", "batch = 'two' is not an int"),
        ("[axes]\nbatch = [true]\n", "batch = True is not an int"),
        ("[axes]\nbatch = []\n", "batch must be a non-empty list"),
        ("[axes]\nbatch = [1, 1]\n", "lists a value twice"),
        ("[axes]\nprecision = ['fp8']\n", "precision"),
        ("[axes]\ntarget = ['wse9']\n", "unknown target 'wse9'"),
        ("[fixed]\nseq = 0\n", "seq = 0: must be from 1 to 2,147,483,647"),
        ("[fixed]\ntime-budget = nan\n", "time-budget = nan: must be a finite number"),
        ("[fixed]\ntime_budget = inf\n", "time-budget = inf: must be a finite number"),
        ("[fixed]\nseed = -1\n", "seed = -1: must be from 0 to"),
        ("[fixed]\nnew-tokens = 1000000000\n", "must be from 1 to 1,048,576"),
        (
            "[axes]\nseed = [" + ", ".join(map(str, range(10_001))) + "]\n",
            "seed lists 10,001 values",
        ),
        (
            "[axes]\nseed = [" + ", ".join(map(str, range(1000))) + "]\n"
            "batch = [" + ", ".join(map(str, range(1, 1001))) + "]\n",
            "1,000,000 points",
        ),
        ("[axes]\nseq = [16]\n[fixed]\nseq = 32\n", "seq is both an axis and fixed"),
        ("[sweep]\nx = 1\n", "unknown section 'sweep'"),
        ("[fixed]\npins = 'nowhere.json'\n", "no such file"),
        ("[axes]\nreplicas = [0]\n", "replicas = 0: must be from 1 to"),
        ("[axes]\nreplicas = ['all']\n", "replicas = 'all': must be a positive integer or auto"),
    ],
)
def test_a_bad_spec_fails_in_one_line(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        load_spec(write(tmp_path, models(GPT2) + body))


def test_bad_models_fail_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no models"):
        load_spec(write(tmp_path, "[axes]\nbatch = [1]\n"))
    with pytest.raises(SpecError, match="no such file"):
        load_spec(write(tmp_path, '[[models]]\npath = "missing.onnx"\n'))
    with pytest.raises(SpecError, match="two models named"):
        load_spec(write(tmp_path, models(GPT2, GPT2)))
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(write(tmp_path, "[[models]\n"))


def test_the_cli_refuses_a_bad_spec_with_exit_2_and_writes_nothing(tmp_path, capsys) -> None:
    spec = write(tmp_path, models(GPT2) + "[axes]\nwafers = [1, 2]\n")
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown option 'wafers'" in err
    assert not out.exists()
