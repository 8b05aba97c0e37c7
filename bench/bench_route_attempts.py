"""Each routing attempt of one compile: what it cost, how it ended, and whether a cheap check
could have known.

    python bench/bench_route_attempts.py [--cold] -- MODEL.onnx [WSECC COMPILE OPTIONS]

Runs `wsecc compile MODEL OPTIONS -o TMP` in this process with `wsecc.core.flow`'s `route`
wrapped, and prints one markdown row per call: its CPU seconds (`time.process_time`, so the
load on a shared machine does not count) and wall seconds (which it does), the lanes, how many came warm (from the attempt
before), the negotiation's iterations with the link overuse after each, how it ended, and the
boundaries `wsecc.route.router.cut_shortfalls` finds short of links before any search (with
its own CPU seconds). `--cold`: every warm-started call is routed again from nothing (no
`warm`), the cost of knowing its lane counts before the first attempt.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import wsecc.core.flow as flow
import wsecc.route.router as router
from wsecc import cli
from wsecc.route.problem import Point, Routing, RoutingError


def _attempt(
    args: tuple[Any, ...], kwargs: dict[str, Any], overuse: list[int]
) -> tuple[str, float, float]:
    """Route once, `overuse` filled with the link overuse at each iteration's end: how it ended,
    and the CPU and wall seconds it took."""
    overuse.clear()
    t0, w0 = time.process_time(), time.perf_counter()
    try:
        routing = router.route(*args, **kwargs)
        length = sum(len(ln.path) - 1 for ln in routing.lanes)
        ended = f"routes: {routing.iterations} iterations, lane length {length:,}"
    except RoutingError as e:
        ended = f"fails: {str(e)[:70]}...; narrows {len(set(e.flows))} flows"
    return ended, time.process_time() - t0, time.perf_counter() - w0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cold", action="store_true", help="route every warm-started call again cold")
    ap.add_argument("compile_args", nargs="+", help="MODEL.onnx and wsecc compile options")
    ns = ap.parse_args()
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    overuse: list[int] = []
    negotiate = router._Negotiation.negotiate

    def recording(self: router._Negotiation, hot: list[Point]) -> None:
        overuse.append(self.overuse())
        negotiate(self, hot)

    def recorded(*args: Any, **kwargs: Any) -> Routing:
        calls.append((args, kwargs))
        return router.route(*args, **kwargs)

    flow.route = recorded  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as tmp:
        code = cli.main(["compile", *ns.compile_args, "-o", str(Path(tmp) / "o")])
    if code:
        raise SystemExit(code)
    flow.route = router.route  # type: ignore[attr-defined]
    router._Negotiation.negotiate = recording  # type: ignore[method-assign, assignment]
    print(
        "| call | lanes | warm | CPU s | wall s | iterations: link overuse after each | ended "
        "| short boundaries (check CPU s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n, (args, kwargs) in enumerate(calls, 1):
        rp, placement = args[0], args[1]
        warm = kwargs.get("warm") or {}
        ended, cpu, wall = _attempt(args, kwargs, overuse)
        trace = ", ".join(f"{o:,}" for o in overuse)
        t0 = time.process_time()
        short = router.cut_shortfalls(rp, placement, kwargs.get("options"), kwargs.get("tolls"))
        check = time.process_time() - t0
        lanes = sum(f.lanes for f in rp.flows)
        print(
            f"| {n} | {lanes:,} | {len(warm):,} | {cpu:.1f} | {wall:.1f} | {len(overuse)}: {trace} "
            f"| {ended} "
            f"| {len(short)} ({check:.2f}) |"
        )
        if ns.cold and warm:
            ended, cpu, wall = _attempt(args, {**kwargs, "warm": None}, overuse)
            trace = ", ".join(f"{o:,}" for o in overuse)
            print(
                f"| {n}, cold | {lanes:,} | 0 | {cpu:.1f} | {wall:.1f} | {len(overuse)}: {trace} "
                f"| {ended} | |"
            )


if __name__ == "__main__":
    main()
