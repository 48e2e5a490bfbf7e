"""Notebooks and their live labs.

Each notebook runs top to bottom in a fresh kernel (as ``python3 dev.py execute`` does, but the
notebook file is not written back). Its wall time runs from starting the kernel to the end of
its last cell. Then, in the same kernel, every open ``hooklab.Panel`` is driven from Python:
``changes`` changes per panel, its controls in turn (toggles on/off, sliders between min and
max, dropdowns through their options), each ``panel.set(...)`` call timed from the value change
to the view having been rebuilt (hooks re-registered, ``render`` and ``plot`` run, the widget
values updated).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import nbformat

from tests.nbtools import RAISES, client_for, has_marker, notebooks, read

#: Wall-time limits per notebook (seconds), by number: 00-05 within 8 s each, 06 within 15 s, 07 within
#: 12 s, 08 within 40 s, 09, 10 and 11 within 30 s, in a fresh kernel on a quiet 2-core machine.
#: Where the time goes: ``python -m benchmarks.profile_notebooks`` (findings in PROFILE.md).
LIMITS = {"00": 8, "01": 8, "02": 8, "03": 8, "04": 8, "05": 8, "06": 15, "07": 12, "08": 40, "09": 30, "10": 30, "11": 30}
SET_LIMIT_S = 150.0
PANEL_MEDIAN_LIMIT_MS = 150.0
MARK = "HOOKLAB-BENCH-PANELS "

#: Runs in the notebook's kernel after its last cell. Prints one line: MARK + JSON.
PANEL_CODE = r'''
import json as _json, time as _time
import hooklab as _hooklab

def _bench_sequence(panel, name, n):
    """n values for control `name`, each different from the one before (and from the current)."""
    w = panel.controls[name]
    if isinstance(w.value, bool):
        return [(not w.value) if i % 2 == 0 else w.value for i in range(n)], "toggle"
    if hasattr(w, "min") and hasattr(w, "max"):
        lo, hi = w.min, w.max
        if lo == hi:
            return [], "slider"
        first, second = (lo, hi) if w.value != lo else (hi, lo)
        return [first if i % 2 == 0 else second for i in range(n)], "slider"
    options = [o[1] if isinstance(o, tuple) else o for o in getattr(w, "options", ())]
    if len(options) < 2:
        return [], "dropdown"
    start = options.index(w.value) if w.value in options else -1
    return [options[(start + 1 + i) % len(options)] for i in range(n)], "dropdown"

def _bench_panels(n):
    """n changes per panel, round-robin over its controls (each control to its next value); each
    panel.set() timed from outside, from the value change to the rebuilt view."""
    result = []
    for title, panel in list(_hooklab.Panel.open_panels.items()):
        names = list(panel.controls)
        per_control = -(-n // max(1, len(names)))
        plan = {}
        for name in names:
            values, kind = _bench_sequence(panel, name, per_control)
            if values:
                plan[name] = (values, kind)
        stats = {name: {"control": name, "kind": kind, "changes": 0, "ms": [], "updated": 0, "errors": 0}
                 for name, (_, kind) in plan.items()}
        order = list(plan)
        for i in range(n if order else 0):
            name = order[i % len(order)]
            value = plan[name][0][i // len(order)]
            c = stats[name]
            before = panel.updates
            t0 = _time.perf_counter()
            try:
                panel.set(**{name: value})
            except Exception:
                c["errors"] += 1
            c["ms"].append((_time.perf_counter() - t0) * 1000)
            c["changes"] += 1
            c["updated"] += panel.updates > before
        result.append({"panel": title, "plot": panel.image is not None, "controls": list(stats.values()),
                       "skipped": [n_ for n_ in names if n_ not in plan]})
    return result

print(__MARK__ + _json.dumps(_bench_panels(__CHANGES__)))
'''


def _number(path: Path) -> str:
    return path.name[:2]


def _panel_summary(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in panels:
        times = [t for c in p["controls"] for t in c["ms"]]
        out.append({
            "panel": p["panel"],
            "plot": p["plot"],
            "controls": [f"{c['control']} ({c['kind']})" for c in p["controls"]],
            "skipped": p["skipped"],
            "changes": len(times),
            "median_ms": statistics.median(times) if times else None,
            "worst_ms": max(times) if times else None,
            "not_updated": sum(c["changes"] - c["updated"] for c in p["controls"]),
            "errors": sum(c["errors"] for c in p["controls"]),
            "per_control": {c["control"]: {"median_ms": statistics.median(c["ms"]) if c["ms"] else None,
                                           "worst_ms": max(c["ms"]) if c["ms"] else None}
                            for c in p["controls"]},
            "ok": bool(times) and statistics.median(times) <= PANEL_MEDIAN_LIMIT_MS,
        })
    return out


def run_one(path: Path, changes: int = 20, timeout: int = 300) -> dict[str, Any]:
    """Execute one notebook in a fresh kernel (not saved), then time its panels there."""
    nb = read(path)
    n_cells = len(nb.cells)
    code_cells = sum(c.cell_type == "code" for c in nb.cells)
    code = PANEL_CODE.replace("__MARK__", repr(MARK)).replace("__CHANGES__", str(int(changes)))
    nb.cells.append(nbformat.v4.new_code_cell(code))
    client = client_for(nb, timeout=timeout)
    finished: dict[int, float] = {}
    client.on_cell_executed = lambda cell, cell_index, execute_reply: finished.__setitem__(
        cell_index, time.perf_counter())
    start = time.perf_counter()
    try:
        client.execute()
    except Exception as exc:  # a cell timed out, the kernel died: report it, go on with the others
        return {"notebook": path.name, "code_cells": code_cells, "seconds": time.perf_counter() - start,
                "limit_s": LIMITS.get(_number(path)), "ok": False,
                "unexpected_errors": [(None, f"{type(exc).__name__}: {str(exc)[:300]}")], "panels": []}
    # the notebook's own cells end at its last code cell (nbclient reports only code cells, and
    # a notebook usually ends in Markdown); the panel benchmark appended after it does not count
    own = [t for i, t in finished.items() if i < n_cells]
    seconds = (max(own) if own else time.perf_counter()) - start
    errors = [(i, o.get("ename")) for i, c in enumerate(nb.cells[:n_cells]) if c.cell_type == "code"
              for o in c.outputs if o.get("output_type") == "error" and not has_marker(c, RAISES)]
    bench = nb.cells[-1]
    text = "".join(o.get("text", "") for o in bench.outputs if o.get("output_type") == "stream")
    lines = [ln for ln in text.splitlines() if ln.startswith(MARK)]
    if not lines:
        failure = [f"{o.get('ename')}: {o.get('evalue')}" for o in bench.outputs if o.get("output_type") == "error"]
        errors.append((None, f"the panel benchmark printed nothing {failure}"))
    panels = _panel_summary(json.loads(lines[-1][len(MARK):])) if lines else []
    limit = LIMITS.get(_number(path))
    return {
        "notebook": path.name,
        "code_cells": code_cells,
        "seconds": seconds,
        "limit_s": limit,
        "ok": (limit is None or seconds <= limit) and not errors,
        "unexpected_errors": errors,
        "panels": panels,
    }


def run(paths: list[Path] | None = None, changes: int = 20) -> dict[str, Any]:
    """Every notebook (or ``paths``) in turn; the whole set's time is the sum of their times."""
    paths = notebooks() if paths is None else paths
    results = [run_one(p, changes=changes) for p in paths]
    total = sum(r["seconds"] for r in results)
    all_panels = [p for r in results for p in r["panels"]]
    return {
        "notebooks": results,
        "total_s": total,
        "set_limit_s": SET_LIMIT_S,
        "set_ok": total <= SET_LIMIT_S,
        "panel_median_limit_ms": PANEL_MEDIAN_LIMIT_MS,
        "panels_ok": bool(all_panels) and all(p["ok"] for p in all_panels),
        "changes_per_panel": changes,
    }


if __name__ == "__main__":
    import sys
    print(json.dumps(run([Path(a).resolve() for a in sys.argv[1:]] or None, changes=5), indent=1))
