"""Two small labelled image sets drawn in code, a tiny CNN, and a short training loop.

Everything is offline and seeded: the same call gives the same images, the same weights and the
same accuracy on every run.

* :func:`make_shapes` draws grey ``size x size`` images of a square, circle, triangle or cross at a
  random position and size, with a little noise: the class is the *outline*. It also returns each
  shape's mask (the drawn pixels).
* :func:`make_patterns` draws a disc or a square (picked at random, whatever the class) filled with
  horizontal stripes, vertical stripes, diagonal stripes or a checkerboard: the class is the
  *pattern inside*, the outline says nothing about it. Notebook 07 uses it, with the masks, to
  check where Grad-CAM looks.
* :func:`tiny_cnn` is ``conv -> ReLU -> pool`` three times, a global average pool and one linear layer.
* :func:`train` trains it with Adam and cross-entropy (hooks on the model see every step).
* :func:`trained_model` trains once per process and caches the result (the same weights every time).

>>> import hooklab.course.shapes as shapes
>>> data = shapes.make_shapes(8, seed=1)
>>> data.images.shape, data.labels.tolist()[:4]
(torch.Size([8, 1, 32, 32]), [1, 0, 2, 2])
>>> data.classes
('square', 'circle', 'triangle', 'cross')
>>> shapes.make_patterns(8).classes
('horizontal', 'vertical', 'diagonal', 'checkerboard')
"""

from __future__ import annotations

import copy
import itertools
import math
import os
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn

from .data import fit, seeded
from ..threads import one_thread_off_main, threads as data_threads
from ..lab.plots import LABEL

__all__ = ["SEED", "CLASSES", "PATTERNS", "Shapes", "make_shapes", "make_patterns", "tiny_cnn", "MaxPool2x2",
           "fast_pooling", "init_weights", "INITS", "Adam", "TrainResult", "train", "accuracy", "KINDS",
           "trained_model", "trained_models", "default_data", "plot_examples"]

#: The seed a trained model starts from when none is given (:func:`trained_model`,
#: :func:`hooklab.course.nb06_training_diagnostics.run`): its initial weights and the order of its batches. Set it to
#: train other models; the notebooks' printed claims must hold for every seed (the benchmark's
#: portability section runs them with others).
SEED = 0

#: The four classes of :func:`make_shapes`, in label order.
CLASSES: tuple[str, ...] = ("square", "circle", "triangle", "cross")

#: The four classes of :func:`make_patterns`, in label order.
PATTERNS: tuple[str, ...] = ("horizontal", "vertical", "diagonal", "checkerboard")
assert len(PATTERNS) == len(CLASSES)  # one tiny_cnn (four outputs) and one layout serve both


@dataclass
class Shapes:
    """A labelled image set: ``images [N, 1, H, W]`` (float), ``labels [N]``, ``masks [N, H, W]`` (bool)
    and the class names, in label order."""

    images: torch.Tensor
    labels: torch.Tensor
    masks: torch.Tensor
    classes: tuple[str, ...] = CLASSES

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int | slice | torch.Tensor) -> "Shapes":
        idx = index if not isinstance(index, int) else slice(index, index + 1)
        return Shapes(self.images[idx], self.labels[idx], self.masks[idx], self.classes)

    def __repr__(self) -> str:
        counts = torch.bincount(self.labels, minlength=len(self.classes)).tolist()
        per_class = ", ".join(f"{c}: {n}" for c, n in zip(self.classes, counts))
        return f"Shapes({len(self)} images of {list(self.images.shape[2:])} pixels; {per_class})"


def _shape_mask(kind: int, xx: torch.Tensor, yy: torch.Tensor, cx: float, cy: float, r: float) -> torch.Tensor:
    dx, dy = xx - cx, yy - cy
    if kind == 0:  # square
        return (dx.abs() <= r * 0.8) & (dy.abs() <= r * 0.8)
    if kind == 1:  # circle
        return dx * dx + dy * dy <= r * r
    if kind == 2:  # triangle, point up: |dx| grows from 0 at the top to r at the bottom
        top, bottom = cy - r, cy + r * 0.8
        inside_y = (yy >= top) & (yy <= bottom)
        half = r * (yy - top) / (bottom - top)
        return inside_y & (dx.abs() <= half)
    if kind == 3:  # cross: two bars
        w = max(1.0, r * 0.45)
        return ((dx.abs() <= w) & (dy.abs() <= r)) | ((dy.abs() <= w) & (dx.abs() <= r))
    raise ValueError(f"kind must be 0..{len(CLASSES) - 1}, got {kind}.")


