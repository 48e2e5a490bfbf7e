"""Grad-CAM from two hooks: a forward hook on a layer and a tensor hook on that layer's output.

Grad-CAM (Selvaraju et al., 2017) asks which places of a layer's feature maps made the model pick a
class. It needs two things of one layer: its output ``A`` (``[N, C, h, w]``) and the gradient of the
class score with respect to that output. Then each channel gets the weight "mean gradient over the
positions", and the heat map is ``ReLU(sum_c weight_c * A_c)``, scaled up to the image size.

The forward hook stores ``A`` (a *clone*: an in-place operation after the layer would otherwise
change what we stored) and registers a tensor hook on the output tensor; the tensor hook stores
the gradient when the backward pass reaches it. Unlike a full backward hook on the module, this
keeps working when an in-place ``ReLU`` follows the layer.

>>> import torch, hooklab.course.shapes as shapes
>>> model = shapes.tiny_cnn(inplace=True)
>>> with GradCAM(model, "relu3") as cam:
...     heat = cam(torch.randn(2, 1, 32, 32))
>>> heat.shape, cam.activations.shape, cam.gradients.shape
(torch.Size([2, 32, 32]), torch.Size([2, 32, 8, 8]), torch.Size([2, 32, 8, 8]))

Exercises of notebook 07 (Grad-CAM), with checkers and worked solutions.

>>> import hooklab.course.nb07_grad_cam as ex
>>> ex.heat_map.check(ex.heat_map.worked()).passed, ex.cam_hooks.check(ex.cam_hooks.worked()).passed
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..lab.exercises import Exercise, Mistake
from .checks import made_hook
from ..hooks import HookOwner, Hooks
from ..claims import approx
from ..selection import module as find_module
from ..threads import threads
from ..lab.plots import LABEL
from .data import seeded

if TYPE_CHECKING:
    from .shapes import Shapes



def cam_from(activations: torch.Tensor, gradients: torch.Tensor, size: Sequence[int] | None = None,
             scaled: bool = True) -> torch.Tensor:
    """The Grad-CAM heat maps ``[N, H, W]`` from a layer's output and its gradient (both ``[N, C, h, w]``).

    Channel weights are the gradients averaged over the positions; the weighted sum of the channels
    goes through a ReLU (only evidence *for* the class), is scaled up to ``size`` (bilinear) and
    divided by its maximum, so every map lies in ``[0, 1]`` (an all-zero map stays zero); ``scaled=False``
    leaves out the division.

    >>> a = torch.zeros(1, 2, 2, 2); a[0, 0, 0, 0] = 1.0
    >>> g = torch.ones(1, 2, 2, 2)
    >>> cam_from(a, g).tolist()
    [[[1.0, 0.0], [0.0, 0.0]]]
    """
    if activations.shape != gradients.shape or activations.dim() != 4:
        raise ValueError(f"activations and gradients must both be [N, C, h, w] of the same shape, got "
                         f"{list(activations.shape)} and {list(gradients.shape)}.")
    weights = gradients.mean(dim=(2, 3), keepdim=True)
    cam = F.relu((weights * activations).sum(dim=1, keepdim=True))
    if size is not None and tuple(size) != tuple(cam.shape[-2:]):
        cam = F.interpolate(cam, size=tuple(size), mode="bilinear", align_corners=False)
    cam = cam[:, 0]
    if not scaled:
        return cam
    top = cam.flatten(1).amax(dim=1).clamp(min=1e-12).view(-1, 1, 1)
    return cam / top


class GradCAM(HookOwner):
    """Grad-CAM on one layer of ``model``, by a forward hook plus a tensor hook.

    Args:
        model: the model (put in eval mode while computing, its mode restored afterwards).
        layer: the layer's name (``"relu3"``); ``KeyError`` with the closest names if unknown.
        name: the owning :class:`hooklab.Hooks` name: a new ``GradCAM`` with the same name
            (re-running the cell) removes the older one's hook. Without a name, two are independent.
        threads: CPU threads for each pass (``None``: torch's setting). ``threads=1`` is the fastest
            for one small image, above all on a busy machine, where waking a second thread can cost
            more than the whole pass: use it in a live panel. Torch's setting is restored afterwards.

    Call it on a batch of images: ``cam(images, target=None)`` returns ``[N, H, W]`` heat maps for
    ``target`` (a class index or one per image; ``None``: the predicted class). Afterwards
    ``cam.activations``, ``cam.gradients`` and ``cam.logits`` hold what the hooks saw.
    Use it as a context manager, or call :meth:`remove`.
    """

    def __init__(self, model: nn.Module, layer: str, *, name: str | None = None, threads: int | None = None) -> None:
        self.model, self.layer, self.threads = model, layer, threads
        self.module = find_module(model, layer)
        self.activations: torch.Tensor | None = None
        self.gradients: torch.Tensor | None = None
        self.logits: torch.Tensor | None = None
        self.hooks = Hooks(name)
        self.hooks.forward(self.module, self._save_output, key="forward")

    def _save_output(self, module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        self.activations = output.detach().clone()
        if output.requires_grad:
            output.register_hook(self._save_grad)

    def _save_grad(self, grad: torch.Tensor) -> None:
        self.gradients = grad.detach().clone()

    def __call__(self, images: torch.Tensor, target: int | Sequence[int] | torch.Tensor | None = None) -> torch.Tensor:
        return _cam_pass(self.model, [self], images, target, self.threads)[0]

    def __repr__(self) -> str:
        return f"GradCAM(layer={self.layer!r}, {'hooked' if self.active else 'removed'})"



def _cam_pass(model: nn.Module, cams: Sequence[GradCAM], images: torch.Tensor,
              target: int | Sequence[int] | torch.Tensor | None = None,
              n_threads: int | None = None) -> list[torch.Tensor]:
    """One forward and one backward pass of ``model`` (in eval mode) for the heat maps of every
    :class:`GradCAM` in ``cams`` (all hooked on ``model``): each one's hooks see its layer's output
    and gradient in the same pass, exactly as in a pass of its own."""
    was_training = model.training
    model.eval()
    for cam in cams:
        cam.gradients = None
    try:
        with threads(n_threads), torch.enable_grad():
            logits = model(images)
            if target is None:
                target_t = logits.argmax(dim=1)
            else:
                target_t = torch.as_tensor(target).expand(len(images)) if torch.as_tensor(target).dim() == 0 \
                    else torch.as_tensor(target)
            score = logits.gather(1, target_t.view(-1, 1)).sum()
            score.backward()
    finally:
        model.zero_grad(set_to_none=True)  # leave no parameter gradients behind
        model.train(was_training)
    maps = []
    for cam in cams:
        cam.logits = logits.detach()
        if cam.gradients is None or cam.activations is None:
            raise RuntimeError(f"the hooks on {cam.layer!r} saw no gradient: is the layer on the path from the "
                               "input to the output, and does its output require grad?")
        maps.append(cam_from(cam.activations, cam.gradients, images.shape[-2:]))
    return maps


def peak_positions(cams: torch.Tensor) -> torch.Tensor:
    """The ``(row, column)`` of each heat map's maximum: ``[N, 2]``.

    >>> peak_positions(torch.tensor([[[0.0, 0.2], [0.9, 0.1]]])).tolist()
    [[1, 0]]
    """
    flat = cams.flatten(1).argmax(dim=1)
    width = cams.shape[-1]
    return torch.stack([flat // width, flat % width], dim=1)


def peak_distance(cams: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """For each heat map, how far its maximum lies from the nearest pixel of the mask, in pixels
    (``[N]`` float; 0 when the peak is on the mask, ``inf`` for an empty mask).

    >>> cams = torch.tensor([[[0.0, 0.0, 1.0]], [[1.0, 0.0, 0.0]]])
    >>> masks = torch.tensor([[[True, False, False]], [[True, False, False]]])
    >>> peak_distance(cams, masks).tolist()
    [2.0, 0.0]
    """
    if cams.shape != masks.shape:
        raise ValueError(f"heat maps {list(cams.shape)} and masks {list(masks.shape)} must have the same shape.")
    rows = torch.arange(masks.shape[-2], dtype=torch.float32).view(1, -1, 1)
    cols = torch.arange(masks.shape[-1], dtype=torch.float32).view(1, 1, -1)
    rc = peak_positions(cams).float()
    dist = ((rows - rc[:, 0].view(-1, 1, 1)) ** 2 + (cols - rc[:, 1].view(-1, 1, 1)) ** 2).sqrt()
    return dist.masked_fill(~masks.bool(), float("inf")).flatten(1).amin(dim=1)


@dataclass
class PeakCheck:
    """What :func:`peak_check` measured for one layer, over the correctly classified images.

    ``distance[k]`` is how far the k-th correctly classified image's heat-map peak lies from its
    shape (0: on it), ``labels[k]`` that image's class; ``share`` is the part with distance 0.
    """

    layer: str
    positions: tuple[int, int]
    distance: torch.Tensor
    labels: torch.Tensor
    classes: tuple[str, ...]
    n_images: int

    @property
    def share(self) -> float:
        """The share of correctly classified images whose peak lies on the shape (0..1)."""
        return (self.distance == 0).float().mean().item() if len(self.distance) else float("nan")

    def per_class(self) -> dict[str, float]:
        """``share`` for each class (``nan`` for a class with no correctly classified image)."""
        return {name: (self.distance[self.labels == c] == 0).float().mean().item()
                for c, name in enumerate(self.classes)}

    def __str__(self) -> str:
        positions = "×".join(map(str, self.positions))
        return (f"{self.layer:6s} {positions:5s}  peak on the shape: {approx(self.share, '.1%')} of "
                f"{approx(len(self.distance), 'd')} correctly classified   {_misses(self.distance)}")

    def report(self) -> str:
        """``str(self)`` and then one line per class: its share, its misses and the farthest one.
        Every figure is marked ``≈``: a trained model's figures differ from machine to machine
        (:mod:`hooklab.claims`).

        >>> check = PeakCheck("relu2", (16, 16), torch.tensor([0.0, 1.0, 0.0]), torch.tensor([0, 0, 1]), ("a", "b"), 3)
        >>> print(check.report())
        relu2  16×16  peak on the shape: ≈66.7% of ≈3 correctly classified   misses ≈1, the farthest ≈1.0 px off
          a             peak on the shape ≈50.0%    misses ≈1, the farthest ≈1.0 px off
          b             peak on the shape ≈100.0%   misses ≈0, the farthest ≈0.0 px off
        """
        width = max(12, *(len(name) for name in self.classes))
        lines = [str(self)]
        for c, name in enumerate(self.classes):
            d = self.distance[self.labels == c]
            share = (d == 0).float().mean().item() if len(d) else float("nan")
            lines.append(f"  {name:{width}s}  peak on the shape {approx(share, '.1%'):8s}  {_misses(d)}")
        return "\n".join(lines)


def _misses(distance: torch.Tensor) -> str:
    misses = distance[distance > 0]
    farthest = misses.max().item() if len(misses) else 0.0
    return f"misses {approx(len(misses), 'd')}, the farthest {approx(farthest, '.1f')} px off"


def peak_check(model: nn.Module, data: "Shapes", layer: str) -> PeakCheck:
    """Grad-CAM on ``layer`` for every image of ``data`` (for the predicted class); for the correctly
    classified ones, how far the peak of the heat map (scaled up to the image) lies from the shape.

    Strict: the peak's pixel must be a pixel of the mask to count as on the shape.

    >>> import hooklab.course.shapes as shapes
    >>> check = peak_check(shapes.tiny_cnn(), shapes.make_patterns(8), "relu2")
    >>> check.layer, check.positions, check.n_images, len(check.distance) <= 8
    ('relu2', (16, 16), 8, True)
    """
    return peak_checks(model, data, [layer])[layer]


def peak_checks(model: nn.Module, data: "Shapes", layers: Sequence[str]) -> dict[str, PeakCheck]:
    """:func:`peak_check` for several layers at once, from ONE forward and one backward pass: a
    :class:`GradCAM` on each layer, all hooked during the same pass (each sees its own layer's
    output and gradient, as in a pass of its own), so the figures are the same as one
    :func:`peak_check` per layer, for the cost of one.

    >>> import hooklab.course.shapes as shapes
    >>> checks = peak_checks(shapes.tiny_cnn(), shapes.make_patterns(8), ["relu1", "relu3"])
    >>> {layer: check.positions for layer, check in checks.items()}
    {'relu1': (32, 32), 'relu3': (8, 8)}
    """
    if not layers:
        raise ValueError("name at least one layer.")
    cams = [GradCAM(model, layer, name=f"peak_check@{id(model):x}:{layer}") for layer in layers]
    try:
        maps = _cam_pass(model, cams, data.images)
    finally:
        for cam in cams:
            cam.remove()
    correct = cams[0].logits.argmax(1) == data.labels  # type: ignore[union-attr]
    checks = {}
    for layer, cam, heat in zip(layers, cams, maps):
        positions = (int(cam.activations.shape[-2]), int(cam.activations.shape[-1]))  # type: ignore[union-attr]
        checks[layer] = PeakCheck(layer, positions, peak_distance(heat, data.masks)[correct], data.labels[correct],
                                  data.classes, len(data))
    return checks


def plot_overlay(ax: Any, image: torch.Tensor, cam: torch.Tensor, mask: torch.Tensor | None = None,
                 title: str = "", alpha: float = 0.5) -> Any:
    """The image in grey, the heat map on top (``alpha``), the shape's outline (if ``mask``) and a
    cross on the heat map's peak (no cross for an all-zero map: it has no peak).

    >>> from hooklab.plots import figure
    >>> ax = plot_overlay(figure().add_subplot(), torch.zeros(1, 8, 8), torch.rand(8, 8), title="demo")
    >>> ax.get_title()
    'demo'
    """
    img = image.detach().squeeze().float()
    ax.imshow(img.numpy(), cmap="gray")
    ax.imshow(cam.detach().float().numpy(), cmap="viridis", alpha=alpha, vmin=0, vmax=1)
    if mask is not None:
        ax.contour(mask.float().numpy(), levels=[0.5], colors="white", linewidths=0.8)
    if cam.max() > 0:
        r, c = peak_positions(cam.unsqueeze(0))[0].tolist()
        ax.plot([c], [r], marker="+", color="white", markersize=9, mew=2)
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=LABEL)
    return ax


def quick_overlay(fig: Any, image: torch.Tensor, cam: torch.Tensor, mask: torch.Tensor | None = None,
                  title: str = "", alpha: float = 0.5) -> Any:
    """A cheap picture for a live panel: the image and the image with its heat map, side by side,
    the shape's outline in white on the heat map (if ``mask``, drawn along the shape's outermost
    pixels, so a peak just outside the shape shows outside the line) and a white cross on the peak
    (none for an all-zero map, which has no peak).

    Drawn as ONE array of pixels (``fig.figimage``, every image pixel a block of screen pixels,
    no resampling) plus the title: no axes, ticks or layout engine, which is where matplotlib
    spends most of its time on a small figure. The blocks are as large as the figure allows.

    >>> from hooklab.plots import figure
    >>> picture = quick_overlay(figure((2.8, 1.6)), torch.zeros(1, 8, 8), torch.rand(8, 8), title="demo")
    >>> picture.get_array().shape   # two 8x8 images of 34x34-pixel blocks and a 6-pixel gap
    (272, 550, 3)
    """
    import matplotlib

    fig.set_layout_engine(None)  # the constrained layout costs more than the drawing
    grey = ((image.detach().squeeze().float() + 0.3) / 1.6).clamp(0, 1).numpy()
    grey = np.stack([grey] * 3, axis=-1)
    heat = matplotlib.colormaps["viridis"](cam.detach().float().clamp(0, 1).numpy())[..., :3]
    h, w = grey.shape[:2]
    width_px, height_px = (fig.get_size_inches() * fig.dpi).astype(int)
    title_px, gap = (int(fig.dpi * 0.2) if title else 0), 6
    scale = max(1, min((height_px - title_px) // h, (width_px - gap) // (2 * w)))

    def blocks(a: np.ndarray) -> np.ndarray:
        return np.repeat(np.repeat(a, scale, axis=0), scale, axis=1)

    right = blocks((1 - alpha) * grey + alpha * heat)
    if mask is not None:
        m = blocks(mask.detach().cpu().numpy().astype(bool))
        right[m & ~_inside(m)] = 1.0  # the outline: shape pixels next to a background pixel
    if cam.max() > 0:
        _cross(right, peak_positions(cam.detach().unsqueeze(0))[0].tolist(), scale)
    picture = np.concatenate([blocks(grey), np.ones((h * scale, gap, 3)), right], axis=1)
    x0 = max(0, (width_px - picture.shape[1]) // 2)
    y0 = max(0, height_px - title_px - picture.shape[0])
    shown = fig.figimage(picture, xo=x0, yo=y0 // 2, origin="upper")
    if title:
        fig.text(0.5, 1 - 0.04 * 1.6 / fig.get_size_inches()[1], title, ha="center", va="top", fontsize=LABEL)
    return shown


def _inside(m: np.ndarray) -> np.ndarray:
    """The pixels of the mask ``m`` whose four neighbours are in it too."""
    inner = m.copy()
    inner[1:] &= m[:-1]
    inner[:-1] &= m[1:]
    inner[:, 1:] &= m[:, :-1]
    inner[:, :-1] &= m[:, 1:]
    return inner


def _cross(picture: np.ndarray, peak: list[int], scale: int) -> None:
    """A white cross on the block of the ``peak`` position (row, column)."""
    (r, c), arm, thick = peak, max(2, scale), max(1, scale // 4)
    cr, cc = r * scale + scale // 2, c * scale + scale // 2
    picture[max(0, cr - thick):cr + thick + 1, max(0, cc - arm):cc + arm + 1] = 1.0
    picture[max(0, cr - arm):cr + arm + 1, max(0, cc - thick):cc + thick + 1] = 1.0


# -------------------------------------------------------------------- exercises



# ---------------------------------------------------------------- 1: the heat map from A and dA
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
    expected = cam_from(a, g, scaled=False)
    if out.shape != expected.shape:
        raise Mistake("fix the shape first (see above).")
    if (out < 0).any():
        raise Mistake("some values are negative: Grad-CAM keeps only evidence *for* the class; apply "
                      "torch.relu to the weighted sum.")
    if torch.allclose(out, torch.relu((g * a).sum(dim=1)), atol=1e-5):
        raise Mistake("you multiplied each position's gradient by its activation. Grad-CAM first averages "
                      "the gradient over the positions (one weight per channel), then weights the channels "
                      "with it.")
    if not torch.allclose(out, expected, atol=1e-5):
        raise Mistake("the values are off: each channel's weight is its gradient averaged over the positions; "
                      "the map is the ReLU of the weighted sum of the channels.")


heat_map = Exercise(
    "The Grad-CAM heat map from a layer's output and its gradient",
    [("returns one map per image, [N, h, w]", _check_shape),
     ("weights the channels by their mean gradient, then ReLU", _check_values)],
    solution="hooklab.course._solutions.nb07_grad_cam:my_cam",
)


# ---------------------------------------------------------------- 2: the two hooks
def _tiny() -> tuple[nn.Sequential, torch.Tensor]:
    return seeded(5, lambda: (nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(inplace=True)),
                              torch.randn(2, 1, 5, 5)))


def _run_hook(make: Callable) -> tuple[dict, torch.Tensor, torch.Tensor, object]:
    saved: dict = {}
    hook = made_hook(make, saved, kind="forward", call="make_cam_hook(saved)", inner="save")
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
        raise Mistake("saved['activations'] still belongs to the autograd graph: store a copy cut from the graph.")
    if torch.allclose(act, torch.relu(pre_relu)) and not torch.allclose(act, pre_relu):
        raise Mistake("saved['activations'] has no negative values left: the in-place ReLU after the layer "
                      "overwrote it, because .detach() shares memory with the output. Store a copy with its "
                      "own memory.")
    if not torch.allclose(act, pre_relu, atol=1e-6):
        raise Mistake("saved['activations'] is not the layer's output.")


def _check_gradients(make: Callable) -> None:
    saved, pre_relu, _, _ = _run_hook(make)
    grad = saved.get("gradients")
    if grad is None:
        raise Mistake("saved['gradients'] is missing after backward. Inside the forward hook, register a tensor "
                      "hook on the output; it receives the gradient during backward and stores it.")
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
    solution="hooklab.course._solutions.nb07_grad_cam:make_cam_hook",
)
