"""The explorer's runs of a model (:class:`Passes`).

* **the record**: one pass with autograd, with the pair of hooks notebook 05 builds on every module
  (:func:`hooklab.recording.watch_calls`): a summary of each module's latest output, and the norm of
  the gradient of ``target`` with respect to each call's output, as far as ``target.backward()`` reaches
  (:func:`leaves`), through ``torch.autograd.grad``: nothing is accumulated into ``.grad``. A call made in
  backward (a checkpoint recomputing its segment) is not a call of the forward pass: not counted;
* **the reference**: one pass without autograd and without any edit, made when an edit first needs
  something to be compared with;
* **an edited pass**: one pass without autograd, with the edit hooks of the moment registered,
  watching one module.

Every pass runs in eval mode (each module's own mode is put back afterwards), with the fused
transformer fast path off (it skips submodules and their hooks) and the panel's number of threads.
While a pass without edits runs, :attr:`Passes.recording` is True: an edit hook then edits nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from typing import Any, Callable, Iterator

import torch
from torch import nn

from ..hooks import Hooks
from ..inspection import in_backward, own_tensors, version
from ..nested import describe, tensors_in, unreachable
from ..recording import watch_calls
from ..selection import select
from ..threads import threads as torch_threads
from .progress import Progress
from .summary import Summary

__all__ = ["Passes", "ModuleRecord", "split", "sum_target", "running", "leaves"]

Example = Any  #: a tensor, a tuple of positional arguments, or an ``(args, kwargs)`` pair


@dataclasses.dataclass
class ModuleRecord:
    """What one module did in one pass: how often it ran, its last output, its gradient norm."""

    calls: int = 0
    summary: Summary | None = None
    grad_squares: dict[int, float] = dataclasses.field(default_factory=dict)  # per call: sum of squared gradients
    no_grad: str = "no gradient reached it"  # why grad_norm is None, when it is
    png: bytes | None = None  # its picture, once drawn

    @property
    def grad_norm(self) -> float | None:
        """The norm of the gradient with respect to the last call's output (all its tensors)."""
        square = self.grad_squares.get(self.calls - 1)
        return None if square is None else math.sqrt(square)


