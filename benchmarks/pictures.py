"""Live pictures: what redrawing only the moving parts saves, per picture of a lab.

The pictures of notebooks 02 (``nb02.LiveBars``), 04 (``nb04.LiveWeights``) and 06
(``nb06.LabPicture``) keep their figure between updates and draw only what changes over a kept
background (:class:`hooklab.plots.LiveCanvas`). Their tests prove, without timing, that an update
draws the same pixels as a full draw and never draws the figure itself; this section times it.
Per picture, interleaved (one update, then one full draw of the same figure, ``reps`` times): an
update to a new state with the same axes (PNG included), and a full draw to PNG
(``hooklab.plots.to_png``). Floor: the median update at most 0.75 of the median full draw (measured
0.42-0.54 on a busy 2-core machine; without blitting it is about 1).

Run alone: ``python -m benchmarks.pictures [REPS]`` prints the figures as JSON.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any, Callable

#: The median update over the median full draw, at most.
LIMIT = 0.75


def _pictures() -> dict[str, tuple[Any, Callable[[int], bytes]]]:
    """Name -> (the picture's figure, an update to state ``i``: the same axes, other data)."""
    import torch

    from hooklab.course import nb02_tensor_hooks as nb02
    from hooklab.course import nb04_editing_parameters as nb04
    from hooklab.course import nb06_training_diagnostics as nb06

    values = [2.0 * v for v in range(-3, 5)]
    bars = nb02.LiveBars([str(v) for v in range(-3, 5)], ["plain 2·v", "lab_v.grad"], xlabel="value of lab_v")

    generator = torch.Generator().manual_seed(0)
    weight, reference = torch.randn(12, 12, generator=generator) * 0.3, torch.randn(12, generator=generator)
    weights = nb04.LiveWeights(weight, reference, limit=float(weight.abs().max()))

    trained = nb06.run("kaiming", 0.006, steps=30, n_train=960, n_test=32)
    lab = nb06.LabPicture(steps=30, layers=list(trained.grads.norms))
    layers = ["relu1", "relu2", "relu3"]
    return {
        "02 gradient bars (LiveBars)": (
            bars.fig, lambda i: bars.png({"plain 2·v": values, "lab_v.grad": [g * (1 + i % 2) / 2 for g in values]})),
        "04 weight and output (LiveWeights)": (
            weights.fig, lambda i: weights.png(weight * (weight.abs() > 0.02 * (i % 5)), reference)),
        "06 histogram and gradient norms (LabPicture)": (
            lab.fig, lambda i: lab.png(trained, layers[i % 3])),
    }


def run(reps: int = 30) -> dict[str, Any]:
    from hooklab.plots import to_png

    found = []
    for name, (fig, update) in _pictures().items():
        update(0)  # the first update draws the background
        updates, fulls = [], []
        for i in range(1, reps + 1):
            start = time.perf_counter()
            update(i)
            updates.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            to_png(fig)
            fulls.append((time.perf_counter() - start) * 1000)
            update(i)  # the figure as the live picture left it
        update_ms, full_ms = statistics.median(updates), statistics.median(fulls)
        found.append({"picture": name, "update_ms": update_ms, "full_draw_ms": full_ms, "ratio": update_ms / full_ms})
    return {"reps": reps, "limit": LIMIT, "pictures": found}


def floors(results: dict[str, Any]) -> list[tuple[str, str, bool]]:
    return [(f"live picture {p['picture'][:2]}: update ≤ {results['limit']:.2f}× a full draw (medians)",
             f"{p['ratio']:.2f}× ({p['update_ms']:.1f} / {p['full_draw_ms']:.1f} ms)", p["ratio"] <= results["limit"])
            for p in results["pictures"]]


def markdown(results: dict[str, Any]) -> list[str]:
    lines = ["", "## Live pictures: an update against a full draw", "",
             "Each lab picture that redraws only its moving parts (`hooklab.plots.LiveCanvas`), timed in one "
             f"process: {results['reps']} updates to new data on the same axes (PNG included), interleaved with as "
             "many full draws of the same figure (`hooklab.plots.to_png`).", "",
             "| picture | update, median ms | full draw, median ms | update / full draw |", "| --- | --- | --- | --- |"]
    for p in results["pictures"]:
        lines.append(f"| {p['picture']} | {p['update_ms']:.1f} | {p['full_draw_ms']:.1f} | {p['ratio']:.2f}× |")
    return lines


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 30), indent=1))
