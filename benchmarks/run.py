"""The benchmark command: ``python3 dev.py bench`` (full) or ``python3 dev.py bench --quick``.

Full: hook overhead (40 interleaved repetitions), memory over 1,000 recorded passes, the tiny
CNN of notebooks 06 and 07 trained from 5 seeds per kind of data, every notebook and every live
panel (20 changes per panel), the live pictures' updates against full draws (30 each,
benchmarks/pictures.py), ``hooklab.explore`` on resnet18 at 224×224 (40 updates), and click to view
in Chromium for every control of every lab (benchmarks/browser.py); writes ``benchmarks/RESULTS.md``.
Quick: 12 interleaved repetitions of the overhead run, 30 passes, one seed, notebook 00 only, 6 changes per panel, 8 picture
updates, 8 explore updates, one PyTorch thread, no browser; writes ``benchmarks/out/results-quick.md`` (git-ignored).
Either way the command exits 1 when a floor it covers is missed or cannot be measured (a section
that could not run: no Chromium for the browser's floors, one CPU for the second-thread floor),
and names each such floor. The floors are set for the full run on a quiet machine; a short run on
a busy one can miss one (run it again, or with ``--threads 1``).
Raw figures go to ``benchmarks/out/results[-quick].json`` either way.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"

#: Settings per mode.
MODES: dict[str, dict[str, Any]] = {
    "full": {"reps": 40, "forwards": 2, "one_shot_reps": 20, "passes": 1000, "seeds": [0, 1, 2, 3, 4],
             "other_cpu": True, "notebooks": None, "changes": 20, "portability_seeds": [3, 4, 5],
             "explore_changes": 40, "explore_big": True, "browser": True, "threads_reps": 5, "picture_reps": 30},
    "quick": {"reps": 12, "forwards": 1, "one_shot_reps": 2, "passes": 30, "seeds": [0], "other_cpu": False,
              "notebooks": ["00"], "changes": 6, "portability_seeds": [], "explore_changes": 8, "explore_big": False,
              "browser": False, "threads_reps": 3, "picture_reps": 8},
}
SECTIONS = ("overhead", "memory", "threads", "models", "notebooks", "pictures", "portability", "explore",
            "explore_big", "browser")


# ---------------------------------------------------------------- the machine
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 ** 2
    except OSError:
        pass
    return None


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "") if out.returncode == 0 else "unknown"
    except OSError:
        return "unknown"


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import torch
    import torchvision
    import torchinfo
    ram = _ram_gib()
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": round(ram, 1) if ram else None,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "torchinfo": torchinfo.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # AVX512, AVX2, DEFAULT: ATen's kernels
        "load_start": _load(),
        "commit": _commit(),
    }


# ---------------------------------------------------------------- running
def _notebook_paths(numbers: list[str] | None) -> list[Path]:
    from tests.nbtools import notebooks
    paths = notebooks()
    if numbers is not None:
        paths = [p for p in paths if p.name[:2] in numbers]
    return paths


def collect(mode: str = "full", sections: tuple[str, ...] = SECTIONS, notebooks: list[str] | None = None,
            threads: int | None = None, overrides: dict[str, Any] | None = None, log=print) -> dict[str, Any]:
    """Run the chosen sections with the mode's settings (``overrides`` replace some); return every figure.

    ``threads`` sets PyTorch's intra-op threads for the hook overhead and memory runs (default:
    PyTorch's own choice, one per core). The notebooks' kernels always use the default.
    """
    cfg = {**MODES[mode], **(overrides or {})}
    started = time.perf_counter()
    if threads is not None:
        import torch
        torch.set_num_threads(threads)
    results: dict[str, Any] = {"mode": mode, "settings": cfg,
                               "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                               "machine": machine()}
    if "overhead" in sections:
        from . import overhead
        log(f"[bench] hook overhead: {cfg['reps']} interleaved repetitions ...")
        results["overhead"] = overhead.run(reps=cfg["reps"], forwards=cfg["forwards"],
                                           one_shot_reps=cfg["one_shot_reps"])
    if "memory" in sections:
        from . import memory
        log(f"[bench] memory: {cfg['passes']} recorded forward passes (fresh interpreter) ...")
        results["memory"] = memory.run(cfg["passes"], threads=threads)
    if "threads" in sections:
        from . import threads as second_thread
        log("[bench] a callback in a second thread, then the main thread's two-thread speed ...")
        results["threads"] = second_thread.run(reps=cfg["threads_reps"])
    if "models" in sections:
        from . import models
        log(f"[bench] the tiny CNN: trained from seeds {cfg['seeds']} on each kind of data"
            f"{' (this CPU, then the other kernel set)' if cfg['other_cpu'] else ''} ...")
        results["models"] = models.run(cfg["seeds"], other_cpu=cfg["other_cpu"])
    if "notebooks" in sections:
        from . import notebooks as nbbench
        paths = _notebook_paths(notebooks if notebooks is not None else cfg["notebooks"])
        log(f"[bench] notebooks: {len(paths)} in fresh kernels, then their panels ...")
        results["notebooks"] = nbbench.run(paths, changes=cfg["changes"])
    if "pictures" in sections:
        from . import pictures
        log(f"[bench] live pictures: {cfg['picture_reps']} updates against as many full draws, per picture ...")
        results["pictures"] = pictures.run(reps=cfg["picture_reps"])
    if "portability" in sections and cfg["portability_seeds"]:
        from . import portability
        log(f"[bench] portable outputs: notebooks {', '.join(portability.TRAINED)} with seeds "
            f"{cfg['portability_seeds']}, on both kernel sets ...")
        results["portability"] = portability.run(seeds=tuple(cfg["portability_seeds"]))
    if "explore" in sections:
        from . import explore
        log(f"[bench] hooklab.explore on resnet18 at 224×224: {cfg['explore_changes']} updates ...")
        results["explore"] = explore.run(changes=cfg["explore_changes"])
    if "explore_big" in sections and cfg["explore_big"]:
        from . import explore
        log(f"[bench] hooklab.explore on {', '.join(explore.BIG_MODELS)} at 224×224: build and updates ...")
        results["explore_big"] = [explore.run_big(name) for name in explore.BIG_MODELS]
    if "browser" in sections and cfg["browser"]:
        from . import browser
        paths = _notebook_paths(notebooks if notebooks is not None else cfg["notebooks"])
        log(f"[bench] click to view in Chromium: {len(paths)} notebooks, every control of every lab ...")
        results["browser"] = browser.run(paths, log=log)
    results["machine"]["load_end"] = _load()
    results["seconds"] = time.perf_counter() - started
    return results


def floors(results: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(floor, measured, met) for every floor the results cover."""
    rows = []
    if "overhead" in results:
        f = results["overhead"]["floor"]
        rows.append((f"hooklab Recorder(clone=False) / hand-written detach hooks ≤ {f['max']:.2f}×",
                     f"{f['ratio']:.3f}×", f["ok"]))
    if "memory" in results:
        m = results["memory"]
        rows.append((f"peak RSS growth over {m['passes']:,} recorded passes, after the first 10 ≤ "
                     f"{m['floor']['max']:.0%}", f"{m['growth']:+.2%}", m["floor"]["ok"]))
    for section in ("threads", "browser"):  # a section that could not run: its floors cannot be measured
        if results.get(section, {}).get("skipped"):
            rows.append((f"{section}: the section's floors", f"cannot be measured: {results[section]['skipped']}",
                         False))
    if "threads" in results:
        from . import threads as second_thread
        rows += second_thread.floors(results["threads"])
    if "models" in results:
        from . import models
        rows += models.floors(results["models"])
    if "pictures" in results:
        from . import pictures
        rows += pictures.floors(results["pictures"])
    if "portability" in results:
        from . import portability
        rows += portability.floors(results["portability"])
    if "explore" in results:
        from . import explore
        rows += explore.floors(results["explore"])
    for result in results.get("explore_big", []):
        from . import explore
        rows += explore.floors(result)
    if "browser" in results:
        from . import browser
        rows += browser.floors(results["browser"])
    if "notebooks" in results:
        n = results["notebooks"]
        for r in n["notebooks"]:
            if r["limit_s"] is not None:
                errs = f" ({len(r['unexpected_errors'])} unexpected errors)" if r["unexpected_errors"] else ""
                rows.append((f"{r['notebook']} ≤ {r['limit_s']} s, without unexpected errors",
                             f"{r['seconds']:.1f} s{errs}", r["ok"]))
        rows.append((f"all {len(n['notebooks'])} notebooks ≤ {n['set_limit_s']:.0f} s", f"{n['total_s']:.1f} s",
                     n["set_ok"]))
        for r in n["notebooks"]:
            for p in r["panels"]:
                med = p["median_ms"]
                rows.append((f"panel '{p['panel']}' ({r['notebook'][:2]}): median update ≤ "
                             f"{n['panel_median_limit_ms']:.0f} ms",
                             "no controls" if med is None else f"{med:.1f} ms", p["ok"]))
    return rows