def _layout(n: int, size: int, gen: torch.Generator
            ) -> tuple[torch.Tensor, torch.Tensor, list[tuple[float, float, float]], torch.Tensor]:
    """Balanced shuffled labels, then for every image a radius (``size/8`` to ``size/4``) and a centre
    that keep the shape fully inside the image, and a brightness (0.7 to 1)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}.")
    if size < 12:
        raise ValueError(f"size must be at least 12 pixels to draw a shape, got {size}.")
    labels = torch.arange(n) % len(CLASSES)  # both data sets have four classes
    labels = labels[torch.randperm(n, generator=gen)]
    ys, xs = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32),
                            indexing="ij")
    params = torch.rand(n, 4, generator=gen)
    places = []
    for i in range(n):
        r = size / 8 + params[i, 0].item() * size / 8
        margin = r + 1
        cx = margin + params[i, 1].item() * (size - 1 - 2 * margin)
        cy = margin + params[i, 2].item() * (size - 1 - 2 * margin)
        places.append((cx, cy, r))
    brightness = 0.7 + 0.3 * params[:, 3].view(n, 1, 1)
    return labels, torch.stack([xs, ys]), places, brightness


def make_shapes(n: int, *, size: int = 32, seed: int = 0, noise: float = 0.15) -> Shapes:
    """Draw ``n`` images of ``size x size`` pixels, each one filled shape on a dark, noisy background.

    Classes (:data:`CLASSES`) are balanced and shuffled; position and radius (``size/8`` to
    ``size/4``) are random, the shape always lies fully inside the image. Seeded: the same arguments
    give the same images.

    >>> data = make_shapes(4, size=16, seed=0)
    >>> data.images.shape, data.masks.shape, data.masks.dtype
    (torch.Size([4, 1, 16, 16]), torch.Size([4, 16, 16]), torch.bool)
    """
    gen = torch.Generator().manual_seed(seed)
    labels, (xs, ys), places, brightness = _layout(n, size, gen)
    masks = torch.stack([_shape_mask(int(label), xs, ys, cx, cy, r) for label, (cx, cy, r) in zip(labels, places)])
    images = masks.float() * brightness + noise * torch.randn(n, size, size, generator=gen)
    return Shapes(images.unsqueeze(1), labels, masks, CLASSES)


def make_patterns(n: int, *, size: int = 32, seed: int = 0, noise: float = 0.15, period: int = 4) -> Shapes:
    """Draw ``n`` images of ``size x size`` pixels, each a disc or a square filled with a pattern,
    on a dark, noisy background. The class (:data:`PATTERNS`) is the pattern: horizontal,
    vertical or diagonal stripes, or a checkerboard, ``period`` pixels from one bright stripe to
    the next, at a random phase. Whether the outline is a disc or a square is picked at random
    for every image, so the outline carries nothing about the class: the evidence lies inside.

    Placement, sizes, brightness and noise as in :func:`make_shapes`; dark stripes are at 30% of
    the bright ones, so the whole shape stands out from the background. Seeded.

    >>> data = make_patterns(4, size=16, seed=0)
    >>> data.images.shape, data.masks.shape, data.labels.tolist()
    (torch.Size([4, 1, 16, 16]), torch.Size([4, 16, 16]), [0, 1, 3, 2])
    """
    if period < 2:
        raise ValueError(f"period must be at least 2 pixels, got {period}.")
    gen = torch.Generator().manual_seed(seed)
    labels, (xs, ys), places, brightness = _layout(n, size, gen)
    extra = torch.rand(n, 3, generator=gen)  # outline (disc or square), two phases
    masks = torch.zeros(n, size, size, dtype=torch.bool)
    fill = torch.zeros(n, size, size)
    for i, (cx, cy, r) in enumerate(places):
        outline = 1 if extra[i, 0] < 0.5 else 0  # _shape_mask's circle or square
        masks[i] = _shape_mask(outline, xs, ys, cx, cy, r)
        px, py = xs + extra[i, 1].item() * period, ys + extra[i, 2].item() * period
        stripes = {0: py, 1: px, 2: px + py}
        label = int(labels[i])
        if label in stripes:
            fill[i] = (stripes[label] % period < period / 2).float()
        else:
            fill[i] = ((px % period < period / 2) ^ (py % period < period / 2)).float()
    images = masks.float() * (0.3 + 0.7 * fill) * brightness + noise * torch.randn(n, size, size, generator=gen)
    return Shapes(images.unsqueeze(1), labels, masks, PATTERNS)


def tiny_cnn(*, width: int = 16, seed: int | None = 0, inplace: bool = False) -> nn.Sequential:
    """A tiny CNN for :func:`make_shapes` images: three ``conv -> ReLU -> pool`` blocks, then
    global average pooling and a linear layer to the four classes. Named layers:
    ``conv1 relu1 pool1 conv2 relu2 pool2 conv3 relu3 gap flatten fc``.

    ``inplace=True`` makes the ReLUs overwrite their input (as many real models do).

    >>> model = tiny_cnn()
    >>> model(torch.zeros(2, 1, 32, 32)).shape
    torch.Size([2, 4])
    >>> [name for name, _ in model.named_children()][:3]
    ['conv1', 'relu1', 'pool1']
    """
    w = width
    return seeded(seed, lambda: nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(1, w // 2, 3, padding=1)), ("relu1", nn.ReLU(inplace=inplace)), ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(w // 2, w, 3, padding=1)), ("relu2", nn.ReLU(inplace=inplace)), ("pool2", nn.MaxPool2d(2)),
        ("conv3", nn.Conv2d(w, 2 * w, 3, padding=1)), ("relu3", nn.ReLU(inplace=inplace)),
        ("gap", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()), ("fc", nn.Linear(2 * w, len(CLASSES))),
    ])))


class _MaxPool2x2(torch.autograd.Function):
    """2 x 2 max-pooling, stride 2, of a ``[N, C, H, W]`` batch in the usual layout, computed by the
    channels-last kernel; the backward is the one ``nn.MaxPool2d`` runs, on the same indices."""

    @staticmethod
    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, indices = nn.functional.max_pool2d(x.contiguous(memory_format=torch.channels_last), 2,
                                                return_indices=True)
        # each window's pick as a flat h * W + w index: the same numbers in both layouts; the output
        # copied into the usual layout's strides (a 1 x 1 output counts as contiguous in either)
        usual = torch.empty_like(out, memory_format=torch.contiguous_format).copy_(out)
        return usual, indices.contiguous()

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int], x: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], tuple[int, int]]:
        """torch.func.vmap: the vmapped dimension joins the batch's (``x`` is the only input: mapped)."""
        out, indices = _MaxPool2x2.forward(x.movedim(in_dims[0], 0).flatten(0, 1))
        return (out.unflatten(0, (info.batch_size, -1)), indices.unflatten(0, (info.batch_size, -1))), (0, 0)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor], output: tuple[torch.Tensor, torch.Tensor]) -> None:
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(inputs[0], output[1])
        ctx.save_for_forward(output[1])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, _: Any) -> torch.Tensor:
        x, indices = ctx.saved_tensors
        return torch.ops.aten.max_pool2d_with_indices_backward(grad.contiguous(), x, [2, 2], [2, 2], [0, 0], [1, 1],
                                                               False, indices)

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor) -> tuple[torch.Tensor, None]:  # forward-mode AD: the picked tangents
        indices = ctx.saved_tensors[-1]
        return tangent.flatten(2).gather(2, indices.flatten(2)).view(indices.shape), None


