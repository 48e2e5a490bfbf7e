"""Exercises of notebook 06 (training diagnostics), with checkers and worked solutions.

>>> from hooklab.exercises import training_diagnostics as ex
>>> print(ex.clip_grad.check(ex.clip_grad_hook))
Clip each weight's gradient norm to 1: all 4 checks passed
  ✓ has the right signature
  ✓ scales a gradient of norm 5 down to norm 1, same direction
  ✓ leaves a gradient of norm 0.5 alone
  ✓ works inside a real backward pass
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from .._signature import check_hook_signature
from ..checker import Exercise, Mistake
from ..diagnostics import dead_share

__all__ = ["stats_hook", "clip_grad"]


# ---------------------------------------------------------------- 1: a statistics hook
def make_stats_hook(store):
    def record(module, args, output):
        a = output.detach()
        per_channel_max = a.amax(dim=(0, 2, 3))  # the largest value of each channel
        store.append({
            "mean": a.mean().item(),
            "std": a.std().item(),
            "dead": (per_channel_max <= 0).float().mean().item(),
        })
    return record


def _batch() -> torch.Tensor:
    # 4 channels; channel 1 is zero everywhere, channel 3 zero except one position (alive)
    g = torch.Generator().manual_seed(3)
    out = torch.relu(torch.randn(2, 4, 3, 3, generator=g)) + 0.1
    out[:, 1] = 0.0
    out[:, 3] = 0.0
    out[1, 3, 2, 2] = 0.5
    return out


def _run_stats(make_hook: Callable) -> tuple[list, Any, torch.Tensor]:
    store: list = []
    hook = make_hook(store)
    if not callable(hook):
        raise Mistake(f"make_stats_hook(store) returned {type(hook).__name__}; it should return the hook "
                      "function itself: `return record` (no parentheses).")
    try:
        check_hook_signature(hook, "forward")
    except TypeError as exc:
        raise Mistake(str(exc)) from None
    layer = nn.Identity()
    out = _batch()
    handle = layer.register_forward_hook(hook)
    try:
        result = layer(out.clone())
    finally:
        handle.remove()
    return store, result, out


def _check_returns_nothing(make_hook: Callable) -> None:
    store, result, out = _run_stats(make_hook)
    if not torch.equal(result, out):
        raise Mistake("your hook changed the layer's output: a forward hook that returns a value replaces "
                      "the output. Only record; end the hook without `return`.")


def _check_floats(make_hook: Callable) -> None:
    store, _, _ = _run_stats(make_hook)
    if len(store) != 1:
        raise Mistake(f"after one forward pass the store holds {len(store)} entries; append exactly one dict "
                      "per call: store.append({...}).")
    entry = store[0]
    if not isinstance(entry, dict) or set(entry) != {"mean", "std", "dead"}:
        raise Mistake(f"append a dict with the keys 'mean', 'std' and 'dead'; got {entry!r}.")
    for key, value in entry.items():
        if isinstance(value, torch.Tensor):
            raise Mistake(f"store[0][{key!r}] is a tensor: keep plain floats (call .item()), so nothing keeps "
                          "tensors, or their graph, alive between steps.")
        if not isinstance(value, float):
            raise Mistake(f"store[0][{key!r}] should be a float, got {type(value).__name__}.")


def _check_values(make_hook: Callable) -> None:
    store, _, out = _run_stats(make_hook)
    entry = store[0]
    mean, std = out.mean().item(), out.std().item()
    zeros = (out <= 0).float().mean().item()
    if abs(entry["mean"] - mean) > 1e-5:
        raise Mistake(f"'mean' is {entry['mean']:.4f}, expected {mean:.4f}: the mean over the whole output.")
    if abs(entry["std"] - std) > 1e-5:
        raise Mistake(f"'std' is {entry['std']:.4f}, expected {std:.4f}: the standard deviation over the whole output.")
    dead = dead_share(out)
    if abs(entry["dead"] - dead) > 1e-6:
        if abs(entry["dead"] - zeros) < 1e-6:
            raise Mistake(f"'dead' is {entry['dead']:.4f}, the share of zero *values*. A unit (a channel, "
                          "dimension 1) is dead when it is zero for every example and every position: "
                          f"take the maximum over the other dimensions first. Expected {dead:.4f}.")
        raise Mistake(f"'dead' is {entry['dead']:.4f}, expected {dead:.4f} (1 of the 4 channels is zero "
                      "everywhere; another is zero except at one position, so it is alive).")


stats_hook = Exercise(
    "A statistics hook that keeps floats",
    [
        ("returns nothing (the output stays as it is)", _check_returns_nothing),
        ("appends one dict of floats per call", _check_floats),
        ("mean, std and dead-unit share are right", _check_values),
    ],
    solution=make_stats_hook,
)


# ---------------------------------------------------------------- 2: clip a gradient's norm
def clip_grad_hook(param):
    norm = param.grad.norm()
    if norm > 1.0:
        param.grad.mul_(1.0 / norm)


def _param_with_grad(grad: list[float]) -> torch.Tensor:
    p = torch.zeros(len(grad), requires_grad=True)
    p.grad = torch.tensor(grad)
    return p


def _check_scales_down(fn: Callable) -> None:
    p = _param_with_grad([3.0, -4.0])  # norm 5
    result = fn(p)
    got = p.grad
    if torch.allclose(got, torch.tensor([3.0, -4.0])):
        hint = (" Your hook returned a value instead: a post-accumulate-grad hook must return None "
                "(PyTorch raises a RuntimeError otherwise)." if result is not None else "")
        raise Mistake("param.grad is unchanged. Change it in place, e.g. param.grad.mul_(1 / norm)." + hint)
    if result is not None:
        raise Mistake("your hook returns a value: a post-accumulate-grad hook must return None (PyTorch raises "
                      "a RuntimeError otherwise). Change param.grad in place and end without `return`.")
    if torch.allclose(got, torch.tensor([1.0, -1.0])):
        raise Mistake("you clamped each element to [-1, 1]; that changes the gradient's direction. Scale the "
                      "whole gradient instead: multiply it by 1 / norm when its norm is above 1.")
    if not torch.allclose(got, torch.tensor([0.6, -0.8]), atol=1e-5):
        raise Mistake(f"param.grad became {[round(v, 4) for v in got.tolist()]}, expected [0.6, -0.8] "
                      "(norm 1, same direction as [3, -4]).")


def _check_leaves_small(fn: Callable) -> None:
    p = _param_with_grad([0.3, 0.4])  # norm 0.5
    fn(p)
    if not torch.allclose(p.grad, torch.tensor([0.3, 0.4])):
        raise Mistake(f"a gradient of norm 0.5 became {[round(v, 4) for v in p.grad.tolist()]}; only scale "
                      "gradients whose norm is above 1, leave the others alone.")


def _check_in_backward(fn: Callable) -> None:
    layer = nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        layer.weight.fill_(1.0)
    handle = layer.weight.register_post_accumulate_grad_hook(fn)
    try:
        (layer(torch.full((1, 3), 10.0)).sum()).backward()  # grad = [10, 10, 10]
    finally:
        handle.remove()
    norm = layer.weight.grad.norm().item()
    if abs(norm - 1.0) > 1e-4:
        raise Mistake(f"registered with register_post_accumulate_grad_hook, the weight's gradient norm after "
                      f"backward is {norm:.4f}, expected 1.0.")


clip_grad = Exercise(
    "Clip each weight's gradient norm to 1",
    [
        ("scales a gradient of norm 5 down to norm 1, same direction", _check_scales_down),
        ("leaves a gradient of norm 0.5 alone", _check_leaves_small),
        ("works inside a real backward pass", _check_in_backward),
    ],
    hook_kind="post_accumulate_grad",
    solution=clip_grad_hook,
)
