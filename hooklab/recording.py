"""Record the inputs, outputs and gradients of chosen modules, call by call: a module can run more
than once per forward pass (a shared layer, a torchvision ``BasicBlock``'s ``relu``), and backward
reaches the calls in reverse order, so each call's gradient is stored with that call.

>>> import torch, torch.nn as nn, hooklab
>>> shared = nn.Linear(2, 2)
>>> twice = nn.Sequential(shared, nn.Tanh(), shared)  # one module, two calls per forward pass
>>> with hooklab.Recorder(twice, "0", keep=None, what=("output", "grad")) as rec:
...     (twice(torch.ones(1, 2)) * 3).sum().backward()
>>> [call.index for call in rec["0"].history], rec["0"].grad.tolist()  # the 2nd call's output got 3s
([0, 1], [[3.0, 3.0]])
>>> rec["0"].output.grad_fn is None  # detached: no graph kept alive
True
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import nn

from .compiled import check_hookable
from .hooks import HookOwner, Hooks, Registration
from .inspection import in_backward
from .naming import closest
from .nested import describe, replace_tensors, tensors_in, unreachable
from .selection import select

__all__ = ["Recorder", "Record", "Call", "detach", "watch_calls"]

_WHAT = ("input", "output", "grad")


def detach(value: Any, *, clone: bool = True, to_cpu: bool = False) -> Any:
    """``value`` with every tensor inside it (:mod:`hooklab.nested`) detached, and cloned (so a later
    in-place operation cannot change it) and moved to the CPU if asked."""
    def one(_: str, t: torch.Tensor) -> torch.Tensor:
        out = t.detach().cpu() if to_cpu else t.detach()
        return out.clone() if clone and out.data_ptr() == t.data_ptr() else out
    return replace_tensors(value, one)


def watch_calls(hooks: Hooks, module: nn.Module, on_call: Callable[[tuple, Any, list[str]], Any],
                on_grad: Callable[[Any, str, torch.Tensor | None], None] | None = None, *,
                key: str | None = None) -> Registration:
    """A forward hook on ``module``: each call, ``on_call(args, output, paths)`` returns a token, and with
    ``on_grad``, a **tensor hook** registered from it on each tensor of the output that requires grad
    (``paths``) calls ``on_grad(token, path, grad)`` when backward reaches it (``grad`` is ``None`` when another
    output of the same operation got one). Unlike a full backward hook, it works next to in-place operations.
    Those on computed tensors go with their graph; one on a leaf (an input or a parameter returned as it is) would
    stay for good, so ``hooks`` holds it (removing them takes it off), and it removes itself once it ran."""
    def forward_hook(module: nn.Module, args: tuple, output: Any) -> None:
        hooked = [(p, t) for p, t in tensors_in(output) if t.requires_grad] if on_grad is not None else []
        token = on_call(args, output, [p for p, _ in hooked])
        if on_grad is not None:
            for path, t in hooked:
                _tensor_hook(hooks, t, functools.partial(on_grad, token, path))

    return hooks.forward(module, forward_hook, key=key)


def _tensor_hook(hooks: Hooks, t: torch.Tensor, report: Callable[[torch.Tensor | None], None]) -> None:
    """``t.register_hook``, or on a leaf, ``hooks.tensor`` and removed once it ran (see :func:`watch_calls`)."""
    def hook(grad: torch.Tensor | None) -> None:
        report(grad)
        if registration is not None:
            registration.remove()

    registration = hooks.tensor(t, hook) if t.is_leaf else None
    if registration is None:
        t.register_hook(hook)


@dataclass
class Call:
    """One call of a module: its ``index`` from 0, detached copies of its ``input`` (positional
    arguments) and ``output``, and ``grads``: the gradient of each tensor of the output that required
    grad, by path (``"output"``, ``"output[0]"``, ``"output.logits"``), ``None`` until reached."""

    index: int
    structure: str
    input: Any = None
    output: Any = None
    grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    reached: bool = False  # a backward pass reached one of the output's tensors
    unreachable: list[tuple[str, str]] = field(default_factory=list)  # leaves the recorder cannot look inside
    in_backward: bool = False  # made during a backward pass (gradient checkpointing recomputing its segment)

    @property
    def grad(self) -> Any:
        """The gradient of the output: a tensor for an output that is one tensor, else ``grads``."""
        if self.reached:
            return self.grads["output"] if list(self.grads) == ["output"] else dict(self.grads)


@dataclass
class Record:
    """One module's number of ``calls`` and the last ``keep`` of them (``history``, oldest first);
    ``input``, ``output`` and ``grad`` are the latest call's."""

    name: str
    what: tuple[str, ...]
    history: deque = field(default_factory=deque)
    calls: int = 0

    inputs = property(lambda self: [c.input for c in self.history], doc="The kept calls' inputs, oldest first.")
    outputs = property(lambda self: [c.output for c in self.history], doc="The kept calls' outputs, oldest first.")
    grads = property(lambda self: [c.grad for c in self.history], doc="The kept calls' gradients (None: not reached).")
    input = property(lambda self: self._latest("input").input, doc="The latest call's positional inputs.")
    output = property(lambda self: self._latest("output").output, doc="The latest call's output.")

    @property
    def grad(self) -> Any:
        """The gradient with respect to the latest call's output (see :attr:`Call.grad`)."""
        call = self._latest("grad")
        if call.reached:
            return call.grad
        raise LookupError(self._no_grad(call))

    def clear(self) -> None:
        """Forget what was recorded."""
        self.history.clear()
        self.calls = 0

    def _latest(self, what: str) -> Call:
        if what not in self.what:
            raise LookupError(f"this recorder does not record {what!r} for {self.name!r}: build it with "
                              f"what=({', '.join(repr(w) for w in (*self.what, what))}).")
        if not self.history:
            raise LookupError(f"nothing recorded for module {self.name!r}: it has not run since the recorder was "
                              "built (or cleared): run the model first, as model(x): hooks do not run when you "
                              "call model.forward(x), nor inside a model compiled before the recorder was built "
                              "(torch.compile: record and run model._orig_mod instead).")
        return self.history[-1]

    def _no_grad(self, call: Call) -> str:
        earlier = [c.index for c in self.history if c.reached]
        also = f" (an earlier call, number {earlier[-1]}, did get one: see record.history)" if earlier else ""
        if call.in_backward:
            return (f"no gradient for the latest call of {self.name!r} (number {call.index}): it ran in a backward pass "
                    "(gradient checkpointing computing the output again), where no gradient reaches an output; the "
                    f"forward pass's call got it: see record.history (keep=None keeps every call){also}.")
        if call.grads:
            return (f"no gradient for {self.name!r} yet: no backward pass has reached its latest call's output "
                    f"({call.structure}). Call .backward() (or torch.autograd.grad) on a value computed from it, "
                    f"after that forward pass.{also}")
        why = ("it ran under torch.no_grad() or torch.inference_mode(), or nothing it was computed from requires grad "
               "(frozen weights and an input without requires_grad)")
        if call.unreachable:
            where = ", ".join(f"{kind} at {path}" for path, kind in call.unreachable[:3])
            why += f"; or its tensors sit inside an object the recorder cannot look inside ({where})"
        return (f"no gradient for {self.name!r}: its latest call's output ({call.structure}) holds no tensor that "
                f"requires grad, so no backward pass can reach it: {why}.{also}")


