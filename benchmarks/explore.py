"""``hooklab.explore`` on ``resnet18(weights=None)`` at batch 1, 3×224×224, and on the big models a
learner brings (``vit_b_16``, ``convnext_tiny``).

Measured: building the panel (its one pass with autograd over every module); a forward pass
alone, without hooks, with the panel's number of threads (what an update that runs the model
cannot go below); and ``changes`` updates driven from Python with the same driver as the
notebooks' panels (its controls in turn: toggles on and off, sliders between their ends, the
module dropdown through its options; the filter, a text box, is left alone). Each update is timed
from outside, and a forward pre-hook and a forward hook on the model (the bench's own) count and
time the passes it ran: one (a new combination of module and interventions; two for the first,
with the reference pass) or none (a module picked without interventions, or a combination seen
before).

Floor: the median update at most 150 ms. Afterwards ``panel.remove()`` must leave 0 hooks.

Big models (:func:`run_big`): building the panel against one forward + backward pass of the same
model (``torch.autograd.grad`` of the summed output with respect to every parameter, what the
panel's own pass does), both timed in turn in one run with the panel's number of threads; floor:
build / (forward + backward) at most 1.3. The same update driver gives their median update.

Run alone: ``python -m benchmarks.explore [changes]`` prints the result as JSON.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

MEDIAN_LIMIT_MS = 150.0


def _driver() -> dict[str, Any]:
    """The notebooks' panel driver (benchmarks/notebooks.py), loaded as functions."""
    from .notebooks import PANEL_CODE
    namespace: dict[str, Any] = {}
    exec(PANEL_CODE.split("print(__MARK__")[0], namespace)
    return namespace


BUILD_RATIO_LIMIT = 1.3
BIG_MODELS = ("vit_b_16", "convnext_tiny")


def run_big(name: str, changes: int = 16, size: int = 224, threads: int | None = 1, reps: int = 3) -> dict[str, Any]:
    """``name`` (a torchvision model) at ``size``²: the panel's build against forward + backward,
    ``reps`` of each in turn (medians), then ``changes`` updates."""
    import torch
    import torchvision

    import hooklab

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, size, size)
    params = [p for p in model.parameters() if p.requires_grad]
    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    build_ms, pass_ms = [], []
    try:
        torch.autograd.grad(model(x).sum(), params)  # warm up
        for _ in range(reps):
            start = time.perf_counter()
            torch.autograd.grad(model(x).sum(), params)
            pass_ms.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            panel = hooklab.explore(model, x, threads=threads, name=f"bench: explore {name}")
            panel.state()
            build_ms.append((time.perf_counter() - start) * 1000)
            panel.close()
    finally:
        torch.set_num_threads(old)
    result = run(changes=changes, size=size, threads=threads, model=model, label=f"{name}(weights=None)")
    ratio = statistics.median(build_ms) / statistics.median(pass_ms)
    result.update({"build_samples_ms": build_ms, "pass_samples_ms": pass_ms, "pass_ms": statistics.median(pass_ms),
                   "build_ms": statistics.median(build_ms), "build_ratio": ratio,
                   "build_ok": ratio <= BUILD_RATIO_LIMIT, "build_limit": BUILD_RATIO_LIMIT})
    return result


