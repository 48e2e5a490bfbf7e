"""Trace one forward (and optionally backward) pass: which hook fired on which module, in order.

>>> import torch, torch.nn as nn, hooklab
>>> model = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
>>> t = hooklab.trace(model, torch.ones(1, 2), backward=True)
>>> [(e.kind, e.module, e.shapes) for e in t][:3]
[('forward_pre', '(model)', 'tuple(Tensor[1, 2])'), ('forward_pre', '0', 'tuple(Tensor[1, 2])'), ('forward', '0', 'Tensor[1, 3]')]
"""

from __future__ import annotations

import html
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import nn

from .compiled import unwrap
from .hooks import Hooks
from .kinds import KINDS, PASS_KINDS, HookKind
from .nested import describe as shape_of
from .selection import select
from .table import Table

__all__ = ["trace", "Trace", "Event", "shape_of"]

ROOT = "(model)"


@dataclass(frozen=True)
class Event:
    """One hook call: ``step``, ``phase``, ``kind``, ``module`` name, its ``type``, and the ``shapes``
    of what that hook may replace (forward_pre: the args, forward: the output, backward_pre:
    grad_output, backward: grad_input; :func:`hooklab.nested.describe`)."""

    step: int
    phase: str
    kind: str
    module: str
    type: str
    shapes: str


class Trace(Sequence[Event]):
    """The ordered events of a traced pass; prints as a table (HTML in a notebook). ``note`` says
    what was traced instead of the model as given (a compiled model's eager module), if anything."""

    def __init__(self, events: list[Event], output: Any = None, note: str | None = None) -> None:
        self.events, self.output, self.note = events, output, note

    def __getitem__(self, i):
        return self.events[i]

    def __len__(self) -> int:
        return len(self.events)

    def filter(self, kind: str | None = None, phase: str | None = None, module: str | None = None) -> "Trace":
        """The events of one kind, phase and/or module."""
        keep = [e for e in self.events if kind in (None, e.kind) and phase in (None, e.phase) and module in (None, e.module)]
        return Trace(keep, self.output, self.note)

    def table(self) -> Table:
        return Table(["step", "phase", "hook", "module", "type", "shapes"],
                     [[e.step, e.phase, e.kind, e.module, e.type, e.shapes] for e in self.events])

    def __str__(self) -> str:
        return (f"Note: {self.note}\n" if self.note else "") + self.table().to_text()

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return (f"<p>Note: {html.escape(self.note)}</p>" if self.note else "") + self.table().to_html()


def _recorder(events: list[Event], kind: str, name: str) -> Callable[..., None]:
    def record(module: nn.Module, *args: Any) -> None:
        seen = args[0] if kind == "backward" else args[-1]
        events.append(Event(len(events), KINDS[kind].phase, kind, name or ROOT, type(module).__name__, shape_of(seen)))
    return record


def trace(model: nn.Module, *inputs: Any, backward: bool = False, loss: Callable[[Any], torch.Tensor] | None = None,
          patterns: Sequence[str] = (), include_root: bool = True,
          kinds: Sequence[HookKind] = PASS_KINDS) -> Trace:  # type: ignore[assignment]
    """Run ``model(*inputs)`` once with a hook of each of ``kinds`` on every module (or those
    ``patterns`` pick; the model itself too, unless ``include_root=False``) and return the events.

    ``backward=True`` also runs a backward pass from ``loss(output)`` (default ``output.sum()``). Every hook is removed
    before this returns, also when the pass raises. A full backward hook on a module whose output is then changed in
    place (``ReLU(inplace=True)``) makes PyTorch raise: trace fewer modules, or turn ``inplace`` off. A compiled model
    is traced through its eager module (the ``note`` says so); a TorchScript module raises ``TypeError``.
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
            with warnings.catch_warnings():  # expected here: the first module's input does not require grad
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                (loss(output) if loss is not None else output.sum()).backward()
    return Trace(events, output.detach() if isinstance(output, torch.Tensor) else output, note)
