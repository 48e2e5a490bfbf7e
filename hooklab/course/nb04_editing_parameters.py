"""Helpers for notebook 04 (editing parameters in hooks): a toy task, a training loop, the
optimizer check, and the live lab's picture.

>>> import torch, hooklab
>>> from hooklab.course.nb04_editing_parameters import toy_regression, train, stale_parameters
>>> model, X, y = toy_regression()
>>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
>>> losses = train(model, X, y, opt, steps=3)
>>> losses[0] > losses[-1], stale_parameters(model, opt)
(True, [])

Exercises of notebook 04 (editing parameters in hooks): a max-norm constraint recomputed from
``weight_orig``, a weight
logger that keeps real snapshots, and a checkpoint hook that folds a pruned weight.

>>> from hooklab.course.nb04_editing_parameters import max_norm_exercise
>>> print(max_norm_exercise.check(max_norm_exercise.worked()))  # the worked solution
Max-norm constraint, recomputed in a forward pre-hook: all 7 checks passed
  ✓ has the right signature
  ✓ runs inside a forward pass without an error
  ✓ returns None (the layer's input stays as it is)
  ✓ leaves weight_orig alone, so the layer may run twice before one backward pass
  ✓ gradients reach weight_orig, and a step on it changes the weight the layer uses
  ✓ limits every row of the used weight to norm 1.0
  ✓ rescales only the rows that are too long, keeping their direction
"""

from __future__ import annotations

import inspect
import itertools
import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, cast

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import prune

from ..claims import PerRun, approx
from ..inspection import version
from ..lab.exercises import Exercise, Mistake
from .checks import made_hook
from ..lab.plots import LABEL, SMALL, TITLE, LiveCanvas, figure, fixed_layout, round_limit
from .data import fit

#: The weights ``toy_regression``'s targets are made with (what training should find).
TRUE_WEIGHT = (1.0, -2.0, 0.5)


