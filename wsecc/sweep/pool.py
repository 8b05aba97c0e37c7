"""The runners: a local process pool (the default) and Ray (`--ray ADDRESS`, `--ray local`).

Both run `wsecc.sweep.run.run_task` on every task and hand its messages to `on_message` as
they come, so the caller records each point as it finishes. The only module that imports ray.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import socket
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from wsecc.errors import WseccError
from wsecc.sweep.run import Message, Task, failed_row, run_task

OnMessage = Callable[[Message], None]


def _pool_task(task: Task, cache_dir: str | None, messages: Any) -> None:
    for message in run_task(task, cache_dir):
        messages.put(message)


def run_local(
    tasks: list[Task], workers: int, cache_dir: str | None, on_message: OnMessage
) -> None:
    """Run `tasks` on `workers` processes (spawned: a fresh interpreter each, no forked solver
    threads). A worker that dies (killed, out of memory) fails the point it was running; its
    task's other points and every other task run on a fresh pool."""
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        messages = manager.Queue()
        while tasks:
            tasks = _run_pool(ctx, tasks, workers, cache_dir, messages, on_message)


def _run_pool(
    ctx: Any, tasks: list[Task], workers: int, cache_dir: str | None, messages: Any,
    on_message: OnMessage,
) -> list[Task]:  # fmt: skip
    """One pool over `tasks`; returns the points left to run when the pool broke."""
    started: set[str] = set()
    finished: set[str] = set()

    def drain(block: bool) -> None:
        try:
            while True:
                kind, payload = messages.get(timeout=0.2) if block else messages.get_nowait()
                block = False
                if kind == "start":
                    started.add(payload)
                else:
                    finished.add(payload["config_hash"])
                on_message((kind, payload))
        except queue.Empty:
            pass

    leftovers: list[Task] = []
    with ProcessPoolExecutor(max_workers=max(1, min(workers, len(tasks))), mp_context=ctx) as ex:
        pending: dict[Future[None], Task] = {
            ex.submit(_pool_task, t, cache_dir, messages): t for t in tasks
        }
        try:
            while pending:
                drain(block=True)
                for f in [f for f in pending if f.done()]:
                    drain(block=False)  # every message a finished task sent is queued by now
                    task = pending.pop(f)
                    error = f.exception()
                    if error is None:
                        continue
                    if not isinstance(error, BrokenProcessPool):
                        raise error
                    rest = []
                    for p in task.points:
                        if p.config_hash in finished:
                            continue
                        if p.config_hash in started:  # it was running when its worker died
                            row = failed_row(p, "the worker process died (out of memory?)")
                            on_message(("row", row))
                            finished.add(p.config_hash)
                        else:
                            rest.append(p)
                    if rest:
                        leftovers.append(Task(tuple(rest)))
        except BaseException:
            for f in pending:
                f.cancel()
            raise
    return leftovers


def run_ray(
    tasks: list[Task], address: str, workers: int, cache_dir: str | None, on_message: OnMessage
) -> None:
    """Run `tasks` as Ray tasks, each a generator streaming its messages back. `address`
    "local" starts a local cluster of `workers` CPUs; anything else joins that cluster (every
    node needs this wsecc installed and the spec's model paths readable)."""
    ray = check_ray(address)
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
    if address == "local":
        ray.init(num_cpus=workers, include_dashboard=False,
                 object_store_memory=256 * 1024**2, **quiet)  # fmt: skip
    else:
        try:
            ray.init(address=address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise WseccError(f"--ray {address}: cannot join the cluster ({e})") from None
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_ray_task)
        tasks_of = {remote.remote(t, cache_dir): t for t in tasks}
        finished: set[str] = set()
        generators = list(tasks_of)
        while generators:
            ready, generators = ray.wait(generators, num_returns=1)
            for gen in ready:
                try:
                    message = ray.get(next(gen))
                except StopIteration:
                    continue
                except ray.exceptions.RayError as e:  # the worker died: its points fail
                    why = f"the Ray worker died ({type(e).__name__})"
                    for p in tasks_of[gen].points:
                        if p.config_hash not in finished:
                            on_message(("row", failed_row(p, why)))
                    continue
                if message[0] == "row":
                    finished.add(message[1]["config_hash"])
                on_message(message)
                generators.append(gen)
    finally:
        ray.shutdown()


def check_ray(address: str) -> Any:
    """The ray module, after failing in one line when it is not installed or nothing listens
    at a HOST:PORT address (Ray itself retries for minutes; other forms, auto or ray://...,
    are left to Ray)."""
    try:
        import ray
    except ImportError:
        raise WseccError("--ray needs Ray: pip install 'wsecc[ray]'") from None
    host, sep, port = address.rpartition(":")
    if address == "local" or not sep or "/" in address or not port.isdigit():
        return ray
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as e:
        raise WseccError(
            f"--ray {address}: nothing answers there ({e.strerror or e}); start a cluster "
            "(ray start --head) or use --ray local"
        ) from None
    return ray


def _ray_task(task: Task, cache_dir: str | None) -> Any:
    yield from run_task(task, cache_dir)