class MaxPool2x2(nn.MaxPool2d):
    """``nn.MaxPool2d(2)``, faster on a CPU for a float32 or float64 batch in the usual layout, with the
    same output, the same gradient and the same picks on ties, bit for bit (a maximum rounds nothing;
    tested in tests/test_course_shapes.py, with autograd, ``torch.func`` and forward-mode AD). PyTorch's
    kernel for the usual ``[N, C, H, W]`` layout compares one value at a time: after a healthy
    initialisation it took a third of the time of 192 training steps of :func:`tiny_cnn` (0.45 of
    1.29 s, one thread, an Intel Xeon); its channels-last kernel compares many channels at once. Any
    other input (another device, dtype or layout, a single image ``[C, H, W]``), or settings changed
    from 2 x 2, stride 2, go to ``nn.MaxPool2d``. Not scriptable with ``torch.jit.script``. Used inside
    :func:`hooklab.course.nb06_training_diagnostics.run`, whose models a learner never sees
    (:func:`fast_pooling`); the models the notebooks show keep ``nn.MaxPool2d``.

    >>> x = torch.randn(2, 3, 8, 8)
    >>> torch.equal(MaxPool2x2()(x), nn.MaxPool2d(2)(x))
    True
    """

    def __init__(self) -> None:
        super().__init__(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.dim() == 4 and x.is_contiguous() and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
                and _plain_2x2(self)):
            return _MaxPool2x2.apply(x)[0]
        return super().forward(x)


