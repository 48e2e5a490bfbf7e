"""Helpers and exercises of notebook 09 (bring your own model).

The notebook's lab is ``hooklab.explore`` itself; this module holds what is not about hooks (a
short way to print a few rows of a panel's state) and the two exercises, both about outputs that
are not one tensor: find every tensor in an output, and an intervention hook that keeps the
output's structure.

>>> from hooklab.course.nb09_bring_your_own_model import brief
>>> brief({"module": "lstm", "hooks": 0, "std": 0.25}, "module", "std")
'module=lstm, std=0.25'

>>> from hooklab.course.nb09_bring_your_own_model import find_tensors
>>> print(find_tensors.check(find_tensors.worked()))  # the worked solution
Find every tensor in an output: all 4 checks passed
  ✓ a tensor is found at 'output'
  ✓ walks tuples and lists, depth first
  ✓ walks dicts, with the key in the path
  ✓ skips what is not a tensor
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from ..lab.exercises import Exercise, Mistake
from ..nested import map_tensors
from ..hooks import Hooks
from .data import seeded

__all__ = ["brief", "find_tensors", "scale_everything"]


def brief(state: dict[str, Any], *keys: str) -> str:
    """``key=value`` for the chosen keys of a panel's state, on one line."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise KeyError(f"the state has no {missing}; it has {list(state)}.")
    return ", ".join(f"{k}={state[k]}" for k in keys)


# ---------------------------------------------------------------- exercise 1: every tensor in an output
def _paths(fn: Callable, output: Any) -> list[tuple[str, Any]]:
    got = fn(output)
    if got is None:
        raise Mistake("your function returns None: collect the pairs in a list and `return` it.")
    got = list(got)
    for item in got:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise Mistake(f"each item should be a (path, tensor) pair such as ('output[0]', tensor), got {item!r:.80}.")
    return got


def _expect(fn: Callable, output: Any, want: list[tuple[str, torch.Tensor]], what: str) -> None:
    got = _paths(fn, output)
    got_paths, want_paths = [p for p, _ in got], [p for p, _ in want]
    if got_paths != want_paths:
        hint = ""
        if set(want_paths) - set(got_paths) and len(got_paths) < len(want_paths):
            hint = (" Some tensors are missing: call your function again on every item of a tuple, list or dict "
                    "(recursion), with the path extended.")
        elif any("." in p.replace("output", "", 1) for p in got_paths):
            hint = " Write an index in brackets, output[0], not output.0."
        raise Mistake(f"for {what} the paths are {got_paths}, expected {want_paths}.{hint}")
    for (path, tensor), (_, expected) in zip(got, want):
        if tensor is not expected:
            raise Mistake(f"the item at {path!r} is not the tensor found there: return the tensor itself, "
                          "not a copy or a summary.")


def _check_tensor(fn: Callable) -> None:
    t = torch.zeros(2, 3)
    _expect(fn, t, [("output", t)], "a plain tensor")


def _check_sequences(fn: Callable) -> None:
    out, h, c = torch.zeros(5, 1, 3), torch.zeros(1, 1, 3), torch.ones(1, 1, 3)
    _expect(fn, (out, (h, c)), [("output[0]", out), ("output[1][0]", h), ("output[1][1]", c)],
            "an LSTM's (output, (h, c))")
    a, b = torch.zeros(1), torch.ones(1)
    _expect(fn, [a, [b]], [("output[0]", a), ("output[1][0]", b)], "a list [a, [b]]")


def _check_dicts(fn: Callable) -> None:
    logits, h = torch.zeros(2, 4), torch.ones(2, 8)
    output = {"logits": logits, "extra": {"hidden": h}}
    got = _paths(fn, output)
    if [p for p, _ in got] == ["output[0]", "output[1][0]"] or [p for p, _ in got] == ["output[0]", "output[1]"]:
        raise Mistake("the paths of a dict's items should name their key: output['logits'], not output[0]. "
                      "Loop over output.items().")
    if [p for p, _ in got] == ['output["logits"]', 'output["extra"]["hidden"]']:
        raise Mistake("write the key as Python prints it, with repr(key): output['logits'] (single quotes).")
    _expect(fn, output, [("output['logits']", logits), ("output['extra']['hidden']", h)],
            "a dict {'logits': ..., 'extra': {'hidden': ...}}")


def _check_skips(fn: Callable) -> None:
    a = torch.zeros(3)
    output = (a, None, 3, "text", {"mask": None})
    got = _paths(fn, output)
    extra = [(p, v) for p, v in got if not isinstance(v, torch.Tensor)]
    if extra:
        raise Mistake(f"{extra[0][0]} holds {extra[0][1]!r}, not a tensor: skip anything that is neither a "
                      "tensor nor a tuple, list or dict.")
    _expect(fn, output, [("output[0]", a)], "(tensor, None, 3, 'text', {'mask': None})")


find_tensors = Exercise(
    "Find every tensor in an output",
    [("a tensor is found at 'output'", _check_tensor),
     ("walks tuples and lists, depth first", _check_sequences),
     ("walks dicts, with the key in the path", _check_dicts),
     ("skips what is not a tensor", _check_skips)],
    solution="hooklab.course._solutions.nb09_bring_your_own_model:tensor_paths",
)


