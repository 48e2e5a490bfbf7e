"""Exercises of notebook 01 (callbacks): one callback per name, and a hook that cleans up after itself.

>>> from hooklab.course.nb01_callbacks import one_per_name
>>> print(one_per_name.check(one_per_name.worked()))  # the worked solution
One callback per name: all 3 checks passed
  ✓ registers one callback per name
  ✓ each callback appends its own name
  ✓ works for other names, every time the callbacks run
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from ..callbacks import Callbacks
from ..lab.exercises import Exercise, Mistake
from .checks import expect_close
from ..inspection import count_hooks

__all__ = ["one_per_name", "hook_for_one_call"]


# ---------------------------------------------------------------- exercise 1: one callback per name
def _registered(fn: Callable, names: list[str]) -> tuple[Callbacks, list[Any]]:
    callbacks, log = Callbacks(), list[Any]()
    fn(callbacks, list(names), log)
    if log:
        raise Mistake(f"the log already held {log} before anything called the callbacks: your code ran them (or "
                      "appended to the log) while registering. Register the function itself, without calling it.")
    return callbacks, log


def _one_per_name(fn: Callable) -> None:
    callbacks, _ = _registered(fn, ["a", "b", "c"])
    if len(callbacks) != 3:
        raise Mistake(f"you registered {len(callbacks)} callback{'s' if len(callbacks) != 1 else ''} for 3 names: "
                      "call callbacks.register(...) once for each name, inside the loop.")


def _late_binding(log: list[Any], last: str) -> None:
    if len(log) > 1 and all(entry == last for entry in log):
        raise Mistake(f"every callback appended {last!r}, the last name. Each one looks `name` up when it runs, "
                      "after the loop has finished (late binding). Bind the value when you create each callback: "
                      "a default argument, functools.partial, or a factory function (section 4).")


def _own_name(fn: Callable) -> None:
    callbacks, log = _registered(fn, ["a", "b", "c"])
    callbacks()
    _late_binding(log, "c")
    if log != ["a", "b", "c"]:
        raise Mistake(f"calling the callbacks for the names ['a', 'b', 'c'] appended {log}; expected ['a', 'b', 'c'].")


def _other_names_twice(fn: Callable) -> None:
    callbacks, log = _registered(fn, ["x", "y"])
    callbacks()
    callbacks()
    _late_binding(log, "y")
    if log != ["x", "y", "x", "y"]:
        raise Mistake(f"for the names ['x', 'y'], calling the callbacks twice appended {log}; expected "
                      "['x', 'y', 'x', 'y']. Use the names you are given, and let each callback append every time "
                      "it runs.")


one_per_name = Exercise(
    "One callback per name",
    [("registers one callback per name", _one_per_name),
     ("each callback appends its own name", _own_name),
     ("works for other names, every time the callbacks run", _other_names_twice)],
    solution="hooklab.course._solutions.nb01_callbacks:register_each",
)


# ---------------------------------------------------------------- exercise 2: a hook for one call only
class _Boom(Exception):
    """Raised by the failing model in the checks."""


class _Failing(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise _Boom("this model always fails")


def _layer() -> nn.Linear:
    with torch.random.fork_rng(devices=[]):  # leave the notebook's random numbers alone
        layer = nn.Linear(2, 1)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0]]))
        layer.bias.fill_(0.5)
    return layer


def _counting_hook() -> tuple[list[int], Callable]:
    calls: list[int] = []

    def hook(module, args, output):
        calls.append(1)

    return calls, hook


def _hook_runs_once(fn: Callable) -> None:
    calls, hook = _counting_hook()
    fn(_layer(), torch.ones(1, 2), hook)
    if not calls:
        raise Mistake("your hook never ran. Register it with model.register_forward_hook(hook) and call the model "
                      "as model(x): model.forward(x) skips every hook.")
    if len(calls) > 1:
        raise Mistake(f"the hook ran {len(calls)} times: call the model once, with the hook registered once.")


def _returns_output(fn: Callable) -> None:
    _, hook = _counting_hook()
    out = fn(_layer(), torch.ones(1, 2), hook)
    expect_close(out, [[3.5]], "what your function returns (the model's output)")


def _no_hook_left(fn: Callable) -> None:
    layer = _layer()
    _, hook = _counting_hook()
    fn(layer, torch.ones(1, 2), hook)
    left = count_hooks(layer, include_global=False)
    if left:
        raise Mistake(f"after your function returned, {left} hook{'s were' if left != 1 else ' was'} still "
                      "registered on the model. Keep the handle that register_forward_hook returns and call "
                      "handle.remove(), or use `with handle:`.")


def _removed_on_error(fn: Callable) -> None:
    model = _Failing()
    _, hook = _counting_hook()
    try:
        fn(model, torch.ones(1, 2), hook)
    except _Boom:
        pass
    else:
        raise Mistake("the model raised an error but your function hid it: let the error through (no bare "
                      "`except`), and remove the hook on the way out.")
    left = count_hooks(model, include_global=False)
    if left:
        raise Mistake("when the model raised an error, your hook stayed registered. Call the model inside "
                      "`with handle:` (or try/finally with handle.remove()) so the hook is removed either way.")


hook_for_one_call = Exercise(
    "A hook for one call only",
    [("the hook runs once", _hook_runs_once),
     ("returns the model's output", _returns_output),
     ("leaves no hook behind", _no_hook_left),
     ("removes the hook even when the model fails", _removed_on_error)],
    solution="hooklab.course._solutions.nb01_callbacks:run_with_hook",
)
