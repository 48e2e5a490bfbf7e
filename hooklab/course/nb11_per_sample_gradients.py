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

import inspect
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..lab.exercises import Exercise, Mistake
from ..lab.plots import LiveCanvas, figure, fixed_layout, round_limit
from .data import seeded

__all__ = ["Data", "make_data", "make_model", "train", "per_sample_grads", "func_grads", "loop_grads",
           "flat_norms", "quiet_first_layer", "FIRST_LAYER_WARNING", "draw_norms", "LiveNorms",
           "linear_exercise", "embedding_exercise", "conv_exercise"]

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
def _linears_covering_every_trainable_parameter(model: nn.Module
                                                 ) -> tuple[dict[int, str], set[int], list[nn.Linear]]:
    """Each parameter's name (a shared one: its first name in ``named_parameters()``), the ids of the
    trainable ones, and the model's ``nn.Linear`` modules; ``ValueError`` naming every trainable
    parameter that a module other than an ``nn.Linear`` uses (also one tied to an ``nn.Linear``)."""
    names = {id(p): name for name, p in model.named_parameters()}
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    linears: list[nn.Linear] = []
    outside: list[str] = []
    for module in dict.fromkeys(m for _, m in model.named_modules(remove_duplicate=False)):
        if isinstance(module, nn.Linear):
            linears.append(module)
            continue
        outside += [names[id(p)] for p in module.parameters(recurse=False)
                    if id(p) in trainable and names[id(p)] not in outside]
    if outside:
        raise ValueError(f"per_sample_grads covers nn.Linear layers only; these trainable parameters are held by "
                         f"another module: {outside}. Freeze them (requires_grad_(False)) or use func_grads, "
                         "which handles every parameter.")
    return names, trainable, linears


def per_sample_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                     reduction: str = "mean") -> dict[str, torch.Tensor]:
    """Per-example gradients of ``cross_entropy(model(x)[i], y[i])`` for every trainable parameter of
    the model's ``nn.Linear`` layers (frozen ones are left out), from a forward hook (its input, on a
    stack, kept only when ``torch.is_grad_enabled()``) and a full backward hook (``grad_output``). A
    layer called more than once adds up its calls; a weight tied across several ``nn.Linear`` adds
    up every use, under its first name in ``named_parameters()``. A call under ``torch.no_grad()``
    leaves nothing on the stack; one with gradients on whose output misses the loss still pairs the
    stack wrongly. ``reduction``: how the batch loss is reduced (``"mean"``'s ``1/n`` is taken out).

    A trainable parameter held by any module other than an ``nn.Linear`` (an ``nn.LayerNorm``, an
    ``nn.Embedding``, also one tied to a Linear's weight) raises ``ValueError`` naming it: an "all
    parameters" norm over a subset would be silently wrong; freeze it or use :func:`func_grads`. A use
    of a Linear's weight outside that Linear's own call (``x @ lin.weight.T`` in a ``forward``) is not
    seen by its hooks and not detected: there the result is wrong. The backward pass is
    ``torch.autograd.grad``: the model's ``.grad`` stay as they were."""
    names, trainable, linears = _linears_covering_every_trainable_parameter(model)
    if not trainable:
        return {}
    n, handles = len(x), []
    grads: dict[str, torch.Tensor] = {}
    scale = n if reduction == "mean" else 1

    def save(module, args, output):
        if torch.is_grad_enabled():  # no backward call can come otherwise
            module.inputs = getattr(module, "inputs", []) + [args[0].detach()]

    def compute(module, grad_input, grad_output):
        a, g = module.inputs.pop(), grad_output[0] * scale
        for p, value in ((module.weight, lambda: torch.einsum("n...o,n...i->noi", g, a)),
                         (module.bias, lambda: torch.einsum("n...o->no", g))):
            if p is not None and id(p) in trainable:
                key = names[id(p)]
                grads[key] = grads[key] + value() if key in grads else value()

    for m in linears:
        handles += [m.register_forward_hook(save), m.register_full_backward_hook(compute)]
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=FIRST_LAYER_WARNING)
            loss = F.cross_entropy(model(x), y, reduction=reduction)
            torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad])
    finally:
        for handle in handles:
            handle.remove()
        for m in linears:
            vars(m).pop("inputs", None)
    return {name: grads[name] for name, p in model.named_parameters() if name in grads}


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
               title: str = "", top: float | None = None) -> Any:
    """Each example's gradient norm, largest first; planted wrong labels in orange; the clipping norm.
    ``top``: the y axis's upper end (by default matplotlib's choice)."""
    ax = fig.add_subplot()
    order = norms.argsort(descending=True)
    planted = torch.isin(order, flipped)
    ax.bar(range(len(norms)), norms[order].tolist(), width=1.0,
           color=["#e66100" if p else "#5d8aa8" for p in planted.tolist()])
    if top is not None:
        ax.set_ylim(0.0, top)
    if clip is not None:
        ax.axhline(clip, color="black", linewidth=1, linestyle="--")
        ax.text(len(norms) - 1, clip, f" clip at {clip:g}", va="bottom", ha="right", fontsize=7)
    ax.set_xlabel("examples, largest gradient norm first (orange: a planted wrong label)", fontsize=7)
    ax.set_ylabel("gradient norm", fontsize=7)
    ax.tick_params(labelsize=7)
    ax.set_title(title, fontsize=8)
    fixed_layout(fig, left=0.08, bottom=0.2, top=0.88)
    return fig