def toy_regression(seed: int = 0, n: int = 32) -> tuple[nn.Linear, torch.Tensor, torch.Tensor]:
    """A fresh ``nn.Linear(3, 1)`` and data ``(X, y)`` with ``y = X @ [1, -2, 0.5] + 0.3``.

    The same weights and data for the same ``seed``, without touching the global random state
    (so a notebook cell that calls it gives the same numbers when run again).

    >>> model, X, y = toy_regression()
    >>> model, list(X.shape), list(y.shape)
    (Linear(in_features=3, out_features=1, bias=True), [32, 3], [32, 1])
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Linear(3, 1)
        X = torch.randn(n, 3)
    y = X @ torch.tensor(TRUE_WEIGHT).unsqueeze(1) + 0.3
    return model, X, y


def train(model: nn.Module, X: torch.Tensor, y: torch.Tensor, optimizer: torch.optim.Optimizer,
          steps: int = 5) -> list[float]:
    """Run ``steps`` full-batch steps of mean-squared-error training; return each step's loss
    (measured before that step's update) as a plain float, unrounded: two runs that compute the same
    thing give ``==`` losses, while the digits themselves may differ from CPU to CPU (print them with
    :func:`hooklab.claims.approx`).

    The loop, written out::

        for _ in range(steps):
            optimizer.zero_grad()
            loss = F.mse_loss(model(X), y)
            loss.backward()
            optimizer.step()

    >>> model, X, y = toy_regression()
    >>> losses = train(model, X, y, torch.optim.SGD(model.parameters(), lr=0.0), steps=2)  # lr 0: nothing moves
    >>> losses[0] == losses[1], 6.0 < losses[0] < 6.2
    (True, True)
    """
    return [float(loss) for loss in fit(model, optimizer, F.mse_loss, itertools.repeat((X, y), steps))]


def figures(values: Iterable[float], spec: str = ".4f") -> str:
    """Per-run figures (losses, trained weights) for printing, each marked ``≈`` by
    :func:`hooklab.approx`: their last digits may differ on another CPU, so the tests mask them.

    >>> figures([6.1188726, 4.1794004]), figures([0.58431, -1.0], ".2f")
    ('[≈6.1189, ≈4.1794]', '[≈0.58, ≈-1.00]')
    """
    return "[" + ", ".join(approx(v, spec) for v in values) + "]"


def went_down(values: Sequence[float]) -> bool:
    """Whether every value is smaller than the one before it (a loss that went down at every step).

    >>> went_down([3.0, 2.0, 1.5]), went_down([3.0, 3.0, 1.5])
    (True, False)
    """
    return all(later < earlier for earlier, later in zip(values, values[1:]))


def output_change(output: torch.Tensor, reference: torch.Tensor) -> float:
    """The largest absolute difference between ``output`` and ``reference``: exactly ``0.0`` when they
    are equal, otherwise a :class:`hooklab.claims.PerRun` figure (``≈``, 4 decimals), since its digits
    come from the layer's float arithmetic and may differ on another CPU.

    >>> output_change(torch.ones(3), torch.ones(3)), output_change(torch.tensor([1.0, 2.5]), torch.ones(2))
    (0.0, ≈1.5000)
    """
    change = (output - reference).abs().max().item()
    return PerRun(change, ".4f") if change else 0.0


def stale_parameters(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The names of ``model``'s parameters that ``optimizer`` does not hold (compared by identity).

    An optimizer keeps references to the tensor objects it was given. A parameter that was
    *replaced* afterwards (``module.weight = nn.Parameter(...)``) is a different object: the
    optimizer never updates it. An empty list means every parameter is trained.

    >>> layer = nn.Linear(2, 1)
    >>> opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    >>> layer.weight = nn.Parameter(layer.weight.detach() * 2)
    >>> stale_parameters(layer, opt)
    ['weight']
    """
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    return [name for name, p in model.named_parameters() if id(p) not in held]


class LiveWeights:
    """The live lab's picture: the weight matrix as an image (zeros white, positive red, negative
    blue) beside the layer's output as bars, with the original output as grey marks.

    ``limit`` fixes the colour scale (default: the largest absolute weight of ``weight``), so that
    pictures drawn at different slider positions can be compared. Built once; :meth:`png` puts in
    a new weight and output and redraws only what changes (:class:`hooklab.plots.LiveCanvas`). The
    output axis runs from -L to L, L a round number above every bar and mark.

    >>> w = torch.tensor([[0.0, 1.0], [-1.0, 0.0], [0.5, 0.0]])
    >>> live = LiveWeights(w, reference=torch.zeros(3), limit=1.0)
    >>> live.png(w, torch.ones(3))[:4], live.title.get_text(), live.ax_o.get_title()
    (b'\\x89PNG', 'weight (3 of 6 are 0)', 'output: now (blue), original (grey)')
    """

    def __init__(self, weight: torch.Tensor, reference: torch.Tensor, *, limit: float | None = None,
                 figsize: tuple[float, float] = (7.0, 2.6)) -> None:
        w = weight.detach().float().cpu()
        self.reference = reference.detach().float().cpu().flatten()
        vmax = float(limit) if limit is not None else max(float(w.abs().max()), 1e-8)
        self.fig = fixed_layout(figure(figsize), bottom=0.16, top=0.88, wspace=0.25)
        self.ax_w, self.ax_o = self.fig.subplots(1, 2, width_ratios=[1.0, 1.4])
        self.image = self.ax_w.imshow(w.numpy(), cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        # a text at a fixed place, not set_title(): a title is placed by measuring the axes at each full draw
        self.title = self.ax_w.text(0.5, 1.04, " ", transform=self.ax_w.transAxes, ha="center", fontsize=TITLE)
        self.ax_w.set_xlabel("input", fontsize=LABEL)
        self.ax_w.set_ylabel("output unit", fontsize=LABEL)
        self.ax_w.tick_params(labelsize=SMALL)
        index = range(len(self.reference))
        self.bars = self.ax_o.vlines(index, 0, [0.0] * len(index), color="#4c72b0", linewidth=7)
        marks, = self.ax_o.plot(index, self.reference.tolist(), linestyle="none", marker="_", markersize=14,
                                color="#555")
        zero = self.ax_o.axhline(0, color="#444", linewidth=0.6)
        self.ax_o.set_title("output: now (blue), original (grey)", fontsize=TITLE)
        self.ax_o.set_xlabel("output unit", fontsize=LABEL)
        self.ax_o.tick_params(labelsize=SMALL)
        # few, fixed ticks: building tick labels is most of the drawing time
        rows, cols = w.shape if w.dim() == 2 else (len(w), 1)
        self.ax_w.set_xticks(sorted({0, cols - 1}))
        self.ax_w.set_yticks(sorted({0, rows - 1}))
        self.ax_o.set_xticks(sorted({0, len(index) - 1}))
        # what a full draw puts over the moving parts must move with them: the marks and zero line
        # over the bars, the spines over the image and the lines
        moving = [self.image, self.title, self.bars, marks, zero,
                  *self.ax_w.spines.values(), *self.ax_o.spines.values()]
        self.canvas = LiveCanvas(self.fig, moving)

    def png(self, weight: torch.Tensor, output: torch.Tensor) -> bytes:
        """The picture for this weight matrix and this output, as PNG bytes."""
        w = weight.detach().float().cpu()
        out = output.detach().float().cpu().flatten()
        self.image.set_data(w.numpy())
        self.title.set_text(f"weight ({int((w == 0).sum())} of {w.numel()} are 0)")
        self.bars.set_segments([[(i, 0.0), (i, v)] for i, v in enumerate(out.tolist())])
        bound = round_limit(max(float(self.reference.abs().max()), float(out.abs().max()), 1e-8) * 1.1)
        self.ax_o.set_ylim(-bound, bound)
        self.ax_o.set_yticks([-bound / 2, 0.0, bound / 2])
        return self.canvas.png(key=bound)


# -------------------------------------------------------------------- exercises


MAX_NORM = 1.0
_NOT_WRITTEN = "not written yet: replace `raise NotImplementedError` with your code and run the cell again."
_SKIPPED = "skipped until the hook runs without an error (see the first failed line)."
_WAITING = "not written yet."


# ---------------------------------------------------------------- exercise 1: max-norm, recomputed
    # no return: returning something would replace the layer's input


# Rows with norms 3, 0.5, 2 and 1 (the last is exactly at the limit: it must stay untouched).
_ROWS = ((2.0, -2.0, 1.0, 0.0, 0.0),
         (0.3, 0.0, -0.4, 0.0, 0.0),
         (0.0, 1.2, 0.0, -1.6, 0.0),
         (0.6, 0.0, 0.0, 0.0, 0.8))


def _max_norm_layer() -> nn.Linear:
    """A ``Linear(5, 4)`` laid out as in section 3b: the trained Parameter is ``weight_orig``, and the
    layer has no ``weight`` until a forward pre-hook sets it."""
    layer = nn.Linear(5, 4)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(_ROWS))
        layer.bias.zero_()
    weight = layer.weight
    del layer.weight
    layer.register_parameter("weight_orig", cast(nn.Parameter, weight))
    return layer


@dataclass
class _Run:
    layer: nn.Linear
    orig: torch.Tensor
    version: int = 0  # weight_orig's version counter before the hook ran (each in-place change bumps it)
    returned: Any = None
    output: torch.Tensor | None = None
    error: BaseException | None = None


def _run_max_norm(fn: Callable, *, twice: bool = False) -> _Run:
    """Register ``fn`` as a forward pre-hook on a fresh layer and run one forward pass, or (``twice``)
    use the layer twice on an input that requires grad, like a shared layer, then one backward pass."""
    layer = _max_norm_layer()
    orig = cast(nn.Parameter, layer.weight_orig)
    run = _Run(layer=layer, orig=orig, version=version(orig))
    calls: list[Any] = []

    def wrapper(module, args):
        calls.append(fn(module, args))
        return calls[-1]

    handle = layer.register_forward_pre_hook(wrapper)
    try:
        if twice:
            x = torch.ones(2, 5, requires_grad=True)
            run.output = layer(x) + layer(x)
            run.output.sum().backward()
        else:
            run.output = layer(torch.ones(2, 5))
    except BaseException as exc:  # noqa: BLE001 - reported to the learner
        run.error = exc
    finally:
        handle.remove()
    run.returned = calls[0] if calls else None
    return run


_RECOMPUTE = ("set `module.weight` to a new tensor: `module.weight_orig` with each row's norm limited to 1.0 "
              "(torch has a function that renormalises rows)")


def _explain_error(exc: BaseException) -> Mistake:
    text = str(exc)
    if isinstance(exc, AttributeError) and "weight" in text:
        return Mistake("the layer has no `weight` until your hook sets it: the trained Parameter is "
                       f"`module.weight_orig` (section 3b). Compute the used weight from it: {_RECOMPUTE}. "
                       "Do not change a weight in place here: that breaks a layer used twice (section 3c).")
    if isinstance(exc, RuntimeError) and "leaf Variable that requires grad" in text:
        return Mistake("PyTorch refused an in-place change to the parameter (\"a leaf Variable that requires grad "
                       "is being used in an in-place operation\"). Do not change `weight_orig` at all: build a new "
                       f"tensor from it, {_RECOMPUTE}.")
    if isinstance(exc, TypeError) and "cannot assign" in text:
        return Mistake("PyTorch refused the assignment to `module.weight`. Set it to a plain tensor computed from "
                       f"`module.weight_orig`: {_RECOMPUTE}.")
    return Mistake(f"your hook raised {type(exc).__name__}: {text}")


def _first_run(fn: Callable) -> _Run:
    run = _run_max_norm(fn)
    if isinstance(run.error, NotImplementedError):
        raise Mistake(_WAITING)
    if run.error is not None:
        raise Mistake(_SKIPPED)
    return run


def _runs(fn: Callable) -> None:
    run = _run_max_norm(fn)
    if isinstance(run.error, NotImplementedError):
        raise NotImplementedError
    if run.error is not None:
        raise _explain_error(run.error)


def _returns_none(fn: Callable) -> None:
    run = _first_run(fn)
    if run.returned is not None:
        raise Mistake("your hook returns a value, and PyTorch uses what a forward pre-hook returns as the "
                      "layer's new input. The constraint changes the weight, not the input: return nothing.")


def _runs_twice(fn: Callable) -> None:
    _first_run(fn)
    run = _run_max_norm(fn, twice=True)
    if run.error is not None and "modified by an inplace operation" in str(run.error):
        raise Mistake("backward failed with \"one of the variables needed for gradient computation has been "
                      "modified by an inplace operation\": your hook changes `weight_orig` in place, so the "
                      "layer's second call changed a tensor that its first call had saved for backward. Leave "
                      f"`weight_orig` alone and build a new tensor from it: {_RECOMPUTE}.")
    if run.error is not None:
        raise _explain_error(run.error)
    if version(run.orig) != run.version or not torch.equal(run.orig.detach(), torch.tensor(_ROWS)):
        raise Mistake("your hook changed `weight_orig` itself. It is the trained tensor and must stay as the "
                      "optimizer left it; the hook only computes the weight the forward pass uses: "
                      f"{_RECOMPUTE}.")


def _trains(fn: Callable) -> None:
    _first_run(fn)
    run = _run_max_norm(fn, twice=True)
    if run.error is not None:
        raise Mistake("skipped until the check above passes (the layer runs twice and backward goes through).")
    layer = run.layer
    if isinstance(layer.weight, nn.Parameter) and layer.weight is not run.orig:
        raise Mistake("your hook put a new nn.Parameter into `module.weight`. No optimizer holds it and no "
                      "gradient reaches `weight_orig` through it. Assign a plain tensor computed from "
                      f"`weight_orig`: {_RECOMPUTE}.")
    if run.orig.grad is None or not bool(run.orig.grad.abs().sum() > 0):
        raise Mistake("no gradient reached `weight_orig`: the used weight must be computed from it with autograd "
                      "on. Drop `.detach()`, `.data` and `torch.no_grad()` from the hook.")
    before = layer.weight.detach().clone()
    torch.optim.SGD([run.orig], lr=0.1).step()
    handle = layer.register_forward_pre_hook(fn)
    try:
        layer(torch.ones(2, 5))
    finally:
        handle.remove()
    if torch.equal(before, layer.weight.detach()):
        raise Mistake("after an SGD step on `weight_orig` the weight the layer uses did not change: compute "
                      "`module.weight` from `module.weight_orig` on every call.")


def _row_norms(fn: Callable) -> None:
    run = _first_run(fn)
    w = run.layer.weight.detach()
    rows, cols = w.norm(dim=1), w.norm(dim=0)
    original = torch.tensor(_ROWS)
    if torch.equal(w, original):
        raise Mistake("the weight the forward pass uses equals `weight_orig`: rows with a norm above 1.0 must be "
                      "scaled down to norm 1.0 (torch.renorm, or divide each long row by its norm).")
    if (rows > MAX_NORM + 1e-4).any():
        if (cols <= MAX_NORM + 1e-4).all():
            raise Mistake("you limited the norm of each column (dim=1 in renorm, or norm(dim=0)). Max-norm limits "
                          "each row, the weights coming into one output unit: `renorm(..., p=2, dim=0, maxnorm=1.0)`, "
                          "or `norm(dim=1, keepdim=True)`.")
        norms = [round(v, 3) for v in rows.tolist()]
        raise Mistake(f"after your hook the rows have norms {norms}; each must be at most 1.0.")
    if run.returned is not None:
        raise Mistake("the rows are within 1.0, but the rest of this check is skipped: your hook returns a value, "
                      "which PyTorch passes to the layer as its input instead of `x`, so the layer's output cannot "
                      "be compared with `x` times the constrained weight. Return nothing (see the line "
                      "'returns None').")
    expected = F.linear(torch.ones(2, 5), w, run.layer.bias)
    if run.output is not None and (run.output.shape != expected.shape
                                   or not torch.allclose(run.output, expected, atol=1e-5)):
        raise Mistake("the output of the forward pass was not computed with the constrained weight.")


def _only_long_rows(fn: Callable) -> None:
    run = _first_run(fn)
    w = run.layer.weight.detach()
    original = torch.tensor(_ROWS)
    norms = original.norm(dim=1)
    for i in range(len(_ROWS)):
        if norms[i] <= MAX_NORM:
            if not torch.allclose(w[i], original[i], atol=1e-6):
                raise Mistake(f"row {i} had norm {norms[i].item():.2g}, within the limit, and your hook changed it. "
                              "Scale only rows whose norm is above 1.0 (scaling everything by one factor is a "
                              "different constraint).")
        else:
            direction = F.cosine_similarity(w[i], original[i], dim=0).item()
            if direction < 0.9999:
                raise Mistake(f"row {i} changed direction, not just length: {_scaled_unevenly(w, original)} "
                              "Divide the whole row by its norm (times 1.0) instead, as "
                              "`torch.renorm(..., p=2, dim=0, maxnorm=1.0)` does.")
            if abs(w[i].norm().item() - MAX_NORM) > 1e-3:
                raise Mistake(f"row {i} had norm {norms[i].item():.2g} and now has {w[i].norm().item():.3g}; "
                              "a row that is too long should end with norm 1.0, not shorter.")


def _scaled_unevenly(w: torch.Tensor, original: torch.Tensor) -> str:
    """What scaled the entries of a row by different factors: the columns, a clamp, or something else."""
    bound = w.abs().max()
    if torch.allclose(w, original.clamp(-bound, bound), atol=1e-6):
        return (f"you clamped each entry to ±{bound.item():.3g}, which cuts the large entries of a row and keeps "
                "the small ones.")
    if (w.norm(dim=0) <= MAX_NORM + 1e-4).all():
        return ("you limited each column (`dim=1` in renorm, or `norm(dim=0)`), and the entries of one row sit "
                "in different columns, so each was scaled by its column's factor.")
    return "its entries were scaled by different factors."


max_norm_exercise = Exercise(
    "Max-norm constraint, recomputed in a forward pre-hook",
    [("runs inside a forward pass without an error", _runs),
     ("returns None (the layer's input stays as it is)", _returns_none),
     ("leaves weight_orig alone, so the layer may run twice before one backward pass", _runs_twice),
     ("gradients reach weight_orig, and a step on it changes the weight the layer uses", _trains),
     ("limits every row of the used weight to norm 1.0", _row_norms),
     ("rescales only the rows that are too long, keeping their direction", _only_long_rows)],
    hook_kind="forward_pre",
    solution="hooklab.course._solutions.nb04_editing_parameters:max_norm",
)


# ---------------------------------------------------------------- exercise 2: log weight snapshots
def _train_with_logger(make: Callable, steps: int = 3, *, first: bool = False
                       ) -> tuple[nn.Linear, list, list[torch.Tensor], list[Any]]:
    """Train a small layer for ``steps`` steps with the learner's logger on it. Only the ``first``
    check reports an unwritten stub in full; the others say it briefly."""
    try:
        return _train(make, steps)
    except NotImplementedError:
        if first:
            raise
        raise Mistake(_WAITING) from None


def _train(make: Callable, steps: int) -> tuple[nn.Linear, list, list[torch.Tensor], list[Any]]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4)
        layer = nn.Linear(3, 2)
    x = torch.linspace(-1.0, 1.0, 12).reshape(4, 3)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    log: list = []
    hook = made_hook(make, log, kind="forward_pre", call="make_weight_logger(log)", inner="log_weight")
    returned: list[Any] = []

    def wrapper(module, args):
        returned.append(hook(module, args))
        return returned[-1]

    handle = layer.register_forward_pre_hook(wrapper)
    truth: list[torch.Tensor] = []
    try:
        for _ in range(steps):
            truth.append(layer.weight.detach().clone())
            opt.zero_grad()
            layer(x).pow(2).sum().backward()
            opt.step()
    finally:
        handle.remove()
    return layer, log, truth, returned


