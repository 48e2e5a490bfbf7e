"""Memory: does recording leak? Resident memory over many recorded forward passes.

A fresh interpreter builds resnet18, attaches ``hooklab.Recorder`` (defaults: keep=1, clone=True)
to every submodule and runs ``passes`` forward passes. The baseline is the resident memory
(``VmRSS`` in ``/proc/self/status``) after the first 10 passes, when the recorder's buffers and
PyTorch's allocator have reached their working size; then the peak (``VmHWM``) is reset and read
again at the end. Growth = (peak after - baseline) / baseline; the floor is 5 %.

Run alone: ``python -m benchmarks.memory 1000 [THREADS]`` prints the result as JSON.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 10
FLOOR = 0.05


def _status_kib(*fields: str) -> tuple[int, ...]:
    """The ``fields`` of /proc/self/status, in KiB, from one read: Linux reports VmHWM as at least the
    VmRSS of the same read, while two reads apart can see the resident set grow in between (the
    read itself allocates)."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in fields:
            found[name] = int(value.split()[0])
    missing = [f for f in fields if f not in found]
    if missing:
        raise LookupError(f"{missing} not in /proc/self/status (this benchmark reads Linux's /proc)")
    return tuple(found[f] for f in fields)


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux 4.0+); False if the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def measure(passes: int = 1000, threads: int | None = None) -> dict[str, Any]:
    """Run in this process (use :func:`run` for a clean, fresh interpreter)."""
    import torch
    import hooklab
    from .overhead import make_model

    if threads is not None:
        torch.set_num_threads(threads)
    model, x = make_model()
    rec = hooklab.Recorder(model, leaves=False, name="bench-memory")
    with torch.no_grad():
        for _ in range(WARMUP):
            model(x)
        gc.collect()
        (baseline,) = _status_kib("VmRSS")
        peak_reset = _reset_peak()
        samples = []
        for i in range(WARMUP, passes):
            model(x)
            if (i + 1) % max(1, passes // 10) == 0:
                samples.append((i + 1, *_status_kib("VmRSS")))
    gc.collect()
    peak, end = _status_kib("VmHWM", "VmRSS")
    stored = sum(len(r.outputs) for r in rec.records.values())
    calls = sum(r.calls for r in rec.records.values())
    rec.remove()
    growth = (peak - baseline) / baseline
    return {
        "passes": passes,
        "modules_recorded": len(rec),
        "calls_recorded": calls,
        "outputs_kept": stored,
        "baseline_rss_mib": baseline / 1024,
        "peak_rss_mib": peak / 1024,
        "end_rss_mib": end / 1024,
        "peak_is_since_baseline": peak_reset,
        "growth": growth,
        "rss_mib_by_pass": [(n, kib / 1024) for n, kib in samples],
        "floor": {"max": FLOOR, "ok": growth <= FLOOR},
    }


def run(passes: int = 1000, threads: int | None = None, timeout: float = 900) -> dict[str, Any]:
    """:func:`measure` in a fresh interpreter, so nothing else in this process adds to the peak."""
    cmd = [sys.executable, "-m", "benchmarks.memory", str(passes)] + ([str(threads)] if threads else [])
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"the memory benchmark failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 1000,
                             int(sys.argv[2]) if len(sys.argv) > 2 else None)))