# ---------------------------------------------------------------- exercise 2: an intervention for any output
class _Tagger(nn.Module):
    """Returns scores and the token ids they were computed for (an integer tensor)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 3)

    def forward(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"scores": self.embed(ids).sum(-1), "ids": ids}


def _run(make: Callable, module: nn.Module, *args: Any) -> tuple[Any, Any, list[Any]]:
    """The module's output without and with the learner's hook; also what the module returned
    (seen by a hook registered before the learner's) and a copy of it taken at that moment."""
    with torch.no_grad():
        plain = module(*args)
    hook = make(3.0)
    if not callable(hook):
        raise Mistake(f"make_scaler returned {type(hook).__name__}, not a function: define "
                      "the forward hook inside it and return the function itself.")
    seen: list[Any] = []

    def remember(m: nn.Module, a: Any, out: Any) -> None:
        seen.append((out, _clone(out)))

    with Hooks() as hooks, torch.no_grad():
        hooks.forward(module, remember)
        hooks.forward(module, hook)
        edited = module(*args)
    return plain, edited, seen


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a.float(), b.float(), atol=1e-6)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


def _scaled(value: Any) -> Any:
    return map_tensors(value, lambda t: t * 3.0)  # every floating-point tensor, in any container


def _check_hook(make: Callable) -> None:
    layer = seeded(0, lambda: nn.Linear(2, 3))
    plain, edited, _ = _run(make, layer, torch.ones(1, 2))
    if edited is None or _same(edited, plain):
        raise Mistake("the output did not change: a forward hook changes the output only by returning the new "
                      "one; assigning to `output` inside the hook does nothing.")
    if not _same(edited, plain * 3):
        raise Mistake("for a Linear layer the output should be 3 × the plain output with make_scaler(3.0).")


def _check_lstm(make: Callable) -> None:
    lstm = seeded(0, lambda: nn.LSTM(2, 4))
    plain, edited, _ = _run(make, lstm, torch.ones(3, 1, 2))
    if isinstance(edited, torch.Tensor):
        raise Mistake("for an LSTM the hook returned one tensor, but the LSTM returns (output, (h, c)): return "
                      "the same structure, each tensor scaled.")
    if not (isinstance(edited, tuple) and len(edited) == 2 and isinstance(edited[1], tuple) and len(edited[1]) == 2):
        raise Mistake(f"for an LSTM the hook should return (output, (h, c)), got {type(edited).__name__} "
                      f"{_shape_of(edited)}: keep tuples as tuples, nested ones too.")
    if not _same(edited, _scaled(plain)):
        unscaled = [name for name, a, b in zip(("output", "h", "c"), (edited[0], *edited[1]), (plain[0], *plain[1]))
                    if _same(a, b)]
        raise Mistake(f"not every tensor of (output, (h, c)) was scaled (unchanged: {unscaled}): call your "
                      "scaling again on every item of a tuple, nested ones too.")


def _shape_of(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return str(list(value.shape))
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_shape_of(v) for v in value) + ")"
    return type(value).__name__


def _check_dict(make: Callable) -> None:
    tagger = seeded(0, _Tagger)
    ids = torch.tensor([[1, 2, 3]])
    plain, edited, _ = _run(make, tagger, ids)
    if not isinstance(edited, dict) or list(edited) != ["scores", "ids"]:
        raise Mistake(f"for a dict output the hook should return a dict with the same keys ['scores', 'ids'], got "
                      f"{type(edited).__name__}{' with keys ' + str(list(edited)) if isinstance(edited, dict) else ''}.")
    if not isinstance(edited["ids"], torch.Tensor) or edited["ids"].dtype != torch.long:
        raise Mistake("the integer tensor 'ids' changed type: scale only floating-point tensors "
                      "(tensor.is_floating_point()), leave the others as they are.")
    if not torch.equal(edited["ids"], ids):
        raise Mistake("the integer tensor 'ids' changed: they are token numbers, not values to scale. Scale only "
                      "tensors for which tensor.is_floating_point() is true.")
    if not _same(edited["scores"], plain["scores"] * 3):
        raise Mistake("edited['scores'] should be 3 × the plain scores.")


def _check_not_in_place(make: Callable) -> None:
    lstm = seeded(0, lambda: nn.LSTM(2, 4))
    _, _, seen = _run(make, lstm, torch.ones(3, 1, 2))
    [(returned, copy)] = seen
    if not _same(returned, copy):
        raise Mistake("the tensors the LSTM returned were changed in place (`*=`, `.mul_()`): another hook, or "
                      "autograd, may still need them. Build new tensors: `t * factor`.")


scale_everything = Exercise(
    "An intervention for any output: scale every floating-point tensor",
    [("returns the scaled output of a plain layer", _check_hook),
     ("keeps an LSTM's (output, (h, c)) and scales each tensor", _check_lstm),
     ("keeps a dict's keys and leaves integer tensors alone", _check_dict),
     ("changes nothing in place", _check_not_in_place)],
    solution="hooklab.course._solutions.nb09_bring_your_own_model:make_scaler", level="stretch",
)