def _logger_runs(make: Callable) -> None:
    _, log, _, returned = _train_with_logger(make, first=True)
    if any(r is not None for r in returned):
        raise Mistake("the hook returns a value, and PyTorch uses what a forward pre-hook returns as the "
                      "layer's new input. Only append to the log; return nothing.")
    if len(log) != 3:
        raise Mistake(f"after 3 forward passes the log holds {len(log)} entries; append exactly one per call.")


def _logger_tensors(make: Callable) -> None:
    layer, log, _, _ = _train_with_logger(make)
    if not log:
        raise Mistake("the log is empty: append one snapshot of module.weight per call.")
    entry = log[0]
    if not isinstance(entry, torch.Tensor):
        raise Mistake(f"the log holds {type(entry).__name__} values; store tensors "
                      "(module.weight.detach().clone()) so they can be compared with torch.equal.")
    if any(e is layer.weight for e in log):
        raise Mistake("you stored `module.weight` itself: every entry is the same Parameter object, so all of "
                      "them show the latest values. Store a copy with its own memory, cut from the graph.")
    if entry.requires_grad or entry.grad_fn is not None:
        raise Mistake("the stored tensors still belong to autograd (requires_grad=True, "
                      f"grad_fn={type(entry.grad_fn).__name__ if entry.grad_fn is not None else None}): "
                      "`.clone()` alone records the copy in the graph. Use `.detach().clone()`.")


