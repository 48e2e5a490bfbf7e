"""Exercises of notebook 02 (tensor hooks): a clamping gradient hook, and logging gradients by name.

>>> from hooklab.course.nb02_tensor_hooks import clamp_exercise
>>> print(clamp_exercise.check(clamp_exercise.worked()))  # the worked solution
Clamp the gradient: all 5 checks passed
  ✓ has the right signature
  ✓ returns a new gradient
  ✓ leaves the gradient it is given unchanged
  ✓ clamps every element to [-1, 1]
  ✓ works in a real backward pass
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
from torch import nn

from ..lab.exercises import Exercise, Mistake
from .checks import expect_close, grad_of
from ..lab.plots import LABEL, SMALL, TITLE, LiveCanvas, figure, fixed_layout, round_limit
from .data import tiny_mlp

__all__ = ["clamp_exercise", "log_exercise"]


# ---------------------------------------------------------------- exercise 1: clamp the gradient
_GRAD = (-3.0, -0.5, 0.25, 2.0)
_CLAMPED = (-1.0, -0.5, 0.25, 1.0)


def _returns_new(fn: Callable) -> None:
    grad = torch.tensor(_GRAD)
    out = fn(grad)
    if out is None:
        if not torch.equal(grad, torch.tensor(_GRAD)):
            raise Mistake("your hook changed the gradient in place and returned None. Return a new tensor "
                          "instead (the clamp without the trailing underscore).")
        raise Mistake("your hook returns None, so the gradient is unchanged: return the new gradient, "
                      "a new tensor with every entry limited to [-1, 1].")
    if not isinstance(out, torch.Tensor):
        raise Mistake(f"your hook returns a {type(out).__name__}; a tensor hook must return a tensor "
                      "(the new gradient) or None.")


def _not_in_place(fn: Callable) -> None:
    grad = torch.tensor(_GRAD)
    fn(grad)
    if not torch.equal(grad, torch.tensor(_GRAD)):
        raise Mistake("your hook changed the gradient it was given in place (clamp_, mul_, grad[...] = ...). "
                      "PyTorch may share that tensor with other parts of the graph, and for a loss like "
                      "`x.sum()` it refuses the write with a RuntimeError. Build a new tensor and return it "
                      "(the clamp without the trailing underscore).")


def _clamps(fn: Callable) -> None:
    grad = torch.tensor(_GRAD)
    out = fn(grad.clone())
    if isinstance(out, torch.Tensor) and out.shape == grad.shape:
        ratio = out / grad
        if torch.allclose(ratio, ratio[0].expand_as(ratio)) and not torch.allclose(out, grad):
            raise Mistake(f"your hook scaled the whole gradient by {ratio[0].item():.3g} (as clip_grad_norm_ does); "
                          "this exercise asks for an element-wise clamp: entries beyond ±1 become ±1, the others "
                          "stay as they are.")
        if torch.allclose(out, grad):
            raise Mistake("your hook returns the gradient unchanged: limit every entry to [-1, 1] first.")
    expect_close(out, _CLAMPED, f"for the gradient {list(_GRAD)}, what your hook returns")


def _in_backward(fn: Callable) -> None:
    v = torch.zeros(4, requires_grad=True)
    handle = v.register_hook(fn)
    try:
        (v * torch.tensor(_GRAD)).sum().backward()
    finally:
        handle.remove()
    expect_close(v.grad, _CLAMPED, "after a backward pass with your hook on v, v.grad")


clamp_exercise = Exercise(
    "Clamp the gradient",
    [("returns a new gradient", _returns_new),
     ("leaves the gradient it is given unchanged", _not_in_place),
     ("clamps every element to [-1, 1]", _clamps),
     ("works in a real backward pass", _in_backward)],
    hook_kind="tensor",
    solution="hooklab.course._solutions.nb02_tensor_hooks:clamp_hook",
)


# ---------------------------------------------------------------- exercise 2: log gradient norms by name
def _model() -> nn.Sequential:
    return tiny_mlp((3, 4, 2), seed=3)  # the same weights every time; the notebook's generator is left alone


def _backward(model: nn.Module) -> None:
    x = torch.linspace(-1.0, 1.0, 6).reshape(2, 3)
    model(x).pow(2).sum().backward()


def _expected() -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    model = _model()
    _backward(model)
    return ({n: grad_of(p).norm().item() for n, p in model.named_parameters()},
            {n: grad_of(p).clone() for n, p in model.named_parameters()})


def _handles(fn: Callable) -> None:
    model, log = _model(), dict[str, Any]()
    handles = fn(model, log)
    if handles is None:
        raise Mistake("your function returns None: collect the handles that register_hook returns in a list "
                      "and return it, so the hooks can be removed later.")
    handles = list(handles)
    n = len(list(model.parameters()))
    if len(handles) != n:
        raise Mistake(f"you returned {len(handles)} handle{'s' if len(handles) != 1 else ''}; the model has {n} "
                      "parameters: register one hook on each of model.named_parameters().")
    if not all(hasattr(h, "remove") for h in handles):
        raise Mistake("return the handles themselves (what param.register_hook(...) returns), not other values.")
    for h in handles:
        h.remove()


def _logs_by_name(fn: Callable) -> None:
    model, log = _model(), dict[str, Any]()
    handles = fn(model, log) or []
    try:
        if log:
            raise Mistake("the log was filled before any backward pass: write the norms from inside the hook.")
        _backward(model)
    finally:
        for h in handles:
            h.remove()
    want, _ = _expected()
    names = list(want)
    if len(log) == 1 and names[-1] in log:
        raise Mistake(f"everything was logged under {names[-1]!r}, the last name: every hook looked `name` up "
                      "after the loop had finished (late binding). Bind each hook's name when you define it "
                      "(notebook 01).")
    missing = [n for n in names if n not in log]
    if missing:
        raise Mistake(f"these names are missing from the log: {missing}; it holds {sorted(log)}. Use the names "
                      "from model.named_parameters() as keys.")
    for name in names:
        value = log[name]
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise Mistake(f"log[{name!r}] holds a tensor of shape {list(value.shape)}; store one number, "
                              "grad.norm().item().")
            value = value.item()
        if abs(float(value) - want[name]) > 1e-4:
            raise Mistake(f"log[{name!r}] is {float(value):.4f}, but that gradient's norm is {want[name]:.4f}: "
                          "store grad.norm().item() of the gradient the hook receives.")


def _grads_unchanged(fn: Callable) -> None:
    model, log = _model(), dict[str, Any]()
    handles = fn(model, log) or []
    try:
        _backward(model)
    finally:
        for h in handles:
            h.remove()
    _, grads = _expected()
    for name, param in model.named_parameters():
        if param.grad is None or not torch.allclose(param.grad, grads[name]):
            raise Mistake(f"with your hooks on, {name}'s gradient changed: a logging hook only looks, so it "
                          "returns None (no `return grad * ...`) and changes nothing in place.")


def _remove_stops(fn: Callable) -> None:
    model, log = _model(), dict[str, Any]()
    handles = list(fn(model, log) or [])
    for h in handles:
        h.remove()
    log.clear()
    _backward(model)
    if log:
        raise Mistake(f"after removing every handle you returned, a backward pass still logged {sorted(log)}: "
                      "return the handles of all the hooks you registered.")


log_exercise = Exercise(
    "Log gradient norms by parameter name",
    [("returns one handle per parameter", _handles),
     ("logs each parameter under its own name, with its gradient's norm", _logs_by_name),
     ("leaves the gradients unchanged", _grads_unchanged),
     ("removing the handles stops the logging", _remove_stops)],
    solution="hooklab.course._solutions.nb02_tensor_hooks:log_grad_norms",
)


# ---------------------------------------------------------------- the live lab's plot
class LiveBars:
    """Bars side by side, one group per label and one colour per series (e.g. a gradient before and
    after hooks), for a live panel: built once, then :meth:`png` sets the bars' heights and redraws
    only them (:class:`hooklab.plots.LiveCanvas`). The y axis runs from -L to L, with L a round
    number above the largest bar, so the axes are drawn again only when L changes.

    >>> bars = LiveBars(["a", "b"], ["plain", "hooked"], xlabel="entry")
    >>> bars.png({"plain": [1.0, -2.0], "hooked": [0.5, -1.0]})[:4], [float(y) for y in bars.ax.get_ylim()]
    (b'\\x89PNG', [-2.5, 2.5])
    >>> [round(b.get_height(), 2) for b in bars.bars["hooked"]], [t.get_text() for t in bars.legend.get_texts()]
    ([0.5, -1.0], ['plain', 'hooked'])
    """

    COLORS = ("#bbbbbb", "#1f5f99", "#b3261e", "#f2a37b")

    def __init__(self, labels: Sequence[str], names: Sequence[str], *, xlabel: str = "",
                 figsize: tuple[float, float] = (4.5, 2.2)) -> None:
        self.fig = fixed_layout(figure(figsize), left=0.11, top=0.95, bottom=0.24 if xlabel else 0.14)
        self.ax = self.fig.add_subplot()
        width = 0.8 / max(len(names), 1)
        self.bars = {}
        for i, name in enumerate(names):
            offset = (i - (len(names) - 1) / 2) * width
            self.bars[name] = list(self.ax.bar([j + offset for j in range(len(labels))], [0.0] * len(labels),
                                               width=width, color=self.COLORS[i % len(self.COLORS)], label=name))
        self.ax.set_xticks(range(len(labels)), list(labels))
        self.ax.tick_params(labelsize=SMALL)
        zero = self.ax.axhline(0, color="#666666", lw=0.8)
        if xlabel:
            self.ax.set_xlabel(xlabel, fontsize=LABEL)
        self.legend = self.ax.legend(fontsize=SMALL, loc="upper left")  # a fixed place: "best" searches
        # the spines too: a full draw puts them over the zero line
        moving = [bar for group in self.bars.values() for bar in group] + [zero, *self.ax.spines.values(), self.legend]
        self.canvas = LiveCanvas(self.fig, moving)

    def png(self, series: dict[str, Sequence[float]]) -> bytes:
        """Set every series' bars (``{name: values}``; a series left out keeps its bars, and the
        axis is fitted to the series given) and return the picture as PNG bytes. Values that are
        not finite are drawn as they are and left out of the axis range."""
        largest = 0.0
        for name, values in series.items():
            for bar, value in zip(self.bars[name], values):
                bar.set_height(float(value))
                if math.isfinite(float(value)):
                    largest = max(largest, abs(float(value)))
        limit = round_limit(1.05 * largest)
        self.ax.set_ylim(-limit, limit)
        return self.canvas.png(key=limit)