def _plain_2x2(pool: nn.MaxPool2d) -> bool:
    """2 x 2 windows, stride 2, no padding, dilation 1, rounding down, no indices returned."""
    def two(v: Any, n: int) -> bool:
        return v in (n, (n, n))
    return (two(pool.kernel_size, 2) and two(pool.stride, 2) and two(pool.padding, 0) and two(pool.dilation, 1)
            and not pool.ceil_mode and not pool.return_indices)


def fast_pooling(model: nn.Module) -> nn.Module:
    """Replace each submodule of ``model`` (not ``model`` itself) that is exactly an ``nn.MaxPool2d``
    (not a subclass) with 2 x 2 windows, stride 2, no padding, dilation 1, rounding down and no indices
    by an equal :class:`MaxPool2x2`, in place; return ``model``.

    >>> [type(m).__name__ for m in fast_pooling(tiny_cnn()).children()][:3]
    ['Conv2d', 'ReLU', 'MaxPool2x2']
    """
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            if type(child) is nn.MaxPool2d and _plain_2x2(child):
                setattr(parent, name, MaxPool2x2())
    return model


#: Weight initialisations :func:`init_weights` knows: the good one and two bad ones.
INITS: dict[str, str] = {
    "kaiming": "weights ~ N(0, 2/fan_in): keeps the activations' scale from layer to layer (good for ReLU)",
    "tiny": "weights ~ N(0, 0.01^2): every layer shrinks the signal, deeper layers see almost nothing",
    "negative bias": "Kaiming weights but every bias -1: most ReLUs start at zero (dead)",
}


def init_weights(model: nn.Module, kind: str = "kaiming", *, seed: int = 0) -> nn.Module:
    """Re-initialise every conv and linear layer of ``model`` in place (seeded) and return it.

    ``kind`` is one of :data:`INITS`.

    >>> model = init_weights(tiny_cnn(), "tiny")
    >>> round(model.conv1.weight.std().item(), 3)
    0.01
    """
    if kind not in INITS:
        raise ValueError(f"unknown initialisation {kind!r}; choose one of {list(INITS)}.")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                std = 0.01 if kind == "tiny" else math.sqrt(2.0 / fan_in)
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * std)
                if m.bias is not None:
                    m.bias.fill_(-1.0 if kind == "negative bias" and not isinstance(m, nn.Linear) else 0.0)
    return model


def accuracy(model: nn.Module, data: Shapes, batch_size: int = 512) -> float:
    """The share of ``data`` that ``model`` classifies correctly (0..1), in eval mode, no grad.

    >>> accuracy(tiny_cnn(), make_shapes(8)) <= 1.0
    True
    """
    was_training = model.training
    model.eval()
    correct = 0
    try:
        with torch.no_grad():
            for start in range(0, len(data), batch_size):
                logits = model(data.images[start:start + batch_size])
                correct += int((logits.argmax(1) == data.labels[start:start + batch_size]).sum())
    finally:
        model.train(was_training)
    return correct / len(data)


@dataclass
class TrainResult:
    """What :func:`train` returns: the model, the loss after every step, and the test accuracy."""

    model: nn.Module
    losses: list[float] = field(default_factory=list)
    test_accuracy: float = float("nan")
    #: The test accuracy measured along the way (``test_every``) and at the end, by the number of
    #: steps done.
    test_accuracies: dict[int, float] = field(default_factory=dict)

    def __repr__(self) -> str:
        last = f"{self.losses[-1]:.3f}" if self.losses else "-"
        return f"TrainResult({len(self.losses)} steps, last loss {last}, test accuracy {self.test_accuracy:.1%})"


def _batches(n: int, batch_size: int, epochs: int, seed: int) -> Iterator[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen)
        for start in range(0, n - batch_size + 1, batch_size):
            yield order[start:start + batch_size]


