"""Training diagnostics with hooks: activation statistics and gradient flow, step by step.

The hooks compute their statistics *inside* the hook and keep only Python floats (and one small
histogram per step), so recording every step of a training run costs little memory and keeps no
tensor, let alone an autograd graph, alive. (:func:`run` has them computed on a second thread
instead, from a copy of each output, a few at a time: the same numbers, and the training does not
wait for them.)

* :class:`ActivationStats`: a forward hook per chosen layer records, for every training step, the
  mean and standard deviation of the layer's output, the share of outputs that are zero, the share
  of *dead units* (channels that are zero for every example and position of the batch), and a
  histogram of the values (the "colorful dimension" plot shows these histograms side by side).
* :class:`GradNorms`: a post-accumulate-grad hook on each layer's weight records the norm of its
  gradient after every backward pass (the gradient flow through the network).
* :func:`run` trains a :func:`hooklab.course.shapes.tiny_cnn` with both attached and returns a :class:`Run`.

>>> import hooklab.course.shapes as shapes, hooklab.course.nb06_training_diagnostics as diag
>>> model = shapes.tiny_cnn()
>>> with diag.ActivationStats(model, "relu*") as stats:
...     _ = model(torch.randn(8, 1, 32, 32))
>>> list(stats), len(stats["relu1"].mean)
(['relu1', 'relu2', 'relu3'], 1)

Exercises of notebook 06 (training diagnostics), with checkers and worked solutions.

>>> import hooklab.course.nb06_training_diagnostics as ex
>>> print(ex.clip_grad.check(ex.clip_grad.worked()))  # the worked solution
Clip each weight's gradient norm to 1: all 4 checks passed
  ✓ has the right signature
  ✓ scales a gradient of norm 5 down to norm 1, same direction
  ✓ leaves a gradient of norm 0.5 alone
  ✓ works inside a real backward pass
"""

from __future__ import annotations

import copy
import math
import threading
from concurrent import futures
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence, cast

import torch
from matplotlib.ticker import NullLocator
from torch import nn

from ..table import Table
from ..lab.exercises import Exercise, Mistake
from .checks import grad_of, made_hook
from ..hooks import HookOwner, Hooks
from ..lab.plots import LABEL, SMALL, TITLE, LiveCanvas, figure, fixed_layout
from ..claims import approx
from ..selection import select
from ..threads import one_thread_off_main


def dead_share(output: torch.Tensor) -> float:
    """The share of units (channels for ``[N, C, H, W]``, features for ``[N, C]``) whose output is
    ``<= 0`` for every example and position: units that are "dead" on this batch.

    >>> dead_share(torch.tensor([[0.0, 1.0], [0.0, 2.0]]))  # unit 0 is zero for both examples
    0.5
    """
    if output.dim() < 2:
        raise ValueError(f"expected a batch [N, C, ...], got shape {list(output.shape)}.")
    dims = [d for d in range(output.dim()) if d != 1]
    return (output.detach().amax(dim=dims) <= 0).float().mean().item()


def _flat(a: torch.Tensor) -> torch.Tensor:
    """``a``'s values as one dimension, in memory order (no copy for the usual and the
    channels-last layouts): for statistics where the order does not matter."""
    if a.is_contiguous():
        return a.view(-1)
    if a.dim() == 4 and a.is_contiguous(memory_format=torch.channels_last):
        return a.permute(0, 2, 3, 1).reshape(-1)
    return a.reshape(-1)


def _dead(a: torch.Tensor) -> torch.Tensor:
    """:func:`dead_share` as a 0-dim tensor. On a channels-last tensor, a unit is dead when the
    sum of its values clamped at 0 is 0 (the same test as its maximum ``<= 0``, NaN included):
    a sum over the rows of the ``[N*H*W, C]`` view is much faster than ``amax`` on that layout."""
    if a.dim() == 4 and not a.is_contiguous() and a.is_contiguous(memory_format=torch.channels_last):
        dead = a.permute(0, 2, 3, 1).reshape(-1, a.shape[1]).clamp(min=0).sum(dim=0) == 0
    else:
        dead = a.amax(dim=[d for d in range(a.dim()) if d != 1]) <= 0
    return dead.float().mean()