class LiveNorms:
    """:func:`draw_norms`' picture with a clipping norm, built once, for a panel that redraws it on every
    change: :meth:`png` sets the bars, their colours and the clipping line, and redraws only those
    (:class:`hooklab.plots.LiveCanvas`); the y axis ends at a round number above the bars and the line
    (:func:`hooklab.plots.round_limit`), so the axes are drawn again only when that number changes.

    >>> live = LiveNorms(4, torch.tensor([2]), "t")
    >>> live.png(torch.tensor([0.5, 2.0, 3.0, 1.0]), 1.0)[:4], live.png(torch.ones(4), 2.5)[:4], live.canvas.full_draws
    (b'\\x89PNG', b'\\x89PNG', 1)
    """

    def __init__(self, count: int, flipped: torch.Tensor, title: str,
                 figsize: tuple[float, float] = (7.5, 2.2)) -> None:
        self.fig, self.flipped, self.title = figure(figsize), flipped, title
        draw_norms(self.fig, torch.zeros(count), flipped, 1.0, title, top=1.0)
        from matplotlib.patches import Rectangle

        self.ax = self.fig.axes[0]
        self.bars = [bar for bar in self.ax.patches if isinstance(bar, Rectangle)]
        (self.line,), (self.label,) = self.ax.lines, self.ax.texts
        assert len(self.bars) == count
        self.canvas = LiveCanvas(self.fig, [*self.bars, self.line, self.label, *self.ax.spines.values()])

    @staticmethod
    def top(norms: torch.Tensor, clip: float) -> float:
        """The y axis's upper end for these norms and this clipping norm."""
        return round_limit(max(float(norms.max()), clip) * 1.05)

    def png(self, norms: torch.Tensor, clip: float) -> bytes:
        """The picture of ``norms`` with the clipping line at ``clip``, as PNG bytes."""
        order = norms.argsort(descending=True)
        planted = torch.isin(order, self.flipped).tolist()
        for bar, height, p in zip(self.bars, norms[order].tolist(), planted):
            bar.set_height(height)
            bar.set_facecolor("#e66100" if p else "#5d8aa8")
        self.line.set_ydata([clip, clip])
        self.label.set_y(clip)
        self.label.set_text(f" clip at {clip:g}")
        top = self.top(norms, clip)
        self.ax.set_ylim(0.0, top)
        return self.canvas.png(key=top)


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