def run(changes: int = 40, size: int = 224, threads: int | None = 1, model: Any = None,
        label: str = "resnet18(weights=None)") -> dict[str, Any]:
    """Build the panel, drive it ``changes`` times, remove it; return every figure."""
    import torch
    import torchvision

    import hooklab

    torch.manual_seed(0)
    model = model if model is not None else torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, size, size)

    forward_ms = []
    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            model(x)
            for _ in range(5):
                start = time.perf_counter()
                model(x)
                forward_ms.append((time.perf_counter() - start) * 1000)
    finally:
        torch.set_num_threads(old)

    start = time.perf_counter()
    panel = hooklab.explore(model, x, threads=threads, name=f"bench: explore {label}")
    panel.state()  # the first view, as showing the panel renders it
    build_ms = (time.perf_counter() - start) * 1000

    driver = _driver()
    names = list(panel.panel.controls)
    per_control = -(-changes // max(1, len(names)))
    plan = {}
    for name in names:
        values, kind = driver["_bench_sequence"](panel.panel, name, per_control)
        if values:
            plan[name] = (values, kind)
    order = list(plan)
    passes: list[float] = []  # the model's passes, timed from outside by a pre-hook and a hook on it
    with hooklab.Hooks() as stopwatch:
        stopwatch.forward_pre(model, lambda m, args: passes.append(-time.perf_counter()))
        stopwatch.forward(model, lambda m, args, out: passes.append(passes.pop() + time.perf_counter()))
        updates = []
        for i in range(changes):
            name = order[i % len(order)]
            value = plan[name][0][i // len(order)]
            passes.clear()
            start = time.perf_counter()
            error = ""
            try:
                panel.set(**{name: value})
            except Exception as exc:  # counted, and the floor then fails
                error = f"{type(exc).__name__}: {exc}"
            ms = (time.perf_counter() - start) * 1000
            updates.append({"control": name, "value": value if not isinstance(value, float) else round(value, 3),
                            "ms": ms, "ran the model": len(passes), "forward ms": sum(passes) * 1000, "error": error})
    hooks_during = panel.hook_count()
    panel.remove()
    hooks_left = hooklab.count_hooks(model)
    times = [u["ms"] for u in updates]
    ran = [u["ms"] for u in updates if u["ran the model"]]
    cached = [u["ms"] for u in updates if not u["ran the model"]]

    def med(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    median = med(times)
    return {
        "model": f"{label}, batch 1, 3×{size}×{size}",
        "threads": threads,
        "build_ms": build_ms,
        "forward_alone_ms": med(forward_ms),
        "changes": len(updates),
        "controls": [f"{n} ({plan[n][1]})" for n in order],
        "skipped": [n for n in names if n not in plan],
        "median_ms": median,
        "worst_ms": max(times) if times else None,
        "ran_model": len(ran),
        "median_ran_model_ms": med(ran),
        "median_cached_ms": med(cached),
        "median_forward_ms": med([u["forward ms"] for u in updates if u["ran the model"]]),
        "errors": [u["error"] for u in updates if u["error"]],
        "hooks_during": hooks_during,
        "hooks_left": hooks_left,
        "updates": updates,
        "limit_ms": MEDIAN_LIMIT_MS,
        "ok": median is not None and median <= MEDIAN_LIMIT_MS and hooks_left == 0 and not any(u["error"] for u in updates),
    }


def floors(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    errors = f" ({len(result['errors'])} errors)" if result["errors"] else ""
    rows = [(f"hooklab.explore on {result['model']}: median update ≤ {result['limit_ms']:.0f} ms, 0 hooks after "
             "remove()", f"{result['median_ms']:.1f} ms, {result['hooks_left']} hooks{errors}", result["ok"])]
    if "build_ratio" in result:
        rows.append((f"hooklab.explore on {result['model']}: build / (forward + backward) ≤ {result['build_limit']}",
                     f"{result['build_ratio']:.2f} ({result['build_ms']:.0f} / {result['pass_ms']:.0f} ms)",
                     result["build_ok"]))
    return rows


def markdown(result: dict[str, Any]) -> list[str]:
    def ms(v: float | None) -> str:
        return "–" if v is None else f"{v:.1f}"
    threads = "PyTorch's setting" if result["threads"] is None else f"{result['threads']} thread" + (
        "s" if result["threads"] != 1 else "")
    lines = [
        "", "## hooklab.explore", "",
        f"`hooklab.explore(model, x)` on {result['model']} ({threads} while the panel runs the model). Building the "
        f"panel (one pass with autograd recording every module): {ms(result['build_ms'])} ms. A forward "
        f"pass alone, without hooks: {ms(result['forward_alone_ms'])} ms (median of 5).",
        "",
        f"{result['changes']} updates, driven as the notebooks' panels are (controls in turn: "
        f"{', '.join(result['controls'])}; not changed: {', '.join(result['skipped']) or 'none'}). An update runs "
        "the model only for a combination of module and interventions not seen before; picking a module without "
        "interventions reads the pass recorded when the panel was built.",
        "",
        "| updates | count | median ms |",
        "| --- | --- | --- |",
        f"| all | {result['changes']} | {ms(result['median_ms'])} (worst {ms(result['worst_ms'])}) |",
        f"| ran the model | {result['ran_model']} | {ms(result['median_ran_model_ms'])} (of which the forward pass "
        f"{ms(result['median_forward_ms'])}) |",
        f"| read from the record | {result['changes'] - result['ran_model']} | {ms(result['median_cached_ms'])} |",
        "",
        f"Hooks the panel held at the end: {result['hooks_during']}; after `panel.remove()`: {result['hooks_left']}.",
    ]
    if result["errors"]:
        lines.append(f"\nErrors: {result['errors'][:3]}")
    return lines


if __name__ == "__main__":
    import sys
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 20), indent=1, default=str))


def markdown_big(results: list[dict[str, Any]]) -> list[str]:
    """The big models' section: build against forward + backward, and their updates."""
    lines = ["", "## hooklab.explore on big models", "",
             "Building the panel (one pass with autograd that summarises every module's output and keeps the "
             "gradient norm of each call's) against one forward + backward pass of the same model "
             "(`torch.autograd.grad` of the summed output with respect to every parameter), timed in turn in "
             "one run with the panel's number of threads (medians); then updates driven as above.", "",
             "| model | forward + backward ms | build ms | build / pass | median update ms | ran the model | "
             "median of those ms | read from the record, median ms |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r['model']} | {r['pass_ms']:.0f} | {r['build_ms']:.0f} | {r['build_ratio']:.2f} | "
                     f"{r['median_ms']:.0f} | {r['ran_model']} of {r['changes']} | "
                     f"{r['median_ran_model_ms'] or 0:.0f} | {r['median_cached_ms'] or 0:.1f} |")
    return lines
