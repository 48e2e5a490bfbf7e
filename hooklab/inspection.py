"""What hooks are registered right now: on a model's modules, on its parameters and buffers, and
the global module hooks. The leak detector.

It reads the dicts in which PyTorch keeps hooks: every module's, and those of each parameter and
buffer (``register_hook`` fills ``_backward_hooks``, ``register_post_accumulate_grad_hook``
``_post_accumulate_grad_hooks``). It cannot see a hook on a tensor the model does not hold (an
activation, a loss: that hook lives and dies with the tensor and its graph), nor a hook on an
autograd node (``grad_fn.register_hook`` / ``register_prehook``), which PyTorch keeps in C++.

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

from torch import nn
from torch.nn.modules import module as _module

from ._signature import function_name
from ._table import Table

__all__ = ["registered_hooks", "count_hooks", "own_tensors", "HookReport"]

#: (attribute on nn.Module, label). ``_backward_hooks`` holds full and deprecated backward hooks.
_MODULE_DICTS = (
    ("_forward_pre_hooks", "forward_pre"),
    ("_forward_hooks", "forward"),
    ("_backward_pre_hooks", "backward_pre"),
    ("_backward_hooks", "backward"),
    ("_state_dict_pre_hooks", "state_dict_pre"),
    ("_state_dict_hooks", "state_dict"),
    ("_load_state_dict_pre_hooks", "load_state_dict_pre"),
    ("_load_state_dict_post_hooks", "load_state_dict_post"),
)
_GLOBAL_DICTS = (
    ("_global_forward_pre_hooks", "forward_pre"),
    ("_global_forward_hooks", "forward"),
    ("_global_backward_pre_hooks", "backward_pre"),
    ("_global_backward_hooks", "backward"),
)
#: Hooks stored on a tensor: (attribute on torch.Tensor, label).
_TENSOR_DICTS = (("_backward_hooks", "tensor"), ("_post_accumulate_grad_hooks", "post_accumulate_grad"))
GLOBAL = "(global)"


def _name(fn: Any) -> str:
    inner = getattr(fn, "hook", None)  # state-dict hooks are wrapped by PyTorch
    fn = inner if callable(inner) and not isinstance(fn, nn.Module) else fn
    return function_name(fn)


class HookReport(Table):
    """Rows of (module or tensor name, kind, function) for every registered hook; ``len()`` counts them."""

    def count(self, kind: str | None = None, module: str | None = None) -> int:
        """How many hooks, optionally only of one kind and/or on one module or tensor (``"0.weight"``)."""
        return sum(1 for m, k, _ in self.rows if (kind is None or k == kind) and (module is None or m == module))

    def to_text(self) -> str:
        return super().to_text() if self.rows else "no hooks registered"


def registered_hooks(model: nn.Module | None = None, *, include_global: bool = True) -> HookReport:
    """Every hook on ``model``'s modules, parameters and buffers (and the global module hooks), as a table.

    The first column names the module (the root is ``(model)``), or for a hook on a parameter or
    buffer that tensor (``0.weight``, kind ``tensor`` or ``post_accumulate_grad``). Global hooks
    (``torch.nn.modules.module.register_module_forward_hook`` and friends) show as ``(global)``.
    Hooks on intermediate tensors and on autograd nodes are not listed (see the module docstring).
    """
    rows: list[list[str]] = []
    if model is not None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"expected an nn.Module, got {type(model).__name__}.")
        for name, module in model.named_modules():
            for attr, kind in _MODULE_DICTS:
                for fn in getattr(module, attr, {}).values():
                    label = kind
                    if attr == "_backward_hooks" and module._is_full_backward_hook is False:
                        label = "backward (deprecated)"
                    rows.append([name or "(model)", label, _name(fn)])
        for name, tensor in itertools.chain(model.named_parameters(), model.named_buffers()):
            for attr, kind in _TENSOR_DICTS:
                rows += [[name, kind, _name(fn)] for fn in (getattr(tensor, attr, None) or {}).values()]
    if include_global:
        for attr, kind in _GLOBAL_DICTS:
            for fn in getattr(_module, attr, {}).values():
                rows.append([GLOBAL, kind, _name(fn)])
    return HookReport(["module", "kind", "function"], rows)


def own_tensors(module: nn.Module) -> list[Any]:
    """The parameters and buffers ``module`` holds itself (not its children's), read from the
    dicts PyTorch keeps them in: what ``parameters(recurse=False)`` and ``buffers(recurse=False)``
    give, without their generator machinery (a live panel asks at every update)."""
    return [t for t in itertools.chain(module._parameters.values(), module._buffers.values()) if t is not None]


def count_hooks(model: nn.Module | None = None, *, include_global: bool = True) -> int:
    """The number of hooks :func:`registered_hooks` lists: on ``model``'s modules, parameters and
    buffers, plus the global ones (counted without building the table: a live panel counts them
    at every update)."""
    count = 0
    if model is not None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"expected an nn.Module, got {type(model).__name__}.")
        seen: set[int] = set()
        for module in model.modules():
            count += sum(len(getattr(module, attr, None) or {}) for attr, _ in _MODULE_DICTS)
            for tensor in own_tensors(module):
                if id(tensor) not in seen:  # a tensor shared by two modules (tied weights) counts once
                    seen.add(id(tensor))
                    count += sum(len(getattr(tensor, attr, None) or {}) for attr, _ in _TENSOR_DICTS)
    if include_global:
        count += sum(len(getattr(_module, attr, None) or {}) for attr, _ in _GLOBAL_DICTS)
    return count