# ---------------------------------------------------------------- reporting
def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}"


def markdown(results: dict[str, Any]) -> str:
    """RESULTS.md: the machine, the floors, then one section per part that was run."""
    lines = _md_header(results)
    sections = [("overhead", _md_overhead), ("memory", _md_memory), ("threads", None), ("models", None),
                ("pictures", None), ("portability", None), ("explore", None), ("explore_big", _md_explore_big),
                ("notebooks", _md_notebooks), ("browser", None)]
    for name, render in sections:
        if name not in results:
            continue
        if render is None:
            from importlib import import_module
            render = import_module(f"benchmarks.{name}").markdown
        lines += render(results[name])
    profile = HERE / "PROFILE.md"  # where the notebooks' time goes (benchmarks/profile_notebooks.py), by hand
    if mode_is_full(results) and profile.exists():
        lines += ["", profile.read_text().strip()]
    mode = results["mode"]
    lines += ["", "Raw figures: `benchmarks/out/results" + ("-quick" if mode == "quick" else "") + ".json` "
              "(not committed). How to run: `python3 dev.py bench` (a few minutes; run it on a quiet machine), "
              "`python3 dev.py bench --quick` (under a minute)."]
    return "\n".join(lines) + "\n"


def _md_explore_big(results: list[dict[str, Any]]) -> list[str]:
    from .explore import markdown_big
    return markdown_big(results)


