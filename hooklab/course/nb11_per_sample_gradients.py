"""Helpers and exercises of notebook 11 (per-sample gradients from hooks).

The notebook writes its hooks in plain sight; this module holds what is not about hooks (the small
data set with planted wrong labels, the model and its training, a plot) and, once the notebook has
built them by hand, the same computations packaged: per-sample gradients from a forward hook and a
full backward hook on every ``nn.Linear`` (:func:`per_sample_grads`), from ``torch.func``
(:func:`func_grads`) and from one backward pass per example (:func:`loop_grads`), and the three
exercises (their checkers and worked solutions).

>>> import hooklab.course.nb11_per_sample_gradients as nb11
>>> data = nb11.make_data()
>>> data.x.shape, data.y.shape, data.flipped.tolist()
(torch.Size([96, 8]), torch.Size([96]), [9, 18, 29, 46, 53, 71, 81, 87])
>>> model = nb11.make_model()
>>> grads = nb11.per_sample_grads(model, data.x, data.y)
>>> {name: list(g.shape) for name, g in grads.items()}
{'0.weight': [96, 32, 8], '0.bias': [96, 32], '2.weight': [96, 4, 32], '2.bias': [96, 4]}
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..lab.exercises import Exercise, Mistake
from ..lab.plots import fixed_layout
from .data import seeded

__all__ = ["Data", "make_data", "make_model", "train", "per_sample_grads", "func_grads", "loop_grads",
           "flat_norms", "quiet_first_layer", "FIRST_LAYER_WARNING", "draw_norms",
           "linear_exercise", "clip_exercise", "conv_exercise"]

FEATURES, CLASSES, HIDDEN = 8, 4, 32
NOISE = 0.3
#: The warning a full backward hook gives on a module whose inputs do not require grad (the first
#: layer: the data has no gradient). The hook still fires, with ``grad_input`` ``(None,)``.
FIRST_LAYER_WARNING = "Full backward hook is firing when gradients are computed with respect to module outputs"


def quiet_first_layer() -> None:
    """Ignore :data:`FIRST_LAYER_WARNING` from here on (the notebook says why, and shows the hook firing)."""
    warnings.filterwarnings("ignore", message=FIRST_LAYER_WARNING)


@dataclass
class Data:
    """``x`` ``[n, 8]``, labels ``y`` (``flipped`` examples carry a wrong one), and the ``true`` labels."""

    x: torch.Tensor
    y: torch.Tensor
    true: torch.Tensor
    flipped: torch.Tensor


def make_data(n: int = 96, n_flipped: int = 8, seed: int = 0) -> Data:
    """Four well-separated Gaussian classes in 8 dimensions; ``n_flipped`` examples, one in every
    ``n // n_flipped``, get the next class's label instead of their own."""
    g = torch.Generator().manual_seed(seed)
    centres = 3.0 * torch.randn(CLASSES, FEATURES, generator=g)
    true = torch.arange(n) % CLASSES
    true = true[torch.randperm(n, generator=g)]
    x = centres[true] + NOISE * torch.randn(n, FEATURES, generator=g)
    step = n // n_flipped
    flipped = torch.arange(n_flipped) * step + torch.randint(0, step, (n_flipped,), generator=g)
    y = true.clone()
    y[flipped] = (true[flipped] + 1) % CLASSES
    return Data(x, y, true, flipped)


def make_model(seed: int = 0) -> nn.Sequential:
    """``Linear(8, 32) -> ReLU -> Linear(32, 4)``, seeded."""
    return seeded(seed, lambda: nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)))


