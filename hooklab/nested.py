"""Walk what a module returns: the tensors inside tuples, lists, dicts, namedtuples and dataclasses.

A module's output is often not one tensor: ``nn.LSTM`` returns ``(output, (h, c))``, a detection backbone an
``OrderedDict``, a Hugging Face model a ``ModelOutput`` (a dataclass that is also a dict). This is the one
place in hooklab that walks such a value; each tensor is named by its *path* (``output[1][0]``,
``output['out']``, ``output.logits``). Anything else (torchvision's ``ImageList``, a class of your own) is a
leaf it cannot see into: :func:`unreachable` lists them, so a caller can say what it could not reach.

>>> import torch
>>> out = (torch.zeros(5, 1, 3), (torch.zeros(1, 1, 3), {"c": torch.arange(2), "n": None}))
>>> [path for path, _ in tensors_in(out)]
['output[0]', 'output[1][0]', "output[1][1]['c']"]
>>> describe(out)
'tuple(Tensor[5, 1, 3], tuple(Tensor[1, 1, 3], dict(c: Tensor[2] int64, n: None)))'
>>> map_tensors(out, lambda t: t * 0)[1][1]["c"].tolist()  # only floating-point tensors are edited
[0, 1]
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable

import torch

__all__ = ["children", "tensors_in", "replace_tensors", "map_tensors", "describe", "unreachable"]

_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)  # hold no tensor


def _is_dataclass(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def children(value: Any) -> list[tuple[str, str, Any]] | None:
    """``[(path suffix, label, child)]`` of a container, or ``None`` for a leaf."""
    if _is_dataclass(value):
        return [(f".{f.name}", f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    if _is_namedtuple(value):
        return [(f".{n}", n, v) for n, v in zip(value._fields, value)]
    if isinstance(value, (tuple, list)):
        return [(f"[{i}]", "", v) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return [(f"[{k!r}]", str(k), v) for k, v in value.items()]
    return None


def tensors_in(value: Any, path: str = "output") -> list[tuple[str, torch.Tensor]]:
    """Every tensor inside ``value``, depth first, with the path that reaches it."""
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    return [found for suffix, _, child in children(value) or [] for found in tensors_in(child, path + suffix)]


def unreachable(value: Any, path: str = "output") -> list[tuple[str, str]]:
    """``[(path, type name)]`` of every leaf that is neither a tensor nor a plain value: objects
    this module cannot see into."""
    if isinstance(value, (torch.Tensor, *_PLAIN)):
        return []
    kids = children(value)
    if kids is None:
        return [(path, type(value).__name__)]
    return [found for suffix, _, child in kids for found in unreachable(child, path + suffix)]


def replace_tensors(value: Any, fn: Callable[[str, torch.Tensor], Any], path: str = "output") -> Any:
    """``value`` rebuilt with every tensor ``t`` at ``path`` replaced by ``fn(path, t)``; containers
    keep their types, other leaves stay as they are."""
    if isinstance(value, torch.Tensor):
        return fn(path, value)
    kids = children(value)
    if kids is None:
        return value
    new = [replace_tensors(child, fn, path + suffix) for suffix, _, child in kids]
    if _is_dataclass(value):
        return _rebuild_dataclass(value, {f.name: v for f, v in zip(dataclasses.fields(value), new)})
    if _is_namedtuple(value):
        return type(value)(*new)
    kind = tuple if isinstance(value, tuple) else list if isinstance(value, list) else dict
    items = new if kind is not dict else list(zip(value.keys(), new))
    try:
        return type(value)(items)
    except TypeError:  # a subclass whose constructor takes other arguments
        return kind(items)


def _rebuild_dataclass(value: Any, fields: dict[str, Any]) -> Any:
    try:
        return dataclasses.replace(value, **{f.name: fields[f.name] for f in dataclasses.fields(value) if f.init})
    except (TypeError, ValueError):  # an __init__ or __post_init__ that will not take them back
        clone = copy.copy(value)
        for key, field_value in fields.items():
            object.__setattr__(clone, key, field_value)
            if isinstance(clone, dict) and key in clone:  # a dataclass that is also a dict (ModelOutput)
                dict.__setitem__(clone, key, field_value)
        return clone


def map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``value`` with ``fn`` applied to every floating-point tensor in it, the rest as it was."""
    return replace_tensors(value, lambda _, t: fn(t) if t.is_floating_point() else t)


def describe(value: Any) -> str:
    """The structure of ``value``, with each tensor's shape (a nested one's by component) and dtype, if not default."""
    if isinstance(value, torch.Tensor):
        dtype = "" if value.dtype == torch.get_default_dtype() else f" {str(value.dtype).replace('torch.', '')}"
        if not value.is_nested:  # nested: [components, then per dimension the size they share, or each one's; ? past 8]
            return f"Tensor{list(value.shape)}{dtype}"
        dims = [s[0] if len(set(s)) == 1 else s if len(s) < 9 else "?" for s in zip(*(c.shape for c in value.unbind()))]
        return f"NestedTensor[{', '.join(map(str, [value.size(0), *dims]))}]{dtype}"
    kids = children(value)
    if value is None or kids is None:
        return "None" if value is None else type(value).__name__
    if isinstance(value, (tuple, list)) and not _is_namedtuple(value):
        return f"{type(value).__name__}({', '.join(describe(c) for _, _, c in kids)})"
    return f"{type(value).__name__}({', '.join(f'{label}: {describe(c)}' for _, label, c in kids)})"