def _logger_snapshots(make: Callable) -> None:
    layer, log, truth, _ = _train_with_logger(make)
    if len(log) != len(truth) or not all(isinstance(e, torch.Tensor) for e in log):
        raise Mistake("fix the lines above first: the log needs one tensor per forward pass.")
    shared = [e for e in log if e is not layer.weight and e.data_ptr() == layer.weight.data_ptr()]
    if shared:
        # .detach() shares the weight's version counter as well as its memory; .data has a counter of its own
        how = ("`.detach()` alone gives a new tensor on the same memory" if version(shared[0]) == version(layer.weight)
               else "`.data` is the same memory under another name, as `.detach()` is")
        raise Mistake(f"your snapshots share memory with the weight ({how}), so the optimizer's in-place updates "
                      "changed them afterwards. Store a copy with its own memory.")
    for i, (got, want) in enumerate(zip(log, truth)):
        if got.shape != want.shape or not torch.equal(got, want):
            raise Mistake(f"entry {i} is not the weight as it was at forward pass {i}; store "
                          "`module.weight.detach().clone()` when the hook runs.")


logger_exercise = Exercise(
    "Log snapshots of a weight",
    [("the hook appends once per forward pass and returns None", _logger_runs),
     ("stores detached tensors, not the Parameter", _logger_tensors),
     ("each entry keeps the values of its own step", _logger_snapshots)],
    solution="hooklab.course._solutions.nb04_editing_parameters:make_weight_logger",
)


