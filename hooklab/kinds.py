"""The kinds of hook in one table (:data:`KINDS`): what registers each, what PyTorch passes it and
lets it return, where PyTorch keeps it, its timeline colour. :class:`hooklab.Hooks`, the signature
check below, :func:`hooklab.registered_hooks`, :func:`hooklab.trace` and the timeline read it.

>>> KINDS["forward"].register, expected_signature("forward")
('register_forward_hook', 'hook(module, args, output)')
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Literal

from .naming import closest, function_name

__all__ = ["Kind", "KINDS", "PASS_KINDS", "HookKind", "check_kind", "check_hook_signature", "expected_signature"]

#: The kinds :class:`hooklab.Hooks` registers, one per PyTorch ``register_*`` method.
HookKind = Literal["forward_pre", "forward", "backward_pre", "backward", "tensor", "post_accumulate_grad"]


@dataclass(frozen=True)
class Kind:
    """One kind of hook (``global_dict``: the dict of global hooks of this kind in
    ``torch.nn.modules.module``; ``via_hooks``: False for those :class:`hooklab.Hooks` only lists)."""

    name: str
    on: str  # "module" or "tensor": what it is registered on
    register: str  # the PyTorch method that registers it
    options: frozenset[str]  # the keyword options that method takes
    params: tuple[str, ...]  # what PyTorch passes the hook
    returns: str  # what the hook may return
    stored_in: str  # the dict on the module or tensor where PyTorch keeps it
    global_dict: str | None = None
    colour: str | None = None  # on a timeline (hooklab.plots.timeline)
    via_hooks: bool = True

    @property
    def phase(self) -> str:
        """"forward" or "backward": the pass in which it runs."""
        return "backward" if self.name.startswith("backward") or self.on == "tensor" else "forward"

    def signature(self, with_kwargs: bool = False) -> tuple[str, ...]:
        """The parameters PyTorch passes (with ``with_kwargs=True``, forward hooks also get ``kwargs``)."""
        if with_kwargs and self.name in ("forward_pre", "forward"):
            return (*self.params[:2], "kwargs", *self.params[2:])
        return self.params


_PRE = frozenset({"prepend", "with_kwargs"})
KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("forward_pre", "module", "register_forward_pre_hook", _PRE, ("module", "args"),
         "None, or the new input (a tuple, or one value that PyTorch wraps in a tuple)", "_forward_pre_hooks",
         "_global_forward_pre_hooks", "#8fb8de"),
    Kind("forward", "module", "register_forward_hook", _PRE | {"always_call"}, ("module", "args", "output"),
         "None, or a new output", "_forward_hooks", "_global_forward_hooks", "#1f5f99"),
    Kind("backward_pre", "module", "register_full_backward_pre_hook", frozenset({"prepend"}), ("module", "grad_output"),
         "None, or a new grad_output", "_backward_pre_hooks", "_global_backward_pre_hooks", "#f2a37b"),
    Kind("backward", "module", "register_full_backward_hook", frozenset({"prepend"}),
         ("module", "grad_input", "grad_output"), "None, or a new grad_input", "_backward_hooks",
         "_global_backward_hooks", "#b3261e"),
    Kind("tensor", "tensor", "register_hook", frozenset(), ("grad",), "None, or a new gradient", "_backward_hooks"),
    Kind("post_accumulate_grad", "tensor", "register_post_accumulate_grad_hook", frozenset(), ("param",),
         "None (it may change param.grad in place)", "_post_accumulate_grad_hooks"),
    Kind("state_dict_pre", "module", "register_state_dict_pre_hook", frozenset(), ("module", "prefix", "keep_vars"),
         "None", "_state_dict_pre_hooks", via_hooks=False),
    Kind("state_dict", "module", "register_state_dict_post_hook", frozenset(),
         ("module", "state_dict", "prefix", "local_metadata"), "None", "_state_dict_hooks", via_hooks=False),
    Kind("load_state_dict_pre", "module", "register_load_state_dict_pre_hook", frozenset(),
         ("module", "state_dict", "prefix", "local_metadata", "strict", "missing_keys", "unexpected_keys",
          "error_msgs"), "None", "_load_state_dict_pre_hooks", via_hooks=False),
    Kind("load_state_dict_post", "module", "register_load_state_dict_post_hook", frozenset(),
         ("module", "incompatible_keys"), "None", "_load_state_dict_post_hooks", via_hooks=False),
)}
#: The module kinds a forward and backward pass runs, in the order a trace lists them.
PASS_KINDS: tuple[str, ...] = ("forward_pre", "forward", "backward_pre", "backward")
assert set(HookKind.__args__) == {k.name for k in KINDS.values() if k.via_hooks}  # type: ignore[attr-defined]


def check_kind(kind: str) -> Kind:
    """The :class:`Kind` named ``kind`` (one that :class:`hooklab.Hooks` registers), or a
    ``ValueError`` naming the close ones."""
    if kind in KINDS and KINDS[kind].via_hooks:
        return KINDS[kind]
    names = [k.name for k in KINDS.values() if k.via_hooks]
    close = closest(str(kind), names, n=3, cutoff=0.4)
    hint = f" Did you mean {close}?" if close else ""
    raise ValueError(f"unknown hook kind {kind!r}.{hint} Valid kinds: {', '.join(names)}.")


def expected_signature(kind: str, with_kwargs: bool = False) -> str:
    """The signature a hook of this kind must have, e.g. ``hook(module, args, output)``."""
    return f"hook({', '.join(KINDS[kind].signature(with_kwargs))})"


def _describe(fn: Callable) -> str:
    try:
        return f"{function_name(fn)}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        return function_name(fn)


def check_hook_signature(fn: Callable, kind: str, with_kwargs: bool = False) -> None:
    """A ``TypeError`` that says what to write, unless ``fn`` takes what PyTorch passes a hook of this kind (a
    bound method counts without ``self``; ``*args`` takes any number).

    >>> check_hook_signature(lambda module, output: None, "forward")
    Traceback (most recent call last):
    ...
    TypeError: a forward hook is called as hook(module, args, output), ...
    """
    what, expected = kind.replace("_", " "), expected_signature(kind, with_kwargs)
    if not callable(fn):
        raise TypeError(f"a {what} hook must be a function, got {type(fn).__name__}; write `def {expected}: ...` "
                        "and pass the function itself (no parentheses after its name).")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return  # builtins without a signature: let PyTorch decide
    n = len(KINDS[kind].signature(with_kwargs))
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    required_kwonly = [p for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    if len(required) <= n and (varargs or len(positional) >= n) and not required_kwonly:
        return
    if required_kwonly:
        problem = f"it needs keyword-only arguments ({', '.join(p.name for p in required_kwonly)})"
    else:
        count = len(required) if len(required) > n else len(positional)
        problem = f"it takes {count} positional argument{'s' if count != 1 else ''}, PyTorch passes {n}"
    extra = (" If you want keyword arguments too, register with with_kwargs=True."
             if kind in ("forward", "forward_pre") and not with_kwargs and len(required) == n + 1 else "")
    raise TypeError(f"a {what} hook is called as {expected}, but {_describe(fn)} does not fit: {problem}. "
                    f"Change it to `def {expected}: ...` (return {KINDS[kind].returns}).{extra}")
