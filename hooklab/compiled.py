"""Models whose inner modules' hooks may not run: compiled (``torch.compile``) and TorchScript ones.

* ``torch.compile(model)`` returns an ``OptimizedModule`` holding the eager model as ``_orig_mod``.
  Dynamo compiles a submodule's call with the hooks it has then: a hook added after the first call
  to a module that had none is ignored (torch 2.14.1; notebook 08 shows the rules). A tool that runs
  the model itself runs the eager module instead (:func:`unwrap`); one that hooks a model *you* run
  cannot know, so it refuses and says what to do (:func:`check_hookable`).
* ``torch.jit.script`` / ``torch.jit.trace`` return a ``ScriptModule`` that runs a compiled graph:
  hooks on the modules inside it do not run.

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


def _scripted(tool: str) -> str:
    return (f"{tool} cannot look inside a TorchScript module (what torch.jit.script or torch.jit.trace returns): "
            "PyTorch runs its compiled graph, so hooks on the modules inside it do not run (and torch.jit.script's "
            "result takes no new hook on itself either). Use the Python module you scripted or traced instead.")


def check_hookable(model: object, tool: str) -> None:
    """A ``TypeError`` saying what to do instead when ``tool`` is given a model whose inner modules'
    hooks could silently not run: a compiled or TorchScript one."""
    if is_scripted(model):
        raise TypeError(_scripted(tool))
    if is_compiled(model):
        raise TypeError(
            f"{tool} got a compiled model (torch.compile returned an OptimizedModule): a hook added after its first "
            "call to a module inside it that had no hooks is ignored, because Dynamo compiled that call without "
            f"it, so {tool} could silently see nothing. Use the eager module instead: pass model._orig_mod, and run "
            "model._orig_mod(x) while the hooks are on (same weights, same function).")


def unwrap(model: nn.Module, tool: str = "explore") -> tuple[nn.Module, str | None]:
    """``(the module to run, a note)``: a compiled model's eager module and a note saying so, or
    ``model`` itself and ``None``. A TorchScript module raises ``TypeError``."""
    if is_scripted(model):
        raise TypeError(_scripted(tool))
    if not is_compiled(model):
        return model, None
    inner = getattr(model, "_orig_mod")
    return inner, (f"compiled (torch.compile): {tool} runs its eager module, model._orig_mod ({type(inner).__name__}, "
                   "same weights), where every hook runs (inside a compiled model, one added late may not)")
