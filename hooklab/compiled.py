"""Models that Python hooks cannot follow: compiled (``torch.compile``) and TorchScript ones.

* ``torch.compile(model)`` returns an ``OptimizedModule`` that holds the eager model as
  ``_orig_mod`` (its modules are then named ``_orig_mod.…``). Dynamo compiles a submodule's call
  together with the hooks it has at the first call; a hook added to a submodule afterwards does not
  run (until something makes it recompile). A tool that runs the model itself can run the eager
  module instead (:func:`unwrap`); a tool that hooks a model *you* run cannot know, so it refuses
  and says what to do (:func:`check_hookable`).
* ``torch.jit.script`` / ``torch.jit.trace`` return a ``ScriptModule``: PyTorch runs its compiled
  graph and refuses Python forward hooks on it.

>>> import torch.nn as nn
>>> unwrap(nn.Linear(2, 2))[1] is None
True
"""

from __future__ import annotations

import sys

import torch
from torch import nn

__all__ = ["is_compiled", "is_scripted", "check_hookable", "unwrap"]


def is_compiled(model: object) -> bool:
    """Whether ``model`` is what ``torch.compile`` returns for a module (an ``OptimizedModule``)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")  # not imported: nothing was compiled yet
    return eval_frame is not None and isinstance(model, eval_frame.OptimizedModule)


def is_scripted(model: object) -> bool:
    """Whether ``model`` is a TorchScript module (``torch.jit.script`` or ``torch.jit.trace``)."""
    return isinstance(model, torch.jit.ScriptModule)


def _scripted_message(tool: str) -> str:
    return (f"{tool} cannot hook a TorchScript module (what torch.jit.script or torch.jit.trace returns): "
            "PyTorch runs its compiled graph and takes no Python hooks on it. Use the Python module you "
            "scripted instead (hooks first; script it afterwards, if at all).")


def check_hookable(model: object, tool: str) -> None:
    """Raise a ``TypeError`` that says what to do instead when ``tool`` (e.g. ``"Recorder"``) is
    given a model whose submodules' hooks would silently not run: a compiled or TorchScript one."""
    if is_scripted(model):
        raise TypeError(_scripted_message(tool))
    if is_compiled(model):
        raise TypeError(
            f"{tool} got a compiled model (torch.compile returned an OptimizedModule): hooks added to the modules "
            "inside it after its first call do not run, because Dynamo compiled those calls without them, so "
            f"{tool} could silently see nothing. Use the eager module instead: pass model._orig_mod, and run "
            "model._orig_mod(x) while the hooks are on (same weights, same function).")


def unwrap(model: nn.Module, tool: str = "explore") -> tuple[nn.Module, str | None]:
    """``(the module to run, a note)``: a compiled model's eager module (``model._orig_mod``) and a
    note saying so, or ``model`` itself and ``None``. A TorchScript module raises ``TypeError``."""
    if is_scripted(model):
        raise TypeError(_scripted_message(tool))
    if is_compiled(model):
        inner = getattr(model, "_orig_mod")
        return inner, (f"compiled (torch.compile): {tool} runs its eager module, model._orig_mod "
                       f"({type(inner).__name__}, same weights), because hooks inside a compiled model do not run")
    return model, None
