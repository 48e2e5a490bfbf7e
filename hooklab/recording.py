"""Record the inputs, outputs and gradients of chosen modules, call by call.

>>> import torch, torch.nn as nn, hooklab
>>> model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
>>> with hooklab.Recorder(model, "0", "2", what=("output", "grad")) as rec:
...     model(torch.ones(2, 4)).sum().backward()
>>> rec["0"].output.shape, rec["2"].grad.tolist()
(torch.Size([2, 3]), [[1.0], [1.0]])
>>> rec["0"].output.grad_fn is None  # detached: no graph kept alive
True

A module can run more than once in one forward pass (a shared layer; the ``relu`` of a torchvision
``BasicBlock``). Each run is a *call*, and the recorder keeps what it saw per call: the gradient of
a call's output is stored with that call, so ``record.output`` and ``record.grad`` always belong to
the same (the latest) call. Backward reaches the calls in reverse order, so a recorder that kept
only the newest gradient to *arrive* would pair the last call's output with the first call's
gradient.

>>> shared = nn.Linear(2, 2)
>>> twice = nn.Sequential(shared, nn.Tanh(), shared)  # one module, two calls per forward pass
>>> with hooklab.Recorder(twice, "0", keep=None, what=("output", "grad")) as rec:
...     (twice(torch.ones(1, 2)) * 3).sum().backward()
>>> [call.index for call in rec["0"].history], rec["0"].grad.tolist()  # the 2nd call's output got 3s
([0, 1], [[3.0, 3.0]])
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import nn

from .hooks import HookOwner, Hooks, Registration
from .nested import describe, replace_tensors, tensors_in, unreachable
from .compiled import check_hookable
from .naming import closest
from .selection import select

__all__ = ["Recorder", "Record", "Call", "detach", "watch_calls"]

_WHAT = ("input", "output", "grad")


def detach(value: Any, *, clone: bool = True, to_cpu: bool = False) -> Any:
    """``value`` with every tensor inside it detached (and cloned, moved to CPU if asked).

    Tuples, lists, dicts, namedtuples and dataclasses are walked (:mod:`hooklab.nested`); any other
    value is returned as it is. Cloning matters when a later in-place operation
    (``ReLU(inplace=True)``) would otherwise change what you stored.
    """
    def one(_: str, t: torch.Tensor) -> torch.Tensor:
        out = t.detach()
        if to_cpu:
            out = out.cpu()
        return out.clone() if clone and out.data_ptr() == t.data_ptr() else out
    return replace_tensors(value, one)


def watch_calls(hooks: Hooks, module: nn.Module, on_call: Callable[[tuple, Any, list[str]], Any],
                on_grad: Callable[[Any, str, torch.Tensor | None], None] | None = None, *,
                key: str | None = None) -> Registration:
    """A forward hook on ``module`` that reports every call, and the gradient of every call's output.

    For each call, ``on_call(args, output, paths)`` runs and returns a token of the caller's
    choosing (its record of that call); ``paths`` names the tensors of the output that will report
    a gradient (:func:`hooklab.nested.tensors_in` paths; empty without ``on_grad``). With
    ``on_grad``, a **tensor hook** is registered on each of those tensors from inside the forward
    hook (``output.register_hook``), and calls ``on_grad(token, path, grad)`` when backward reaches
    it (``grad`` may be ``None``: another output of the same operation got a gradient, this one
    none). That works next to in-place operations, where a full backward hook would fail.
    """
    def forward_hook(module: nn.Module, args: tuple, output: Any) -> None:
        hooked = [(p, t) for p, t in tensors_in(output) if t.requires_grad] if on_grad is not None else []
        token = on_call(args, output, [p for p, _ in hooked])
        if on_grad is not None:
            for path, t in hooked:
                _tensor_hook(t, functools.partial(on_grad, token, path))

    return hooks.forward(module, forward_hook, key=key)


def _tensor_hook(t: torch.Tensor, report: Callable[[torch.Tensor | None], None]) -> None:
    """``t.register_hook`` for one backward pass. On a leaf (a module that returns its input or a
    parameter as it is) a tensor hook would stay for good, so it removes itself once it ran."""
    handle = None

    def hook(grad: torch.Tensor | None) -> None:
        report(grad)
        if handle is not None:
            handle.remove()

    registered = t.register_hook(hook)
    if t.is_leaf:
        handle = registered


@dataclass
class Call:
    """One call of a module, as a :class:`Recorder` kept it.

    ``index`` counts the module's calls from 0 (since the recorder was built or cleared);
    ``input`` (the positional arguments) and ``output`` are detached copies (``None`` when not
    recorded); ``structure`` describes the output. ``grads`` holds the gradient of each tensor of
    the output that required grad, by path (``"output"`` for an output that is one tensor,
    ``"output[0]"``, ``"output['out']"``, ``"output.logits"`` inside others), ``None`` until a
    backward pass reaches it.
    """

    index: int
    structure: str
    input: Any = None
    output: Any = None
    grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    reached: bool = False  # a backward pass reached at least one of the output's tensors
    unreachable: list[tuple[str, str]] = field(default_factory=list)  # leaves the recorder cannot look inside

    @property
    def grad(self) -> Any:
        """The gradient of this call's output: a tensor when the output is one tensor, otherwise the
        ``{path: gradient}`` dict (:attr:`grads`). ``None`` until a backward pass reaches it."""
        if not self.reached:
            return None
        return self.grads["output"] if list(self.grads) == ["output"] else dict(self.grads)


@dataclass
class Record:
    """What was recorded for one module: its number of ``calls`` and the last ``keep`` of them
    (``history``, oldest first). ``input``, ``output`` and ``grad`` are the latest call's."""

    name: str
    what: tuple[str, ...]
    history: deque = field(default_factory=deque)
    calls: int = 0

    @property
    def inputs(self) -> list[Any]:
        """The kept calls' positional inputs, oldest first."""
        return [c.input for c in self.history]

    @property
    def outputs(self) -> list[Any]:
        """The kept calls' outputs, oldest first."""
        return [c.output for c in self.history]

    @property
    def grads(self) -> list[Any]:
        """The kept calls' gradients, oldest first (``None`` for a call no backward pass reached)."""
        return [c.grad for c in self.history]

    @property
    def input(self) -> Any:
        """The latest call's positional inputs."""
        return self._latest("input").input

    @property
    def output(self) -> Any:
        """The latest call's output."""
        return self._latest("output").output

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
        also = (f" (an earlier call, number {earlier[-1]}, did get one: see record.history)" if earlier else "")
        if not call.grads:
            why = ("it ran under torch.no_grad() or torch.inference_mode(), or nothing it was computed from "
                   "requires grad (frozen weights and an input without requires_grad)")
            if call.unreachable:
                where = ", ".join(f"{kind} at {path}" for path, kind in call.unreachable[:3])
                why += f"; or its tensors sit inside an object the recorder cannot look inside ({where})"
            return (f"no gradient for {self.name!r}: its latest call's output ({call.structure}) holds no tensor "
                    f"that requires grad, so no backward pass can reach it: {why}.{also}")
        return (f"no gradient for {self.name!r} yet: no backward pass has reached its latest call's output "
                f"({call.structure}). Call .backward() (or torch.autograd.grad) on a value computed from it, after "
                f"that forward pass.{also}")