def histogram(values: torch.Tensor, bins: int = 40, hist_max: float = 4.0) -> torch.Tensor:
    """The counts of ``torch.histc(values.clamp(max=hist_max), bins, 0, hist_max)``, the same
    integers (as float32), several times faster on a CPU: each value's bin is computed as
    ``histc`` computes it, then counted with ``torch.bincount``. Values below 0 and NaN are left
    out, values above ``hist_max`` land in the last bin.

    >>> histogram(torch.tensor([0.0, 0.05, 0.1, 3.99, 4.0, 9.0, -0.01, float("nan")]), bins=40)[[0, 1, 39]]
    tensor([2., 1., 3.])
    """
    values = values.reshape(-1)
    if math.frexp(hist_max)[0] == 0.5:  # a power of two: x * bins / hist_max, rounded once, is the same
        pos = values.mul(bins / hist_max)
    else:  # as histc: (x - min) * bins / (max - min)
        pos = values.mul(bins).div_(hist_max)
    # NaN and negatives (-inf too) go to the slot -1, below bin 0, which is dropped
    pos = pos.nan_to_num_(nan=-1.0, neginf=-1.0).floor_().clamp_(-1, bins - 1).add_(1)
    return torch.bincount(pos.to(torch.int32), minlength=bins + 1)[1:].float()


@dataclass
class LayerStats:
    """One layer's statistics, one entry per recorded step (``hist`` holds one list of counts per step)."""

    name: str
    mean: list[float] = field(default_factory=list)
    std: list[float] = field(default_factory=list)
    zeros: list[float] = field(default_factory=list)
    dead: list[float] = field(default_factory=list)
    hist: list[list[float]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.mean)

    def clear(self) -> None:
        """Forget every recorded step."""
        for values in (self.mean, self.std, self.zeros, self.dead, self.hist):
            values.clear()

    def last(self, n: int = 10) -> dict[str, float]:
        """The averages over the last ``n`` steps: ``{"mean", "std", "zeros", "dead"}``.

        >>> s = LayerStats("relu1", mean=[1.0, 3.0], std=[0.0, 0.0], zeros=[0.5, 0.5], dead=[0.0, 1.0])
        >>> s.last(2)
        {'mean': 2.0, 'std': 0.0, 'zeros': 0.5, 'dead': 0.5}
        """
        if not self.mean:
            raise LookupError(f"nothing recorded for {self.name!r} yet: run a training step first.")
        return {k: sum(v[-n:]) / len(v[-n:]) for k, v in
                (("mean", self.mean), ("std", self.std), ("zeros", self.zeros), ("dead", self.dead))}


