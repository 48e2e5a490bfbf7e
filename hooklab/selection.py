"""Pick modules of a model by exact name, glob, type or predicate.

>>> import torch.nn as nn, hooklab
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
>>> list(hooklab.select(model, type=nn.Linear)), list(hooklab.select(model, "?", where=lambda n, m: n != "1"))
(['0', '2'], ['0', '2'])
>>> hooklab.module(model, "2")
Linear(in_features=8, out_features=2, bias=True)
"""

from __future__ import annotations

import fnmatch
from typing import Callable

from torch import nn

from .compiled import check_hookable, check_parts
from .naming import closest

__all__ = ["select", "module", "module_names"]

_GLOB_CHARS = set("*?[")
_WEIGHT_PARTS = {"parametrizations", "_packed_params", "_all_weight_values", "weight_fake_quant", "activation_post_process"}


def _leaf(name: str, m: nn.Module) -> bool:
    """No children but a weight's parts or quantization observers (parametrize, torch.ao), nor one itself."""
    return all(c in _WEIGHT_PARTS for c, _ in m.named_children()) and not _WEIGHT_PARTS & set(name.split("."))


def module_names(model: nn.Module) -> dict[nn.Module, str]:
    """``{module: qualified name}`` for every module (the root is ``""``; a module reused in two places
    keeps its first name): build it once, instead of ``dict(model.named_modules())`` per layer."""
    _check_model(model)
    return {m: name for name, m in model.named_modules()}


def _check_model(model: object) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"expected an nn.Module (a model or a layer), got {type(model).__name__}.")


def module(model: nn.Module, name: str) -> nn.Module:
    """``model.get_submodule(name)``, but an unknown name raises ``KeyError`` listing the closest real names."""
    _check_model(model)
    try:
        return model.get_submodule(name)
    except AttributeError:
        names = [n for n, _ in model.named_modules() if n]
        raise KeyError(f"{type(model).__name__} has no module named {name!r}. Closest names: {closest(name, names)}. "
                       "See every name with [n for n, _ in model.named_modules()].") from None


def _matching(model: nn.Module, pattern: str, names: list[str]) -> list[str]:
    """The names ``pattern`` (an exact name, ``""`` for the model, or a glob) picks, or ``KeyError``."""
    if not isinstance(pattern, str):
        raise TypeError(f"patterns are module names or globs (strings), got {pattern!r}; "
                        "to select by class use type=..., by test use where=....")
    if _GLOB_CHARS & set(pattern):
        hits = fnmatch.filter(names, pattern)
        if not hits:
            raise KeyError(f"no module of {model.__class__.__name__} matches {pattern!r}. "
                           f"Closest names: {closest(pattern.replace('*', ''), names)}.")
        return hits
    if pattern in names or pattern == "":
        return [pattern]
    raise KeyError(f"{model.__class__.__name__} has no module named {pattern!r}. Closest names: {closest(pattern, names)}.")


def select(model: nn.Module, *patterns: str, type: type[nn.Module] | tuple[type[nn.Module], ...] | None = None,
           where: Callable[[str, nn.Module], bool] | None = None, leaves: bool = False,
           include_root: bool = False) -> dict[str, nn.Module]:
    """Modules of ``model`` as ``{name: module}``, in ``named_modules()`` order: those ``patterns``
    name (exact names, ``""`` for the model itself, or globs such as ``"layer*.conv1"``; none: every
    module, the model too with ``include_root``), of ``type``, for which ``where(name, module)`` holds,
    without children if ``leaves`` (a model without children is its own leaf; a parametrized or dynamically quantized
    layer is a leaf, its weight's modules are not). An unknown name, or a
    glob that matches nothing, raises ``KeyError`` listing the closest real names; one in a compiled or TorchScript part
    (where a hook may not run), ``TypeError``."""
    _check_model(model)
    check_hookable(model, "select")
    named = list(model.named_modules())
    names = [n for n, _ in named if n]
    if patterns:
        chosen = {n for pattern in patterns for n in _matching(model, pattern, names)}
        keep = [(n, m) for n, m in named if n in chosen]
    else:  # every module; the model itself too if asked, or if it is the only leaf there is
        root_too = include_root or (leaves and _leaf("", model))
        keep = [(n, m) for n, m in named if n or root_too]
    if type is not None:
        keep = [(n, m) for n, m in keep if isinstance(m, type)]
    if leaves:
        keep = [(n, m) for n, m in keep if _leaf(n, m)]
    if where is not None:
        keep = [(n, m) for n, m in keep if where(n, m)]
    check_parts(model, [n for n, _ in keep])
    return dict(keep)
