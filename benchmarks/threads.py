"""A second thread: does a live panel's update that runs in another thread slow the main thread?

JupyterLab 4.4+ hands widget messages to a kernel *subshell* when ipykernel (7+) offers them: the
callback runs in a thread of its own, which lives as long as the kernel. PyTorch work on two
threads from such a thread makes every later two-thread PyTorch call of the process slower, the
main thread's too (this machine's OpenMP is libgomp). A :class:`hooklab.Panel` therefore sets its
update's thread to one PyTorch thread when that is not the main thread (``hooklab.threads``).

Each variant runs in a fresh interpreter: a small CNN's training steps on two threads in the main
thread (median of ``reps`` timings), then, in a second thread that stays alive, the same steps run
either plainly (PyTorch's default threads) or as a Panel's update, then the main thread's steps
again. Floor: after a Panel's update, after / before ≤ 1.25.

Run alone: ``python -m benchmarks.threads [REPS]`` prints the figures as JSON.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 1.25
VARIANTS = ("plainly, with PyTorch's default threads", "as a hooklab Panel's update")


def measure(variant: str, reps: int = 5, steps: int = 40) -> dict[str, Any]:
    """In this process: the main thread's two-thread steps before and after a callback in a second thread."""
    import torch
    from torch import nn

    import hooklab

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(16 * 8 * 8, 4))
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(32, 1, 32, 32), torch.randint(0, 4, (32,))

    def work() -> float:
        start = time.perf_counter()
        for _ in range(steps):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return time.perf_counter() - start

    def timed() -> float:
        torch.set_num_threads(2)
        work()
        return statistics.median(work() for _ in range(reps))

    before = timed()
    ran, done = threading.Event(), threading.Event()

    panel = hooklab.Panel("bench", lambda panel: f"{work():.3f} s")

    def callback() -> None:  # an update in a subshell: its thread lives on afterwards
        if variant == VARIANTS[0]:
            work()
        else:
            panel.refresh()
        ran.set()
        done.wait()

    worker = threading.Thread(target=callback, daemon=True)
    worker.start()
    try:
        ran.wait(120)
        after = timed()
    finally:
        done.set()
        worker.join()
    return {"variant": variant, "before_s": before, "after_s": after, "ratio": after / before}


def run(reps: int = 5) -> dict[str, Any]:
    """Each variant in a fresh interpreter (a process that never had a second thread before)."""
    if (os.cpu_count() or 1) < 2:
        return {"skipped": "one CPU: there is no two-thread work to slow down", "variants": []}
    variants = []
    for variant in VARIANTS:
        out = subprocess.run([sys.executable, "-m", "benchmarks.threads", str(reps), variant], cwd=ROOT,
                             capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"benchmarks.threads failed:\n{out.stderr[-2000:]}")
        variants.append(json.loads(out.stdout))
    return {"reps": reps, "limit": LIMIT, "variants": variants}


def floors(results: dict[str, Any]) -> list[tuple[str, str, bool]]:
    if results.get("skipped"):
        return []
    guarded = next(v for v in results["variants"] if v["variant"] == VARIANTS[1])
    return [(f"main thread's two-thread steps after a Panel update in a second thread: after / before ≤ "
             f"{results['limit']:.2f}", f"{guarded['ratio']:.2f}×", guarded["ratio"] <= results["limit"])]


def markdown(results: dict[str, Any]) -> list[str]:
    lines = ["", "## A panel update in a second thread", ""]
    if results.get("skipped"):
        return lines + [f"Not run: {results['skipped']}."]
    lines += ["JupyterLab 4.4+ runs widget callbacks in a kernel subshell (a thread of its own) when the kernel "
              "offers subshells. A small CNN's training steps on two threads in the main thread, median of "
              f"{results['reps']} timings, before and after the same steps ran in a second thread that stays alive; "
              "each variant in a fresh interpreter.", "",
              "| the second thread ran the steps | before s | after s | after / before |",
              "| --- | --- | --- | --- |"]
    for v in results["variants"]:
        lines.append(f"| `{v['variant']}` | {v['before_s']:.3f} | {v['after_s']:.3f} | {v['ratio']:.2f}× |")
    return lines


if __name__ == "__main__":
    if len(sys.argv) > 2:
        print(json.dumps(measure(sys.argv[2], reps=int(sys.argv[1]))))
    else:
        print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 5), indent=1))
