"""Where a notebook's time goes: per-cell wall times in a fresh kernel, and a profile of the slow cells.

    .venv/bin/python -m benchmarks.profile_notebooks notebooks/06_training_diagnostics.ipynb [--runs 3] [--top 3]

For each notebook:

* ``--runs`` fresh kernels (as ``python3 dev.py execute`` runs it, the file is not written): the
  kernel's start-up, every code cell's wall time (from its start to its end, as the kernel's
  client sees them) and the total (start of the kernel to the end of the last code cell);
* then the ``--top`` slowest cells again, in this process (an IPython shell that runs every cell
  in order, so the state is the notebook's), under ``cProfile``: the functions with the largest
  cumulative time in each.

Prints a report; ``--json FILE`` also writes the raw figures.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import time
from pathlib import Path
from typing import Any

from tests.nbtools import client_for, read


def cell_times(path: Path) -> dict[str, Any]:
    """One fresh-kernel run: kernel start-up and each code cell's seconds."""
    nb = read(path)
    client = client_for(nb)
    started: dict[int, float] = {}
    finished: dict[int, float] = {}
    client.on_cell_execute = lambda cell, cell_index: started.__setitem__(cell_index, time.perf_counter())
    client.on_cell_executed = lambda cell, cell_index, execute_reply: finished.__setitem__(
        cell_index, time.perf_counter())
    t0 = time.perf_counter()
    with client.setup_kernel():
        ready = time.perf_counter()
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        cpu = _cpu_seconds(getattr(getattr(client.km, "provisioner", None), "pid", None))
    end = max(finished.values()) if finished else time.perf_counter()
    cells = {i: finished[i] - started[i] for i in finished if i in started}
    first = min(started.values()) if started else ready
    return {"total_s": end - t0, "kernel_s": first - t0, "cpu_s": cpu, "cells": cells,
            "sources": {i: nb.cells[i].source for i in cells}}


def _cpu_seconds(pid: int | None) -> float | None:
    """The CPU time (user + system) the kernel process has used so far, from /proc (Linux): less
    sensitive than the wall time to other work on a shared machine."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return None


def profile_cells(path: Path, indices: list[int], lines: int = 12) -> dict[int, str]:
    """Run every code cell of ``path`` in order in an IPython shell in this process; profile the
    cells in ``indices`` (cumulative time, the top ``lines`` functions)."""
    import matplotlib

    matplotlib.use("Agg")
    from IPython.core.interactiveshell import InteractiveShell

    os.chdir(path.parent)
    shell = InteractiveShell.instance()
    nb = read(path)
    out: dict[int, str] = {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if index in indices:
            prof = cProfile.Profile()
            t = time.perf_counter()
            prof.enable()
            shell.run_cell(cell.source, silent=True)
            prof.disable()
            seconds = time.perf_counter() - t
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(lines)
            body = buf.getvalue()
            body = body[body.find("ncalls"):] if "ncalls" in body else body
            out[index] = f"cell {index} ({seconds:.2f} s in this process)\n{body}"
        else:
            shell.run_cell(cell.source, silent=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--top", type=int, default=0, help="profile the N slowest cells (default 0: none)")
    parser.add_argument("--cells", type=int, default=6, help="list the N slowest cells (default 6)")
    parser.add_argument("--json", help="write the raw figures here")
    args = parser.parse_args(argv)
    raw: dict[str, Any] = {}
    for name in args.notebooks:
        path = Path(name).resolve()
        load = os.getloadavg()
        runs = [cell_times(path) for _ in range(args.runs)]
        totals = [r["total_s"] for r in runs]
        median_cells = {i: statistics.median(r["cells"][i] for r in runs) for i in runs[0]["cells"]}
        slow = sorted(median_cells, key=median_cells.get, reverse=True)
        cpus = [r["cpu_s"] for r in runs if r["cpu_s"] is not None]
        cpu = f"; kernel CPU time {' '.join(f'{c:.1f}' for c in cpus)} s" if cpus else ""
        print(f"\n{path.name}: {' '.join(f'{t:.1f}' for t in totals)} s (median {statistics.median(totals):.1f} s; "
              f"kernel start {statistics.median(r['kernel_s'] for r in runs):.1f} s{cpu}; "
              f"load {load[0]:.2f} at the start)")
        for i in slow[:args.cells]:
            first = runs[0]["sources"][i].strip().splitlines()[0][:70] if runs[0]["sources"][i].strip() else ""
            print(f"  cell {i:3d}  {median_cells[i]:6.2f} s   {first}")
        profiles = profile_cells(path, slow[:args.top]) if args.top else {}
        for text in profiles.values():
            print("\n  " + text.replace("\n", "\n  "))
        raw[path.name] = {"totals": totals, "cpu": cpus, "load": load, "cells": median_cells, "profiles": profiles}
    if args.json:
        Path(args.json).write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