def train(model: nn.Module, data: Data, steps: int = 20, lr: float = 0.05) -> nn.Module:
    """Full-batch Adam on the labels as given (wrong ones included); returns the model, in place."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(data.x), data.y).backward()
        opt.step()
    model.zero_grad(set_to_none=True)
    return model


# ---------------------------------------------------------------------- the three ways
def _linears(model: nn.Module) -> dict[str, nn.Linear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}


def per_sample_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                     reduction: str = "mean") -> dict[str, torch.Tensor]:
    """Per-example gradients of ``cross_entropy(model(x)[i], y[i])`` for every ``nn.Linear``'s
    parameters, from a forward hook (its input, on a stack) and a full backward hook (``grad_output``);
    a layer called more than once adds up its calls. ``reduction``: how the batch loss is reduced
    before ``backward()`` (``"mean"`` carries ``1/n``, which is taken out again)."""
    n, handles = len(x), []
    grads: dict[str, torch.Tensor] = {}
    scale = n if reduction == "mean" else 1

    def save(module, args, output):
        module.inputs = getattr(module, "inputs", []) + [args[0].detach()]

    def compute(name):
        def hook(module, grad_input, grad_output):
            a, g = module.inputs.pop(), grad_output[0] * scale
            for key, value in ((f"{name}.weight", torch.einsum("n...o,n...i->noi", g, a)),
                               (f"{name}.bias", torch.einsum("n...o->no", g))):
                grads[key] = grads[key] + value if key in grads else value
        return hook

    for name, m in _linears(model).items():
        handles += [m.register_forward_hook(save), m.register_full_backward_hook(compute(name))]
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=FIRST_LAYER_WARNING)
            loss = F.cross_entropy(model(x), y, reduction=reduction)
            torch.autograd.backward(loss, inputs=[p for p in model.parameters() if p.requires_grad])
    finally:
        for handle in handles:
            handle.remove()
        for m in _linears(model).values():
            vars(m).pop("inputs", None)
    model.zero_grad(set_to_none=True)
    return {key: grads[key] for key, _ in model.named_parameters() if key in grads}


def func_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """The same with ``torch.func``: ``vmap(grad(loss of one example))`` over the batch."""
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss_one(p, xi, yi):
        return F.cross_entropy(torch.func.functional_call(model, p, (xi[None],)), yi[None])

    return torch.func.vmap(torch.func.grad(loss_one), in_dims=(None, 0, 0))(params, x, y)


def loop_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """The same with one forward and backward pass per example."""
    names = [k for k, _ in model.named_parameters()]
    rows = []
    for xi, yi in zip(x, y):
        loss = F.cross_entropy(model(xi[None]), yi[None])
        rows.append(torch.autograd.grad(loss, list(model.parameters())))
    return {k: torch.stack([r[i] for r in rows]) for i, k in enumerate(names)}


def flat_norms(grads: dict[str, torch.Tensor]) -> torch.Tensor:
    """Each example's gradient norm over all parameters together: ``[n]``."""
    return torch.cat([g.flatten(1) for g in grads.values()], dim=1).norm(dim=1)


def draw_norms(fig: Any, norms: torch.Tensor, flipped: torch.Tensor, clip: float | None = None,
               title: str = "") -> Any:
    """Each example's gradient norm, largest first; planted wrong labels in orange; the clipping norm."""
    ax = fig.add_subplot()
    order = norms.argsort(descending=True)
    planted = torch.isin(order, flipped)
    ax.bar(range(len(norms)), norms[order].tolist(), width=1.0,
           color=["#e66100" if p else "#5d8aa8" for p in planted.tolist()])
    if clip is not None:
        ax.axhline(clip, color="black", linewidth=1, linestyle="--")
        ax.text(len(norms) - 1, clip, f" clip at {clip:g}", va="bottom", ha="right", fontsize=7)
    ax.set_xlabel("examples, largest gradient norm first (orange: a planted wrong label)", fontsize=7)
    ax.set_ylabel("gradient norm", fontsize=7)
    ax.tick_params(labelsize=7)
    ax.set_title(title, fontsize=8)
    fixed_layout(fig, left=0.08, bottom=0.2, top=0.88)
    return fig