class Adam:
    """Adam with PyTorch's defaults (betas 0.9 and 0.999, eps 1e-8, no weight decay), written out:
    the arithmetic of ``torch.optim.Adam`` on a CPU (its one-tensor-at-a-time path), operation for
    operation, so a training gives the same weights to the last bit (tested against
    ``torch.optim.Adam``). :func:`train` uses it because creating any ``torch.optim`` optimizer
    imports ``torch._dynamo`` (PyTorch wraps its optimizers' methods to keep them out of
    ``torch.compile``), seconds of a fresh kernel that a model trained for a lesson on something
    else need not pay.

    >>> w = torch.zeros(2, requires_grad=True)
    >>> opt = Adam([w], lr=0.1)
    >>> (w * torch.tensor([1.0, -1.0])).sum().backward()
    >>> opt.step()   # Adam's first step is the learning rate, against the gradient's sign
    >>> [round(v, 6) for v in w.tolist()]
    [-0.1, 0.1]
    """

    def __init__(self, params: Any, lr: float = 0.001, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = [p for p in params]
        self.lr, (self.beta1, self.beta2), self.eps = lr, betas, eps
        self.steps = [0] * len(self.params)  # per weight, as PyTorch counts them (a weight without a gradient waits)
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.beta1, self.beta2
        for i, (p, exp_avg, exp_avg_sq) in enumerate(zip(self.params, self.exp_avg, self.exp_avg_sq)):
            if p.grad is None:
                continue
            self.steps[i] += 1
            step = float(self.steps[i])
            step_size = self.lr / (1 - beta1 ** step)
            bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
            exp_avg.lerp_(p.grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
            p.addcdiv_(exp_avg, denom, value=-step_size)


def train(
    model: nn.Module,
    data: Shapes,
    *,
    test: Shapes | None = None,
    epochs: int = 4,
    lr: float = 0.006,
    batch_size: int = 32,
    max_steps: int | None = None,
    seed: int = 0,
    threads: int | None = 1,
    test_every: int | None = None,
    channels_last: bool = False,
) -> TrainResult:
    """Train ``model`` on ``data`` with Adam and cross-entropy; return a :class:`TrainResult`.

    Args:
        epochs, lr, batch_size: the usual; ``max_steps`` stops early after that many steps.
        seed: fixes the order of the batches.
        threads: CPU threads used while training (fixed, so every run gives the same numbers;
            one thread is also the fastest for a model this small on a busy machine).
        test_every: also measure the test accuracy after every ``test_every`` steps
            (``result.test_accuracies``, by step). Measuring changes nothing in the training: the
            first ``k`` steps of a run are the same as a run of ``k`` steps, test accuracy included.
        channels_last: train in PyTorch's channels-last memory format (the model's weights and the
            batches stored height, width, channel): faster on a CPU, where max-pooling the usual
            layout is slow, but the sums come out in another order, so the trained weights differ
            a little. The model is handed back in the usual layout.

    >>> result = train(tiny_cnn(), make_shapes(64), max_steps=2)
    >>> len(result.losses)
    2
    >>> train(tiny_cnn(), make_shapes(64), test=make_shapes(8), max_steps=3, test_every=2).test_accuracies.keys()
    dict_keys([2, 3])
    """
    if test_every is not None and (test is None or test_every < 1):
        raise ValueError("test_every needs a test set and a number of steps of at least 1.")
    layout = torch.channels_last if channels_last else torch.contiguous_format
    model.to(memory_format=layout)
    opt = Adam(model.parameters(), lr=lr)
    order = itertools.islice(_batches(len(data), batch_size, epochs, seed), max_steps)
    images = data.images.contiguous(memory_format=layout)
    batches = ((images[i], data.labels[i]) for i in order)
    model.train()
    with data_threads(threads):
        result = _fit_and_test(model, opt, batches, test, test_every)
    model.to(memory_format=torch.contiguous_format)
    return result


def _fit_and_test(model: nn.Module, opt: "Adam", batches: Any, test: Shapes | None,
                  test_every: int | None) -> TrainResult:
    """The steps of :func:`train`, with a test after every ``test_every`` of them and at the end."""
    losses: list[float] = []
    result = TrainResult(model)
    while True:  # one stretch of test_every steps (all of them without test_every), then a test
        done = len(losses)
        losses += fit(model, opt, nn.functional.cross_entropy, itertools.islice(batches, test_every))
        if len(losses) == done:
            break
        if test is not None and test_every is not None:
            result.test_accuracies[len(losses)] = accuracy(model, test)
        if test_every is None:
            break
    result.losses = [v if math.isfinite(v) else float("nan") for v in losses]
    if test is not None:
        if len(losses) not in result.test_accuracies:
            result.test_accuracies[len(losses)] = accuracy(model, test)
        result.test_accuracy = result.test_accuracies[len(losses)]
    return result


#: The image sets :func:`default_data` and :func:`trained_model` know.
KINDS: dict[str, Callable[..., Shapes]] = {"shapes": make_shapes, "patterns": make_patterns}

_DATA: dict[tuple[str, int, int], tuple[Shapes, Shapes]] = {}
_TRAINED: dict[tuple, TrainResult] = {}


def default_data(n_train: int = 2048, n_test: int = 512, kind: str = "shapes") -> tuple[Shapes, Shapes]:
    """The training and test sets the notebooks use (made once per process, then reused).

    ``kind`` is ``"shapes"`` (:func:`make_shapes`, notebook 06) or ``"patterns"``
    (:func:`make_patterns`, notebook 07).

    >>> train_set, test_set = default_data(64, 32)
    >>> len(train_set), len(test_set), test_set.classes[0]
    (64, 32, 'square')
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind of data {kind!r}; choose one of {list(KINDS)}.")
    key = (kind, n_train, n_test)
    if key not in _DATA:
        _DATA[key] = (KINDS[kind](n_train, seed=1), KINDS[kind](n_test, seed=2))
    return _DATA[key]


def trained_model(*, inplace: bool = True, epochs: int = 4, kind: str = "shapes", seed: int | None = None) -> TrainResult:
    """A :func:`tiny_cnn` trained on :func:`default_data` of ``kind``: trained on the first call
    (in the channels-last layout, the faster one: see :func:`train`), then a fresh copy of the
    cached weights on every call (so changing the returned model changes no later one). ``seed``
    picks the initial weights and the order of the batches (default: :data:`SEED`).

    >>> result = trained_model()   # doctest: +SKIP
    >>> result.test_accuracy >= 0.95  # doctest: +SKIP
    True
    """
    return trained_models([SEED if seed is None else seed], inplace=inplace, epochs=epochs, kind=kind)[0]


def trained_models(seeds: Sequence[int], *, inplace: bool = True, epochs: int = 4, kind: str = "shapes"
                   ) -> list[TrainResult]:
    """:func:`trained_model` for each of ``seeds``. The models not trained yet train side by side,
    as many at a time as the machine has CPU cores, each on one thread as :func:`train` always
    trains: the same weights as one after the other (a training's sums do not depend on what runs
    beside it), in about the time of one on two free cores.

    >>> [r.test_accuracy >= 0.95 for r in trained_models([1, 2], kind="patterns")]  # doctest: +SKIP
    [True, True]
    """
    keys = [(inplace, epochs, kind, seed) for seed in seeds]
    todo = [key for key in dict.fromkeys(keys) if key not in _TRAINED]
    if todo:
        train_set, test_set = default_data(kind=kind)
        # built here, in this thread: tiny_cnn seeds PyTorch's global generator for a moment
        models = {key: init_weights(tiny_cnn(inplace=inplace), "kaiming", seed=key[3]) for key in todo}

        def fit_one(key: tuple) -> TrainResult:
            one_thread_off_main()  # a worker thread: one PyTorch thread, before any work
            return train(models[key], train_set, test=test_set, epochs=epochs, seed=key[3], channels_last=True)

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        workers = min(len(todo), cores)
        if workers > 1:
            with ThreadPoolExecutor(workers, thread_name_prefix="hooklab-train") as pool:
                results = list(pool.map(fit_one, todo))
        else:
            results = [fit_one(key) for key in todo]
        _TRAINED.update(zip(todo, results))
    copies = []
    for key in keys:
        cached = _TRAINED[key]
        copies.append(TrainResult(copy.deepcopy(cached.model).eval(), list(cached.losses), cached.test_accuracy))
    return copies


def plot_examples(fig: Any, data: Shapes, n: int = 8, predictions: torch.Tensor | None = None, rows: int = 1) -> Any:
    """The first ``n`` images of ``data`` in ``rows`` rows, titled with their class (and a prediction if given).

    >>> from hooklab.plots import figure
    >>> fig = plot_examples(figure((4, 1)), make_shapes(4), n=4)
    >>> len(fig.axes)
    4
    """
    axes = fig.subplots(rows, math.ceil(n / rows), squeeze=False).flatten()
    for i, ax in enumerate(axes):
        ax.imshow(data.images[i, 0].numpy(), cmap="gray", vmin=-0.3, vmax=1.3)
        title = data.classes[int(data.labels[i])]
        if predictions is not None:
            title += f"\n→ {data.classes[int(predictions[i])]}"
        ax.set_title(title, fontsize=LABEL)
        ax.set_axis_off()
    return fig