# ---------------------------------------------------------------- exercise 3: load a pruned checkpoint
    # no return: PyTorch ignores it. The hook changes the dict (its keys) in place; `orig * mask` is a new
    # tensor, so the caller's checkpoint tensors stay as they were


_LOAD_ARGS = ("module", "state_dict", "prefix", "local_metadata", "strict", "missing_keys", "unexpected_keys",
              "error_msgs")


def _net() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))


def _pruned_checkpoint() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """A checkpoint saved from a pruned network, and the weights it stands for."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        net = _net()
    prune.l1_unstructured(net[0], "weight", amount=0.5)
    prune.l1_unstructured(net[2], "weight", amount=0.5)
    expected = {f"{i}.weight": cast(torch.Tensor, net[i].weight_orig).detach() * cast(torch.Tensor, net[i].weight_mask)
                for i in (0, 2)}
    return net.state_dict(), expected


def _load_signature(fn: Callable) -> None:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return
    if len(positional) != len(_LOAD_ARGS):
        raise Mistake(f"PyTorch calls a load_state_dict pre-hook with {len(_LOAD_ARGS)} arguments: "
                      f"hook({', '.join(_LOAD_ARGS)}); yours takes {len(positional)}.")


@dataclass
class _Call:
    """What one call of the learner's load_state_dict pre-hook did to the dict PyTorch handed it."""

    before: list[str]  # the dict's keys when the hook was called
    after: list[str]  # and when it returned
    rebound: bool  # the hook's `state_dict` name was bound to another object by the time it returned
    returned: Any = None


