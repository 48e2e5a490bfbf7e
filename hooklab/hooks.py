"""One owner for many hook handles: :class:`Hooks`.

PyTorch's ``register_*`` calls each return a ``RemovableHandle``; lose it and the hook stays for good. :class:`Hooks`
keeps the handles, removes them all on ``remove()`` or at the end of a ``with`` block (also when it raises), and rejects
a hook with the wrong signature when you register it, not deep inside a forward pass. Two things, and nothing else,
replace a hook: a *named owner* (``Hooks("demo")`` first removes what an older ``Hooks("demo")`` holds and closes it, so
a cell that creates it can run again) and a *key* (registering under a key in use replaces that hook).

>>> import torch, hooklab
>>> layer = torch.nn.Linear(2, 2)
>>> for _ in range(3):  # like running a cell three times
...     hooks = hooklab.Hooks("doc")
...     _ = hooks.forward(layer, lambda m, args, out: out * 2)
>>> _ = hooks.forward(layer, lambda m, args, out: out + 1, key="plus one")
>>> _ = hooks.forward(layer, lambda m, args, out: out + 2, key="plus one")  # replaces
>>> hooklab.count_hooks(layer), hooks.keys()[-1]
(2, 'plus one')
>>> hooks.remove(); hooklab.count_hooks(layer)
0
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, ClassVar, Iterator, Mapping, Union

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from .compiled import is_scripted
from .inspection import is_registered
from .kinds import HookKind, check_hook_signature, check_kind
from .naming import closest, function_name

__all__ = ["Hooks", "Registration", "HookOwner", "Target"]

#: A module, a tensor, or ``{name: module}`` (what :func:`hooklab.select` returns: one hook on each).
Target = Union[nn.Module, torch.Tensor, Mapping[str, nn.Module]]
Hook = Callable[..., Any]


class HookOwner:
    """What every tool that registers hooks shares (``Recorder``, ``GradCAM``): its hooks in
    ``self.hooks``; ``remove()``, or the end of its ``with`` block, takes them off."""

    hooks: Hooks

    @property
    def active(self) -> bool:
        """Whether its hooks are still registered."""
        return len(self.hooks) > 0

    def remove(self) -> None:
        """Remove the hooks (what they recorded stays readable)."""
        self.hooks.remove()

    def __enter__(self: Any) -> Any:  # also Registration's and Hooks's
        return self

    def __exit__(self: Any, *exc: object) -> None:
        self.remove()


class Registration:
    """One hook function on one or more targets: ``handles`` are PyTorch's, one per target;
    ``remove()`` (or leaving its ``with`` block) removes them all."""

    def __init__(self, owner: "Hooks", key: str, kind: str, label: str, fn_name: str) -> None:
        self.owner, self.key, self.kind, self.label, self.fn_name = owner, key, kind, label, fn_name
        self.handles: list[RemovableHandle] = []

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        if self.owner._entries.get(self.key) is self:
            del self.owner._entries[self.key]

    def __len__(self) -> int:
        return sum(is_registered(h) for h in self.handles)

    __enter__, __exit__ = HookOwner.__enter__, HookOwner.__exit__  # ``with``: removed at the end, even on an error

    def __repr__(self) -> str:
        count = f" x{len(self.handles)}" if len(self.handles) > 1 else ""
        return f"<{self.kind} hook {self.fn_name} on {self.label}{count}, key {self.key!r}>"


class Hooks:
    """Registers hooks and owns their handles (see the module's docstring)."""

    _named: ClassVar[dict[str, "Hooks"]] = {}
    _count: ClassVar[Iterator[int]] = itertools.count()

    def __init__(self, name: str | None = None) -> None:
        self.name, self._entries, self._replaced = name, dict[str, Registration](), False
        if name is not None:
            previous = Hooks._named.get(name)
            if previous is not None:
                previous.remove()
                previous._replaced = True
            Hooks._named[name] = self

    def add(self, kind: HookKind, target: Target, fn: Hook, *, key: str | None = None, **options: Any) -> Registration:
        """Register ``fn`` as a hook of ``kind`` (a :data:`hooklab.kinds.KINDS` name) on ``target`` with PyTorch's
        matching ``register_*`` call, passing it ``options`` (``prepend``, ``with_kwargs``, ``always_call``)."""
        if self._replaced:
            raise RuntimeError(f"this Hooks({self.name!r}) was replaced by a newer Hooks({self.name!r}), which removed "
                               "its hooks: register on the newer one (re-run the cell that creates it).")
        spec = check_kind(kind)
        check_hook_signature(fn, kind, with_kwargs=bool(options.get("with_kwargs", False)))
        if set(options) - spec.options:
            raise TypeError(f"{kind} hooks take no option {sorted(set(options) - spec.options)}; allowed: "
                            f"{sorted(spec.options) or 'none'}.")
        targets = _targets(spec.on, kind, target)
        label = ", ".join(sorted({f"Tensor{list(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
                                  for t in targets}))
        key = f"{kind}:{label}#{next(Hooks._count)}" if key is None else key
        if key in self._entries:
            self._entries[key].remove()
        registration = Registration(self, key, kind, label, function_name(fn))
        try:
            for t in targets:
                registration.handles.append(_register(t, spec.register, fn, options))
        except BaseException:
            registration.remove()
            raise
        self._entries[key] = registration
        return registration

    def forward_pre(self, module: Target, fn: Hook, *, key: str | None = None, prepend: bool = False,
                    with_kwargs: bool = False) -> Registration:
        """``fn(module, args)`` before ``forward``; returns ``None`` or new args."""
        return self.add("forward_pre", module, fn, key=key, prepend=prepend, with_kwargs=with_kwargs)

    def forward(self, module: Target, fn: Hook, *, key: str | None = None, prepend: bool = False,
                with_kwargs: bool = False, always_call: bool = False) -> Registration:
        """``fn(module, args, output)`` after ``forward``; returns ``None`` or the output to use instead."""
        return self.add("forward", module, fn, key=key, prepend=prepend, with_kwargs=with_kwargs,
                        always_call=always_call)

    def backward_pre(self, module: Target, fn: Hook, *, key: str | None = None, prepend: bool = False) -> Registration:
        """``fn(module, grad_output)`` (a full backward pre-hook); returns ``None`` or a new ``grad_output``."""
        return self.add("backward_pre", module, fn, key=key, prepend=prepend)

    def backward(self, module: Target, fn: Hook, *, key: str | None = None, prepend: bool = False) -> Registration:
        """``fn(module, grad_input, grad_output)`` (a full backward hook); returns ``None`` or a new ``grad_input``."""
        return self.add("backward", module, fn, key=key, prepend=prepend)

    def tensor(self, tensor: torch.Tensor, fn: Hook, *, key: str | None = None) -> Registration:
        """``tensor.register_hook(fn)``: ``fn(grad)``; returns ``None`` or the gradient to use instead."""
        return self.add("tensor", tensor, fn, key=key)

    def post_accumulate_grad(self, param: torch.Tensor, fn: Hook, *, key: str | None = None) -> Registration:
        """``fn(param)`` after ``param.grad`` was accumulated (leaf tensors only)."""
        return self.add("post_accumulate_grad", param, fn, key=key)

    def remove(self) -> None:
        """Remove every hook this owner holds."""
        for registration in list(self._entries.values()):
            registration.remove()

    def drop(self, key: str) -> None:
        """Remove the hook registered under ``key``; ``KeyError`` (naming the close keys) if none."""
        if key not in self._entries:
            close = closest(key, list(self._entries), n=3, cutoff=0.3, fallback=False)
            raise KeyError(f"no hook registered under key {key!r}." + (f" Close keys: {close}." if close else "")
                           + f" Registered keys: {list(self._entries) or 'none'}.")
        self._entries[key].remove()

    def keys(self) -> list[str]:
        """The keys, in registration order."""
        return list(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        """The PyTorch hooks it holds that are still registered (one per module of a mapping target)."""
        return sum(len(r) for r in self._entries.values())

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    __enter__, __exit__ = HookOwner.__enter__, HookOwner.__exit__  # ``with``: removed at the end, even on an error

    def __repr__(self) -> str:
        title = f"Hooks({self.name!r})" if self.name else "Hooks()"
        lines = [f"{title}: {len(self)} hook{'s' if len(self) != 1 else ''}" if self._entries else f"{title}: no hooks"]
        lines += [f"  {k!r}: {r.kind} hook {r.fn_name} on {r.label}" + (f" x{len(r.handles)}" if len(r.handles) > 1 else "")
                  for k, r in self._entries.items()]
        return "\n".join(lines)


def _register(target: Any, method: str, fn: Hook, options: dict[str, Any]) -> RemovableHandle:
    try:
        return getattr(target, method)(fn, **options)
    except RuntimeError as exc:
        if is_scripted(target):  # PyTorch's own message does not say what to do
            raise TypeError(f"{exc}: this TorchScript module (what torch.jit.script returns) takes no new hooks. "
                            "Register the hook on the Python module before scripting it, or on the module itself, "
                            "not scripted.") from exc
        raise


def _targets(on: str, kind: str, target: Target) -> list[Any]:
    if isinstance(target, Mapping) and not target:
        raise ValueError("the mapping of modules is empty: nothing to register the hook on. Check the pattern you "
                         "passed to hooklab.select().")
    targets = list(target.values()) if isinstance(target, Mapping) else [target]
    for t in targets:
        (_check_module if on == "module" else _check_tensor)(kind, t)
    return targets


def _check_module(kind: str, target: Any) -> None:
    if isinstance(target, str):
        raise TypeError(f"a {kind} hook goes on an nn.Module, not the string {target!r}; look the module up first: "
                        f"hooklab.select(model, {target!r}).")
    if isinstance(target, torch.Tensor):
        raise TypeError(f"a {kind} hook goes on an nn.Module, not a tensor; for a hook on a tensor's gradient use "
                        "hooks.tensor(tensor, fn).")
    if not isinstance(target, nn.Module):
        raise TypeError(f"a {kind} hook goes on an nn.Module, got {type(target).__name__}.")


def _check_tensor(kind: str, target: Any) -> None:
    if not isinstance(target, torch.Tensor):
        hint = (" For a module, use hooks.forward / hooks.backward, or hooks.tensor(param, fn) on each of "
                "module.parameters()." if isinstance(target, nn.Module) else "")
        raise TypeError(f"a {kind} hook goes on a tensor, got {type(target).__name__}.{hint}")
    if not target.requires_grad:
        raise ValueError(f"this tensor (shape {list(target.shape)}) does not require grad, so no gradient will ever "
                         "reach a hook on it. Create it with requires_grad=True, call .requires_grad_() on a leaf "
                         "tensor, or hook a tensor computed from one that requires grad.")
    if kind == "post_accumulate_grad" and not target.is_leaf:
        raise ValueError("post-accumulate-grad hooks go on leaf tensors (parameters, or tensors you created with "
                         "requires_grad=True); this one was computed from others. Use hooks.tensor instead.")