# ---------------------------------------------------------------------- exercise 1: nn.Linear, any shape
def _linear_case(shape: tuple[int, ...], seed: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    layer = seeded(seed, lambda: nn.Linear(shape[-1], 3))
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    out = layer(x)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1))

    def one(p, xi, gi):
        return (torch.func.functional_call(layer, p, (xi[None],)) * gi[None]).sum()

    params = {k: v.detach() for k, v in layer.named_parameters()}
    expected = torch.func.vmap(torch.func.grad(one), in_dims=(None, 0, 0))(params, x, g)
    return x, g, expected


def _check_linear(fn: Callable, shape: tuple[int, ...], seed: int) -> None:
    x, g, expected = _linear_case(shape, seed)
    got = fn(x, g)
    if not isinstance(got, tuple) or len(got) != 2:
        raise Mistake("return two tensors: the weight gradients first, then the bias gradients.")
    for name, value in zip(("weight", "bias"), got):
        want = expected[name]
        if not isinstance(value, torch.Tensor):
            raise Mistake(f"the {name} gradients should be a tensor, got {type(value).__name__}.")
        if value.shape != want.shape:
            raise Mistake(f"for input {list(shape)} the {name} gradients have shape {list(value.shape)}, expected "
                          f"{list(want.shape)}: [batch] + the {name}'s own shape.")
        if not torch.allclose(value, want, atol=1e-5):
            raise Mistake(f"for input {list(shape)} the {name} gradients differ from torch.func's"
                          + (": sum over the positions between the batch and the features." if len(shape) > 2 else "."))


linear_exercise = Exercise(
    "Per-sample gradients of nn.Linear, for inputs of any shape",
    [("a batch of vectors [n, in]", lambda fn: _check_linear(fn, (5, 4), 0)),
     ("a batch of sequences [n, positions, in]", lambda fn: _check_linear(fn, (5, 6, 4), 1)),
     ("two dimensions between batch and features [n, h, w, in]", lambda fn: _check_linear(fn, (3, 2, 5, 4), 2))],
    solution="hooklab.course._solutions.nb11_per_sample_gradients:per_sample_linear",
)