def mode_is_full(results: dict[str, Any]) -> bool:
    return results.get("mode") == "full"


def _md_header(results: dict[str, Any]) -> list[str]:
    """The title, the machine, and the table of floors."""
    m = results["machine"]
    mode = results["mode"]
    lines = [
        "# Benchmarks" + (" (quick mode: a short run that proves the command works)" if mode == "quick" else ""),
        "",
        f"Measured {results['date']} with `python3 dev.py bench{' --quick' if mode == 'quick' else ''}` "
        f"in {results['seconds']:.0f} s, at commit {m['commit']}.",
        "",
        f"**Machine:** {m['cpu']} (PyTorch's CPU kernels: {m.get('cpu_capability', 'not recorded')}); "
        f"{m['cores']} cores; {m['ram_gib']} GiB RAM; {m['os']}; Python {m['python']}; "
        f"torch {m['torch']} (CPU; {m['torch_threads']} thread{'s' if m['torch_threads'] != 1 else ''} for the "
        "overhead and memory runs, the notebooks' kernels use the default); "
        f"torchvision {m['torchvision']}; "
        f"torchinfo {m['torchinfo']}. Load average (1, 5, 15 min) at the start: {m['load_start']}, "
        f"at the end: {m['load_end']} (2 cores: above 2 means other work was competing for the CPU, "
        "and every figure below is slower and noisier than on a quiet machine). Every figure down to the "
        "profile sections comes from this machine; each profile section names its own CPU.",
        "",
        "## Floors",
        "",
        "| floor | measured | met |",
        "| --- | --- | --- |",
    ]
    for name, measured, ok in floors(results):
        lines.append(f"| {name} | {measured} | {'yes' if ok else '**no**'} |")
    return lines


def _md_overhead(o: dict[str, Any]) -> list[str]:
    """The hook-overhead section."""
    lines: list[str] = []
    lines += [
        "",
        "## Hook overhead",
        "",
        f"{o['model']}; hooks on all {o['modules_hooked']} submodules. {o['reps']} repetitions, interleaved "
        f"(each repetition runs every variant once, in a shuffled order), {o['forwards']} timed forward "
        "pass(es) per variant per repetition. Ratios are of medians.",
        "",
        "| variant | median ms / forward | min ms | × no hooks | × hand-written detach |",
        "| --- | --- | --- | --- | --- |",
    ]
    for n, v in o["steady_ms"].items():
        lines.append(f"| {n} | {v:.2f} | {o['steady_min_ms'][n]:.2f} | {o['steady_vs_no_hooks'][n]:.3f} | "
                     f"{o['steady_vs_hand_written'][n]:.3f} |")
    lines += [
        "",
        f"The floor compares like with like: `Recorder(clone=False)` and the hand-written hooks both store "
        f"each module's detached output without copying it (ratio of medians {o['floor']['ratio']:.3f}, "
        f"of minimums {o['floor_ratio_of_minimums']:.3f}). The default `Recorder` also clones each output, "
        "so that a later in-place operation (resnet's `ReLU(inplace=True)`) cannot change what was stored; "
        "compare it with the hand-written `detach().clone()` hooks.",
        "",
        f"One shot: register the hooks, run one forward pass, remove the hooks (what `torchinfo.summary` does "
        f"on every call); median of {o['one_shot_reps']} interleaved calls.",
        "",
        "| variant | median ms / call | × a forward pass without hooks |",
        "| --- | --- | --- |",
    ]
    for n, v in o["one_shot_ms"].items():
        lines.append(f"| {n} | {v:.2f} | {o['one_shot_vs_no_hooks'][n]:.3f} |")
    lines += [
        "",
        f"The hook functions alone (CPU time of one thread, so the machine's other work hardly counts; "
        f"called directly on layer1's output; the minimum of 7 interleaved rounds of 500 calls). A forward pass calls them "
        f"{o['hook_calls_per_forward']} times.",
        "",
        "| hook function of | µs per call | ms per forward pass |",
        "| --- | --- | --- |",
    ]
    for n, us in o["hook_call_us"].items():
        lines.append(f"| {n} | {us:.2f} | {us * o['hook_calls_per_forward'] / 1000:.3f} |")
    lines.append(f"\nHooks left on the model afterwards: {o['hooks_left_on_model']}.")
    return lines


