"""How many PyTorch threads hooklab's work uses (hooklab.threads), on the main thread and off it:
hooklab.threads.threads, a Panel's update, explore's passes."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

import pytest
import torch

import hooklab
from hooklab.threads import threads


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


def test_a_panel_update_off_the_main_thread_runs_with_one_thread():
    """A click that JupyterLab hands to a kernel subshell runs the update in another thread."""
    seen = []
    panel = hooklab.Panel("threads", lambda p: seen.append(torch.get_num_threads()) or "ok", name="t-threads")
    panel.toggle("on", lambda hooks, p: None)
    main_before = torch.get_num_threads()
    panel.refresh()
    assert seen == [main_before]  # on the main thread: the setting is left alone
    in_thread(lambda: panel.set(on=True))
    assert seen[-1] == 1
    assert torch.get_num_threads() == main_before
    panel.remove()


def test_explore_passes_off_the_main_thread_run_with_one_thread():
    from hooklab.lab.passes import running as _running

    def body() -> tuple[int, int]:
        with _running(torch.nn.Linear(1, 1), 2):
            inside = torch.get_num_threads()
        return inside, torch.get_num_threads()

    assert in_thread(body) == (1, 1)


class WatchedLock:
    """The panel's lock, watched: when ``second`` first asks for it, note whether it was free then
    (it must not be: the first update holds it), then wait for it as the panel would."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self.second: threading.Thread | None = None
        self.asked = threading.Event()
        self.free_when_asked: bool | None = None

    def __enter__(self) -> Any:
        if threading.current_thread() is self.second and not self.asked.is_set():
            self.free_when_asked = self.lock.acquire(blocking=False)
            if self.free_when_asked:
                self.lock.release()
            self.asked.set()
        return self.lock.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.lock.__exit__(*exc)


def test_panel_updates_from_two_threads_run_one_after_the_other():
    """A click in a kernel subshell and a cell's panel.set() do not interleave: the second waits."""
    entered, go, log = threading.Event(), threading.Event(), []

    def register(hooks, panel):
        log.append(("start", panel.values["on"]))
        if panel.values["on"]:
            entered.set()
            assert go.wait(10)
        log.append(("end", panel.values["on"]))

    panel = hooklab.Panel("two threads", lambda p: log.append(("view", p.values["on"])) or "ok", name="t-two-threads")
    panel.toggle("on", register)
    log.clear()
    watched = panel._lock = WatchedLock(panel._lock)
    first = threading.Thread(target=lambda: panel.set(on=True))
    first.start()
    assert entered.wait(10)
    second = watched.second = threading.Thread(target=lambda: panel.set(on=False))
    second.start()
    assert watched.asked.wait(10), "the second update never asked for the panel's lock"
    assert watched.free_when_asked is False, "the first update did not hold the panel's lock while it ran"
    go.set()
    first.join(10)
    second.join(10)
    assert not first.is_alive() and not second.is_alive()
    # unticked: its hook is removed, nothing registered; each update's view after its own hooks
    assert log == [("start", True), ("end", True), ("view", True), ("view", False)]
    assert panel.values["on"] is False and panel.hook_count() == 0
    panel.remove()
