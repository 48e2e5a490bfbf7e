"""Record the inputs, outputs and gradients of chosen modules.

>>> import torch, torch.nn as nn, hooklab
>>> model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
>>> with hooklab.Recorder(model, "0", "2", what=("output", "grad")) as rec:
...     model(torch.ones(2, 4)).sum().backward()
>>> rec["0"].output.shape, rec["2"].grad.tolist()
(torch.Size([2, 3]), [[1.0], [1.0]])
>>> rec["0"].output.grad_fn is None  # detached: no graph kept alive
True
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import nn

from .hooks import HookOwner, Hooks
from .selection import _closest, select

__all__ = ["Recorder", "Record", "detach"]

_WHAT = ("input", "output", "grad")


def detach(value: Any, *, clone: bool = True, to_cpu: bool = False) -> Any:
    """``value`` with every tensor inside it detached (and cloned, moved to CPU if asked).

    Tuples, lists and dicts are walked; anything else is returned as it is. Cloning matters
    when a later in-place operation (``ReLU(inplace=True)``) would otherwise change what you
    stored.
    """
    if isinstance(value, torch.Tensor):
        out = value.detach()
        if to_cpu:
            out = out.cpu()
        return out.clone() if clone and out.data_ptr() == value.data_ptr() else out
    if isinstance(value, tuple):
        return tuple(detach(v, clone=clone, to_cpu=to_cpu) for v in value)
    if isinstance(value, list):
        return [detach(v, clone=clone, to_cpu=to_cpu) for v in value]
    if isinstance(value, dict):
        return {k: detach(v, clone=clone, to_cpu=to_cpu) for k, v in value.items()}
    return value


@dataclass
class Record:
    """What was recorded for one module: the last ``keep`` calls, oldest first."""

    name: str
    inputs: deque = field(default_factory=deque)
    outputs: deque = field(default_factory=deque)
    grads: deque = field(default_factory=deque)
    calls: int = 0

    input = property(lambda self: self._last(self.inputs, "input"), doc="The latest call's positional inputs.")
    output = property(lambda self: self._last(self.outputs, "output"), doc="The latest call's output.")
    grad = property(lambda self: self._last(self.grads, "grad"), doc="The gradient w.r.t. the latest output.")

    def clear(self) -> None:
        """Forget what was recorded."""
        for store in (self.inputs, self.outputs, self.grads):
            store.clear()
        self.calls = 0

    def _last(self, store: deque, what: str) -> Any:
        if not store:
            raise LookupError(f"nothing recorded as {what!r} for module {self.name!r} yet: "
                              + ("run a backward pass first." if what == "grad" else "run the model first, "
                                 f"and make sure {what!r} is in the recorder's what=(...)."))
        return store[-1]


class Recorder(HookOwner):
    """Records what chosen modules see, with forward hooks (and tensor hooks for gradients).

    Args:
        model: the model.
        patterns, type, where, leaves: which modules, as in :func:`hooklab.select`
            (no pattern: every leaf module).
        what: any of ``"input"``, ``"output"``, ``"grad"`` (the gradient with respect to the
            module's output, captured by a tensor hook registered on the output inside the
            forward hook, which works even with in-place operations after the module).
        keep: how many calls to keep per module (the newest); ``None`` keeps every call.
        to_cpu: move stored tensors to the CPU.
        clone: copy stored tensors, so later in-place operations cannot change them.
        name: the recorder's hooks are owned by ``hooklab.Hooks(name)``: building a new recorder
            with the same name (re-running the cell) removes the older one's hooks. Without a
            name, two recorders are independent, and the older keeps recording until you call
            its :meth:`remove` (or leave its ``with`` block).

    Stored tensors are always detached: recording never keeps an autograd graph alive. Use it
    in a ``with`` block, or call :meth:`remove`.
    """

    def __init__(self, model: nn.Module, *patterns: str, type: Any = None,
                 where: Callable[[str, nn.Module], bool] | None = None, leaves: bool | None = None,
                 what: Iterable[str] = ("output",), keep: int | None = 1, to_cpu: bool = False, clone: bool = True,
                 name: str | None = None) -> None:
        self.what = tuple(what)
        bad = [w for w in self.what if w not in _WHAT]
        if bad or not self.what:
            raise ValueError(f"what= takes any of {_WHAT}, got {self.what!r}.")
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be a positive number of calls (or None for all), got {keep}.")
        if leaves is None:
            leaves = not patterns and type is None and where is None
        self.modules = select(model, *patterns, type=type, where=where, leaves=leaves)
        if not self.modules:
            raise ValueError("no module matched: nothing to record. Check the patterns, type= and where=.")
        self.keep, self.to_cpu, self.clone = keep, to_cpu, clone
        self.records: dict[str, Record] = {n: self._new_record(n) for n in self.modules}
        self.hooks = Hooks(name)
        for module_name, module in self.modules.items():
            self.hooks.forward(module, self._make_hook(self.records[module_name]), key=module_name)

    def _new_record(self, name: str) -> Record:
        return Record(name, deque(maxlen=self.keep), deque(maxlen=self.keep), deque(maxlen=self.keep))

    def _make_hook(self, record: Record) -> Callable:
        want_in, want_out, want_grad = ("input" in self.what), ("output" in self.what), ("grad" in self.what)
        opts = {"clone": self.clone, "to_cpu": self.to_cpu}

        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            record.calls += 1
            if want_in:
                record.inputs.append(detach(args, **opts))
            if want_out:
                record.outputs.append(detach(output, **opts))
            if want_grad and isinstance(output, torch.Tensor) and output.requires_grad:
                def store_grad(grad: torch.Tensor) -> None:
                    if self.active:  # removed between this forward pass and its backward: record nothing
                        record.grads.append(detach(grad, **opts))
                output.register_hook(store_grad)

        return hook

    def __getitem__(self, name: str) -> Record:
        if name not in self.records:
            raise KeyError(f"this recorder does not record {name!r}. Closest recorded names: "
                           f"{_closest(name, list(self.records))}.")
        return self.records[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def outputs(self) -> dict[str, Any]:
        """``{module name: latest output}`` for every module that has run."""
        return {n: r.output for n, r in self.records.items() if r.outputs}

    def grads(self) -> dict[str, Any]:
        """``{module name: latest gradient}`` for every module a backward pass reached."""
        return {n: r.grad for n, r in self.records.items() if r.grads}

    def clear(self) -> None:
        """Forget everything recorded; keep recording."""
        for record in self.records.values():
            record.clear()

    def __repr__(self) -> str:
        calls = sum(r.calls for r in self.records.values())
        state = "recording" if self.active else "removed"
        return f"Recorder({len(self.records)} modules, what={self.what}, keep={self.keep}, {calls} calls, {state})"
