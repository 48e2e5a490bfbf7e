"""The explorer's interventions: forward hooks that return an edited output.

Each one applies to every floating-point tensor of the output (:func:`hooklab.nested.map_tensors`),
keeps the output's structure, and edits nothing in place. The noise is seeded (the i-th tensor of
the output gets seed i, from 1), so an edited pass gives the same result every time.

>>> import torch
>>> hook = edit_hook("scale", {"factor": 2.0}, lambda: False, {})
>>> hook(None, (), (torch.ones(2), 3))[0].tolist()
[2.0, 2.0]
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from ..nested import describe, map_tensors, tensors_in, unreachable

__all__ = ["INTERVENTIONS", "edit_hook", "label", "unreachable_reason"]

#: The interventions, in the order their checkboxes appear, with the slider each one reads.
INTERVENTIONS: dict[str, str | None] = {"zero": None, "noise": "noise_std", "scale": "factor", "clamp": "limit"}


def _std(t: torch.Tensor) -> torch.Tensor:
    return t.float().std() if t.numel() > 1 else torch.zeros((), device=t.device)


def _edit(kind: str, setting: float) -> Callable[[Any], Any]:
    """``output -> edited output`` for one intervention at one setting."""
    if kind == "zero":
        return lambda output: map_tensors(output, torch.zeros_like)
    if kind == "scale":
        return lambda output: map_tensors(output, lambda t: t * setting)
    if kind == "clamp":
        def clamp(t: torch.Tensor) -> torch.Tensor:
            bound = setting * _std(t).item()
            return t.clamp(-bound, bound)
        return lambda output: map_tensors(output, clamp)

    def noisy(output: Any) -> Any:
        seed = [0]  # the same noise on every run: the i-th tensor of the output gets seed i (from 1)

        def add(t: torch.Tensor) -> torch.Tensor:
            seed[0] += 1
            noise = torch.randn(t.shape, generator=torch.Generator().manual_seed(seed[0])).to(t.device, t.dtype)
            return t + setting * _std(t).to(t.dtype) * noise
        return map_tensors(output, add)
    return noisy


def edit_hook(kind: str, values: dict[str, Any], recording: Callable[[], bool],
              missed: dict[str, str]) -> Callable[..., Any]:
    """The forward hook of one intervention, with the setting in ``values`` (its slider) now. It
    edits nothing while ``recording()`` (a pass without edits runs); when the output holds no
    floating-point tensor it edits nothing and says why in ``missed[kind]``."""
    slider = INTERVENTIONS[kind]
    edit = _edit(kind, float(values[slider]) if slider else 0.0)

    def hook(module: nn.Module, args: Any, output: Any) -> Any:
        if recording():
            return None
        if not any(t.is_floating_point() for _, t in tensors_in(output)):
            missed[kind] = unreachable_reason(output)
            return None
        missed.pop(kind, None)
        return edit(output)

    hook.__name__ = hook.__qualname__ = f"{kind}_output"
    return hook


def label(kind: str, value: float | None) -> str:
    """How the view names an intervention at its setting: ``noise 0.5×std``, ``scale ×2``."""
    if value is None:
        return kind
    return {"noise": f"noise {value:g}×std", "scale": f"scale ×{value:g}", "clamp": f"clamp ±{value:g}×std"}[kind]


def unreachable_reason(output: Any) -> str:
    """Why an intervention found nothing to edit in ``output``."""
    hidden = unreachable(output)
    if not hidden:
        return f"its output, {describe(output)}, holds no floating-point tensor"
    objects = ", ".join(f"{kind} at {path}" for path, kind in hidden[:3])
    return (f"its output, {describe(output)}, holds no floating-point tensor explore can reach ({objects}: an object "
            "explore cannot look inside; it edits tensors in tuples, lists, dicts, namedtuples and dataclasses)")
