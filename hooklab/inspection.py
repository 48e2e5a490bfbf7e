"""What hooks are registered right now, the leak detector: on a model's modules, on its parameters and buffers, and the
global module hooks. It cannot see a hook on a tensor the model does not hold (an activation, a loss: it lives and dies
with that tensor), nor one on an autograd node (``grad_fn.register_hook``), which PyTorch keeps in C++.

The one module of hooklab that reads PyTorch's private attributes: the hook dicts of ``nn.Module``, ``torch.Tensor`` and
``torch.nn.modules.module`` (named in :data:`hooklab.kinds.KINDS`), ``Module._is_full_backward_hook``,
``Module._parameters`` and ``_buffers``, ``Tensor._version`` (:func:`version`), ``RemovableHandle.hooks_dict_ref`` and
``.id`` (:func:`is_registered`), and ``torch._C._current_graph_task_id`` (:func:`in_backward`).

>>> import torch.nn as nn, hooklab
>>> layer = nn.Linear(2, 2)
>>> handle = layer.register_forward_hook(lambda m, a, o: None)
>>> on_weight = layer.weight.register_hook(lambda grad: None)
>>> print(hooklab.registered_hooks(layer, include_global=False))
module   kind     function
-------  -------  --------
(model)  forward  <lambda>
weight   tensor   <lambda>
>>> handle.remove(); on_weight.remove(); hooklab.count_hooks(layer)
0
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as module_globals
from torch.utils.hooks import RemovableHandle

from .kinds import KINDS
from .naming import function_name
from .table import Table

__all__ = ["registered_hooks", "count_hooks", "HookReport", "hook_dicts", "own_tensors", "version", "is_registered",
           "in_backward"]

GLOBAL = "(global)"
_MODULE_KINDS = [k for k in KINDS.values() if k.on == "module"]
_TENSOR_KINDS = [k for k in KINDS.values() if k.on == "tensor"]


def hook_dicts(module: nn.Module) -> dict[str, dict[int, Any]]:
    """``{kind: the dict of hooks of that kind}`` of one module, as PyTorch keeps them (handle id
    -> function, in the order they run)."""
    return {k.name: getattr(module, k.stored_in, None) or {} for k in _MODULE_KINDS}


def own_tensors(module: nn.Module) -> list[torch.Tensor]:
    """``module``'s own parameters and buffers (``parameters(recurse=False)`` and the buffers),
    read from PyTorch's dicts without their generator machinery: a live panel asks at every update."""
    return [t for t in itertools.chain(module._parameters.values(), module._buffers.values()) if t is not None]


def version(t: torch.Tensor) -> int:
    """How many times ``t`` was changed in place (PyTorch's version counter, ``t._version``)."""
    return t._version


def is_registered(handle: RemovableHandle) -> bool:
    """Whether PyTorch still holds the hook behind ``handle`` (it may have been removed directly)."""
    hooks_dict = handle.hooks_dict_ref()
    return hooks_dict is not None and handle.id in hooks_dict


def in_backward() -> bool:
    """Whether the code that calls it runs inside a backward pass (a checkpoint recomputing its
    segment, for one): ``torch._C._current_graph_task_id()`` is -1 outside one (torch 2.14.1).

    >>> in_backward()
    False
    """
    return torch._C._current_graph_task_id() != -1


def _name(fn: Any) -> str:
    inner = getattr(fn, "hook", None)  # state-dict hooks are wrapped by PyTorch
    return function_name(inner if callable(inner) and not isinstance(fn, nn.Module) else fn)


def _on_tensor(t: torch.Tensor) -> list[tuple[str, Any]]:
    return [(k.name, fn) for k in _TENSOR_KINDS for fn in (getattr(t, k.stored_in, None) or {}).values()]


def _global() -> list[tuple[str, Any]]:
    return [(k.name, fn) for k in _MODULE_KINDS if k.global_dict for fn in getattr(module_globals, k.global_dict).values()]


class HookReport(Table):
    """Rows of (module or tensor name, kind, function) for every registered hook; ``len()`` counts them."""

    def count(self, kind: str | None = None, module: str | None = None) -> int:
        """How many hooks, optionally only of one kind and/or on one module or tensor (``"0.weight"``)."""
        return sum(1 for m, k, _ in self.rows if kind in (None, k) and module in (None, m))

    def to_text(self) -> str:
        return super().to_text() if self.rows else "no hooks registered"


def _check(model: object) -> None:
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"expected an nn.Module, got {type(model).__name__}.")


def registered_hooks(model: nn.Module | None = None, *, include_global: bool = True) -> HookReport:
    """Every hook on ``model``'s modules (the root is ``(model)``), on its parameters and buffers (by
    name, ``0.weight``), and the global module hooks (``(global)``), as a table."""
    _check(model)
    rows: list[list[str]] = []
    for name, module in model.named_modules() if model is not None else []:
        for kind, hooks in hook_dicts(module).items():
            label = "backward (deprecated)" if kind == "backward" and module._is_full_backward_hook is False else kind
            rows += [[name or "(model)", label, _name(fn)] for fn in hooks.values()]
    tensors = itertools.chain(model.named_parameters(), model.named_buffers()) if model is not None else []
    rows += [[name, kind, _name(fn)] for name, t in tensors for kind, fn in _on_tensor(t)]
    rows += [[GLOBAL, kind, _name(fn)] for kind, fn in (_global() if include_global else [])]
    return HookReport(["module", "kind", "function"], rows)


def count_hooks(model: nn.Module | None = None, *, include_global: bool = True) -> int:
    """How many hooks :func:`registered_hooks` lists (counted without building the table: a live
    panel counts them at every update)."""
    _check(model)
    count, seen = 0, set[int]()
    for module in model.modules() if model is not None else []:
        count += sum(len(hooks) for hooks in hook_dicts(module).values())
        for t in own_tensors(module):
            if id(t) not in seen:  # a tensor shared by two modules (tied weights) counts once
                seen.add(id(t))
                count += len(_on_tensor(t))
    return count + (len(_global()) if include_global else 0)
