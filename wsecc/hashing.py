"""The SHA-256 of a model file, taken beside the frontend (the report's `model.sha256`)."""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path


def sha256_of(path: str | os.PathLike[str]) -> str:
    # 16 MiB at a time into one buffer: the GIL is let go for each read and each update, so
    # few, large ones keep a hash on another thread (`sha256_beside`) out of the main one's way
    h = hashlib.sha256()
    buf = bytearray(1 << 24)
    view = memoryview(buf)
    with open(path, "rb") as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def sha256_beside(path: Path) -> Future[str]:
    """`sha256_of(path)` on a thread of its own: hashlib releases the GIL, so the report's hash
    of a large model (0.6 s for GPT-2 small's 650 MB) runs on another core while the frontend
    parses the same file."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wsecc-sha256")
    try:
        return pool.submit(sha256_of, path)
    finally:
        pool.shutdown(wait=False)  # the thread ends when the hash is done