def _call_watching(fn: Callable, args: tuple) -> tuple[Any, bool]:
    """``fn(*args)``, and whether the name of ``fn``'s second parameter (``state_dict``) was bound to
    another object when ``fn`` returned (``state_dict = {...}`` inside the hook)."""
    code = getattr(fn, "__code__", None)
    if code is None or code.co_argcount < 2:
        return fn(*args), False
    name, rebound = code.co_varnames[1], cast(list[bool], [])

    def watch(frame, event, arg):
        if event == "return" and frame.f_code is code and not rebound:
            rebound.append(frame.f_locals.get(name) is not args[1])

    old = sys.getprofile()
    sys.setprofile(watch)
    try:
        result = fn(*args)
    finally:
        sys.setprofile(old)
    return result, bool(rebound and rebound[0])


def _keys(keys: Iterable[str]) -> str:
    return ", ".join(f"`{key}`" for key in keys)


def _load_failed(text: str, calls: list[_Call]) -> Mistake:
    """Why ``load_state_dict`` refused the checkpoint, from what the hook did to its dict."""
    call = calls[0] if calls else _Call([], [], False)
    left = [key for key in call.after if key.endswith(("_orig", "_mask"))]
    folded = [key[: -len("_orig")] for key in call.before if key.endswith("_orig") and key not in call.after]
    returned_dict = isinstance(call.returned, dict)
    if call.rebound or (returned_dict and call.after == call.before):
        how = ("binds the name `state_dict` to a new dict" + (" and returns it" if returned_dict else "")
               if call.rebound else "returns a new dict")
        keys = f" ({_keys(left[:2])}, ...)" if left else ""
        return Mistake(f"your hook {how}, so the dict PyTorch handed it, the one it loads from, still has the "
                       f"same keys{keys}. A new dict bound to the name inside the hook changes "
                       "nothing outside it, and PyTorch ignores what a load_state_dict pre-hook returns. Change "
                       "the dict you are given, in place: `state_dict[name] = ...`, `state_dict.pop(key)`.")
    if left and folded:
        return Mistake(f"your hook folded {_keys(folded)} but left {_keys(left)} in the checkpoint. Fold every "
                       "key that ends in `_orig`: go through `list(state_dict)`, not fixed names.")
    if left:
        return Mistake(f"the checkpoint still holds {_keys(left)}: after computing each weight, remove both its "
                       "`_orig` and its `_mask` key with `state_dict.pop(key)`.")
    if "Missing key(s)" in text:
        return Mistake("the model finds no `0.weight` / `2.weight` key: store the folded tensor under the "
                       "name of the `_orig` key without `_orig` (`key[:-len('_orig')]`).")
    return Mistake(f"load_state_dict failed: {text.strip()}")


