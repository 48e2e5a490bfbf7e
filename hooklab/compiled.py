"""Where hooks may not run: in compiled (``torch.compile``, ``module.compile()``) and TorchScript models and parts.

A tool that runs the model itself runs a compiled model's eager module, ``_orig_mod`` (:func:`unwrap`); one that
hooks a model *you* run refuses a compiled or TorchScript one (:func:`check_hookable`); no module inside such a part,
or one compiled in place, is hooked (:func:`check_parts`, which :func:`hooklab.select` calls). Each message says why
(torch 2.14.1's rules; notebook 08 shows them) and what to do instead.

>>> import torch.nn as nn
>>> unwrap(nn.Linear(2, 2))[1] is None
True
"""

from __future__ import annotations

import sys
from typing import Iterable

import torch
from torch import nn

__all__ = ["is_compiled", "is_scripted", "check_hookable", "check_parts", "unwrap"]


def is_compiled(model: object) -> bool:
    """Whether ``model`` is what ``torch.compile`` returns for a module (an ``OptimizedModule``)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")  # not imported: nothing was compiled yet
    return eval_frame is not None and isinstance(model, eval_frame.OptimizedModule)


def is_scripted(model: object) -> bool:
    """Whether ``model`` is a TorchScript module (``torch.jit.script`` or ``torch.jit.trace``)."""
    return isinstance(model, torch.jit.ScriptModule)


_SCRIPTED = ("PyTorch runs its compiled graph, so a hook added after scripting or tracing does not run inside it "
             "(torch.jit.script compiled in the hooks its modules had then and refuses new ones on any of them; the "
             "modules inside a traced one accept a new hook and never run it)")


_IGNORED = ("a hook added after its first call to a module inside it that had no hooks is ignored, because Dynamo "
            "compiled that call without it, so {} could silently see nothing")


def check_hookable(model: object, tool: str) -> None:
    """A ``TypeError`` saying what to do when ``tool`` gets a compiled or TorchScript model (hooks may not run)."""
    if is_scripted(model):
        raise TypeError(f"{tool} cannot look inside a TorchScript module (what torch.jit.script or torch.jit.trace "
                        f"returns): {_SCRIPTED}. Use the Python module instead.")
    if is_compiled(model):
        raise TypeError(f"{tool} got a compiled model (torch.compile returned an OptimizedModule): "
                        f"{_IGNORED.format(tool)}. Use the eager module instead: pass model._orig_mod, and run "
                        "model._orig_mod(x) while the hooks are on (same weights, same function).")


def _in_place(module: nn.Module) -> bool:
    return getattr(module, "_compiled_call_impl", None) is not None  # set by module.compile()


def check_parts(model: nn.Module, names: Iterable[str]) -> None:
    """A ``TypeError`` naming the part when a module of ``model`` named in ``names`` is inside an ``OptimizedModule``
    or a ``ScriptModule``, or a module compiled in place: a hook on it may not run (one on the part itself runs)."""
    parts = {p: m for p, m in model.named_modules() if _in_place(m) or p and (is_scripted(m) or is_compiled(m))}
    for name in names:
        part = next((p for p in parts if not p and name or name.startswith(f"{p}.")), None)
        if part is None:
            continue
        m, (at, where) = parts[part], (f"model.get_submodule({part!r})", repr(part)) if part else ("model", "the model")
        said = f"cannot hook {name!r}, inside {where}"
        if _in_place(m):
            raise TypeError(f"{said}, compiled in place by {at}.compile(): "
                            f"{_IGNORED.format('a hook there')}. It keeps no eager module: build a new "
                            f"{type(m).__name__} without .compile() and load this one's state_dict into it.")
        if is_scripted(m):
            raise TypeError(f"{said}, a TorchScript submodule: {_SCRIPTED}. Put the Python module in its place.")
        raise TypeError(f"{said}, a compiled submodule (torch.compile returned an OptimizedModule): "
                        f"{_IGNORED.format('a hook there')}. Put its eager module, {at}._orig_mod, in its place.")


def unwrap(model: nn.Module, tool: str = "explore") -> tuple[nn.Module, str | None]:
    """``(the module to run, a note)``: a compiled model's eager module and a note saying so, or
    ``model`` itself and ``None``. A TorchScript module raises ``TypeError``."""
    if not is_compiled(model):
        check_hookable(model, tool)  # a TorchScript module
        return model, None
    inner = getattr(model, "_orig_mod")
    return inner, (f"compiled (torch.compile): {tool} runs its eager module, model._orig_mod ({type(inner).__name__}, "
                   "same weights), where every hook runs (inside a compiled model, one added late may not)")
