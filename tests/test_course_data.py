"""hooklab.course.data.threads: the thread count a block runs with, on the main thread and off it."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

import pytest
import torch

from hooklab.course.data import threads


def in_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a new thread (as a kernel subshell runs a widget callback); return its result."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed back to the test
            out["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_threads_restores_the_thread_count_also_on_error():
    before = torch.get_num_threads()
    with threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError):
        with threads(1):
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def test_threads_are_capped_at_the_cpu_count():
    with threads(10_000):
        assert torch.get_num_threads() == os.cpu_count()


def test_off_the_main_thread_a_block_runs_with_one_thread_and_the_thread_stays_at_one():
    main_before = torch.get_num_threads()

    def body() -> tuple[int, int, int]:
        default = torch.get_num_threads()
        with threads(2):
            inside = torch.get_num_threads()
        return default, inside, torch.get_num_threads()

    default, inside, after = in_thread(body)
    assert (inside, after) == (1, 1)
    assert torch.get_num_threads() == main_before  # the main thread's setting is its own
    # (what that protects, the main thread's speed, is timed by the benchmark: benchmarks/threads.py)
