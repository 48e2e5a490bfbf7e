"""Click to view, in a real browser: the time a learner waits after using a lab's control.

Built on the browser test's harness (tests/browser.py): JupyterLab on 127.0.0.1 and Debian's
Chromium driven by playwright. Each notebook is opened and run (Run All); then each live panel is
scrolled into view and left for ``SETTLE_MS`` (a person looks at a panel before using it; a click
on a control off the screen would also time the drawing of the cells it scrolls in: about 50 ms
more for 02's and 04's first click), and every control is used as a person uses it: each checkbox
ticked and unticked, each slider moved to an end with the keyboard and back (End/Home), each
dropdown through its options (at most ``MAX_OPTIONS`` of them, spread from first to last) and back
to where it was. Text boxes are left alone.

Each change is timed in the page, from the input event (the click, the key, the pick: the last
one before the new view) to the moment the panel's view shows the next update count (its HTML
carries ``data-update="N"``; a MutationObserver sees N+1 arrive), and to the moment the busy state
("updating…") appeared. No text is polled.

Per notebook: the median, the 95th percentile and the first interaction (the first change after
Run All). Floors, for labs whose job is not training: median ≤ 100 ms, p95 ≤ 250 ms,
first interaction ≤ 150 ms. Training labs (``TRAINING``: 06, 08): the busy state shown within
100 ms of every input (its slowest), every new view within 1.5 s, and a setting picked again
(seen before in this run, so cached) at most 150 ms (median).

Only in the full bench (``python3 dev.py bench``); ``--quick`` leaves it out. Run alone:
``python -m benchmarks.browser 00 03`` prints the figures as JSON.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

MEDIAN_LIMIT_MS = 100.0
P95_LIMIT_MS = 250.0
FIRST_LIMIT_MS = 150.0
TRAINING = ("06", "08")
TRAINING_BUSY_LIMIT_MS = 100.0
TRAINING_VIEW_LIMIT_MS = 1500.0
TRAINING_REPEAT_LIMIT_MS = 150.0
MAX_OPTIONS = 10
SETTLE_MS = 500


def _spread(options: list[str], most: int) -> list[str]:
    if len(options) <= most:
        return list(options)
    return [options[round(i * (len(options) - 1) / (most - 1))] for i in range(most)]


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _use_every_control(nb: Any) -> list[tuple[str, tuple[Any, ...]]]:
    """Use every control of the current panel; return, per change, the controls' values after it."""
    states = []

    def state() -> tuple[Any, ...]:
        return tuple((c["label"], c["value"]) for c in nb.panel()["controls"])

    for c in nb.panel()["controls"]:
        label = c["label"]
        if c["kind"] == "checkbox":
            for _ in range(2):
                nb.click(label)
                states.append(state())
        elif c["kind"] == "slider":
            for key in (("End", "Home") if float(c["now"]) < c["max"] else ("Home", "End")):
                nb.move_slider(label, key)
                states.append(state())
        elif c["kind"] == "dropdown":
            for option in [o for o in _spread(c["options"], MAX_OPTIONS) if o != c["value"]] + [c["value"]]:
                nb.pick(label, option)
                states.append(state())
    return states


def _summary(name: str, timings: list[Any], repeats: list[bool], panels: list[str]) -> dict[str, Any]:
    views = [t.view_ms for t in timings if t.view_ms is not None]
    busy = [t.busy_ms for t in timings if t.busy_ms is not None]
    repeat_views = [t.view_ms for t, r in zip(timings, repeats) if r and t.view_ms is not None]
    training = name[:2] in TRAINING
    out: dict[str, Any] = {
        "notebook": name, "panels": panels, "training": training, "changes": len(timings),
        "median_ms": statistics.median(views) if views else None,
        "p95_ms": _p95(views) if views else None,
        "first_ms": timings[0].view_ms if timings else None,
        "first_what": timings[0].what if timings else None,
        "worst_ms": max(views) if views else None,
        "busy_median_ms": statistics.median(busy) if busy else None,
        "busy_worst_ms": max(busy) if busy else None,
        "busy_missing": sum(t.busy_ms is None for t in timings),
        "repeat_median_ms": statistics.median(repeat_views) if repeat_views else None,
        "per_kind": {kind: statistics.median([t.view_ms for t in timings if t.kind == kind and t.view_ms is not None])
                     for kind in sorted({t.kind for t in timings if t.view_ms is not None})},
        "samples": [{"what": t.what, "kind": t.kind, "view_ms": t.view_ms, "busy_ms": t.busy_ms, "repeat": r}
                    for t, r in zip(timings, repeats)],
    }
    return out