def _md_memory(mm: dict[str, Any]) -> list[str]:
    """The memory section."""
    lines: list[str] = []
    lines += [
        "",
        "## Memory",
        "",
        f"`hooklab.Recorder` with its defaults (keep=1, clone=True) on all {mm['modules_recorded']} submodules of "
        f"the same resnet18, {mm['passes']:,} forward passes ({mm['calls_recorded']:,} hook calls) in a fresh "
        f"interpreter. Resident memory after the first 10 passes: {mm['baseline_rss_mib']:.1f} MiB; peak "
        f"after that: {mm['peak_rss_mib']:.1f} MiB ({mm['growth']:+.2%}); at the end: {mm['end_rss_mib']:.1f} MiB; "
        f"outputs kept at the end: {mm['outputs_kept']} (one per module).",
        "",
        "| after pass | " + " | ".join(str(n) for n, _ in mm["rss_mib_by_pass"]) + " |",
        "| --- | " + " | ".join("---" for _ in mm["rss_mib_by_pass"]) + " |",
        "| RSS MiB | " + " | ".join(f"{v:.0f}" for _, v in mm["rss_mib_by_pass"]) + " |",
    ]
    return lines


def _md_notebooks(n: dict[str, Any]) -> list[str]:
    """The notebook times and the live-lab update times."""
    lines: list[str] = []
    lines += [
        "",
        "## Notebooks",
        "",
        "Each notebook executed top to bottom in a fresh kernel (start of the kernel to the end of the last "
        "cell; the notebook file is not written).",
        "",
        "| notebook | code cells | seconds | limit |",
        "| --- | --- | --- | --- |",
    ]
    for r in n["notebooks"]:
        lines.append(f"| {r['notebook']} | {r['code_cells']} | {r['seconds']:.1f} | "
                     f"{'–' if r['limit_s'] is None else r['limit_s']} |")
    lines.append(f"| **all {len(n['notebooks'])}** | {sum(r['code_cells'] for r in n['notebooks'])} | "
                 f"**{n['total_s']:.1f}** | {n['set_limit_s']:.0f} |")
    errors = [(r["notebook"], r["unexpected_errors"]) for r in n["notebooks"] if r["unexpected_errors"]]
    if errors:
        lines.append(f"\nUnexpected errors (cells not marked NBVAL_RAISES_EXCEPTION): {errors}")
    lines += [
        "",
        "## Live labs",
        "",
        f"In the kernel that ran the notebook, every open `hooklab.Panel` driven from Python: "
        f"{n['changes_per_panel']} changes per panel, its controls in turn (toggles on/off, sliders between min "
        "and max, dropdowns through their options), each `panel.set(...)` timed from the value change to the view rebuilt (hooks "
        "re-registered, the view and plot rendered, the widget values updated), from outside the panel.",
        "",
        "| notebook | panel | controls | changes | median ms | worst ms |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in n["notebooks"]:
        for p in r["panels"]:
            flags = "".join([f" ({p['errors']} errors)" if p["errors"] else "",
                             f" (not changed: {', '.join(p['skipped'])})" if p.get("skipped") else "",
                             f" ({p['not_updated']} changes without an update)" if p["not_updated"] else ""])
            lines.append(f"| {r['notebook'][:2]} | {p['panel']}{' (with plot)' if p['plot'] else ''}{flags} | "
                         f"{', '.join(p['controls'])} | {p['changes']} | {_ms(p['median_ms'])} | {_ms(p['worst_ms'])} |")
        if not r["panels"]:
            lines.append(f"| {r['notebook'][:2]} | (no open panel) | | | | |")
    return lines


def summary(results: dict[str, Any]) -> str:
    """A few lines for the terminal."""
    lines = []
    if "overhead" in results:
        o = results["overhead"]
        lines.append("hook overhead (median ms per forward; × hand-written detach):")
        for n, v in o["steady_ms"].items():
            lines.append(f"  {n:<40} {v:8.2f}  {o['steady_vs_hand_written'][n]:.3f}×")
        lines.append(f"  torchinfo.summary, one call: {o['one_shot_ms']['torchinfo.summary']:.2f} ms; "
                     f"hooklab Recorder one shot: {o['one_shot_ms']['hooklab Recorder (clone=True, default)']:.2f} ms")
    if "memory" in results:
        mm = results["memory"]
        lines.append(f"memory: {mm['baseline_rss_mib']:.0f} MiB after 10 passes, peak {mm['peak_rss_mib']:.0f} MiB "
                     f"over {mm['passes']} ({mm['growth']:+.2%})")
    if "models" in results:
        for r in results["models"]["runs"]:
            lines.append(f"{r['kind']} seed {r['seed']}: {r['data_s'] + r['train_s']:.1f} s, test accuracy "
                         f"{r['accuracy']:.1%}, Grad-CAM peak on the shape {r['peak_share']:.1%}")
    if "notebooks" in results:
        n = results["notebooks"]
        for r in n["notebooks"]:
            panels = "; ".join(f"panel median {_ms(p['median_ms'])} ms, worst {_ms(p['worst_ms'])} ms"
                               for p in r["panels"]) or "no panel"
            lines.append(f"{r['notebook']}: {r['seconds']:.1f} s; {panels}")
        lines.append(f"all notebooks: {n['total_s']:.1f} s")
    if "explore" in results:
        e = results["explore"]
        lines.append(f"explore resnet18: median update {e['median_ms']:.1f} ms (ran the model {e['ran_model']} of "
                     f"{e['changes']} times, median {e['median_ran_model_ms'] or 0:.1f} ms; forward alone "
                     f"{e['forward_alone_ms']:.1f} ms); build {e['build_ms']:.0f} ms")
    if "browser" in results and not results["browser"].get("skipped"):
        for r in results["browser"]["notebooks"]:
            lines.append(f"browser {r['notebook']}: " + (r["error"][:200] if r.get("error") else
                         f"median {_ms(r['median_ms'])} ms, p95 {_ms(r['p95_ms'])} ms, first {_ms(r['first_ms'])} ms"))
    rows = floors(results)
    missed = [(name, measured) for name, measured, ok in rows if not ok]
    lines.append(f"floors met: {len(rows) - len(missed)} of {len(rows)}" +
                 ("".join(f"\n  MISSED: {name} (measured: {measured})" for name, measured in missed)))
    return "\n".join(lines)


def write(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown(results), encoding="utf-8")
    raw = OUT / ("results-quick.json" if results["mode"] == "quick" else "results.json")
    if path.parent != HERE:  # a custom --out: keep the JSON beside it
        raw = path.with_suffix(".json")
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(results, indent=1), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 dev.py bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short run; writes benchmarks/out/results-quick.md")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections to run (default: all of {','.join(SECTIONS)})")
    parser.add_argument("--notebooks", help="comma-separated notebook numbers, e.g. 00,03 (default: all; quick: 00)")
    parser.add_argument("--out", type=Path, help="where to write the Markdown table")
    parser.add_argument("--threads", type=int, help="PyTorch threads for the overhead and memory runs "
                        "(default: one per core, in quick mode 1; 1 gives steadier figures on a busy machine)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    sections = tuple(s.strip() for s in args.only.split(",") if s.strip())
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    numbers = [s.strip() for s in args.notebooks.split(",")] if args.notebooks else None
    out = args.out or (OUT / "results-quick.md" if mode == "quick" else HERE / "RESULTS.md")
    if mode == "full" and args.out is None and (sections != SECTIONS or numbers is not None):
        out = OUT / "results-partial.md"  # RESULTS.md only from a complete run
    # quick: one PyTorch thread unless told otherwise, so a busy machine cannot stretch the run
    threads = args.threads if args.threads is not None else (1 if mode == "quick" else None)
    results = collect(mode, sections, numbers, threads=threads)
    write(results, out)
    print(summary(results))
    print(f"[bench] {results['seconds']:.0f} s; written to {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    missed = [name for name, _, ok in floors(results) if not ok]
    if missed:
        print(f"[bench] {len(missed)} floor(s) missed or not measured (MISSED above): exit status 1")
    return 1 if missed else 0