def _linear_mistake(fn: Callable, shape: tuple[int, ...], seed: int) -> str | None:
    """What is wrong with ``fn`` on one input shape (None: nothing)."""
    x, g, expected = _linear_case(shape, seed)
    extra = len(shape) - 2  # dimensions between the batch and the features
    try:
        got = fn(x, g)
    except RuntimeError as exc:
        if extra and "einsum" in str(exc):
            return (f"for input {list(shape)} your einsum raised: its subscripts name fewer dimensions than the "
                    f"input has ({len(shape)}). The input has {extra} dimension(s) between the batch and the "
                    "features; `...` in the subscripts stands for any number of them.")
        raise
    if not isinstance(got, tuple) or len(got) != 2:
        return "return two tensors: the weight gradients first, then the bias gradients."
    shapes = {name: want.shape for name, want in expected.items()}
    if all(isinstance(v, torch.Tensor) for v in got) and (got[0].shape, got[1].shape) == (shapes["bias"],
                                                                                          shapes["weight"]):
        return "the bias gradients came first: return (weight, bias)."
    for name, value in zip(("weight", "bias"), got):
        want = expected[name]
        if not isinstance(value, torch.Tensor):
            return f"the {name} gradients should be a tensor, got {type(value).__name__}."
        if value.shape != want.shape:
            if value.shape == want.shape[1:]:
                why = "the batch dimension was summed away: keep one gradient per example"
            elif extra and value.shape[0] == shape[0] and value.dim() > want.dim():
                why = ("the positions between the batch and the features are still there: a parameter used at "
                       "every position gets the sum of their gradients")
            elif name == "weight" and value.shape == want.shape[:1] + want.shape[1:][::-1]:
                why = "in and out are swapped: the weight is [out, in], rows for the outputs"
            else:
                why = f"[batch] + the {name}'s own shape"
            return (f"for input {list(shape)} the {name} gradients have shape {list(value.shape)}, expected "
                    f"{list(want.shape)}: {why}.")
        if not torch.allclose(value, want, atol=1e-5):
            positions = math.prod(shape[1:-1])
            if extra and torch.allclose(value * positions, want, atol=1e-4):
                return (f"for input {list(shape)} the {name} gradients are the mean over the positions: "
                        "a parameter used at every position gets the sum of their gradients.")
            if extra and _linear_mistake(fn, (5, 4), 0) is None:
                return (f"for input {list(shape)} the {name} gradients differ from torch.func's (right for [n, in]): "
                        "sum over every position between the batch and the features.")
            return (f"for input {list(shape)} the {name} gradients differ from torch.func's: "
                    + ("one example's weight gradient is the outer product of its g (rows: out) and its a "
                       "(columns: in)." if name == "weight" else "one example's bias gradient is its g."))
    return None


def _check_linear(fn: Callable, shape: tuple[int, ...], seed: int) -> None:
    mistake = _linear_mistake(fn, shape, seed)
    if mistake:
        raise Mistake(mistake)


linear_exercise = Exercise(
    "Per-sample gradients of nn.Linear, for inputs of any shape",
    [("a batch of vectors [n, in]", lambda fn: _check_linear(fn, (5, 4), 0)),
     ("a batch of sequences [n, positions, in]", lambda fn: _check_linear(fn, (5, 6, 4), 1)),
     ("two dimensions between batch and features [n, h, w, in]", lambda fn: _check_linear(fn, (3, 2, 5, 4), 2))],
    solution="hooklab.course._solutions.nb11_per_sample_gradients:per_sample_linear",
)