_SKIP_UNTIL_LOADED = "skipped until a pruned checkpoint loads (the line 'load_state_dict succeeds' says what stops it)."


def _load(fn: Callable, checkpoint: dict[str, torch.Tensor], *, first: bool = False, skip: bool = False
          ) -> tuple[nn.Sequential, list[_Call]]:
    """Load ``checkpoint`` into a fresh plain network with ``fn`` as its load_state_dict pre-hook. When
    loading fails, ``skip`` makes the message say the check is skipped (an earlier line names the cause)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(6)
        net = _net()
    calls: list[_Call] = []
    raised: list[BaseException] = []

    def wrapper(*args):
        given = args[1]
        call = _Call(before=list(given), after=[], rebound=False)
        calls.append(call)
        try:
            call.returned, call.rebound = _call_watching(fn, args)
        except BaseException as exc:  # load_state_dict would hide it in a RuntimeError without text
            raised.append(exc)
            raise
        finally:
            call.after = list(given)

    handle = net.register_load_state_dict_pre_hook(wrapper)
    try:
        net.load_state_dict(checkpoint)
    except BaseException as exc:
        if raised:
            if isinstance(raised[0], NotImplementedError) and not first:
                raise Mistake(_WAITING) from None
            raise raised[0] from None
        if not isinstance(exc, RuntimeError):
            raise
        if skip:
            raise Mistake(_SKIP_UNTIL_LOADED) from None
        raise _load_failed(str(exc), calls) from None
    finally:
        handle.remove()
    return net, calls


def _loads_pruned(fn: Callable) -> None:
    _load_signature(fn)
    checkpoint, _ = _pruned_checkpoint()
    _load(fn, checkpoint, first=True)


def _folds_correctly(fn: Callable) -> None:
    _load_signature(fn)
    checkpoint, expected = _pruned_checkpoint()
    before = {key: value.clone() for key, value in checkpoint.items()}  # an in-place hook changes checkpoint's
    net, _ = _load(fn, checkpoint, skip=True)
    for name, want in expected.items():
        got = net.state_dict()[name]
        if torch.equal(got, before[name + "_orig"]):
            raise Mistake(f"`{name}` was loaded from `{name}_orig` alone, so the pruned entries came back. "
                          "Multiply by the mask: `weight_orig * weight_mask`.")
        if not torch.equal(got, want):
            raise Mistake(f"`{name}` after loading is not `{name}_orig * {name}_mask`.")


def _checkpoint_untouched(fn: Callable) -> None:
    _load_signature(fn)
    checkpoint, _ = _pruned_checkpoint()
    before = {key: value.clone() for key, value in checkpoint.items()}
    _load(fn, checkpoint, skip=True)
    changed = [key for key, value in checkpoint.items() if not torch.equal(value, before[key])]
    if changed:
        raise Mistake(f"the caller's checkpoint changed: its `{changed[0]}` holds other values after loading. "
                      "Your hook changed a tensor of `state_dict` in place (`mul_`, `*=`); `load_state_dict` "
                      "hands the hook a copy of the dict, but the tensors in it are the caller's (section 6). "
                      "Put a new tensor (the product of the two) under the key instead.")


def _plain_still_loads(fn: Callable) -> None:
    _load_signature(fn)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        plain = _net()
    net, _ = _load(fn, plain.state_dict())
    for name, value in plain.state_dict().items():
        if not torch.equal(net.state_dict()[name], value):
            raise Mistake(f"loading an ordinary (unpruned) checkpoint changed `{name}`: leave keys without "
                          "`_orig` alone.")


def _two_parts() -> tuple[nn.Sequential, nn.Sequential, nn.Sequential, nn.Sequential]:
    """A model of two parts, `folded` and `still_pruned`, saved with both pruned, and one to load it into whose
    `folded` is plain: ``(saved part, saved model, plain part, model to load into)``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(8)
        saved_part, saved_other, part, other = _net(), _net(), _net(), _net()
    for net in (saved_part, saved_other, other):
        prune.l1_unstructured(net[0], "weight", amount=0.5)
        prune.l1_unstructured(net[2], "weight", amount=0.5)
    return (saved_part, nn.Sequential(OrderedDict(folded=saved_part, still_pruned=saved_other)),
            part, nn.Sequential(OrderedDict(folded=part, still_pruned=other)))


