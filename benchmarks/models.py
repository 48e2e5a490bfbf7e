"""The trained tiny CNN of notebooks 06 and 07, over several training seeds.

For each kind of data (``shapes``: the class is the outline, notebook 06; ``patterns``: the class
is the pattern inside the shape, notebook 07) and each seed, :func:`hooklab.course.shapes.trained_model`
trains one model (seeded initial weights and batch order, one PyTorch thread, as in the
notebooks). Measured: the seconds to draw the data (once per kind) and to train, the test
accuracy, and Grad-CAM's strict peak check on ``relu2`` (:func:`hooklab.course.nb07_grad_cam.peak_check`: the
share of correctly classified test images whose heat-map peak is a pixel of the shape).

Each seed is trained twice in the full run: with this CPU's float kernels, and with the other
kernel set of ``python3 dev.py test --other-cpu`` (in a subprocess): the floors must hold for both,
as the notebooks' claims must hold on any machine.

Floors, for every seed and kernel set: data plus training within 10 s, test accuracy at least
95%; on the pattern data also the peak on the shape for at least 90% of the correctly classified
images.

Run alone: ``python -m benchmarks.models 0 1 2`` prints the result (this CPU's kernels) as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

TRAIN_LIMIT_S = 10.0
ACCURACY_FLOOR = 0.95
PEAK_FLOOR = 0.90
LAYER = "relu2"


def run(seeds: list[int], other_cpu: bool = False) -> dict[str, Any]:
    """Train and check one model per kind and seed (also with the other kernel set if ``other_cpu``);
    return every figure and whether the floors hold."""
    result = _run_here(seeds)
    if other_cpu:
        from .portability import ROOT, other_cpu_env
        env = dict(os.environ, PYTHONUTF8="1", **other_cpu_env())
        out = subprocess.run([sys.executable, "-m", "benchmarks.models", *map(str, seeds)], cwd=ROOT, env=env,
                             capture_output=True, text=True, check=True)
        other = json.loads(out.stdout)
        result["runs"] += [{**r, "kernels": "other CPU"} for r in other["runs"]]
    return result


def _run_here(seeds: list[int]) -> dict[str, Any]:
    import hooklab.course.nb07_grad_cam as gradcam
    import hooklab.course.shapes as shapes

    rows = []
    for kind in ("shapes", "patterns"):
        started = time.perf_counter()
        _, test_set = shapes.default_data(kind=kind)
        data_s = time.perf_counter() - started
        for seed in seeds:
            started = time.perf_counter()
            result = shapes.trained_model(kind=kind, seed=seed)
            train_s = time.perf_counter() - started
            check = gradcam.peak_check(result.model, test_set, LAYER)
            ok = data_s + train_s <= TRAIN_LIMIT_S and result.test_accuracy >= ACCURACY_FLOOR
            if kind == "patterns":
                ok = ok and check.share >= PEAK_FLOOR
            rows.append({"kind": kind, "seed": seed, "kernels": "this CPU", "data_s": data_s, "train_s": train_s,
                         "steps": len(result.losses), "accuracy": result.test_accuracy, "peak_share": check.share,
                         "peak_per_class": check.per_class(), "ok": ok})
    return {"seeds": seeds, "layer": LAYER, "train_limit_s": TRAIN_LIMIT_S, "accuracy_floor": ACCURACY_FLOOR,
            "peak_floor": PEAK_FLOOR, "runs": rows}


def floors(models: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(floor, measured, met): the worst seed of each kind against each floor."""
    out = []
    for kind in ("shapes", "patterns"):
        runs = [r for r in models["runs"] if r["kind"] == kind]
        if not runs:
            continue
        slowest = max(r["data_s"] + r["train_s"] for r in runs)
        worst_acc = min(r["accuracy"] for r in runs)
        kernel_sets = sorted({r.get("kernels", "this CPU") for r in runs})
        n_seeds = len({r["seed"] for r in runs})
        seeds = f"{n_seeds} seed{'s' if n_seeds != 1 else ''}" + (f" × {len(kernel_sets)} kernel sets" if len(kernel_sets) > 1 else "")
        out.append((f"{kind}: data + training ≤ {models['train_limit_s']:.0f} s, slowest of {seeds}",
                    f"{slowest:.1f} s", slowest <= models["train_limit_s"]))
        out.append((f"{kind}: test accuracy ≥ {models['accuracy_floor']:.0%}, worst of {seeds}",
                    f"{worst_acc:.1%}", worst_acc >= models["accuracy_floor"]))
        if kind == "patterns":
            worst_peak = min(r["peak_share"] for r in runs)
            out.append((f"patterns: Grad-CAM peak on the shape ({models['layer']}, strict) ≥ "
                        f"{models['peak_floor']:.0%}, worst of {seeds}", f"{worst_peak:.1%}",
                        worst_peak >= models["peak_floor"]))
    return out


def markdown(models: dict[str, Any]) -> list[str]:
    """The section of RESULTS.md."""
    lines = ["", "## The trained tiny CNN (notebooks 06 and 07)", "",
             "`hooklab.course.shapes.trained_model(kind=..., seed=...)` for each kind of data (`shapes`: the class is the "
             "outline, notebook 06; `patterns`: the class is the pattern inside the shape, notebook 07) and each "
             "seed (initial weights and batch order; one PyTorch thread, as in the notebooks). Then "
             f"`hooklab.course.nb07_grad_cam.peak_check` on `{models['layer']}`: the share of the correctly classified test "
             "images (of 512) whose Grad-CAM peak, scaled up to 32×32, is a pixel of the shape.",
             "", "Every seed is trained with this CPU's float kernels and, in the full run, again with the other "
             "kernel set of `python3 dev.py test --other-cpu` (SSE4.1 kernels, one thread): the digits differ, "
             "the floors must hold for both.",
             "", f"| data | seed | kernels | data s | training s | steps | test accuracy | peak on the shape "
             f"({models['layer']}) | per class |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in models["runs"]:
        per_class = ", ".join(f"{name} {share:.0%}" for name, share in r["peak_per_class"].items())
        lines.append(f"| {r['kind']} | {r['seed']} | {r.get('kernels', 'this CPU')} | {r['data_s']:.2f} | "
                     f"{r['train_s']:.1f} | {r['steps']} | {r['accuracy']:.1%} | {r['peak_share']:.1%} | {per_class} |")
    lines += ["", "The data are drawn once per kind (the first row of each kind pays for it; the floor adds it "
              "to every seed). On the shapes, where the class is the outline, the peak share has no floor: "
              "it is what notebook 07 contrasts with the patterns, and it varies from seed to seed."]
    return lines


if __name__ == "__main__":
    print(json.dumps(_run_here([int(s) for s in sys.argv[1:]] or [0]), indent=1))