# ---------------------------------------------------------------------- exercise 2: nn.Embedding
def _embedding_case(seed: int, repeats: bool, padding_idx: int | None = None
                    ) -> tuple[nn.Embedding, torch.Tensor, torch.Tensor, torch.Tensor]:
    """An nn.Embedding(9, 3), indices [4, 5] (each example's tokens all different unless ``repeats``), a
    grad_output [4, 5, 3], and torch.func's per-example weight gradients [4, 9, 3]."""
    emb = seeded(seed, lambda: nn.Embedding(9, 3, padding_idx=padding_idx))
    gen = torch.Generator().manual_seed(seed)
    if repeats:
        idx = torch.randint(0, 4, (4, 5), generator=gen)
        idx[:, 1] = idx[:, 0]  # every example has at least one repeated token
    else:
        idx = torch.stack([torch.randperm(9, generator=gen)[:5] for _ in range(4)])
    if padding_idx is not None:
        idx[:, -2:] = padding_idx  # the sequences end with padding
    g = torch.randn(4, 5, 3, generator=gen)

    def one(w, i, gi):
        return (torch.func.functional_call(emb, {"weight": w}, (i[None],)) * gi[None]).sum()

    expected = torch.func.vmap(torch.func.grad(one), in_dims=(None, 0, 0))(emb.weight.detach(), idx, g)
    return emb, idx, g, expected


def _check_embedding(fn: Callable, seed: int, repeats: bool, padding_idx: int | None = None) -> None:
    emb, idx, g, expected = _embedding_case(seed, repeats, padding_idx)
    got = fn(emb, idx.clone(), g.clone())
    if not isinstance(got, torch.Tensor):
        raise Mistake(f"return the weight gradients as one tensor, got {type(got).__name__}.")
    if got.shape != expected.shape:
        why = ("that is one gradient per position (grad_output's shape): the weight's gradient has a row per "
               "vocabulary entry" if got.shape == g.shape else
               "the batch dimension was summed away: keep one gradient per example"
               if got.shape == expected.shape[1:] else "[batch] + emb.weight.shape")
        raise Mistake(f"the result has shape {list(got.shape)}, expected {list(expected.shape)}: {why}.")
    if torch.allclose(got, expected, atol=1e-5):
        return
    rows = torch.arange(emb.num_embeddings)
    counts = (idx[:, :, None] == rows).sum(1)  # [n, vocab]: how often each example uses each row
    single = (counts <= 1)[..., None].expand_as(got)
    if padding_idx is not None:
        others = (rows != padding_idx)[None, :, None].expand_as(got)
        if torch.allclose(got[others], expected[others], atol=1e-5):
            raise Mistake("the padding_idx row has a gradient: nn.Embedding's backward gives that row none "
                          "(zero), whatever grad_output holds at the padding positions.")
    if repeats and torch.allclose(got[single], expected[single], atol=1e-5):
        raise Mistake("the rows of tokens that appear more than once in an example are wrong (the others are "
                      "right): such a row is the sum of the gradients at every position the token appears at; "
                      "writing through an index keeps only one of them.")
    raise Mistake("the gradients differ from torch.func's: row v of example i is the sum of grad_output over "
                  "the positions of example i whose index is v, and zero for a token it does not use.")


