"""One instrumentation for the whole compile: what each stage and pass took, what it wrote to
`--dump-dir`, and what it says under `--explain`.

The pass manager (`wsecc.pm`) and every stage of the chain (`wsecc.core.chain`: frontend,
passes, sizing, placement and routing, simulation, numerics) run under an `Instrument`:

- `stage(name)` announces a stage on the progress hook (`say(name, "")`) and records its
  wall-clock seconds; `step(stage, name)` records a pass inside a stage. The report's
  `stage_seconds` are the stage records summed by name (`Trace.seconds`), the report's
  `passes[].seconds` the step records (through `wsecc.pm.PassRecord`).
- `dump(name, text, suffix)` writes `dump_dir/NN-<name>.<suffix>` when a dump folder is set,
  numbered across the whole compile in the order written: `00-input.txt`, one file per pass,
  then `sizing.json`, `placement.json`, `routing.json` as those stages finish.
- `explain(stage, text)` says why a stage decided what it did, only under `--explain`.

An `Instrument` accumulates while its stage runs; the stage value it produces keeps its frozen
`Trace`, from which the next stage's `Instrument` continues (`Instrument.after`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

Say = Callable[[str, str], None]
"""The progress hook: `say(stage, "")` when a stage starts, `say(stage, message)` for a line."""


def quiet(stage: str, message: str) -> None:
    """A progress hook that shows nothing."""


@dataclass(frozen=True)
class Record:
    """The wall-clock seconds of one stage (`step` empty) or of one pass in a stage."""

    stage: str
    seconds: float
    step: str = ""


@dataclass(frozen=True)
class Trace:
    """What the stages that led to a stage value recorded: their timings, in the order they ran,
    and the names of the files they dumped."""

    records: tuple[Record, ...] = ()
    dumps: tuple[str, ...] = ()

    @property
    def seconds(self) -> dict[str, float]:
        """Wall-clock seconds by stage name (a stage run twice: the sum), in the order run."""
        out: dict[str, float] = {}
        for r in self.records:
            if not r.step:
                out[r.stage] = out.get(r.stage, 0.0) + r.seconds
        return out

    def then(self, record: Record) -> Trace:
        """This trace with `record` after its own."""
        return Trace((*self.records, record), self.dumps)


@dataclass
class Timer:
    """The seconds a `stage` or `step` took, set when it ends."""

    seconds: float = 0.0


@dataclass
class Instrument:
    """The progress hook, the dump folder and the explain switch of one compile, and the trace
    recorded so far (module doc)."""

    say: Say = quiet
    dump_dir: Path | None = None
    explaining: bool = False
    trace: Trace = field(default_factory=Trace)

    @classmethod
    def after(
        cls, trace: Trace, say: Say = quiet, dump_dir: str | Path | None = None,
        explaining: bool = False,
    ) -> Instrument:  # fmt: skip
        """An instrument that continues `trace` (the stage value's before this stage)."""
        return cls(say, Path(dump_dir) if dump_dir else None, explaining, trace)

    @contextmanager
    def stage(self, name: str) -> Iterator[Timer]:
        """Announce stage `name` and record its seconds (even when it raises)."""
        self.say(name, "")
        with self._timed(name, "") as timer:
            yield timer

    @contextmanager
    def step(self, stage: str, name: str) -> Iterator[Timer]:
        """Record the seconds of step `name` (a pass) of `stage`."""
        with self._timed(stage, name) as timer:
            yield timer

    @contextmanager
    def _timed(self, stage: str, step: str) -> Iterator[Timer]:
        timer = Timer()
        t0 = time.perf_counter()
        try:
            yield timer
        finally:
            timer.seconds = time.perf_counter() - t0
            self.trace = self.trace.then(Record(stage, timer.seconds, step))

    def explain(self, stage: str, text: str) -> None:
        """Say `text` on `stage`'s progress line under `--explain`; nothing otherwise."""
        if self.explaining:
            self.say(stage, text)

    def dump(self, name: str, text: str, suffix: str = "txt") -> Path | None:
        """Write `text` to `dump_dir/NN-<name>.<suffix>` (NN: the files dumped before it), or
        nothing without a dump folder."""
        if self.dump_dir is None:
            return None
        path = self.dump_dir / f"{len(self.trace.dumps):02d}-{name}.{suffix}"
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.trace = Trace(self.trace.records, (*self.trace.dumps, path.name))
        return path