class ActivationStats(HookOwner):
    """Forward hooks that record per-step statistics of chosen layers' outputs.

    Args:
        model: the model.
        patterns: layer names or globs, as in :func:`hooklab.select` (``"relu*"``).
        bins, hist_max: the histogram of each output has ``bins`` bins over ``[0, hist_max]``
            (values above land in the last bin).
        training_only: record only while the layer is in training mode, so evaluating the model
            (``model.eval()``) does not add steps.
        name: the owning :class:`hooklab.Hooks` name: a new ``ActivationStats`` with the same
            name (re-running the cell) removes the older one's hooks. Without a name, two are
            independent.
        background: compute the statistics on this executor's one thread (a copy of each output
            waits there, at most :attr:`MAX_WAITING` at a time) while the model goes on. Until
            :meth:`wait`, the lists may lag behind the steps. The same numbers, in the same order,
            when the model runs on one PyTorch thread as that thread does (a mean summed on two
            threads can differ in its last bits). :func:`run` uses it: on a second CPU core, the
            training does not wait for the statistics.

    ``stats["relu2"].dead`` is the list of dead-unit shares, one per step. Use it as a context
    manager, or call :meth:`remove`.
    """

    #: With ``background``, the most outputs waiting for their statistics (the hook waits beyond).
    MAX_WAITING = 24

    def __init__(self, model: nn.Module, *patterns: str, bins: int = 40, hist_max: float = 4.0,
                 training_only: bool = True, name: str | None = None, background: Executor | None = None) -> None:
        self.modules = select(model, *patterns)
        if not self.modules:
            raise ValueError("no layer matched: nothing to record.")
        self.bins, self.hist_max, self.training_only = bins, hist_max, training_only
        self.background, self._waiting = background, threading.BoundedSemaphore(self.MAX_WAITING)
        self._pending: list[Future] = []
        self.layers: dict[str, LayerStats] = {n: LayerStats(n) for n in self.modules}
        self.hooks = Hooks(name)
        for layer_name, module in self.modules.items():
            self.hooks.forward(module, self._make_hook(self.layers[layer_name]), key=layer_name)

    def _make_hook(self, stats: LayerStats) -> Callable:
        bins, hist_max, training_only = self.bins, self.hist_max, self.training_only

        def record(a: torch.Tensor) -> None:
            values = _flat(a)
            zeros = (values <= 0).view(torch.uint8).sum(dtype=torch.int32).float() / values.numel()  # = mean()
            mean, std, zeros, dead = torch.stack([values.mean(), values.std(), zeros, _dead(a)]).tolist()
            stats.mean.append(mean)
            stats.std.append(std)
            stats.zeros.append(zeros)
            stats.dead.append(dead)
            stats.hist.append(histogram(values, bins, hist_max).tolist())

        def record_stats(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            if training_only and not module.training:
                return
            if not isinstance(output, torch.Tensor):  # an LSTM's (output, (h, c)), a dict, ...
                raise TypeError(f"ActivationStats records layers whose output is one tensor; {stats.name!r} "
                                f"returned a {type(output).__name__}: choose a layer inside it (an activation, "
                                "such as a ReLU), or record this one with hooklab.Recorder")
            if self.background is None:
                record(output.detach().float())
                return
            self._waiting.acquire()
            try:
                future = self.background.submit(self._off_main, record, output.detach().float().clone())
            except BaseException:
                self._waiting.release()
                raise
            future.add_done_callback(lambda _: self._waiting.release())  # also when cancelled or failed
            self._pending.append(future)

        return record_stats

    @staticmethod
    def _off_main(record: Callable, a: torch.Tensor) -> None:
        one_thread_off_main()  # one PyTorch thread, as the training's: the same sums
        record(a)

    def wait(self, raise_error: bool = True) -> None:
        """Wait until the statistics of every step so far are recorded (with ``background``); then
        raise the first error raised while computing them (unless not ``raise_error``)."""
        pending, self._pending = self._pending, []
        futures.wait(pending)
        errors = [error for f in pending if not f.cancelled() and (error := f.exception()) is not None]
        if errors and raise_error:
            raise errors[0]

    def __getitem__(self, name: str) -> LayerStats:
        if name not in self.layers:
            raise KeyError(f"no statistics for {name!r}; recorded layers: {list(self.layers)}.")
        return self.layers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def table(self, n: int = 10) -> Table:
        """Mean, std, zero share and dead share per layer, averaged over the last ``n`` steps
        (measured figures, marked ``≈``: see :mod:`hooklab.claims`)."""
        rows = []
        for name, s in self.layers.items():
            last = s.last(n)
            rows.append([name, approx(last["mean"], ".3f"), approx(last["std"], ".3f"), approx(last["zeros"], ".0%"),
                         approx(last["dead"], ".0%")])
        return Table(["layer", "mean", "std", "zeros", "dead units"], rows)

    def clear(self) -> None:
        """Forget every recorded step; keep recording."""
        for s in self.layers.values():
            s.clear()

    def __repr__(self) -> str:
        steps = max((len(s) for s in self.layers.values()), default=0)
        state = "recording" if self.active else "removed"
        return f"ActivationStats({list(self.layers)}, {steps} steps, {state})"


class GradNorms(HookOwner):
    """Post-accumulate-grad hooks on the weights of chosen layers: the gradient norm after every
    backward pass, per layer (``norms["conv1"]`` is a list of floats, one per step).

    >>> import hooklab.course.shapes as shapes
    >>> model = shapes.tiny_cnn()
    >>> with GradNorms(model, "conv*", "fc") as g:
    ...     model(torch.randn(4, 1, 32, 32)).sum().backward()
    >>> list(g.norms), len(g.norms["fc"])
    (['conv1', 'conv2', 'conv3', 'fc'], 1)
    """

    def __init__(self, model: nn.Module, *patterns: str, name: str | None = None) -> None:
        self.modules = {n: m for n, m in select(model, *patterns).items()
                        if isinstance(getattr(m, "weight", None), torch.Tensor)}
        if not self.modules:
            raise ValueError("no selected layer has a weight: nothing to record.")
        self.norms: dict[str, list[float]] = {n: [] for n in self.modules}
        self.hooks = Hooks(name)
        for layer_name, module in self.modules.items():
            weight = cast(torch.Tensor, module.weight)
            self.hooks.post_accumulate_grad(weight, self._make_hook(self.norms[layer_name]), key=layer_name)

    @staticmethod
    def _make_hook(store: list[float]) -> Callable:
        def record_norm(param: torch.Tensor) -> None:
            store.append(grad_of(param).norm().item())
        return record_norm

    def clear(self) -> None:
        """Forget every recorded step; keep recording."""
        for values in self.norms.values():
            values.clear()

    def __repr__(self) -> str:
        steps = max((len(v) for v in self.norms.values()), default=0)
        return f"GradNorms({list(self.norms)}, {steps} steps)"


@dataclass
class Run:
    """One diagnosed training run: its settings, the activation statistics, the gradient norms,
    the loss per step and the test accuracy."""

    init: str
    lr: float
    stats: ActivationStats
    grads: GradNorms
    losses: list[float]
    test_accuracy: float
    #: The test accuracy after every epoch (and at the end), by the number of steps done.
    test_accuracies: dict[int, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.init}, lr={self.lr:g}"

    def first(self, steps: int) -> "Run":
        """The run as it stood after its first ``steps`` steps, at a step where the test accuracy
        was measured (:attr:`test_accuracies`): the same as a run of ``steps`` steps with the same
        settings (statistics, gradient norms and losses cut there; measuring the test accuracy
        along the way changes nothing in the training).

        >>> r = run(epochs=2, n_train=96, n_test=32)   # 3 steps per epoch
        >>> sorted(r.test_accuracies), len(r.first(3).losses), len(r.first(3).stats["relu2"])
        ([3, 6], 3, 3)
        """
        if steps not in self.test_accuracies:
            raise ValueError(f"the test accuracy was measured after {sorted(self.test_accuracies)} steps only; "
                             f"pick one of those, not {steps}.")
        stats = copy.copy(self.stats)
        stats.layers = {name: LayerStats(name, s.mean[:steps], s.std[:steps], s.zeros[:steps], s.dead[:steps],
                                         s.hist[:steps]) for name, s in self.stats.layers.items()}
        grads = copy.copy(self.grads)
        grads.norms = {name: values[:steps] for name, values in self.grads.norms.items()}
        return Run(self.init, self.lr, stats, grads, self.losses[:steps], self.test_accuracies[steps],
                   {k: v for k, v in self.test_accuracies.items() if k <= steps})

    def summary(self, layer: str = "relu3", n: int = 10) -> dict[str, Any]:
        """The run's figures: the loss and ``layer``'s statistics averaged over the last ``n``
        steps, the test accuracy, and conv1's gradient norm (3 significant digits, so that a tiny
        norm stays visible: ``≈1.7e-05``). A trained model's figures differ a little from machine
        to machine, so they are marked ``≈`` (:mod:`hooklab.claims`).
        """
        last = self.stats[layer].last(n)
        return {
            "run": self.label,
            "final loss": approx(_mean_last(self.losses, n), ".3f"),
            "test accuracy": approx(self.test_accuracy, ".1%"),
            f"{layer} mean": approx(last["mean"], ".3f"),
            f"{layer} std": approx(last["std"], ".3f"),
            f"{layer} dead units": approx(last["dead"], ".0%"),
            "conv1 grad norm": approx(_mean_last(self.grads.norms["conv1"], n), ".3g"),
        }

    def __repr__(self) -> str:
        return f"Run({self.label}: {len(self.losses)} steps, test accuracy {approx(self.test_accuracy, '.1%')})"


def _mean_last(values: Sequence[float], n: int) -> float:
    tail = [v for v in values[-n:] if math.isfinite(v)]
    return sum(tail) / len(tail) if tail else float("nan")


def run(init: str = "kaiming", lr: float = 0.006, *, steps: int | None = None, epochs: int = 4,
        n_train: int = 2048, n_test: int = 512, seed: int | None = None, inplace: bool = False,
        hist_max: float = 4.0) -> Run:
    """Train a fresh :func:`hooklab.course.shapes.tiny_cnn` with ``init`` and ``lr`` while
    :class:`ActivationStats` (on the ReLUs) and :class:`GradNorms` (on conv and linear weights)
    record every step; remove the hooks and return a :class:`Run`.

    ``steps`` stops after that many steps (a short run for a live lab). ``seed`` picks the initial
    weights and the order of the batches (default: :data:`hooklab.course.shapes.SEED`). A run of
    whole epochs (no ``steps``) also measures the test accuracy after every epoch
    (``test_accuracies``; see :meth:`Run.first`); a short run, only at its end (a live lab waits
    for it).

    >>> r = run(steps=3, n_train=96, n_test=32)
    >>> len(r.losses), len(r.stats["relu1"].mean), len(r.grads.norms["conv1"])
    (3, 3, 3)
    """
    from . import shapes

    seed = shapes.SEED if seed is None else seed
    train_set, test_set = shapes.default_data(n_train, n_test)
    # the same training, bit for bit, with a faster kernel for max-pooling (shapes.MaxPool2x2)
    model = shapes.fast_pooling(shapes.init_weights(shapes.tiny_cnn(inplace=inplace), init, seed=seed))
    # the activation statistics are computed on a second thread (a second core) while it trains, set
    # to one PyTorch thread before the training starts (shapes.train trains on one)
    with ThreadPoolExecutor(1, thread_name_prefix="hooklab-stats", initializer=one_thread_off_main) as pool, \
            ActivationStats(model, "relu*", hist_max=hist_max, name="diagnostics.run:stats", background=pool) as stats, \
            GradNorms(model, "conv*", "fc", name="diagnostics.run:grads") as grads:
        pool.submit(int).result()  # the thread started, and set
        try:
            result = shapes.train(model, train_set, test=test_set, epochs=epochs, lr=lr, max_steps=steps, seed=seed,
                                  test_every=max(1, len(train_set) // 32) if steps is None else None)
        except BaseException:
            stats.wait(raise_error=False)  # the training's error (or Ctrl-C) is the one to see
            raise
        stats.wait()
    return Run(init, lr, stats, grads, result.losses, result.test_accuracy, result.test_accuracies)


# ---------------------------------------------------------------------- plots
def _fixed_layout(fig: Any, **space: float) -> None:
    fixed_layout(fig, **{"wspace": 0.3, **space})


#: Okabe and Ito's colours (told apart with any colour vision), and a line style and a marker for each
#: line as well: no two lines of a plot differ by colour alone.
_COLORS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7")
_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)))
_MARKERS = ("o", "s", "^", "D", "v")


