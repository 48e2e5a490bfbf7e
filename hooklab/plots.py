"""Matplotlib figures for notebooks and panels, made without pyplot's global state."""

from __future__ import annotations

import io
import math
from typing import Any, Sequence

import torch
from matplotlib.figure import Figure

__all__ = ["figure", "to_png", "feature_grid", "bar"]


def figure(size: tuple[float, float] = (5.0, 2.6)) -> Figure:
    """A new figure that pyplot does not know about (nothing is shown twice in a notebook)."""
    return Figure(figsize=size, dpi=100, layout="constrained")


def to_png(fig: Figure) -> bytes:
    """The figure as PNG bytes (for an ``ipywidgets.Image``)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def feature_grid(fig: Figure, maps: torch.Tensor, n: int = 16, title: str = "") -> Figure:
    """Draw the first ``n`` channels of a ``[C, H, W]`` (or ``[1, C, H, W]``) tensor as a grid."""
    if maps.dim() == 4:
        maps = maps[0]
    if maps.dim() != 3:
        raise ValueError(f"feature maps must be [C, H, W] or [1, C, H, W], got shape {list(maps.shape)}.")
    maps = maps.detach().float().cpu()[:n]
    cols = math.ceil(math.sqrt(len(maps)))
    rows = math.ceil(len(maps) / cols)
    for i, fmap in enumerate(maps):
        ax = fig.add_subplot(rows, cols, i + 1)
        ax.imshow(fmap.numpy(), cmap="viridis")
        ax.set_axis_off()
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def bar(ax: Any, labels: Sequence[str], values: Sequence[float], title: str = "", color: str = "#4c72b0") -> Any:
    """A small labelled bar chart on ``ax``."""
    ax.bar(range(len(values)), list(values), color=color)
    ax.set_xticks(range(len(values)), list(labels), rotation=45, ha="right", fontsize=8)
    ax.set_title(title, fontsize=9)
    return ax