class Recorder(HookOwner):
    """Records what chosen modules see, call by call (in a ``with`` block, or until :meth:`remove`).

    The modules: as :func:`hooklab.select` picks them (no pattern: every leaf). ``what``: any of
    ``"input"``, ``"output"``, ``"grad"`` (of the output, through :func:`watch_calls`; for an output
    that is not one tensor, a ``{path: gradient}`` dict). ``keep``: calls kept per module (``None``:
    all). ``to_cpu``, ``clone``: as :func:`detach`. ``name``: owned by ``hooklab.Hooks(name)``, so one
    built again under it removes the older one's hooks. Stored tensors are detached (another value,
    such as an ``ImageList``, is stored as it is). A compiled model (record ``_orig_mod``) or part is refused.
    """

    def __init__(self, model: nn.Module, *patterns: str, type: Any = None,
                 where: Callable[[str, nn.Module], bool] | None = None, leaves: bool | None = None,
                 what: Iterable[str] = ("output",), keep: int | None = 1, to_cpu: bool = False, clone: bool = True,
                 name: str | None = None) -> None:
        self.what = tuple(what)
        if not self.what or set(self.what) - set(_WHAT):
            raise ValueError(f"what= takes any of {_WHAT}, got {self.what!r}.")
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be a positive number of calls (or None for all), got {keep}.")
        check_hookable(model, "Recorder")
        leaves = (not patterns and type is None and where is None) if leaves is None else leaves
        self.modules = select(model, *patterns, type=type, where=where, leaves=leaves)
        if not self.modules:
            raise ValueError("no module matched: nothing to record. Check the patterns, type= and where=.")
        self.keep, self.to_cpu, self.clone = keep, to_cpu, clone
        self.records = {n: Record(n, self.what, deque(maxlen=keep)) for n in self.modules}
        self.hooks = Hooks(name)
        on_grad = self._store_grad if "grad" in self.what else None
        for module_name, module in self.modules.items():
            watch_calls(self.hooks, module, functools.partial(self._store_call, self.records[module_name]), on_grad,
                        key=module_name)

    def _store_call(self, record: Record, args: tuple, output: Any, paths: list[str]) -> Call:
        call = Call(record.calls, describe(output), grads=dict.fromkeys(paths), in_backward=in_backward())
        record.calls += 1
        if "input" in self.what:
            call.input = detach(args, clone=self.clone, to_cpu=self.to_cpu)
        if "output" in self.what:
            call.output = detach(output, clone=self.clone, to_cpu=self.to_cpu)
        call.unreachable = [] if paths else unreachable(output)
        record.history.append(call)
        return call

    def _store_grad(self, call: Call, path: str, grad: torch.Tensor | None) -> None:
        if self.active:  # removed between this forward pass and its backward: record nothing
            call.reached = True
            if grad is not None:
                call.grads[path] = detach(grad, clone=self.clone, to_cpu=self.to_cpu)

    def __getitem__(self, name: str) -> Record:
        if name not in self.records:
            raise KeyError(f"this recorder does not record {name!r}. Closest recorded names: "
                           f"{closest(name, list(self.records))}.")
        return self.records[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def outputs(self) -> dict[str, Any]:
        """``{module name: latest output}`` for every module that has run."""
        return {n: r.output for n, r in self.records.items() if r.history}

    def grads(self) -> dict[str, Any]:
        """``{module name: gradient of the latest output}`` where backward reached the latest call."""
        return {n: r.history[-1].grad for n, r in self.records.items() if r.history and r.history[-1].reached}

    def clear(self) -> None:
        """Forget everything recorded; keep recording."""
        for record in self.records.values():
            record.clear()

    def __repr__(self) -> str:
        calls = sum(r.calls for r in self.records.values())
        return (f"Recorder({len(self.records)} modules, what={self.what}, keep={self.keep}, {calls} calls, "
                f"{'recording' if self.active else 'removed'})")
