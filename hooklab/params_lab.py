"""Helpers for notebook 04 (editing parameters in hooks): a toy task, a training loop, the
optimizer check, and the live lab's picture.

>>> import torch, hooklab
>>> from hooklab.params_lab import toy_regression, train, stale_parameters
>>> model, X, y = toy_regression()
>>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
>>> losses = train(model, X, y, opt, steps=3)
>>> losses[0] > losses[-1], stale_parameters(model, opt)
(True, [])
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["toy_regression", "train", "stale_parameters", "draw_weights_and_output"]

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
    (measured before that step's update, rounded to 4 decimals).

    The loop, written out::

        for _ in range(steps):
            optimizer.zero_grad()
            loss = F.mse_loss(model(X), y)
            loss.backward()
            optimizer.step()

    >>> model, X, y = toy_regression()
    >>> train(model, X, y, torch.optim.SGD(model.parameters(), lr=0.0), steps=2)  # lr 0: nothing moves
    [6.1189, 6.1189]
    """
    losses: list[float] = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.mse_loss(model(X), y)
        loss.backward()
        optimizer.step()
        losses.append(round(loss.item(), 4))
    return losses


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


def draw_weights_and_output(fig: Any, weight: torch.Tensor, output: torch.Tensor, reference: torch.Tensor,
                            limit: float | None = None) -> Any:
    """The live lab's picture: the weight matrix as an image (zeros white, positive red, negative
    blue) beside the layer's output as bars, with the original output as grey marks.

    ``limit`` fixes the colour scale (default: the largest absolute weight), so that pictures
    drawn at different slider positions can be compared. The figure is laid out by hand (no
    layout engine, no colour bar), which keeps a live panel's update fast.

    >>> from hooklab.plots import figure
    >>> fig = draw_weights_and_output(figure(), torch.eye(3), torch.ones(3), torch.zeros(3))
    >>> [ax.get_title() for ax in fig.axes]
    ['weight (6 of 9 are 0)', 'output: now (blue), original (grey)']
    """
    w = weight.detach().float().cpu()
    out = output.detach().float().cpu().flatten()
    ref = reference.detach().float().cpu().flatten()
    vmax = float(limit) if limit is not None else max(float(w.abs().max()), 1e-8)
    fig.set_layout_engine(None)
    ax_w, ax_o = fig.subplots(1, 2, width_ratios=[1.0, 1.4])
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.16, top=0.88, wspace=0.25)
    ax_w.imshow(w.numpy(), cmap="RdBu_r", vmin=-vmax, vmax=vmax)
    ax_w.set_title(f"weight ({int((w == 0).sum())} of {w.numel()} are 0)", fontsize=9)
    ax_w.set_xlabel("input", fontsize=8)
    ax_w.set_ylabel("output unit", fontsize=8)
    ax_w.tick_params(labelsize=7)
    index = range(len(out))
    ax_o.vlines(index, 0, out.tolist(), color="#4c72b0", linewidth=7)
    ax_o.plot(index, ref.tolist(), linestyle="none", marker="_", markersize=14, color="#555")
    ax_o.axhline(0, color="#444", linewidth=0.6)
    bound = max(float(ref.abs().max()), float(out.abs().max()), 1e-8) * 1.15
    ax_o.set_ylim(-bound, bound)
    ax_o.set_title("output: now (blue), original (grey)", fontsize=9)
    ax_o.set_xlabel("output unit", fontsize=8)
    ax_o.tick_params(labelsize=7)
    # few, fixed ticks: building tick labels is most of the drawing time
    rows, cols = w.shape if w.dim() == 2 else (len(w), 1)
    ax_w.set_xticks(sorted({0, cols - 1}))
    ax_w.set_yticks(sorted({0, rows - 1}))
    ax_o.set_xticks(sorted({0, len(out) - 1}))
    ax_o.set_yticks([-round(bound * 0.8, 2), 0.0, round(bound * 0.8, 2)])
    return fig