def floors(results: dict[str, Any]) -> list[tuple[str, str, bool]]:
    rows: list[tuple[str, str, bool]] = []
    if results.get("skipped"):
        return rows
    for r in results["notebooks"]:
        n = r["notebook"][:2]
        if r.get("error"):
            rows.append((f"browser {n}: every control used", r["error"][:120], False))
            continue
        if r["median_ms"] is None:  # no change was timed: its floors cannot be measured
            rows.append((f"browser {n}: click to view", "cannot be measured: no change of a control was timed", False))
            continue
        if r["training"]:
            rows += [
                (f"browser {n} (training lab): busy state shown ≤ {TRAINING_BUSY_LIMIT_MS:.0f} ms after every input",
                 "never seen" if r["busy_worst_ms"] is None or r["busy_missing"] else f"{r['busy_worst_ms']:.0f} ms",
                 r["busy_worst_ms"] is not None and not r["busy_missing"]
                 and r["busy_worst_ms"] <= TRAINING_BUSY_LIMIT_MS),
                (f"browser {n} (training lab): every new view ≤ {TRAINING_VIEW_LIMIT_MS:.0f} ms",
                 f"{r['worst_ms']:.0f} ms", r["worst_ms"] <= TRAINING_VIEW_LIMIT_MS),
                (f"browser {n} (training lab): a setting picked again ≤ {TRAINING_REPEAT_LIMIT_MS:.0f} ms (median)",
                 "–" if r["repeat_median_ms"] is None else f"{r['repeat_median_ms']:.0f} ms",
                 r["repeat_median_ms"] is not None and r["repeat_median_ms"] <= TRAINING_REPEAT_LIMIT_MS),
            ]
        else:
            rows += [
                (f"browser {n}: click to view, median ≤ {MEDIAN_LIMIT_MS:.0f} ms", f"{r['median_ms']:.0f} ms",
                 r["median_ms"] <= MEDIAN_LIMIT_MS),
                (f"browser {n}: click to view, p95 ≤ {P95_LIMIT_MS:.0f} ms", f"{r['p95_ms']:.0f} ms",
                 r["p95_ms"] <= P95_LIMIT_MS),
                (f"browser {n}: first interaction ≤ {FIRST_LIMIT_MS:.0f} ms", f"{r['first_ms']:.0f} ms",
                 r["first_ms"] <= FIRST_LIMIT_MS),
            ]
    return rows