def _only_its_prefix(fn: Callable) -> None:
    """The hook on one part, `folded`, of a bigger model whose other part, `still_pruned`, stays pruned:
    PyTorch calls it with prefix='folded.', and its keys are `folded.0.weight_orig`, ... (a hook that
    builds key names without `prefix`, fixed or from the module's own `state_dict()`, finds none)."""
    _load_signature(fn)
    _load(fn, _pruned_checkpoint()[0], skip=True)
    saved_part, saved, part, model = _two_parts()
    calls: list[_Call] = []
    raised: list[BaseException] = []

    def wrapper(*args):
        call = _Call(before=list(args[1]), after=[], rebound=False)
        calls.append(call)
        try:
            return fn(*args)
        except BaseException as exc:  # load_state_dict would hide it in a RuntimeError without text
            raised.append(exc)
            raise
        finally:
            call.after = list(args[1])

    where = ("Registered on `model.folded`, your hook is called with `prefix='folded.'`, and the keys it gets "
             "are `folded.0.weight_orig`, `folded.0.weight_mask`, ...")
    handle = part.register_load_state_dict_pre_hook(wrapper)
    try:
        model.load_state_dict(saved.state_dict())
    except BaseException:
        if raised:
            raise Mistake(f"your hook raised {type(raised[0]).__name__}: {raised[0]}. {where}: build every key "
                          "you read or write from `prefix` (`prefix + '0.weight_orig'`), or take the names from "
                          "the keys themselves.") from None
    finally:
        handle.remove()
    if not calls:
        raise Mistake("skipped: PyTorch did not call the hook.")
    before, after = calls[0].before, calls[0].after
    others = sorted(key for key in set(before) ^ set(after) if not key.startswith("folded."))
    if others:
        raise Mistake(f"your hook also changed {_keys(others[:2])}, keys of another part of the model. {where}; "
                      "change only keys that start with `prefix`.")
    left = [key for key in after if key.startswith("folded.") and key.endswith(("_orig", "_mask"))]
    if left:
        raise Mistake(f"your hook left {_keys(left[:2])} as they were. {where}: build the key names from `prefix` "
                      "(`prefix + name`), or take them from the keys themselves, not from fixed names or the "
                      "module's own `state_dict()`.")
    for i in (0, 2):
        if not torch.equal(cast(nn.Linear, part[i]).weight, cast(nn.Linear, saved_part[i]).weight):
            raise Mistake(f"`folded.{i}.weight` after loading is not "
                          f"`folded.{i}.weight_orig * folded.{i}.weight_mask`.")


fold_exercise = Exercise(
    "Load a pruned checkpoint into a plain model",
    [("has the signature PyTorch calls it with", _load_signature),
     ("load_state_dict succeeds with a pruned checkpoint", _loads_pruned),
     ("each weight becomes weight_orig * weight_mask", _folds_correctly),
     ("leaves the caller's checkpoint unchanged", _checkpoint_untouched),
     ("an ordinary checkpoint still loads unchanged", _plain_still_loads),
     ("changes only the keys under `prefix` (a hook on one part of a bigger model)", _only_its_prefix)],
    solution="hooklab.course._solutions.nb04_editing_parameters:fold_pruned", level="stretch",
)
