"""One owner for many hook handles.

PyTorch's ``register_*`` calls each return a ``RemovableHandle`` and forget about it; lose the
handle and the hook stays on the model for good. :class:`Hooks` keeps the handles for you, under
a key, so that

* registering the same key again **replaces** the old hook (re-running a notebook cell never
  stacks a second copy),
* ``with Hooks() as hooks:`` removes every hook on exit, also when the block raises,
* a hook function with the wrong signature is rejected when you register it.

>>> import torch, hooklab
>>> layer = torch.nn.Linear(2, 2)
>>> with hooklab.Hooks() as hooks:
...     _ = hooks.forward(layer, lambda module, args, output: torch.zeros_like(output))
...     print(layer(torch.ones(2)).tolist(), len(hooks))
[0.0, 0.0] 1
>>> len(layer._forward_hooks)
0
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator, Mapping, Union

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ._signature import KINDS, check_hook_signature, check_kind, function_name

__all__ = ["Hooks", "Target"]

#: What a hook can be registered on: a module, a tensor, or a ``{name: module}`` mapping
#: (what :func:`hooklab.select` returns) to register the same hook on each of them.
Target = Union[nn.Module, torch.Tensor, Mapping[str, nn.Module]]

_MODULE_KINDS = ("forward_pre", "forward", "backward_pre", "backward")


@dataclass
class _Entry:
    kind: str
    label: str
    fn_name: str
    handles: list[RemovableHandle] = field(default_factory=list)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


def _label(target: Any) -> str:
    if isinstance(target, torch.Tensor):
        return f"Tensor{list(target.shape)}"
    return type(target).__name__


class Hooks:
    """Registers hooks and owns their handles, one key per hook.

    Args:
        name: optional. Creating a ``Hooks`` with a name that is already in use first removes
            every hook the older one holds, so a notebook cell that does
            ``hooks = hooklab.Hooks("demo")`` can be re-run without leaving the previous
            run's hooks behind.

    Each ``register`` method takes ``key=``; without one the key is
    ``"<kind>:<target type>@<id>:<function name>"``, so registering a function of the same name
    on the same target again replaces it. Pass an explicit key to keep two lambdas apart.

    >>> import torch, hooklab
    >>> layer = torch.nn.Linear(2, 2)
    >>> hooks = hooklab.Hooks("doc")
    >>> for _ in range(3):  # like re-running a cell three times
    ...     _ = hooks.forward(layer, lambda m, args, out: out * 2, key="double")
    >>> len(layer._forward_hooks)
    1
    >>> hooks.clear(); len(layer._forward_hooks)
    0
    """

    _named: ClassVar[dict[str, "Hooks"]] = {}

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._entries: dict[str, _Entry] = {}
        if name is not None:
            previous = Hooks._named.get(name)
            if previous is not None:
                previous.clear()
            Hooks._named[name] = self

    # ------------------------------------------------------------------ registering
    def add(self, kind: str, target: Target, fn: Callable, *, key: str | None = None, **options: Any) -> list[RemovableHandle]:
        """Register ``fn`` as a hook of ``kind`` on ``target``; return the PyTorch handles.

        ``kind`` is one of ``forward_pre``, ``forward``, ``backward_pre``, ``backward``,
        ``tensor``, ``post_accumulate_grad``. ``options`` go to PyTorch's ``register_*`` call
        (``prepend``, ``with_kwargs``, ``always_call``). A mapping target registers ``fn`` on
        every module in it under the one key.
        """
        check_kind(kind)
        check_hook_signature(fn, kind, with_kwargs=bool(options.get("with_kwargs", False)))
        targets = self._targets(kind, target)
        if key is None:
            label = "+".join(f"{_label(t)}@{id(t):x}" for t in targets)
            key = f"{kind}:{label}:{function_name(fn)}"
        self.discard(key)
        entry = _Entry(kind, ", ".join(sorted({_label(t) for t in targets})), function_name(fn))
        try:
            for t in targets:
                entry.handles.append(_register(kind, t, fn, options))
        except BaseException:
            entry.remove()
            raise
        self._entries[key] = entry
        return entry.handles

    def forward_pre(self, module: Target, fn: Callable, *, key: str | None = None, prepend: bool = False,
                    with_kwargs: bool = False) -> RemovableHandle:
        """``module.register_forward_pre_hook(fn)``: ``fn(module, args)`` runs before ``forward``.

        Return ``None`` to leave the input alone, or the new input (a tuple, or a single value
        that PyTorch wraps in a tuple). With ``with_kwargs=True``: ``fn(module, args, kwargs)``
        returning ``None`` or ``(args, kwargs)``.
        """
        return self.add("forward_pre", module, fn, key=key, prepend=prepend, with_kwargs=with_kwargs)[0]

    def forward(self, module: Target, fn: Callable, *, key: str | None = None, prepend: bool = False,
                with_kwargs: bool = False, always_call: bool = False) -> RemovableHandle:
        """``module.register_forward_hook(fn)``: ``fn(module, args, output)`` runs after ``forward``.

        Return ``None`` to leave the output alone, or the output to use instead.
        """
        return self.add("forward", module, fn, key=key, prepend=prepend, with_kwargs=with_kwargs,
                        always_call=always_call)[0]

    def backward_pre(self, module: Target, fn: Callable, *, key: str | None = None,
                     prepend: bool = False) -> RemovableHandle:
        """``module.register_full_backward_pre_hook(fn)``: ``fn(module, grad_output)``.

        Runs when the gradient with respect to the module's output is known; return ``None`` or a
        new ``grad_output``.
        """
        return self.add("backward_pre", module, fn, key=key, prepend=prepend)[0]

    def backward(self, module: Target, fn: Callable, *, key: str | None = None,
                 prepend: bool = False) -> RemovableHandle:
        """``module.register_full_backward_hook(fn)``: ``fn(module, grad_input, grad_output)``.

        Runs when the gradients with respect to the module's inputs are computed; return ``None``
        or a new ``grad_input``.
        """
        return self.add("backward", module, fn, key=key, prepend=prepend)[0]

    def tensor(self, tensor: torch.Tensor, fn: Callable, *, key: str | None = None) -> RemovableHandle:
        """``tensor.register_hook(fn)``: ``fn(grad)`` runs when the tensor's gradient is computed.

        Return ``None`` to only look, or a tensor to use as the gradient instead.
        """
        return self.add("tensor", tensor, fn, key=key)[0]

    def post_accumulate_grad(self, param: torch.Tensor, fn: Callable, *, key: str | None = None) -> RemovableHandle:
        """``param.register_post_accumulate_grad_hook(fn)``: ``fn(param)`` runs after
        ``param.grad`` has been accumulated (leaf tensors only)."""
        return self.add("post_accumulate_grad", param, fn, key=key)[0]

    # ------------------------------------------------------------------ removing
    def remove(self, key: str) -> None:
        """Remove the hook(s) registered under ``key``; ``KeyError`` (with close keys) if none."""
        if key not in self._entries:
            close = difflib.get_close_matches(key, list(self._entries), n=3, cutoff=0.3)
            hint = f" Close keys: {', '.join(map(repr, close))}." if close else ""
            raise KeyError(f"no hook registered under key {key!r}.{hint} Registered keys: "
                           f"{list(self._entries) or 'none'}.")
        self._entries.pop(key).remove()

    def discard(self, key: str) -> bool:
        """Remove the hook(s) under ``key`` if there are any; return whether something was removed."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            entry.remove()
        return entry is not None

    def clear(self) -> None:
        """Remove every hook this object holds."""
        while self._entries:
            _, entry = self._entries.popitem()
            entry.remove()

    # ------------------------------------------------------------------ looking
    def keys(self) -> list[str]:
        """The keys, in registration order."""
        return list(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        """The number of PyTorch hooks held (a mapping target counts once per module)."""
        return sum(len(e.handles) for e in self._entries.values())

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __enter__(self) -> "Hooks":
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()

    def __repr__(self) -> str:
        title = f"Hooks({self.name!r})" if self.name else "Hooks()"
        if not self._entries:
            return f"{title}: no hooks"
        lines = [f"{title}: {len(self)} hook{'s' if len(self) != 1 else ''}"]
        for key, e in self._entries.items():
            count = f" x{len(e.handles)}" if len(e.handles) > 1 else ""
            lines.append(f"  {key!r}: {e.kind} hook {e.fn_name} on {e.label}{count}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _targets(kind: str, target: Target) -> list[Any]:
        if isinstance(target, Mapping):
            if not target:
                raise ValueError("the mapping of modules is empty: nothing to register the hook on. "
                                 "Check the pattern you passed to hooklab.select().")
            targets = list(target.values())
        else:
            targets = [target]  # type: ignore[list-item]
        for t in targets:
            _check_target(kind, t)
        return targets


def _check_target(kind: str, target: Any) -> None:
    if kind in _MODULE_KINDS:
        if isinstance(target, str):
            raise TypeError(f"a {kind} hook goes on an nn.Module, not the string {target!r}; look the module "
                            f"up first: hooklab.select(model, {target!r}).")
        if isinstance(target, torch.Tensor):
            raise TypeError(f"a {kind} hook goes on an nn.Module, not a tensor; for a hook on a tensor's "
                            "gradient use hooks.tensor(tensor, fn).")
        if not isinstance(target, nn.Module):
            raise TypeError(f"a {kind} hook goes on an nn.Module, got {type(target).__name__}.")
        return
    if not isinstance(target, torch.Tensor):
        hint = (" For a module, use hooks.forward / hooks.backward, or hooks.tensor(param, fn) on each of "
                "module.parameters()." if isinstance(target, nn.Module) else "")
        raise TypeError(f"a {kind} hook goes on a tensor, got {type(target).__name__}.{hint}")
    if not target.requires_grad:
        raise ValueError(
            f"this tensor (shape {list(target.shape)}) does not require grad, so no gradient will ever reach a "
            "hook on it. Create it with requires_grad=True, call .requires_grad_() on a leaf tensor, or hook a "
            "tensor computed from one that requires grad."
        )
    if kind == "post_accumulate_grad" and not target.is_leaf:
        raise ValueError("post-accumulate-grad hooks go on leaf tensors (parameters, or tensors you created "
                         "with requires_grad=True); this one was computed from others. Use hooks.tensor instead.")


def _register(kind: str, target: Any, fn: Callable, options: dict[str, Any]) -> RemovableHandle:
    allowed = {
        "forward_pre": {"prepend", "with_kwargs"},
        "forward": {"prepend", "with_kwargs", "always_call"},
        "backward_pre": {"prepend"},
        "backward": {"prepend"},
        "tensor": set(),
        "post_accumulate_grad": set(),
    }[kind]
    unknown = set(options) - allowed
    if unknown:
        raise TypeError(f"{kind} hooks take no option {sorted(unknown)}; allowed: {sorted(allowed) or 'none'}.")
    if kind == "forward_pre":
        return target.register_forward_pre_hook(fn, **options)
    if kind == "forward":
        return target.register_forward_hook(fn, **options)
    if kind == "backward_pre":
        return target.register_full_backward_pre_hook(fn, **options)
    if kind == "backward":
        return target.register_full_backward_hook(fn, **options)
    if kind == "tensor":
        return target.register_hook(fn)
    assert kind == "post_accumulate_grad" and kind in KINDS
    return target.register_post_accumulate_grad_hook(fn)