embedding_exercise = Exercise(
    "Per-sample gradients of nn.Embedding",
    [("every token once per example", lambda fn: _check_embedding(fn, 0, repeats=False)),
     ("a token repeated in one example: its gradients add up", lambda fn: _check_embedding(fn, 1, repeats=True)),
     ("padding_idx: the padding row gets no gradient", lambda fn: _check_embedding(fn, 2, True, padding_idx=0))],
    solution="hooklab.course._solutions.nb11_per_sample_gradients:per_sample_embedding",
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


class _UnfoldSpy:
    """Records the arguments and output shape of every ``F.unfold`` call made inside the ``with`` block
    (``nn.Unfold`` calls it too), so that a checker can say which of the conv's settings it missed."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], torch.Size]] = []

    def __enter__(self) -> "_UnfoldSpy":
        self.original = F.unfold
        signature = inspect.signature(self.original)

        def spy(*args: Any, **kwargs: Any) -> torch.Tensor:
            out = self.original(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            self.calls.append((dict(bound.arguments), out.shape))
            return out

        F.unfold = spy
        return self

    def __exit__(self, *exc: Any) -> None:
        F.unfold = self.original


def _pair(value: Any) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


def _unfold_mismatch(conv: nn.Conv2d, g: torch.Tensor, spy: _UnfoldSpy) -> str | None:
    """The conv settings the learner's F.unfold call did not match, said in a sentence (None: it matched)."""
    if not spy.calls:
        return None
    arguments, shape = spy.calls[-1]
    wrong = [name for name in ("kernel_size", "stride", "padding", "dilation")
             if _pair(arguments[name]) != _pair(getattr(conv, name))]
    positions = g[0, 0].numel()
    if not wrong and shape[-1] == positions:
        return None
    size = " × ".join(map(str, g.shape[2:]))
    said = f"F.unfold gave {shape[-1]} positions, the conv's output has {positions} ({size})"
    if wrong:
        named = " and ".join(wrong) + (" differ" if len(wrong) > 1 else " differs")
        return f"{said}: your unfold's {named} from the conv's; unfold must slide the way the conv does."
    return f"{said}: unfold must slide the way the conv does (its stride, padding and dilation)."


def _check_conv(fn: Callable, seed: int, **how: Any) -> None:
    conv, x, g, expected = _conv_case(seed, **how)
    with _UnfoldSpy() as spy:
        try:
            got = fn(conv, x, g)
        except RuntimeError as exc:
            mismatch = _unfold_mismatch(conv, g, spy)
            if mismatch:
                raise Mistake(f"with {how}, {mismatch}") from None
            if "einsum" in str(exc) and "subscripts" in str(exc):
                raise Mistake(f"with {how} your einsum raised: grad_output is {list(g.shape)}, four dimensions, "
                              "while the patches have one positions dimension; give grad_output the same "
                              "layout [n, out, positions].") from None
            raise
    if isinstance(got, tuple):
        raise Mistake("return only the weight gradients, one tensor (not a tuple as in exercise 1).")
    if not isinstance(got, torch.Tensor):
        raise Mistake(f"return the weight gradients as one tensor, got {type(got).__name__}.")
    if got.shape != expected.shape:
        raise Mistake(f"the result has shape {list(got.shape)}, expected {list(expected.shape)}: "
                      "(n, out, in, kh, kw), reshape at the end.")
    if torch.allclose(got, expected, atol=1e-5):
        return
    mismatch = _unfold_mismatch(conv, g, spy)
    if mismatch:
        raise Mistake(f"with {how}, {mismatch}")
    positions = g[0, 0].numel()
    if torch.allclose(got * positions, expected, atol=1e-4):
        raise Mistake(f"with {how} the gradients are the mean over the positions: the kernel is used at every "
                      "position, and its gradient is the sum of theirs.")
    if torch.allclose(got.flatten(2).sort(-1).values, expected.flatten(2).sort(-1).values, atol=1e-5):
        raise Mistake(f"with {how} the right numbers are in the wrong places: unfold's rows are ordered "
                      "(in, kh, kw), the order of conv.weight.flatten(1); the reshape must keep that order.")
    raise Mistake(f"with {how} the gradients differ from torch.func's: one example's gradient is the sum over the "
                  "positions of grad_output (per output channel) times the patch the kernel saw there.")


conv_exercise = Exercise(
    "Per-sample gradients of nn.Conv2d through unfold",
    [("a 3×3 kernel", lambda fn: _check_conv(fn, 0, kernel_size=3)),
     ("padding 1 and stride 2", lambda fn: _check_conv(fn, 1, kernel_size=3, padding=1, stride=2)),
     ("a 2×3 kernel with dilation 2", lambda fn: _check_conv(fn, 2, kernel_size=(2, 3), dilation=2))],
    solution="hooklab.course._solutions.nb11_per_sample_gradients:per_sample_conv2d", level="stretch",
)
