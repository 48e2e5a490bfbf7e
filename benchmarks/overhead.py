"""Hook overhead on torchvision's resnet18: no hooks, hand-written hooks, hooklab, torchinfo.

Every variant hooks the same modules (every submodule of the model, containers included) and
runs the same model on the same batch (8 images at 64×64, CPU, eval mode, no_grad). The
repetitions are interleaved: repetition 1 of every variant, then repetition 2 of every variant,
and so on, so a burst of load from elsewhere on the machine hits every variant alike.

Two kinds of figure:

* steady state: hooks registered (untimed), then ``forwards`` forward passes, each timed;
  the figure is the median of milliseconds per forward pass over every repetition (the minimum,
  which the machine's noise can only raise, is reported beside it).
* one shot: register the hooks, run one forward pass, remove them (what ``torchinfo.summary``
  does on every call); milliseconds per call.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any, Callable

import torch
from torch import nn

import hooklab
from hooklab.inspection import count_hooks, hook_dicts

#: Setting up one variant returns a teardown function.
Setup = Callable[[nn.Module], Callable[[], None]]


def make_model() -> tuple[nn.Module, torch.Tensor]:
    """resnet18 without pretrained weights (nothing downloads), in eval mode, and its batch."""
    from torchvision.models import resnet18

    torch.manual_seed(0)
    model = resnet18(weights=None).eval()
    x = torch.randn(8, 3, 64, 64)
    return model, x


def hooked_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every submodule of the model, containers included (the root excluded)."""
    return [(name, m) for name, m in model.named_modules() if name]


# ---------------------------------------------------------------- the variants
def no_hooks(model: nn.Module) -> Callable[[], None]:
    return lambda: None


def _hand_written(clone: bool) -> Setup:
    def setup(model: nn.Module) -> Callable[[], None]:
        store: dict[str, torch.Tensor] = {}
        handles = []
        for name, module in hooked_modules(model):
            if clone:
                def hook(m: nn.Module, args: tuple, output: torch.Tensor, name: str = name) -> None:
                    store[name] = output.detach().clone()
            else:
                def hook(m: nn.Module, args: tuple, output: torch.Tensor, name: str = name) -> None:
                    store[name] = output.detach()
            handles.append(module.register_forward_hook(hook))

        def teardown() -> None:
            for h in handles:
                h.remove()
            store.clear()
        return teardown
    return setup


def _recorder(clone: bool) -> Setup:
    def setup(model: nn.Module) -> Callable[[], None]:
        # leaves=False with no pattern: every submodule, as the hand-written hooks do
        rec = hooklab.Recorder(model, leaves=False, clone=clone, name=f"bench-recorder-{clone}")
        return rec.remove
    return setup


#: name -> (setup, description). The floor compares "hooklab Recorder(clone=False)" with
#: "hand-written detach": both store each module's detached output, without copying it.
VARIANTS: dict[str, tuple[Setup, str]] = {
    "no hooks": (no_hooks, "plain forward pass"),
    "hand-written detach": (_hand_written(False), "register_forward_hook on every module: store output.detach()"),
    "hooklab Recorder(clone=False)": (_recorder(False), "hooklab.Recorder(model, leaves=False, clone=False)"),
    "hand-written detach+clone": (_hand_written(True), "as above, storing output.detach().clone()"),
    "hooklab Recorder (clone=True, default)": (_recorder(True), "hooklab.Recorder(model, leaves=False)"),
}
FLOOR_PAIR = ("hooklab Recorder(clone=False)", "hand-written detach")
FLOOR_RATIO = 1.10


def hook_call_cost(calls: int = 500, rounds: int = 7) -> dict[str, float]:
    """Microseconds of CPU time per call of each variant's hook function alone, called directly
    on a real intermediate output of resnet18 (layer1's, 8 × 64 × 16 × 16): the minimum over
    ``rounds`` interleaved rounds of ``calls`` calls. CPU time of this thread, so that other
    processes hardly disturb it (a clone's copy is all in this thread's time only when PyTorch
    copies with one thread)."""
    model, x = make_model()
    target = model.layer1
    with torch.no_grad():
        args = (model.maxpool(model.relu(model.bn1(model.conv1(x)))),)
        output = target(*args)
    hooks: dict[str, Callable] = {}
    teardowns = []
    try:
        for name, (setup, _) in VARIANTS.items():
            if name == "no hooks":
                continue
            before = set(hook_dicts(target)["forward"])
            teardowns.append(setup(model))
            [key] = set(hook_dicts(target)["forward"]) - before
            hooks[name] = hook_dicts(target)["forward"][key]
        best = {name: float("inf") for name in hooks}
        for _ in range(rounds):
            for name, hook in hooks.items():
                start = time.thread_time()
                for _ in range(calls):
                    hook(target, args, output)
                best[name] = min(best[name], time.thread_time() - start)
    finally:
        for teardown in teardowns:
            teardown()
    return {name: t / calls * 1e6 for name, t in best.items()}