def split(example: Example) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` from what explore takes, or a ``TypeError`` saying how to write it."""
    if isinstance(example, torch.Tensor):
        return (example,), {}
    if isinstance(example, tuple) and len(example) == 2 and isinstance(example[1], dict):
        if isinstance(example[0], (tuple, list)):
            return tuple(example[0]), dict(example[1])
        raise TypeError("example=(value, dict) is ambiguous: write ((x,), {'mask': m}) for keyword arguments, "
                        "or ((x, d), {}) to pass the dict as the second positional argument.")
    if isinstance(example, tuple):
        return example, {}
    hints: dict[type, str] = {
        dict: "a dict example is ambiguous: for keyword arguments write ((), {...}) (an (args, kwargs) pair); for a "
              "model that takes one dict write ({...},).",
        list: "a list example is ambiguous: for positional arguments pass a tuple (x, y); for a model that takes one "
              "list write ([...],)."}
    hint = hints.get(type(example))
    raise TypeError(hint or f"example must be a tensor, a tuple of positional arguments or an (args, kwargs) pair, "
                            f"got {type(example).__name__}; e.g. explore(model, torch.randn(1, 3, 224, 224)).")


def sum_target(output: Any) -> torch.Tensor:
    """The default target: the sum of every floating-point tensor in the model's output."""
    parts = [t.sum() for _, t in tensors_in(output) if t.is_floating_point()]
    if not parts:
        raise ValueError("the model's output holds no floating-point tensor to sum: pass target=, "
                         "a function of the output that returns one number.")
    return torch.stack(parts).sum() if len(parts) > 1 else parts[0]


def leaves(value: torch.Tensor) -> list[torch.Tensor]:
    """What ``value.backward()`` accumulates a gradient into: each leaf of ``value``'s graph that requires
    grad (an ``AccumulateGrad`` node's ``variable``: a trainable weight, an input that requires grad), once."""
    found = {id(value): value} if value.grad_fn is None and value.requires_grad else {}
    seen, stack = set(), [value.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            if isinstance(variable := getattr(node, "variable", None), torch.Tensor):
                found.setdefault(id(variable), variable)
            stack.extend(next_node for next_node, _ in node.next_functions)
    return list(found.values())


@contextlib.contextmanager
def running(model: nn.Module, threads: int | None) -> Iterator[None]:
    """``threads`` PyTorch threads, the transformer fast path off, every module in eval mode; all
    restored afterwards (each module its own mode)."""
    fast, modes = torch.backends.mha.get_fastpath_enabled(), [(m, m.training) for m in model.modules()]
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        for m, _ in modes:
            m.training = False
        with torch_threads(threads):  # off the main thread: one thread (hooklab.threads)
            yield
    finally:
        for m, training in modes:
            m.training = training
        torch.backends.mha.set_fastpath_enabled(fast)


class Passes:
    """The passes of one model on one example (see the module's docstring)."""

    def __init__(self, model: nn.Module, example: Example, target: Callable[[Any], torch.Tensor] | None,
                 threads: int | None) -> None:
        self.model, self.threads = model, threads
        self.args, self.kwargs = split(example)
        nested = [describe(t) for _, t in tensors_in((self.args, self.kwargs)) if t.is_nested]
        if nested:  # the default target (a sum), noise and clamp would raise inside PyTorch on one
            raise TypeError(f"explore does not take a nested tensor ({nested[0]}) in the example: pass the padded "
                            "tensor (t.to_padded_tensor(0.0)) with its padding mask, e.g. src_key_padding_mask=pad; "
                            "explore's passes turn off the transformer fast path that makes nested tensors.")
        self.target = target or sum_target
        self.names: dict[str, nn.Module] = select(model, include_root=True)  # refuses compiled parts
        self.modules: dict[str, ModuleRecord] = {}  #: the record: what each module did
        self.output: list[tuple[str, torch.Tensor]] = []  #: the record's final output (detached)
        self.has_grad = False  #: whether the target's gradient reached anything
        self.recording = False  #: True while a pass without edits runs
        self._reference: list[tuple[str, torch.Tensor]] | None = None
        self._recorded_for: tuple[Any, ...] = ()

    def _call(self) -> Any:
        return self.model(*self.args, **self.kwargs)

    def fingerprint(self) -> tuple[Any, ...]:
        """Which tensors the model and the example hold, and their versions (an in-place change
        bumps a version): when it changes, the record is stale."""
        tensors = [t for m in self.names.values() for t in own_tensors(m)]
        return tuple((id(t), version(t)) for t in (*tensors, *(t for _, t in tensors_in((self.args, self.kwargs)))))

    @property
    def stale(self) -> bool:
        """Whether the weights or the example changed in place since the record."""
        if [id(m) for m in self.model.modules()] != [id(m) for m in self.names.values()]:
            raise RuntimeError("the model's modules changed since explore() was called: call explore() again.")
        return self.fingerprint() != self._recorded_for

    def record(self) -> None:
        """The pass with autograd that records every module (a progress line in a notebook)."""
        self.modules, self._reference = {n: ModuleRecord() for n in self.names}, None
        total, ran, grads = len(self.names), set(), [0, 0]  # gradient hooks registered, and run
        with Progress(f"explore {type(self.model).__name__}:") as progress, self._clean(), Hooks() as hooks:

            def on_call(name: str, args: tuple, output: Any, paths: list[str]) -> tuple[ModuleRecord, int] | None:
                if in_backward():  # a checkpoint recomputing its segment: the forward pass's call is counted
                    return None
                seen = self.modules[name]
                seen.calls, seen.summary = seen.calls + 1, Summary.of(output)
                if not paths:
                    seen.no_grad = ("its output holds no tensor explore can reach" if unreachable(output)
                                    else "no tensor of its output requires grad")
                grads[0] += len(paths)
                ran.add(name)
                progress.update(len(ran), 2 * total, f"forward pass: {len(ran)} of {total} modules ran")
                return seen, seen.calls - 1

            def on_grad(token: tuple[ModuleRecord, int] | None, path: str, grad: torch.Tensor | None) -> None:
                if token is None:  # the output of a call made during backward
                    return
                grads[1] += 1
                progress.update(total + total * grads[1] / max(grads[0], 1), 2 * total,
                                f"backward pass: {grads[1]} of {grads[0]} gradients")
                if grad is not None:  # None: a sibling output of the same operation got a gradient, this one none
                    seen, call = token
                    seen.grad_squares[call] = seen.grad_squares.get(call, 0.0) + grad.detach().float().pow(2).sum().item()

            for name, module in self.names.items():
                watch_calls(hooks, module, functools.partial(on_call, name), on_grad)
            with torch.enable_grad():
                self._backward(self._call())
        self._recorded_for = self.fingerprint()

    def _backward(self, output: Any) -> None:
        value = self.target(output)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            got = f"shape {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"target(output) must return one number as a tensor, got {got}; "
                             "e.g. target=lambda out: out[0, 3] or target=lambda out: out.sum().")
        inputs = leaves(value)  # what value.backward() would reach: trainable weights, an example that requires grad
        self.has_grad = bool(inputs)
        if self.has_grad:  # runs the tensor hooks; accumulates nothing into .grad
            torch.autograd.grad(value, inputs, allow_unused=True)
        self.output = [(p, t.detach()) for p, t in tensors_in(output)]

    @contextlib.contextmanager
    def _clean(self) -> Iterator[None]:
        """A pass without edits: edit hooks edit nothing meanwhile."""
        self.recording = True
        try:
            with running(self.model, self.threads):
                yield
        finally:
            self.recording = False

    def reference(self) -> list[tuple[str, torch.Tensor]]:
        """The output without edits, computed as an edited pass is (no autograd); made once."""
        if self._reference is None:
            with self._clean(), torch.no_grad():
                self._reference = tensors_in(self._call())
        return self._reference

    def edited(self, module: nn.Module) -> tuple[ModuleRecord, list[tuple[str, torch.Tensor]]]:
        """One pass without autograd with the edit hooks registered now, watching ``module`` after
        them: what it output (edited), and the model's output."""
        seen = ModuleRecord()

        def watch(m: nn.Module, args: Any, output: Any) -> None:
            seen.calls, seen.summary = seen.calls + 1, Summary.of(output)

        with running(self.model, self.threads), Hooks() as hooks, torch.no_grad():
            hooks.forward(module, watch)  # registered after the edit hooks: it sees the edited output
            return seen, tensors_in(self._call())
