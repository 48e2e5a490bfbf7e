"""One owner for many hook handles: :class:`Hooks`.

PyTorch's ``register_*`` calls each return a ``RemovableHandle``; lose it and the hook stays on
the model for good. :class:`Hooks` keeps the handles, removes them all on ``remove()`` or at the
end of a ``with`` block (also when it raises), and rejects a hook with the wrong signature when
you register it, not deep inside a forward pass.

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

import itertools
from typing import Any, Callable, ClassVar, Iterator, Mapping, Union

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from .compiled import is_scripted
from .inspection import is_registered
from .kinds import (BackwardHook, BackwardPreHook, ForwardHook, ForwardPreHook, HookKind, PostAccumulateGradHook,
                    TensorHook, check_hook_signature, check_kind)
from .naming import closest, function_name

__all__ = ["Hooks", "Registration", "HookOwner", "Target"]

#: What a hook can be registered on: a module, a tensor, or a ``{name: module}`` mapping
#: (what :func:`hooklab.select` returns) to register the same hook on each of them.
Target = Union[nn.Module, torch.Tensor, Mapping[str, nn.Module]]


class Registration:
    """What registering returns: the PyTorch handles of one hook function on one or more targets.

    ``remove()`` removes all of them (and the entry in its :class:`Hooks`); it is a context
    manager too. ``handles`` are PyTorch's own ``RemovableHandle`` objects, one per target.
    """

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

    def __enter__(self) -> "Registration":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        count = f" x{len(self.handles)}" if len(self.handles) > 1 else ""
        return f"<{self.kind} hook {self.fn_name} on {self.label}{count}, key {self.key!r}>"


class Hooks:
    """Registers hooks and owns their handles. Two things, and nothing else, replace a hook:

    * a *named owner*: ``Hooks("demo")`` first removes every hook an older ``Hooks("demo")``
      holds and closes it (registering on it raises), so a cell that creates the owner and then
      registers can be re-run without leaving the previous run's hooks behind;
    * a *key*: registering under a ``key=`` this owner already uses replaces that hook.

    Without a key, every registration is a hook of its own, exactly as with PyTorch.

    >>> import torch, hooklab
    >>> layer = torch.nn.Linear(2, 2)
    >>> for _ in range(3):  # like re-running a cell three times
    ...     hooks = hooklab.Hooks("doc")
    ...     _ = hooks.forward(layer, lambda m, args, out: out * 2)
    >>> len(layer._forward_hooks)
    1
    >>> _ = hooks.forward(layer, lambda m, args, out: out + 1, key="plus one")
    >>> _ = hooks.forward(layer, lambda m, args, out: out + 2, key="plus one")  # replaces
    >>> len(layer._forward_hooks), hooks.keys()[-1]
    (2, 'plus one')
    >>> hooks.remove(); len(layer._forward_hooks)
    0
    """

    _named: ClassVar[dict[str, "Hooks"]] = {}
    _count: ClassVar[Iterator[int]] = itertools.count()

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._entries: dict[str, Registration] = {}
        self._replaced = False
        if name is not None:
            previous = Hooks._named.get(name)
            if previous is not None:
                previous.remove()
                previous._replaced = True
            Hooks._named[name] = self

    def add(self, kind: HookKind, target: Target, fn: Callable[..., Any], *, key: str | None = None,
            **options: Any) -> Registration:
        """Register ``fn`` as a hook of ``kind`` on ``target`` and return the :class:`Registration`.

        ``kind`` is one of ``forward_pre``, ``forward``, ``backward_pre``, ``backward``,
        ``tensor``, ``post_accumulate_grad``; each calls PyTorch's matching ``register_*`` method.
        ``options`` go to that call (``prepend``, ``with_kwargs``, ``always_call``). A mapping
        target registers ``fn`` on every module in it, as one registration.
        """
        if self._replaced:
            raise RuntimeError(f"this Hooks({self.name!r}) was replaced by a newer Hooks({self.name!r}), which removed "
                               "its hooks: register on the newer one (re-run the cell that creates it).")
        spec = check_kind(kind)
        check_hook_signature(fn, kind, with_kwargs=bool(options.get("with_kwargs", False)))
        unknown = set(options) - spec.options
        if unknown:
            raise TypeError(f"{kind} hooks take no option {sorted(unknown)}; allowed: {sorted(spec.options) or 'none'}.")
        targets = _targets(spec.on, kind, target)
        label = ", ".join(sorted({_label(t) for t in targets}))
        if key is None:
            key = f"{kind}:{label}#{next(Hooks._count)}"
        elif key in self._entries:
            self._entries[key].remove()
        registration = Registration(self, key, kind, label, function_name(fn))
        try:
            for t in targets:
                registration.handles.append(getattr(t, spec.register)(fn, **options))
        except BaseException:
            registration.remove()
            raise
        self._entries[key] = registration
        return registration

    def forward_pre(self, module: Target, fn: ForwardPreHook | Callable[..., Any], *, key: str | None = None,
                    prepend: bool = False, with_kwargs: bool = False) -> Registration:
        """``module.register_forward_pre_hook(fn)``: ``fn(module, args)`` before ``forward``; returns
        ``None`` or new args (with ``with_kwargs=True``: ``fn(module, args, kwargs)``, ``(args, kwargs)``)."""
        return self.add("forward_pre", module, fn, key=key, prepend=prepend, with_kwargs=with_kwargs)

    def forward(self, module: Target, fn: ForwardHook | Callable[..., Any], *, key: str | None = None,
                prepend: bool = False, with_kwargs: bool = False, always_call: bool = False) -> Registration:
        """``module.register_forward_hook(fn)``: ``fn(module, args, output)`` after ``forward``;
        returns ``None`` or the output to use instead."""
        return self.add("forward", module, fn, key=key, prepend=prepend, with_kwargs=with_kwargs,
                        always_call=always_call)

    def backward_pre(self, module: Target, fn: BackwardPreHook, *, key: str | None = None,
                     prepend: bool = False) -> Registration:
        """``module.register_full_backward_pre_hook(fn)``: ``fn(module, grad_output)`` once the gradient
        w.r.t. the output is known; returns ``None`` or a new ``grad_output``."""
        return self.add("backward_pre", module, fn, key=key, prepend=prepend)

    def backward(self, module: Target, fn: BackwardHook, *, key: str | None = None,
                 prepend: bool = False) -> Registration:
        """``module.register_full_backward_hook(fn)``: ``fn(module, grad_input, grad_output)`` once the
        gradients w.r.t. the positional inputs are known; returns ``None`` or a new ``grad_input``."""
        return self.add("backward", module, fn, key=key, prepend=prepend)

    def tensor(self, tensor: torch.Tensor, fn: TensorHook, *, key: str | None = None) -> Registration:
        """``tensor.register_hook(fn)``: ``fn(grad)`` when the gradient is computed; returns ``None`` or
        the gradient to use instead."""
        return self.add("tensor", tensor, fn, key=key)

    def post_accumulate_grad(self, param: torch.Tensor, fn: PostAccumulateGradHook, *,
                             key: str | None = None) -> Registration:
        """``param.register_post_accumulate_grad_hook(fn)``: ``fn(param)`` runs after
        ``param.grad`` has been accumulated (leaf tensors only)."""
        return self.add("post_accumulate_grad", param, fn, key=key)

    def remove(self) -> None:
        """Remove every hook this owner holds."""
        for registration in list(self._entries.values()):
            registration.remove()

    def drop(self, key: str) -> None:
        """Remove the hook registered under ``key``; ``KeyError`` (naming the close keys) if none."""
        if key not in self._entries:
            close = closest(key, list(self._entries), n=3, cutoff=0.3, fallback=False)
            hint = f" Close keys: {close}." if close else ""
            raise KeyError(f"no hook registered under key {key!r}.{hint} Registered keys: "
                           f"{list(self._entries) or 'none'}.")
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

    def __enter__(self) -> "Hooks":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        title = f"Hooks({self.name!r})" if self.name else "Hooks()"
        if not self._entries:
            return f"{title}: no hooks"
        lines = [f"{title}: {len(self)} hook{'s' if len(self) != 1 else ''}"]
        for key, r in self._entries.items():
            count = f" x{len(r.handles)}" if len(r.handles) > 1 else ""
            lines.append(f"  {key!r}: {r.kind} hook {r.fn_name} on {r.label}{count}")
        return "\n".join(lines)


class HookOwner:
    """The lifecycle every hooklab tool that registers hooks shares (``Recorder``, ``GradCAM``, ...):
    its hooks live in ``self.hooks`` (a :class:`Hooks`); ``remove()`` takes them off, and a ``with``
    block removes them on exit, also when it raises."""

    hooks: Hooks

    @property
    def active(self) -> bool:
        """Whether its hooks are still registered."""
        return len(self.hooks) > 0

    def remove(self) -> None:
        """Remove the hooks (what they recorded stays readable)."""
        self.hooks.remove()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _label(target: Any) -> str:
    if isinstance(target, torch.Tensor):
        return f"Tensor{list(target.shape)}"
    return type(target).__name__


def _targets(on: str, kind: str, target: Target) -> list[Any]:
    if isinstance(target, Mapping):
        if not target:
            raise ValueError("the mapping of modules is empty: nothing to register the hook on. "
                             "Check the pattern you passed to hooklab.select().")
        targets: list[Any] = list(target.values())
    else:
        targets = [target]
    for t in targets:
        (_check_module if on == "module" else _check_tensor)(kind, t)
    return targets


def _check_module(kind: str, target: Any) -> None:
    if isinstance(target, str):
        raise TypeError(f"a {kind} hook goes on an nn.Module, not the string {target!r}; look the module "
                        f"up first: hooklab.select(model, {target!r}).")
    if isinstance(target, torch.Tensor):
        raise TypeError(f"a {kind} hook goes on an nn.Module, not a tensor; for a hook on a tensor's "
                        "gradient use hooks.tensor(tensor, fn).")
    if not isinstance(target, nn.Module):
        raise TypeError(f"a {kind} hook goes on an nn.Module, got {type(target).__name__}.")
    _check_not_scripted(target)


def _check_not_scripted(target: nn.Module) -> None:
    """PyTorch refuses hooks on a TorchScript module with a message that does not say what to do."""
    if is_scripted(target):
        raise TypeError("this is a TorchScript module (what torch.jit.script or torch.jit.trace returns): PyTorch "
                        "runs its compiled graph and takes no Python hooks on it. Register the hook on the Python "
                        "module you scripted instead (hooks first; script it afterwards, if at all).")


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
        raise ValueError("post-accumulate-grad hooks go on leaf tensors (parameters, or tensors you created "
                         "with requires_grad=True); this one was computed from others. Use hooks.tensor instead.")