class Recorder(HookOwner):
    """Records what chosen modules see, call by call, with forward hooks (and tensor hooks for
    gradients).

    Args:
        model: the model.
        patterns, type, where, leaves: which modules, as in :func:`hooklab.select`
            (no pattern: every leaf module).
        what: any of ``"input"``, ``"output"``, ``"grad"``. ``"grad"`` is the gradient with respect
            to the module's output, captured by a tensor hook registered on each tensor of the
            output inside the forward hook (which works even with in-place operations after the
            module). For an output that is one tensor it is a tensor; for a tuple, dict, namedtuple
            or dataclass output (``nn.LSTM``, ``nn.MultiheadAttention``, a detection backbone, a
            Hugging Face model) it is a ``{path: gradient}`` dict over the output's tensors that
            required grad (``None`` for one that backward did not reach).
        keep: how many calls to keep per module (the newest); ``None`` keeps every call. Each
            call's gradient is stored with that call: ``record.grad`` is always the gradient of
            ``record.output``, the latest call's, even when the module ran several times and
            backward reached the calls in another order. ``record.history`` holds the kept calls.
            When several backward passes reach one call, the latest gradient is kept.
        to_cpu: move stored tensors to the CPU.
        clone: copy stored tensors, so later in-place operations cannot change them.
        name: the recorder's hooks are owned by ``hooklab.Hooks(name)``: building a new recorder
            with the same name (re-running the cell) removes the older one's hooks. Without a
            name, two recorders are independent, and the older keeps recording until you call
            its :meth:`remove` (or leave its ``with`` block).

    Stored tensors are always detached: recording never keeps an autograd graph alive. (A value
    that is neither a tensor nor a tuple, list, dict, namedtuple or dataclass, such as
    torchvision's ``ImageList``, is stored as it is.) Use it in a ``with`` block, or call
    :meth:`remove`.

    A compiled model (``torch.compile``) is refused: hooks added to its modules after its first
    call do not run. Record the eager module, ``model._orig_mod``, and run that.
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
        check_hookable(model, "Recorder")
        if leaves is None:
            leaves = not patterns and type is None and where is None
        self.modules = select(model, *patterns, type=type, where=where, leaves=leaves)
        if not self.modules:
            raise ValueError("no module matched: nothing to record. Check the patterns, type= and where=.")
        self.keep, self.to_cpu, self.clone = keep, to_cpu, clone
        self.records: dict[str, Record] = {n: Record(n, self.what, deque(maxlen=keep)) for n in self.modules}
        self.hooks = Hooks(name)
        on_grad = self._store_grad if "grad" in self.what else None
        for module_name, module in self.modules.items():
            watch_calls(self.hooks, module, functools.partial(self._store_call, self.records[module_name]), on_grad,
                        key=module_name)

    def _store_call(self, record: Record, args: tuple, output: Any, paths: list[str]) -> Call:
        opts = {"clone": self.clone, "to_cpu": self.to_cpu}
        call = Call(record.calls, describe(output), grads=dict.fromkeys(paths))
        record.calls += 1
        if "input" in self.what:
            call.input = detach(args, **opts)
        if "output" in self.what:
            call.output = detach(output, **opts)
        if not paths:
            call.unreachable = unreachable(output)
        record.history.append(call)
        return call

    def _store_grad(self, call: Call, path: str, grad: torch.Tensor | None) -> None:
        if not self.active:  # removed between this forward pass and its backward: record nothing
            return
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
        """``{module name: gradient of the latest output}`` for every module whose latest call a
        backward pass reached."""
        return {n: r.history[-1].grad for n, r in self.records.items() if r.history and r.history[-1].reached}

    def clear(self) -> None:
        """Forget everything recorded; keep recording."""
        for record in self.records.values():
            record.clear()

    def __repr__(self) -> str:
        calls = sum(r.calls for r in self.records.values())
        state = "recording" if self.active else "removed"
        return f"Recorder({len(self.records)} modules, what={self.what}, keep={self.keep}, {calls} calls, {state})"
