"""Check a hook function's signature when it is registered, not deep inside a forward pass."""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable, Literal, Optional, Protocol, Tuple

import torch
from torch import nn

#: The kinds of hook :class:`hooklab.Hooks` registers, one per PyTorch ``register_*`` method.
HookKind = Literal["forward_pre", "forward", "backward_pre", "backward", "tensor", "post_accumulate_grad"]
Grads = Tuple[Optional[torch.Tensor], ...]


class ForwardPreHook(Protocol):
    """``hook(module, args)`` -> ``None`` or new args: ``nn.Module.register_forward_pre_hook``."""
    def __call__(self, module: nn.Module, args: Tuple[Any, ...], /) -> Any: ...


class ForwardHook(Protocol):
    """``hook(module, args, output)`` -> ``None`` or a new output: ``nn.Module.register_forward_hook``."""
    def __call__(self, module: nn.Module, args: Tuple[Any, ...], output: Any, /) -> Any: ...


class BackwardPreHook(Protocol):
    """``hook(module, grad_output)`` -> ``None`` or a new grad_output: ``register_full_backward_pre_hook``."""
    def __call__(self, module: nn.Module, grad_output: Grads, /) -> Any: ...


class BackwardHook(Protocol):
    """``hook(module, grad_input, grad_output)`` -> ``None`` or a new grad_input: ``register_full_backward_hook``."""
    def __call__(self, module: nn.Module, grad_input: Grads, grad_output: Grads, /) -> Any: ...


class TensorHook(Protocol):
    """``hook(grad)`` -> ``None`` or a new gradient: ``Tensor.register_hook``."""
    def __call__(self, grad: torch.Tensor, /) -> Optional[torch.Tensor]: ...


class PostAccumulateGradHook(Protocol):
    """``hook(param)`` -> ``None`` (it may change ``param.grad`` in place): ``register_post_accumulate_grad_hook``."""
    def __call__(self, param: torch.Tensor, /) -> None: ...


#: The positional parameters PyTorch passes to each kind of hook.
SIGNATURES: dict[str, tuple[str, ...]] = {
    "forward_pre": ("module", "args"),
    "forward_pre+kwargs": ("module", "args", "kwargs"),
    "forward": ("module", "args", "output"),
    "forward+kwargs": ("module", "args", "kwargs", "output"),
    "backward_pre": ("module", "grad_output"),
    "backward": ("module", "grad_input", "grad_output"),
    "tensor": ("grad",),
    "post_accumulate_grad": ("param",),
}

#: What each kind of hook may return.
RETURNS: dict[str, str] = {
    "forward_pre": "None, or the new input (a tuple, or one value that PyTorch wraps in a tuple)",
    "forward": "None, or a new output",
    "backward_pre": "None, or a new grad_output",
    "backward": "None, or a new grad_input",
    "tensor": "None, or a new gradient",
    "post_accumulate_grad": "None (it may change param.grad in place)",
}

#: The public kinds (what ``Hooks.add`` accepts).
KINDS: tuple[str, ...] = tuple(RETURNS)
assert set(KINDS) == set(HookKind.__args__)  # type: ignore[attr-defined]


def check_kind(kind: str) -> str:
    """Return ``kind`` if it is a hook kind; otherwise raise ``ValueError`` naming the close ones."""
    if kind in KINDS:
        return kind
    close = difflib.get_close_matches(str(kind), KINDS, n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"unknown hook kind {kind!r}.{hint} Valid kinds: {', '.join(KINDS)}.")


def expected_signature(kind: str, with_kwargs: bool = False) -> str:
    """The signature a hook of this kind must have, e.g. ``hook(module, args, output)``."""
    key = f"{kind}+kwargs" if with_kwargs else kind
    return f"hook({', '.join(SIGNATURES[key])})"


def function_name(fn: object) -> str:
    """A readable name: ``double``, ``Counter.hook``, ``<lambda>`` (no ``<locals>`` noise)."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return str(name).rsplit("<locals>.", 1)[-1]


def _describe(fn: Callable) -> str:
    name = function_name(fn)
    try:
        return f"{name}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        return str(name)


def check_hook_signature(fn: Callable, kind: str, with_kwargs: bool = False) -> None:
    """Raise ``TypeError`` unless ``fn`` can be called with the arguments PyTorch passes.

    A bound method counts without ``self``; ``*args`` accepts any number.

    >>> check_hook_signature(lambda grad: grad * 2, "tensor")
    >>> check_hook_signature(lambda module, output: None, "forward")
    Traceback (most recent call last):
    ...
    TypeError: a forward hook is called as hook(module, args, output), ...
    """
    if not callable(fn):
        raise TypeError(f"a {kind.replace('_', ' ')} hook must be a function, got {type(fn).__name__}; write "
                        f"`def {expected_signature(kind, with_kwargs)}: ...` and pass the function itself "
                        "(no parentheses after its name).")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins without a signature: let PyTorch decide
    params = list(sig.parameters.values())
    n = len(SIGNATURES[f"{kind}+kwargs" if with_kwargs else kind])
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    required_kwonly = [p for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    has_varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    if len(required) <= n and (has_varargs or len(positional) >= n) and not required_kwonly:
        return
    expected = expected_signature(kind, with_kwargs)
    got = _describe(fn)
    if required_kwonly:
        problem = f"it needs keyword-only arguments ({', '.join(p.name for p in required_kwonly)})"
    else:
        count = len(required) if len(required) > n else len(positional)
        problem = f"it takes {count} positional argument{'s' if count != 1 else ''}, PyTorch passes {n}"
    extra = (" If you want keyword arguments too, register with with_kwargs=True."
             if kind in ("forward", "forward_pre") and not with_kwargs and len(required) == n + 1 else "")
    raise TypeError(f"a {kind.replace('_', ' ')} hook is called as {expected}, but {got} does not fit: "
                    f"{problem}. Change it to `def {expected}: ...` (return {RETURNS[kind]}).{extra}")