def _style(i: int, steps: int = 0) -> dict[str, Any]:
    """The ``i``-th line's colour, line style and marker (a marker every ``steps // 8`` points, none for 0)."""
    marks = {"marker": _MARKERS[i % len(_MARKERS)], "markevery": (i * max(1, steps // 32), max(1, steps // 8)),
             "markersize": 4} if steps else {}
    return {"color": _COLORS[i % len(_COLORS)], "ls": _STYLES[i % len(_STYLES)], **marks}


def _label_ends(ax: Any, gap: float = 0.13) -> None:
    """Name each line of ``ax`` at its right end, in its colour (labels pushed apart by ``gap`` of the axes
    height, so lines that end together keep legible names)."""
    to_axes = ax.transData + ax.transAxes.inverted()
    ends = []
    for line in ax.get_lines():
        x, y = line.get_xdata(), line.get_ydata()
        last = max((i for i in range(len(y)) if math.isfinite(y[i])), default=None)
        if last is not None:
            ends.append([float(to_axes.transform((x[last], y[last]))[1]), line])
    ends.sort(key=lambda e: e[0])
    for below, above in zip(ends, ends[1:]):
        above[0] = max(above[0], below[0] + gap)
    shift = max(0.0, (ends[-1][0] - 1.0) if ends else 0.0)
    for y, line in ends:
        ax.text(1.02, y - shift, line.get_label(), transform=ax.transAxes, color=line.get_color(), fontsize=SMALL,
                va="center", clip_on=False)


def plot_stats(fig: Any, stats: ActivationStats, layers: Sequence[str] | None = None, title: str = "") -> Any:
    """Three panels over the training steps: the mean, the std and the dead-unit share of each layer
    (each layer in its own colour, line style and marker; named at the end of its line on the right).

    >>> from hooklab.plots import figure
    >>> r = run(steps=2, n_train=64, n_test=32)
    >>> len(plot_stats(figure(), r.stats).axes)
    3
    """
    layers = list(layers or stats.layers)
    _fixed_layout(fig, top=0.8 if title else 0.86, bottom=0.22, left=0.07, right=0.91, wspace=0.4)
    axes = fig.subplots(1, 3)
    for ax, key, label in zip(axes, ("mean", "std", "dead"), ("mean", "std", "share of dead units")):
        for i, name in enumerate(layers):
            values = getattr(stats[name], key)
            ax.plot(values, lw=1.4, label=name, **_style(i, len(values)))
        ax.set_title(label, fontsize=TITLE)
        ax.set_xlabel("step", fontsize=LABEL)
        ax.set_ylabel(label, fontsize=LABEL)
        ax.tick_params(labelsize=SMALL)
    axes[2].set_ylim(-0.05, 1.05)
    axes[0].legend(fontsize=SMALL, frameon=False, loc="upper left")
    _label_ends(axes[2])
    if title:
        fig.suptitle(title, fontsize=TITLE)
    return fig


def plot_colorful(ax: Any, stats: LayerStats, hist_max: float = 4.0, title: str = "") -> Any:
    """The "colorful dimension": one column per step, the histogram of the layer's output values
    bottom (0) to top (``hist_max``), coloured by log(1 + count), with a colour bar. A healthy layer
    shows a band that spreads upward; a collapsed one sits in the bottom row (everything at zero).

    >>> from hooklab.plots import figure
    >>> r = run(steps=2, n_train=64, n_test=32)
    >>> plot_colorful(figure().add_subplot(), r.stats["relu2"]).get_title()
    'relu2: histogram per step'
    """
    if not stats.hist:
        raise LookupError(f"no histograms recorded for {stats.name!r} yet.")
    h = torch.tensor(stats.hist).T.log1p()
    image = ax.imshow(h.numpy(), origin="lower", aspect="auto", cmap="viridis",
                      extent=(0, len(stats.hist), 0, hist_max), interpolation="nearest")
    bar = ax.figure.colorbar(image, ax=ax, pad=0.02, fraction=0.06)
    bar.set_label("log(1 + count)", fontsize=SMALL)
    bar.ax.tick_params(labelsize=SMALL)
    ax.set_xlabel("step", fontsize=LABEL)
    ax.set_ylabel("activation value", fontsize=LABEL)
    ax.tick_params(labelsize=SMALL)
    ax.set_title(title or f"{stats.name}: histogram per step", fontsize=TITLE)
    return ax


def plot_grad_flow(ax: Any, grads: GradNorms, title: str = "gradient norm per layer") -> Any:
    """The weight-gradient norm of each layer over the steps, on a log scale (each layer in its own
    colour, line style and marker, named at the end of its line).

    >>> from hooklab.plots import figure
    >>> r = run(steps=2, n_train=64, n_test=32)
    >>> len(plot_grad_flow(figure().add_subplot(), r.grads).lines)
    4
    """
    for i, (name, values) in enumerate(grads.norms.items()):
        ax.plot([v if v > 0 else float("nan") for v in values], lw=1.2, label=name, **_style(i, len(values)))
    ax.set_yscale("log")
    ax.yaxis.set_minor_locator(NullLocator())  # minor ticks on a log axis cost more than the lines
    ax.set_xlabel("step", fontsize=LABEL)
    ax.set_ylabel("gradient norm", fontsize=LABEL)
    ax.tick_params(labelsize=SMALL)
    ax.set_xlim(0, max((len(v) for v in grads.norms.values()), default=1))
    _label_ends(ax)
    ax.set_title(title, fontsize=TITLE)
    return ax


def plot_runs(fig: Any, runs: Sequence[Run], layer: str = "relu3", hist_max: float = 4.0) -> Any:
    """One row per run: ``layer``'s colorful dimension, its dead-unit share and the gradient flow.

    >>> from hooklab.plots import figure
    >>> r = run(steps=2, n_train=64, n_test=32)
    >>> len(plot_runs(figure((9, 4)), [r, r]).axes)
    8
    """
    _fixed_layout(fig, top=0.88, bottom=0.11, left=0.06, right=0.92, hspace=0.9, wspace=0.55)
    axes = fig.subplots(len(runs), 3, squeeze=False)
    for row, r in zip(axes, runs):
        plot_colorful(row[0], r.stats[layer], hist_max, title=f"{r.label}\n{layer}: histogram per step")
        steps = len(r.stats[layer].dead)
        row[1].plot(r.stats[layer].dead, lw=1.4, label="dead", **_style(3, steps))
        row[1].plot(r.stats[layer].zeros, lw=1.4, label="zeros", **_style(0, steps))
        row[1].set_ylim(-0.05, 1.05)
        row[1].set_title(f"{layer}: share of\nzeros, dead units", fontsize=TITLE)
        row[1].set_xlabel("step", fontsize=LABEL)
        row[1].set_ylabel("share", fontsize=LABEL)
        row[1].tick_params(labelsize=SMALL)
        _label_ends(row[1], gap=0.2)
        plot_grad_flow(row[2], r.grads, title=f"gradient norms\n(accuracy {r.test_accuracy:.0%})")
    return fig


class LabPicture:
    """The live lab's picture, built once and redrawn fast on every change
    (:class:`hooklab.plots.LiveCanvas`): a layer's colorful dimension (as :func:`plot_colorful`)
    and log10 of each layer's weight-gradient norm over the steps (a norm of exactly 0 leaves a
    gap). The gradient axis runs between whole powers of ten around the run's norms.

    >>> r = run(steps=2, n_train=64, n_test=32)
    >>> picture = LabPicture(steps=2, layers=list(r.grads.norms))
    >>> picture.png(r, "relu2")[:4], [t.get_text() for t in picture.titles]
    (b'\\x89PNG', ['relu2: histogram per step', 'log10 of the gradient norm'])
    """

    def __init__(self, steps: int, layers: Sequence[str], *, hist_max: float = 4.0, bins: int = 40,
                 figsize: tuple[float, float] = (6.4, 1.9)) -> None:
        self.steps, self.hist_max, self.bins = steps, hist_max, bins
        self.fig = fixed_layout(figure(figsize), left=0.05, right=0.97, top=0.86, bottom=0.14, wspace=0.17)
        hist_ax, self.grad_ax = self.fig.subplots(1, 2)
        self.image = hist_ax.imshow(torch.zeros(bins, steps).numpy(), origin="lower", aspect="auto", cmap="viridis",
                                    extent=(0, steps, 0, hist_max), interpolation="nearest")
        hist_ax.set_yticks([0, hist_max / 2, hist_max])
        self.lines = {name: self.grad_ax.plot([], [], lw=1.2, label=name, **_style(i, steps))[0]
                      for i, name in enumerate(layers)}
        self.grad_ax.set_xlim(0, steps)
        legend = self.grad_ax.legend(fontsize=SMALL, loc="lower right", ncols=2, handlelength=1, columnspacing=0.8)
        # titles as texts at a fixed place: set_title() places a title by measuring the axes
        self.titles = [ax.text(0.5, 1.04, title, transform=ax.transAxes, ha="center", fontsize=TITLE)
                       for ax, title in ((hist_ax, " "), (self.grad_ax, "log10 of the gradient norm"))]
        for ax in (hist_ax, self.grad_ax):
            ax.set_xticks([0, steps // 2, steps])
            ax.tick_params(labelsize=SMALL)
        # what a full draw puts over the moving parts moves with them: the legend, the spines
        self.canvas = LiveCanvas(self.fig, [self.image, self.titles[0], *self.lines.values(), legend,
                                            *hist_ax.spines.values(), *self.grad_ax.spines.values()])

    def png(self, run: Run, layer: str = "relu3") -> bytes:
        """``run``'s picture with ``layer``'s histograms, as PNG bytes."""
        stats = run.stats[layer]
        if len(stats.hist) != self.steps:
            raise ValueError(f"the picture was built for {self.steps} steps; the run has {len(stats.hist)}.")
        if (run.stats.hist_max, run.stats.bins) != (self.hist_max, self.bins):
            raise ValueError(f"the picture was built for {self.bins} bins up to {self.hist_max}; the run's histograms "
                             f"have {run.stats.bins} up to {run.stats.hist_max}: build it with those.")
        h = torch.tensor(stats.hist).T.log1p()
        self.image.set_data(h.numpy())
        self.image.set_clim(float(h.min()), float(h.max()))
        self.titles[0].set_text(f"{layer}: histogram per step")
        finite = []
        for name, line in self.lines.items():
            logs = [math.log10(v) if v > 0 else float("nan") for v in run.grads.norms[name]]
            line.set_data(range(len(logs)), logs)
            finite += [v for v in logs if math.isfinite(v)]
        low, high = (math.floor(min(finite)), math.ceil(max(finite))) if finite else (-1, 1)
        self.grad_ax.set_ylim(low, high if high > low else low + 1)
        return self.canvas.png(key=(low, high))


# -------------------------------------------------------------------- exercises



# ---------------------------------------------------------------- 1: a statistics hook
def _batch() -> torch.Tensor:
    # 4 channels; channel 1 is zero everywhere, channel 3 zero except one position (alive)
    g = torch.Generator().manual_seed(3)
    out = torch.relu(torch.randn(2, 4, 3, 3, generator=g)) + 0.1
    out[:, 1] = 0.0
    out[:, 3] = 0.0
    out[1, 3, 2, 2] = 0.5
    return out


def _run_stats(make_hook: Callable) -> tuple[list, Any, torch.Tensor]:
    store: list = []
    hook = made_hook(make_hook, store, kind="forward", call="make_stats_hook(store)", inner="record")
    layer = nn.Identity()
    out = _batch()
    handle = layer.register_forward_hook(hook)
    try:
        result = layer(out.clone())
    finally:
        handle.remove()
    return store, result, out


def _check_returns_nothing(make_hook: Callable) -> None:
    store, result, out = _run_stats(make_hook)
    if not torch.equal(result, out):
        raise Mistake("your hook changed the layer's output: a forward hook that returns a value replaces "
                      "the output. Only record; end the hook without `return`.")


def _check_floats(make_hook: Callable) -> None:
    store, _, _ = _run_stats(make_hook)
    if len(store) != 1:
        raise Mistake(f"after one forward pass the store holds {len(store)} entries; append exactly one dict "
                      "per call: store.append({...}).")
    entry = store[0]
    if not isinstance(entry, dict) or set(entry) != {"mean", "std", "dead"}:
        raise Mistake(f"append a dict with the keys 'mean', 'std' and 'dead'; got {entry!r}.")
    for key, value in entry.items():
        if isinstance(value, torch.Tensor):
            raise Mistake(f"store[0][{key!r}] is a tensor: keep plain floats (call .item()), so nothing keeps "
                          "tensors, or their graph, alive between steps.")
        if not isinstance(value, float):
            raise Mistake(f"store[0][{key!r}] should be a float, got {type(value).__name__}.")


def _check_values(make_hook: Callable) -> None:
    store, _, out = _run_stats(make_hook)
    entry = store[0]
    mean, std = out.mean().item(), out.std().item()
    zeros = (out <= 0).float().mean().item()
    if abs(entry["mean"] - mean) > 1e-5:
        raise Mistake(f"'mean' is {entry['mean']:.4f}, expected {mean:.4f}: the mean over the whole output.")
    if abs(entry["std"] - std) > 1e-5:
        raise Mistake(f"'std' is {entry['std']:.4f}, expected {std:.4f}: the standard deviation over the whole output.")
    dead = dead_share(out)
    if abs(entry["dead"] - dead) > 1e-6:
        if abs(entry["dead"] - zeros) < 1e-6:
            raise Mistake(f"'dead' is {entry['dead']:.4f}, the share of zero *values*. A unit (a channel, "
                          "dimension 1) is dead when it is zero for every example and every position: "
                          f"take the maximum over the other dimensions first. Expected {dead:.4f}.")
        raise Mistake(f"'dead' is {entry['dead']:.4f}, expected {dead:.4f} (1 of the 4 channels is zero "
                      "everywhere; another is zero except at one position, so it is alive).")


stats_hook = Exercise(
    "A statistics hook that keeps floats",
    [
        ("returns nothing (the output stays as it is)", _check_returns_nothing),
        ("appends one dict of floats per call", _check_floats),
        ("mean, std and dead-unit share are right", _check_values),
    ],
    solution="hooklab.course._solutions.nb06_training_diagnostics:make_stats_hook",
)


# ---------------------------------------------------------------- 2: clip a gradient's norm
def _param_with_grad(grad: list[float]) -> torch.Tensor:
    p = torch.zeros(len(grad), requires_grad=True)
    p.grad = torch.tensor(grad)
    return p


def _check_scales_down(fn: Callable) -> None:
    p = _param_with_grad([3.0, -4.0])  # norm 5
    result = fn(p)
    got = grad_of(p)
    if torch.allclose(got, torch.tensor([3.0, -4.0])):
        hint = (" Your hook returned a value instead: a post-accumulate-grad hook must return None "
                "(PyTorch raises a RuntimeError otherwise)." if result is not None else "")
        raise Mistake("param.grad is unchanged. Scale it in place, by 1 over its norm." + hint)
    if result is not None:
        raise Mistake("your hook returns a value: a post-accumulate-grad hook must return None (PyTorch raises "
                      "a RuntimeError otherwise). Change param.grad in place and end without `return`.")
    if torch.allclose(got, torch.tensor([1.0, -1.0])):
        raise Mistake("you clamped each element to [-1, 1]; that changes the gradient's direction. Scale the "
                      "whole gradient instead: multiply it by 1 / norm when its norm is above 1.")
    if not torch.allclose(got, torch.tensor([0.6, -0.8]), atol=1e-5):
        raise Mistake(f"param.grad became {[round(v, 4) for v in got.tolist()]}, expected [0.6, -0.8] "
                      "(norm 1, same direction as [3, -4]).")


def _check_leaves_small(fn: Callable) -> None:
    p = _param_with_grad([0.3, 0.4])  # norm 0.5
    fn(p)
    got = grad_of(p)
    if not torch.allclose(got, torch.tensor([0.3, 0.4])):
        raise Mistake(f"a gradient of norm 0.5 became {[round(v, 4) for v in got.tolist()]}; only scale "
                      "gradients whose norm is above 1, leave the others alone.")


def _check_in_backward(fn: Callable) -> None:
    layer = nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        layer.weight.fill_(1.0)
    handle = layer.weight.register_post_accumulate_grad_hook(fn)
    try:
        (layer(torch.full((1, 3), 10.0)).sum()).backward()  # grad = [10, 10, 10]
    finally:
        handle.remove()
    norm = grad_of(layer.weight).norm().item()
    if abs(norm - 1.0) > 1e-4:
        raise Mistake(f"registered with register_post_accumulate_grad_hook, the weight's gradient norm after "
                      f"backward is {norm:.4f}, expected 1.0.")


clip_grad = Exercise(
    "Clip each weight's gradient norm to 1",
    [
        ("scales a gradient of norm 5 down to norm 1, same direction", _check_scales_down),
        ("leaves a gradient of norm 0.5 alone", _check_leaves_small),
        ("works inside a real backward pass", _check_in_backward),
    ],
    hook_kind="post_accumulate_grad",
    solution="hooklab.course._solutions.nb06_training_diagnostics:clip_grad_hook", level="stretch",
)
