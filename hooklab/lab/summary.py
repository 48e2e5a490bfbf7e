"""What one output of a module shows in the explorer: its structure, and the figures of its first
floating-point tensor (mean, spread, share of zeros, a histogram, the first feature maps). Small:
the output itself is not kept, so a summary cannot change when a later in-place operation does.

>>> import torch
>>> s = Summary.of((torch.zeros(2, 3), None))
>>> s.structure, s.path, s.shape, s.zeros
('tuple(Tensor[2, 3], None)', 'output[0]', [2, 3], 1.0)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F

from ..nested import describe, tensors_in

__all__ = ["Summary", "BINS"]

BINS = 40  #: bars of a histogram
HISTOGRAM_VALUES = 1 << 16  #: a larger output's histogram counts an evenly spaced sample of this size at most
MAPS, TILE, VALUES = 16, 40, 256  # feature maps shown (at most TILE pixels a side), or first values


@dataclasses.dataclass
class Summary:
    """What one output shows (see the module's docstring); ``path`` names the tensor described."""

    structure: str
    path: str | None = None
    shape: list[int] | None = None
    dtype: str | None = None
    numel: int = 0
    mean: float | None = None
    std: float | None = None
    zeros: float | None = None
    lo: float = 0.0
    hi: float = 1.0
    counts: torch.Tensor | None = None  # the histogram: BINS counts between lo and hi
    every: int = 1  # the histogram counts every ``every``-th value (1: all of them)
    nonfinite: int = 0
    preview: torch.Tensor | None = None  # the first feature maps tiled [H, W] in [0, 1], or the first values
    maps: tuple[int, int] | None = None  # (shown, all) channels when the preview is feature maps

    @classmethod
    def of(cls, output: Any) -> "Summary":
        """Summarise ``output`` (read-only)."""
        summary = cls(describe(output))
        main = next(((p, t) for p, t in tensors_in(output) if t.is_floating_point()), None)
        if main is None:
            return summary
        path, t = main
        with torch.no_grad():
            t = t.detach()
            summary.path, summary.numel = path, t.numel()
            summary.dtype = str(t.dtype).replace("torch.", "")
            if t.is_nested:  # no one shape (the structure gives each component's): every component's values
                values = torch.cat([c.float().flatten() for c in t.unbind()] or [torch.zeros(0)])
            else:
                summary.shape, values = list(t.shape), t.float().flatten()
            if values.numel() and not all(math.isfinite(v.item()) for v in values.aminmax()):
                finite = torch.isfinite(values)  # NaN or inf somewhere: leave them out
                summary.nonfinite, values = int((~finite).sum()), values[finite]
            if values.numel():
                summary._describe_values(values)
                summary._preview(t, values)
        return summary

    def _describe_values(self, values: torch.Tensor) -> None:
        lo, hi = torch.aminmax(values)
        mean = values.mean()
        self.mean, self.std = mean.item(), 0.0
        if values.numel() > 1:  # two passes: mean, then the spread around it (much faster than std_mean)
            spread = values - mean
            self.std = (spread.dot(spread) / (values.numel() - 1)).sqrt().item()
        self.zeros = 1.0 - torch.count_nonzero(values).item() / values.numel()
        self.lo, self.hi = lo.item(), hi.item()
        top = self.hi if self.hi > self.lo else self.lo + 1.0
        self.every = -(-values.numel() // HISTOGRAM_VALUES)
        index = ((values[:: self.every] - self.lo) * (BINS / (top - self.lo))).long().clamp_(0, BINS - 1)
        self.counts = torch.bincount(index.cpu(), minlength=BINS).float()  # as torch.histc counts, faster

    def _preview(self, t: torch.Tensor, values: torch.Tensor) -> None:
        if not t.is_nested and t.dim() == 4 and t.shape[-1] * t.shape[-2] > 1:
            maps = t[0, :MAPS].float().cpu()
            if maps.shape[-2] > TILE or maps.shape[-1] > TILE:
                maps = F.adaptive_avg_pool2d(maps, (min(maps.shape[-2], TILE), min(maps.shape[-1], TILE)))
            self.preview, self.maps = mosaic(maps), (maps.shape[0], t.shape[1])
        else:
            self.preview = values[:VALUES].cpu().clone()


def mosaic(maps: torch.Tensor, pad: int = 1) -> torch.Tensor:
    """``[C, H, W]`` tiled into one ``[H', W']`` image, each channel scaled to [0, 1], gaps of 1.

    >>> mosaic(torch.rand(4, 2, 2)).shape
    torch.Size([5, 5])
    """
    c, h, w = maps.shape
    lo, hi = maps.amin(dim=(1, 2), keepdim=True), maps.amax(dim=(1, 2), keepdim=True)
    maps = (maps - lo) / (hi - lo).clamp_min(1e-12)
    cols = math.ceil(math.sqrt(c))
    rows = math.ceil(c / cols)
    tiles = torch.ones(rows * cols, h + pad, w + pad)
    tiles[:c, :h, :w] = maps
    out = tiles.view(rows, cols, h + pad, w + pad).permute(0, 2, 1, 3).reshape(rows * (h + pad), cols * (w + pad))
    return out[: rows * (h + pad) - pad, : cols * (w + pad) - pad]
