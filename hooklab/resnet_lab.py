"""Helpers for notebook 05 (traversing a ResNet): tables, rounded statistics, a fast layer view.

The notebook keeps the hooks in plain sight; this module holds only what is not about hooks:
printing rows as an aligned table, rounding statistics so they print the same on every run,
tiling feature maps into one image, and drawing a layer's output quickly enough for a live panel.

>>> import torch, hooklab.resnet_lab as lab
>>> lab.stats(torch.tensor([[-1.0, 0.0], [1.0, 2.0]]))
{'mean': 0.5, 'std': 1.291, 'min': -1.0, 'max': 2.0, 'zeros': 0.25}
>>> print(lab.table(["layer", "shape"], [["conv1", [1, 64, 32, 32]]]))
layer  shape
-----  ---------------
conv1  [1, 64, 32, 32]
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import torch

from ._table import Table

__all__ = ["table", "sig", "stats", "mosaic", "photo_image", "top_logits", "layer_figure", "torch_threads", "Table"]


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> Table:
    """Rows under a header: prints as aligned text, shows as an HTML table in a notebook.

    >>> print(table(["a", "b"], [[1, 2]], title="demo"))
    demo
    a  b
    -  -
    1  2
    """
    return Table(header, rows, title)


def sig(value: float, digits: int = 4) -> float:
    """``value`` rounded to ``digits`` significant digits (``-0.0`` printed as ``0.0``).

    Printing four significant digits keeps a checked output the same on every run even when the
    last bits of a float differ (another CPU, another number of threads).

    >>> sig(123.456), sig(0.000123456), sig(-0.0)
    (123.5, 0.0001235, 0.0)
    """
    value = float(value)
    if value == 0 or not math.isfinite(value):
        return 0.0 if value == 0 else value
    return round(value, digits - 1 - math.floor(math.log10(abs(value)))) + 0.0


def stats(t: torch.Tensor, digits: int = 4) -> dict[str, float]:
    """Mean, standard deviation, min, max and the share of exact zeros of ``t``, rounded.

    >>> stats(torch.zeros(3))
    {'mean': 0.0, 'std': 0.0, 'min': 0.0, 'max': 0.0, 'zeros': 1.0}
    """
    t = t.detach().float()
    return {
        "mean": sig(t.mean().item(), digits),
        "std": sig(t.std().item() if t.numel() > 1 else 0.0, digits),
        "min": sig(t.min().item(), digits),
        "max": sig(t.max().item(), digits),
        "zeros": sig((t == 0).float().mean().item(), digits),
    }


def mosaic(maps: torch.Tensor, n: int = 16, pad: int = 1) -> torch.Tensor:
    """The first ``n`` channels of ``[C, H, W]`` (or ``[1, C, H, W]``) tiled into one ``[H', W']`` image.

    Each channel is scaled to [0, 1] on its own; the gaps between tiles are 1 (white with a grey
    colour map). One image draws much faster than ``n`` separate plots, which matters in a live panel.

    >>> mosaic(torch.rand(1, 6, 4, 4), n=4).shape   # 2 x 2 tiles of 4 x 4, 1 pixel apart
    torch.Size([9, 9])
    """
    if maps.dim() == 4:
        maps = maps[0]
    if maps.dim() != 3:
        raise ValueError(f"feature maps must be [C, H, W] or [1, C, H, W], got shape {list(maps.shape)}.")
    maps = maps.detach().float()[:n]
    c, h, w = maps.shape
    lo = maps.amin(dim=(1, 2), keepdim=True)
    hi = maps.amax(dim=(1, 2), keepdim=True)
    maps = (maps - lo) / (hi - lo).clamp_min(1e-12)
    cols = math.ceil(math.sqrt(c))
    rows = math.ceil(c / cols)
    tiles = torch.ones(rows * cols, h + pad, w + pad)  # each tile with its gap below and to the right
    tiles[:c, :h, :w] = maps
    out = tiles.view(rows, cols, h + pad, w + pad).permute(0, 2, 1, 3).reshape(rows * (h + pad), cols * (w + pad))
    return out[: rows * (h + pad) - pad, : cols * (w + pad) - pad]


def photo_image(x: torch.Tensor) -> torch.Tensor:
    """Undo the ImageNet normalisation of :func:`hooklab.data.sample_photo`: ``[H, W, 3]`` in [0, 1].

    >>> import hooklab
    >>> photo_image(hooklab.data.sample_photo(32)).shape
    torch.Size([32, 32, 3])
    """
    if x.dim() == 4:
        x = x[0]
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    return (x.detach() * std + mean).clamp(0, 1).permute(1, 2, 0)


def top_logits(logits: torch.Tensor, k: int = 3, digits: int = 4) -> list[tuple[int, float]]:
    """The ``k`` largest logits of the first sample as ``(class index, rounded value)`` pairs.

    >>> top_logits(torch.tensor([[0.5, 3.0, -1.0, 2.0]]), k=2)
    [(1, 3.0), (3, 2.0)]
    """
    row = logits.detach()[0] if logits.dim() > 1 else logits.detach()
    values, indices = row.topk(k)
    return [(int(i), sig(v, digits)) for v, i in zip(values.tolist(), indices.tolist())]


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with PyTorch using ``n`` CPU threads, then restore the previous number.

    A live panel runs one small forward pass per click. On a machine whose cores are busy with
    other work, two threads waiting for each other make that pass many times slower, while one
    thread is hardly slower than two on an idle machine: so the panel uses one.

    >>> with torch_threads(1):
    ...     torch.get_num_threads()
    1
    """
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def layer_figure(fig: Any, output: torch.Tensor, title: str = "") -> Any:
    """Draw a layer's output on ``fig``: a histogram of its values, and its first 16 feature maps
    as one tiled image (or, for an output without spatial size, its first 256 values as a line).

    Built for speed (a live panel redraws it on every change): no layout engine, one image, and
    the tensor work on one CPU thread (see :func:`torch_threads`).

    >>> from hooklab.plots import figure
    >>> len(layer_figure(figure(), torch.rand(1, 4, 8, 8), "conv1").axes)
    2
    """
    if hasattr(fig, "set_layout_engine"):
        fig.set_layout_engine(None)  # a layout engine makes savefig draw the figure twice
    ax_hist, ax_maps = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.2, 1], "left": 0.06, "right": 0.98,
                                                       "bottom": 0.12, "top": 0.88, "wspace": 0.12})
    with torch_threads(1):
        values = output.detach().float().flatten()
        lo, hi = values.min().item(), values.max().item()
        if hi <= lo:
            hi = lo + 1.0
        counts = torch.histc(values, bins=40, min=lo, max=hi)
        spatial = output.dim() == 4 and output.shape[-1] * output.shape[-2] > 1
        tiled = mosaic(output).numpy() if spatial else None
    ax_hist.stairs(counts.numpy(), torch.linspace(lo, hi, 41).numpy(), fill=True, color="#4c72b0")
    head = f"{title}: " if title else ""
    # a title with a fixed y skips a slow layout step
    ax_hist.set_title(f"{head}histogram of {values.numel()} output values", fontsize=8, y=1.0)
    ax_hist.tick_params(labelsize=7)
    ax_hist.set_yticks([])  # the counts' scale adds little; fewer labels draw faster
    if spatial:
        ax_maps.imshow(tiled, cmap="gray")
        ax_maps.set_title(f"first {min(16, output.shape[1])} of {output.shape[1]} feature maps", fontsize=8, y=1.0)
        ax_maps.set_axis_off()
    else:
        ax_maps.plot(values[:256].numpy(), lw=0.8, color="#4c72b0")
        ax_maps.set_title(f"first {min(256, values.numel())} values (no spatial size)", fontsize=8, y=1.0)
        ax_maps.tick_params(labelsize=7)
    return fig
