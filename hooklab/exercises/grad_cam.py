"""Exercises of notebook 07 (Grad-CAM), with checkers and worked solutions.

>>> from hooklab.exercises import grad_cam as ex
>>> ex.heat_map.check(ex.my_cam).passed, ex.cam_hooks.check(ex.make_cam_hook).passed
(True, True)
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .._signature import check_hook_signature
from ..checker import Mistake, Exercise

__all__ = ["heat_map", "cam_hooks"]


# ---------------------------------------------------------------- 1: the heat map from A and dA
def my_cam(activations, gradients):
    weights = gradients.mean(dim=(2, 3), keepdim=True)   # one weight per channel: [N, C, 1, 1]
    return torch.relu((weights * activations).sum(dim=1))  # [N, h, w]


def _case() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    a = torch.relu(torch.randn(2, 3, 4, 4, generator=g))
    grad = torch.randn(2, 3, 4, 4, generator=g)
    return a, grad


def _call_cam(fn: Callable) -> torch.Tensor:
    a, g = _case()
    out = fn(a.clone(), g.clone())
    if out is None:
        raise Mistake("your function returns None: `return` the heat maps.")
    if not isinstance(out, torch.Tensor):
        raise Mistake(f"your function returns {type(out).__name__}; return a tensor of shape [N, h, w].")
    return out


def _check_shape(fn: Callable) -> None:
    out = _call_cam(fn)
    if list(out.shape) == [2, 3, 4, 4]:
        raise Mistake("the result still has the channel dimension [N, C, h, w]: sum the weighted channels "
                      "over dim=1 to get one map per image, [N, h, w].")
    if list(out.shape) != [2, 4, 4]:
        raise Mistake(f"the result has shape {list(out.shape)}; expected one map per image, [N, h, w] = [2, 4, 4]. "
                      "Average the gradients over dims (2, 3) only, and sum over the channels (dim=1).")


def _check_values(fn: Callable) -> None:
    out = _call_cam(fn)
    a, g = _case()
    expected = my_cam(a, g)
    if out.shape != expected.shape:
        raise Mistake("fix the shape first (see above).")
    if (out < 0).any():
        raise Mistake("some values are negative: Grad-CAM keeps only evidence *for* the class; apply "
                      "torch.relu to the weighted sum.")
    if torch.allclose(out, torch.relu((g * a).sum(dim=1)), atol=1e-5):
        raise Mistake("you multiplied each position's gradient by its activation. Grad-CAM first averages "
                      "the gradient over the positions (one weight per channel: gradients.mean(dim=(2, 3), "
                      "keepdim=True)), then weights the channels with it.")
    if not torch.allclose(out, expected, atol=1e-5):
        raise Mistake("the values are off: weights = gradients.mean(dim=(2, 3), keepdim=True); "
                      "heat = relu((weights * activations).sum(dim=1)).")


heat_map = Exercise(
    "The Grad-CAM heat map from a layer's output and its gradient",
    [("returns one map per image, [N, h, w]", _check_shape),
     ("weights the channels by their mean gradient, then ReLU", _check_values)],
    solution=my_cam,
)


# ---------------------------------------------------------------- 2: the two hooks
def make_cam_hook(saved):
    def save(module, args, output):
        saved["activations"] = output.detach().clone()   # clone: an in-place op may follow

        def save_grad(grad):
            saved["gradients"] = grad.detach()
        output.register_hook(save_grad)                   # fires during backward
    return save


def _tiny() -> tuple[nn.Sequential, torch.Tensor]:
    torch.manual_seed(5)
    model = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(inplace=True))
    x = torch.randn(2, 1, 5, 5)
    return model, x


def _run_hook(make: Callable) -> tuple[dict, torch.Tensor, torch.Tensor, object]:
    saved: dict = {}
    hook = make(saved)
    if not callable(hook):
        raise Mistake(f"make_cam_hook(saved) returned {type(hook).__name__}; return the forward hook function "
                      "itself (`return save`, no parentheses).")
    try:
        check_hook_signature(hook, "forward")
    except TypeError as exc:
        raise Mistake(str(exc)) from None
    model, x = _tiny()
    with torch.no_grad():
        pre_relu = model[0](x)
    returned: list = []

    def wrapper(module, args, output):
        returned.append(hook(module, args, output))

    handle = model[0].register_forward_hook(wrapper)
    try:
        out = model(x)
        (out * 2).sum().backward()
    finally:
        handle.remove()
    return saved, pre_relu, out, returned[0] if returned else None


def _check_activations(make: Callable) -> None:
    saved, pre_relu, _, returned = _run_hook(make)
    if returned is not None:
        raise Mistake("your forward hook returns a value, which replaces the layer's output. Only store; "
                      "return nothing.")
    act = saved.get("activations")
    if act is None:
        raise Mistake("saved['activations'] is missing: store the layer's output there in the forward hook.")
    if act.grad_fn is not None or act.requires_grad:
        raise Mistake("saved['activations'] still belongs to the autograd graph: store output.detach().clone().")
    if torch.allclose(act, torch.relu(pre_relu)) and not torch.allclose(act, pre_relu):
        raise Mistake("saved['activations'] has no negative values left: the in-place ReLU after the layer "
                      "overwrote it, because .detach() shares memory with the output. Store "
                      "output.detach().clone().")
    if not torch.allclose(act, pre_relu, atol=1e-6):
        raise Mistake("saved['activations'] is not the layer's output.")


def _check_gradients(make: Callable) -> None:
    saved, pre_relu, _, _ = _run_hook(make)
    grad = saved.get("gradients")
    if grad is None:
        raise Mistake("saved['gradients'] is missing after backward. Inside the forward hook, register a tensor "
                      "hook on the output: output.register_hook(save_grad), where save_grad(grad) stores grad.")
    if not isinstance(grad, torch.Tensor) or grad.shape != pre_relu.shape:
        raise Mistake(f"saved['gradients'] should be a tensor shaped like the output {list(pre_relu.shape)}.")
    if grad.requires_grad:
        raise Mistake("saved['gradients'] requires grad: store grad.detach().")
    expected = 2 * (pre_relu > 0).float()
    if not torch.allclose(grad, expected):
        raise Mistake("saved['gradients'] is not the gradient of the loss with respect to the layer's output.")


cam_hooks = Exercise(
    "Grad-CAM's two hooks: a forward hook that registers a tensor hook",
    [("stores the output, detached and cloned, and returns nothing", _check_activations),
     ("stores the gradient with respect to the output", _check_gradients)],
    solution=make_cam_hook,
)
