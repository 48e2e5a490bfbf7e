"""Trace one forward (and optionally backward) pass: which hook fired on which module, in order.

>>> import torch, torch.nn as nn, hooklab
>>> model = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
>>> t = hooklab.trace(model, torch.ones(1, 2), backward=True)
>>> [(e.kind, e.module) for e in t][:3]
[('forward_pre', '(model)'), ('forward_pre', '0'), ('forward', '0')]
"""

from __future__ import annotations

import html
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn

from .kinds import KINDS, PASS_KINDS, HookKind
from .nested import describe
from .table import Table
from .compiled import unwrap
from .hooks import Hooks
from .selection import select

__all__ = ["trace", "Trace", "Event", "shape_of"]

ROOT = "(model)"


def shape_of(value: Any) -> str:
    """What a hook argument holds, with its shapes: ``Tensor[1, 4]``, ``tuple(Tensor[1, 4], None)``
    (:func:`hooklab.nested.describe`)."""
    return describe(value)


@dataclass(frozen=True)
class Event:
    """One hook call: ``step`` (0, 1, …), ``phase`` (forward/backward), ``kind``, ``module`` name,
    the module's class, and the shapes of what that hook may replace (forward_pre: the args,
    forward: the output, backward_pre: grad_output, backward: grad_input)."""

    step: int
    phase: str
    kind: str
    module: str
    type: str
    shapes: str


class Trace(Sequence[Event]):
    """The ordered events of a traced pass; prints as a table (HTML in a notebook)."""

    def __init__(self, events: list[Event], output: Any = None, note: str | None = None) -> None:
        self.events = events
        self.output = output
        #: what was traced instead of the model as given (a compiled model's eager module), if anything
        self.note = note

    def __getitem__(self, i):
        return self.events[i]

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def filter(self, kind: str | None = None, phase: str | None = None, module: str | None = None) -> "Trace":
        """The events of one kind, phase and/or module."""
        return Trace([e for e in self.events if (kind is None or e.kind == kind)
                      and (phase is None or e.phase == phase) and (module is None or e.module == module)], self.output,
                     self.note)

    def table(self) -> Table:
        return Table(["step", "phase", "hook", "module", "type", "shapes"],
                     [[e.step, e.phase, e.kind, e.module, e.type, e.shapes] for e in self.events])

    def __str__(self) -> str:
        text = self.table().to_text()
        return f"Note: {self.note}\n{text}" if self.note else text

    __repr__ = __str__

    def _repr_html_(self) -> str:
        note = f"<p>Note: {html.escape(self.note)}</p>" if self.note else ""
        return note + self.table().to_html()


def _recorder(events: list[Event], kind: str, name: str) -> Callable[..., None]:
    """A hook of ``kind`` that adds an :class:`Event` for each call, with the shapes of what that
    kind may replace: args, output, grad_output, grad_input."""
    def record(module: nn.Module, *args: Any) -> None:
        seen = args[0] if kind == "backward" else args[-1]
        events.append(Event(len(events), KINDS[kind].phase, kind, name or ROOT, type(module).__name__, shape_of(seen)))
    return record


def trace(
    model: nn.Module,
    *inputs: Any,
    backward: bool = False,
    loss: Callable[[Any], torch.Tensor] | None = None,
    patterns: Sequence[str] = (),
    include_root: bool = True,
    kinds: Sequence[HookKind] = PASS_KINDS,  # type: ignore[assignment]
) -> Trace:
    """Run ``model(*inputs)`` once with a hook of every kind on every module and return the events.

    Args:
        backward: also run a backward pass (from ``loss(output)``, default ``output.sum()``)
            and record the full backward pre-hooks and backward hooks.
        patterns: only these modules (names or globs, as in :func:`hooklab.select`).
        include_root: also trace the model itself (shown as ``(model)``).
        kinds: which hook kinds to attach.

    A compiled model (``torch.compile``) is traced through its eager module, ``model._orig_mod``
    (hooks inside a compiled model do not run), and the trace's ``note`` says so; a TorchScript
    module raises ``TypeError``.

    Every hook is removed before this returns, also when the pass raises. Full backward hooks do
    not work on a module whose output is then changed in place (``ReLU(inplace=True)``): tracing
    such a model with ``backward=True`` raises PyTorch's ``RuntimeError``; trace fewer modules
    with ``patterns=`` or turn ``inplace`` off.
    """
    model, note = unwrap(model, "trace")
    modules = select(model, *patterns, include_root=include_root and not patterns)
    events: list[Event] = []
    with Hooks() as hooks:
        for name, module in modules.items():
            for kind in kinds:
                if backward or KINDS[kind].phase == "forward":
                    hooks.add(kind, module, _recorder(events, kind, name), key=f"{kind}:{name}")
        output = model(*inputs)
        if backward:
            value = loss(output) if loss is not None else output.sum()
            with warnings.catch_warnings():
                # expected here: the first module's input does not require grad
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                value.backward()
    return Trace(events, output.detach() if isinstance(output, torch.Tensor) else output, note)
