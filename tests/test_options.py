"""The options are defined once (`wsecc.options`): the CLI's flags, the sweep spec's keys and
`Options(...)`'s keywords come from that one definition, and every bad value is refused when
it is parsed, in one line, exit 2, before any work."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES

from wsecc.cli import build_parser, main
from wsecc.errors import WseccError
from wsecc.options import (
    Option,
    OptionError,
    Options,
    _opt,
    add_flags,
    check_value,
    option_table,
    spec_keys,
)
from wsecc.sweep.spec import SPEC_KEYS

GPT2 = SAMPLES / "gpt2_legacy_op17.onnx"


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def _subparser(command: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]  # type: ignore[no-any-return]


@dataclass(frozen=True)
class _Extended(Options):
    """Options with one more option, defined in one place."""

    widgets: int = _opt(3, "--widgets", "widgets per kernel", int, low=1, high=9)


def test_an_option_defined_once_is_a_flag_a_spec_key_and_a_keyword() -> None:
    table = option_table(_Extended)
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_flags(parser, "compile", table=table)
    assert parser.parse_args([]).widgets == 3
    assert parser.parse_args(["--widgets", "4"]).widgets == 4
    with pytest.raises(argparse.ArgumentError, match="0: must be from 1 to 9"):
        parser.parse_args(["--widgets", "0"])
    assert "widgets per kernel (default 3)" in parser.format_help()
    assert spec_keys(table)["widgets"].name == "widgets"
    assert _Extended(widgets=5).widgets == 5
    with pytest.raises(OptionError, match="--widgets 10: must be from 1 to 9"):
        _Extended(widgets=10)


def test_the_cli_the_spec_and_the_api_are_derived_from_the_table() -> None:
    table = option_table()
    fields = {o.name for o in table}
    assert fields == set(Options.__dataclass_fields__)
    for command in ("compile", "check", "inspect", "simulate"):
        flags = _flags(_subparser(command))
        for o in table:
            if o.flag is None or command not in o.commands:
                assert o.flag not in flags, (command, o.flag)
                continue
            action = flags[o.flag]
            assert action.dest == o.name and o.help in (action.help or ""), (command, o.flag)
            if command == "compile" and not o.auto:
                assert action.default == ([] if o.kind is dict else o.default), o.flag
    assert SPEC_KEYS == {o.flag[2:]: o for o in table if o.flag and o.spec}
    for o in table:  # every default is a value the option takes
        auto = o.auto and o.default in (None, "auto")  # --systems defaults to 1, not auto
        assert check_value(o, o.default) == (None if auto else o.default) or o.kind is dict


def _bad_texts(o: Option) -> list[str]:
    """Command-line values option `o` must refuse."""
    if o.choices:
        return ["bogus"]
    if o.kind is dict:
        return ["x=0", "x", "x=1.5", "x=2147483648"]
    if o.kind is int:
        bad = ["x", "1.5", str(int(o.low) - 1)]
        return bad + ([str(int(o.high) + 1)] if o.high is not None else [])
    if o.kind is float:
        return ["nan", "inf", "-inf", "-1", "0", "x", str((o.high or 0) * 10)]
    if o.name in ("pins", "inputs"):
        return ["missing.json", ".", "list.json", "truncated.json"]
    if o.name == "dump_dir":
        return ["list.json"]
    if o.name == "inject_fault":
        return ["bogus", "grad_scale=-1", "grad_scale=x"]
    if o.name == "target":
        return ["wse9", "missing.toml", "list.json"]
    raise AssertionError(f"no bad value for {o.flag}: add one")


def test_every_option_refuses_a_bad_value_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "truncated.json").write_text('{"a": {"x": 1')
    cases = [
        (o.flag, text)
        for o in option_table()
        if o.flag and "compile" in o.commands and o.kind is not bool
        for text in _bad_texts(o)
    ]
    assert len(cases) > 40
    for flag, text in cases:
        with pytest.raises(SystemExit) as e:
            main(["compile", str(GPT2), f"{flag}={text}", "-o", "out"])
        err = capsys.readouterr().err
        assert e.value.code == 2, (flag, text)
        assert err.count("\n") == 1 and err.startswith("wsecc: error:"), (flag, text, err)
        assert "internal error" not in err and flag in err, (flag, text, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["list.json", "truncated.json"]


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"time_budget_s": math.nan}, "--time-budget nan: must be a finite number"),
        ({"time_budget_s": math.inf}, "--time-budget inf: must be a finite number"),
        ({"seed": -1}, "--seed -1: must be from 0"),
        ({"seed": "3"}, "--seed '3': must be an integer"),
        ({"batch": 2**31}, "--batch 2147483648: must be from 1"),
        ({"dims": {"n": 0}}, "--dim n 0: must be from 1"),
        ({"deterministic": 1}, "--deterministic 1: must be true or false"),
        ({"pins": "/nonexistent/pins.json"}, "no such file"),
        ({"sim_samples": 0}, "sim_samples 0: must be from 1"),
        ({"mode": "generate", "seq": 64, "new_tokens": 1000}, "at most 33 new tokens fit"),
    ],
)
def test_the_api_checks_every_keyword(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(WseccError, match=message):
        Options(**kw)


def test_the_default_new_tokens_still_fit_a_short_context() -> None:
    assert Options(mode="generate", seq=8).new_tokens == 16  # cut to the context when validating


def test_simulate_takes_the_compiles_precision_and_validation_by_default() -> None:
    flags = _flags(_subparser("simulate"))
    assert {f for f in flags if f.startswith("--")} >= {"--sim", "--precision", "--validate"}
    assert all(flags[f].default is None for f in ("--precision", "--validate"))
    assert flags["--sim"].default == "l1"  # as a compile's