def _torchinfo_call(model: nn.Module, x: torch.Tensor) -> Any:
    import torchinfo
    return torchinfo.summary(model, input_data=x, verbose=0, mode="eval")


def _hook_calls_per_forward(model: nn.Module, x: torch.Tensor) -> int:
    calls = [0]
    handles = [m.register_forward_hook(lambda *a: calls.__setitem__(0, calls[0] + 1)) for _, m in hooked_modules(model)]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return calls[0]


def run(reps: int = 30, forwards: int = 3, one_shot_reps: int | None = None, seed: int = 0) -> dict[str, Any]:
    """Measure every variant; return medians (ms), ratios and the raw samples.

    ``reps`` interleaved repetitions of ``forwards`` individually timed forward passes per
    variant (steady state), and ``one_shot_reps`` (default ``reps``) interleaved one-shot calls per variant plus
    torchinfo.summary. The order of the variants is shuffled in every repetition.
    """
    one_shot_reps = reps if one_shot_reps is None else one_shot_reps
    model, x = make_model()
    rng = random.Random(seed)
    names = list(VARIANTS)
    steady: dict[str, list[float]] = {n: [] for n in names}
    with torch.no_grad():
        for _ in range(3):  # warm up: allocator, threads, caches
            model(x)
        for _ in range(reps):
            order = names[:]
            rng.shuffle(order)
            for name in order:
                teardown = VARIANTS[name][0](model)
                try:
                    for _ in range(forwards):
                        start = time.perf_counter()
                        model(x)
                        steady[name].append((time.perf_counter() - start) * 1000)
                finally:
                    teardown()

    one_shot_names = [n for n in names if n != "no hooks"] + ["torchinfo.summary"]
    one_shot: dict[str, list[float]] = {n: [] for n in one_shot_names}
    _torchinfo_call(model, x)  # warm up its imports
    for _ in range(one_shot_reps):
        order = one_shot_names[:]
        rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            if name == "torchinfo.summary":
                _torchinfo_call(model, x)  # registers, runs under no_grad, removes
            else:
                with torch.no_grad():
                    teardown = VARIANTS[name][0](model)
                    model(x)
                    teardown()
            one_shot[name].append((time.perf_counter() - start) * 1000)
    leftover = count_hooks(model)
    per_call = hook_call_cost()
    calls_per_forward = _hook_calls_per_forward(model, x)

    med = {n: statistics.median(v) for n, v in steady.items()}
    best = {n: min(v) for n, v in steady.items()}
    med_one = {n: statistics.median(v) for n, v in one_shot.items()}
    base = med["no hooks"]
    ratio = med[FLOOR_PAIR[0]] / med[FLOOR_PAIR[1]]
    return {
        "model": "torchvision resnet18(weights=None), eval, no_grad, batch 8 × 3 × 64 × 64, CPU",
        "modules_hooked": len(hooked_modules(model)),
        "reps": reps,
        "forwards": forwards,
        "one_shot_reps": one_shot_reps,
        "torch_threads": torch.get_num_threads(),
        "steady_ms": med,
        "steady_vs_no_hooks": {n: v / base for n, v in med.items()},
        "steady_vs_hand_written": {n: v / med["hand-written detach"] for n, v in med.items()},
        "steady_min_ms": best,
        "floor_ratio_of_minimums": best[FLOOR_PAIR[0]] / best[FLOOR_PAIR[1]],
        "one_shot_ms": med_one,
        "one_shot_vs_no_hooks": {n: v / base for n, v in med_one.items()},
        "descriptions": {n: d for n, (_, d) in VARIANTS.items()} | {
            "torchinfo.summary": "torchinfo.summary(model, input_data=x, verbose=0): hooks, forward, removes, tabulates"},
        "floor": {"pair": list(FLOOR_PAIR), "ratio": ratio, "max": FLOOR_RATIO, "ok": ratio <= FLOOR_RATIO},
        "hooks_left_on_model": leftover,
        "hook_call_us": per_call,
        "hook_calls_per_forward": calls_per_forward,
        "samples_steady_ms": steady,
        "samples_one_shot_ms": one_shot,
    }


if __name__ == "__main__":
    import json
    import sys
    r = run(reps=int(sys.argv[1]) if len(sys.argv) > 1 else 10)
    r.pop("samples_steady_ms"), r.pop("samples_one_shot_ms")
    print(json.dumps(r, indent=1))