def _chromium_version(executable: str) -> str:
    try:
        return subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run(paths: list[Path] | None = None, log: Any = print) -> dict[str, Any]:
    """Open and run each notebook in JupyterLab in Chromium, use every control of its live panels."""
    from tests.browser import CHROMIUM_ARGS, INSTALL_HINT, Lab, NotebookPage, find_chromium
    from tests.nbtools import notebooks

    paths = notebooks() if paths is None else paths
    executable = find_chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {"skipped": "the playwright package is missing (python3 dev.py setup installs it)", "notebooks": []}
    if executable is None:
        return {"skipped": f"no Chromium: {INSTALL_HINT}", "notebooks": []}
    results: dict[str, Any] = {"chromium": _chromium_version(executable), "load_start": _load(), "notebooks": []}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hooklab-bench-browser-") as tmp, \
            Lab(paths, Path(tmp)) as lab, sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = chromium.new_context(viewport={"width": 1400, "height": 1100}).new_page()
            loaded = False
            for path in paths:
                nb = NotebookPage(page, lab, path.name)
                log(f"[bench] browser: {path.name} ...")
                try:
                    nb.open(reload=not loaded)
                    loaded = True
                    nb.run_all()
                    titles, timings, repeats = [], [], []
                    for index in nb.live_panels():
                        nb.panel_index = index
                        # a person scrolls to a panel and looks at it before using it: the page has
                        # drawn the cells around it by the first click
                        nb.page.locator(".hooklab-panel").nth(index).scroll_into_view_if_needed()
                        nb.page.wait_for_timeout(SETTLE_MS)
                        titles.append(nb.panel()["title"])
                        seen = {tuple((c["label"], c["value"]) for c in nb.panel()["controls"])}
                        done = len(nb.timings)
                        for state in _use_every_control(nb):
                            repeats.append(state in seen)
                            seen.add(state)
                        timings += nb.timings[done:]
                    results["notebooks"].append(_summary(path.name, timings, repeats, titles))
                except Exception as exc:  # report it, go on with the next notebook
                    loaded = False
                    results["notebooks"].append({"notebook": path.name, "error": f"{type(exc).__name__}: {exc}"[:500],
                                                 "training": path.name[:2] in TRAINING, "median_ms": None})
                finally:
                    try:
                        nb.close()
                    except Exception:
                        loaded = False
                    lab.shutdown_kernels()
        finally:
            chromium.close()
    results["load_end"] = _load()
    results["seconds"] = time.perf_counter() - started
    return results


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.0f}"


def markdown(results: dict[str, Any]) -> list[str]:
    """The browser section of RESULTS.md."""
    lines = ["", "## Click to view in the browser", ""]
    if results.get("skipped"):
        return lines + [f"Not run: {results['skipped']}."]
    lines += [
        f"JupyterLab and {results['chromium']} (headless, driven by playwright) on the same machine; load "
        f"average (1, 5, 15 min) {results['load_start']} at the start of this section, {results['load_end']} at "
        f"its end ({results['seconds']:.0f} s). Each notebook opened and run (Run All), then every control of "
        "its live panels used as a person uses it: checkboxes ticked and unticked, sliders moved to an end with "
        f"the keyboard and back, dropdowns through their options (at most {MAX_OPTIONS}) and back. Each change "
        "timed in the page from the input event to the new view (its update count, `data-update`, arrived) "
        "and to the busy state shown. *First* is the first change after Run All; a *repeat* is a change to "
        "a combination of values already shown in this run.",
        "",
        "| notebook | changes | median ms | p95 ms | first ms (what) | worst ms | busy shown, median ms "
        "(worst) | repeats, median ms | median by control kind |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results["notebooks"]:
        if r.get("error"):
            lines.append(f"| {r['notebook']} | failed: {r['error'][:200]} | | | | | | | |")
            continue
        kinds = ", ".join(f"{k} {v:.0f}" for k, v in r["per_kind"].items())
        missing = f", not seen {r['busy_missing']}×" if r["busy_missing"] else ""
        lines.append(f"| {r['notebook']}{' (training lab)' if r['training'] else ''} | {r['changes']} | "
                     f"{_ms(r['median_ms'])} | {_ms(r['p95_ms'])} | {_ms(r['first_ms'])} ({r['first_what']}) | "
                     f"{_ms(r['worst_ms'])} | {_ms(r['busy_median_ms'])} ({_ms(r['busy_worst_ms'])}{missing}) | "
                     f"{_ms(r['repeat_median_ms'])} | {kinds} |")
    return lines


if __name__ == "__main__":
    import sys

    from tests.nbtools import notebooks
    chosen = [p for p in notebooks() if not sys.argv[1:] or p.name[:2] in sys.argv[1:]]
    found = run(chosen)
    for r in found["notebooks"]:
        r.pop("samples", None)
    print(json.dumps(found, indent=1))