# ---------------------------------------------------------------------- exercise 2: clip, then add up
def _clip_case(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    grads = {"w": torch.randn(6, 3, 2, generator=g), "b": torch.randn(6, 3, generator=g)}
    grads["w"][0] *= 0.01  # example 0 is small: it must not be scaled up
    grads["b"][0] *= 0.01
    grads["b"][1] *= 10.0  # example 1 is large in b only: a per-parameter norm would clip w wrongly
    return grads


def _clipped_sums(grads: dict[str, torch.Tensor], max_norm: float) -> dict[str, torch.Tensor]:
    """The reference, one example at a time (the worked solution does it for the whole batch at once)."""
    out = {name: torch.zeros_like(g[0]) for name, g in grads.items()}
    for i in range(len(next(iter(grads.values())))):
        size = sum(float(g[i].pow(2).sum()) for g in grads.values()) ** 0.5
        scale = min(1.0, max_norm / (size + 1e-6))
        for name, g in grads.items():
            out[name] += scale * g[i]
    return out


def _check_clip_values(fn: Callable) -> None:
    grads = _clip_case()
    got = fn({k: v.clone() for k, v in grads.items()}, 1.0)
    want = _clipped_sums(grads, 1.0)
    if not isinstance(got, dict) or set(got) != set(want):
        raise Mistake(f"return a dict with the same keys as grads ({sorted(want)}), one summed gradient each.")
    for name in want:
        if not isinstance(got[name], torch.Tensor) or got[name].shape != want[name].shape:
            raise Mistake(f"got[{name!r}] should have the parameter's shape {list(want[name].shape)} (summed over "
                          "the examples).")
    per_param = {k: torch.einsum("n,n...->...", (1.0 / (g.flatten(1).norm(dim=1) + 1e-6)).clamp(max=1.0), g)
                 for k, g in grads.items()}
    if all(torch.allclose(got[k], per_param[k], atol=1e-4) for k in want):
        raise Mistake("each parameter was clipped on its own: one example's norm is over all its parameters "
                      "together (concatenate them, then take the norm).")
    for name in want:
        expect_same(got[name], want[name], name)


def expect_same(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    if not torch.allclose(got, want, atol=1e-4):
        raise Mistake(f"the sum for {name!r} is not the sum of the clipped gradients: scale example i by "
                      "min(1, max_norm / norm_i), a small gradient is never scaled up.")


def _check_clip_large(fn: Callable) -> None:
    grads = _clip_case(1)
    got = fn({k: v.clone() for k, v in grads.items()}, 1e6)
    for name, g in grads.items():
        if not torch.allclose(got[name], g.sum(0), atol=1e-4):
            raise Mistake(f"with a huge max_norm nothing is clipped: the result for {name!r} should be "
                          "grads[name].sum(0).")


def _check_clip_kept(fn: Callable) -> None:
    grads = _clip_case(2)
    before = {k: v.clone() for k, v in grads.items()}
    fn(grads, 0.5)
    if not all(torch.equal(grads[k], before[k]) for k in grads):
        raise Mistake("your function changed the per-sample gradients it was given (an in-place `*=`?): "
                      "compute the scaled gradients as new tensors.")


clip_exercise = Exercise(
    "Clip each example's gradient, then add them up",
    [("clips each example over all parameters together, never scales up", _check_clip_values),
     ("a huge max_norm clips nothing", _check_clip_large),
     ("leaves the per-sample gradients as they were", _check_clip_kept)],
    solution="hooklab.course._solutions.nb11_per_sample_gradients:clip_and_sum",
)


# ---------------------------------------------------------------------- exercise 3: nn.Conv2d by unfold
def _conv_case(seed: int, **how: Any) -> tuple[nn.Conv2d, torch.Tensor, torch.Tensor, torch.Tensor]:
    conv = seeded(seed, lambda: nn.Conv2d(2, 3, **how))
    x = torch.randn(4, 2, 7, 6, generator=torch.Generator().manual_seed(seed))
    g = torch.randn(conv(x).shape, generator=torch.Generator().manual_seed(seed + 1))

    def one(w, xi, gi):
        return (torch.func.functional_call(conv, {"weight": w, "bias": conv.bias.detach()}, (xi[None],))
                * gi[None]).sum()

    expected = torch.func.vmap(torch.func.grad(one), in_dims=(None, 0, 0))(conv.weight.detach(), x, g)
    return conv, x, g, expected


def _check_conv(fn: Callable, seed: int, **how: Any) -> None:
    conv, x, g, expected = _conv_case(seed, **how)
    got = fn(conv, x, g)
    if not isinstance(got, torch.Tensor):
        raise Mistake(f"return the weight gradients as one tensor, got {type(got).__name__}.")
    if got.shape != expected.shape:
        raise Mistake(f"the result has shape {list(got.shape)}, expected {list(expected.shape)}: "
                      "[batch] + conv.weight.shape (reshape at the end).")
    if not torch.allclose(got, expected, atol=1e-5):
        raise Mistake(f"with {how} the gradients differ from torch.func's: pass the conv's kernel_size, dilation, "
                      "padding and stride to F.unfold.")


conv_exercise = Exercise(
    "Per-sample gradients of nn.Conv2d through unfold",
    [("a 3×3 kernel", lambda fn: _check_conv(fn, 0, kernel_size=3)),
     ("padding 1 and stride 2", lambda fn: _check_conv(fn, 1, kernel_size=3, padding=1, stride=2)),
     ("a 2×3 kernel with dilation 2", lambda fn: _check_conv(fn, 2, kernel_size=(2, 3), dilation=2))],
    solution="hooklab.course._solutions.nb11_per_sample_gradients:per_sample_conv2d", level="stretch",
)
