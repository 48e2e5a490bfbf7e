"""The explorer's picture of one output: its histogram on the left, its first feature maps (or its
first values) on the right. Drawn with Pillow straight into pixels: a few milliseconds, where a
matplotlib figure takes tens, and a live panel redraws it on every change.

>>> import torch
>>> from hooklab.lab.summary import Summary
>>> picture(Summary.of(torch.rand(1, 4, 8, 8)), "conv1")[:4]
b'\\x89PNG'
"""

from __future__ import annotations

import functools
import io
from typing import Any

import torch
import torch.nn.functional as F

from .summary import Summary

__all__ = ["picture"]

#: The palette: white, ink, grey, blue, then a ramp of greys for the feature maps.
WHITE, INK, GREY, BLUE, RAMP, LEVELS = 0, 1, 2, 3, 4, 252
PALETTE = [255, 255, 255, 34, 34, 34, 102, 102, 102, 76, 114, 176] + [
    round(255 * i / (LEVELS - 1)) for i in range(LEVELS) for _ in range(3)]


@functools.lru_cache(maxsize=1)
def _font() -> Any:
    from PIL import ImageFont
    try:
        return ImageFont.load_default(size=12)
    except (TypeError, OSError):  # an older Pillow, or one without FreeType
        return ImageFont.load_default()


def picture(summary: Summary, title: str = "", size: tuple[int, int] = (460, 220)) -> bytes:
    """A PNG of one output: ``title`` on top, the histogram left, the feature maps or values right."""
    from PIL import Image, ImageDraw

    image = Image.new("P", size, WHITE)  # one byte a pixel: encodes three times faster than RGB
    image.putpalette(PALETTE)
    draw = ImageDraw.Draw(image)
    if title:
        draw.text((8, 2), title, fill=INK, font=_font())
    if summary.counts is None:
        draw.text((8, 18), "no floating-point values to show", fill=GREY, font=_font())
    else:
        _histogram(draw, summary, size)
        if summary.maps is not None:
            _maps(image, draw, summary, size)
        elif summary.preview is not None:
            _values(draw, summary.preview.float(), size)
    buf = io.BytesIO()
    image.save(buf, format="png", compress_level=1)
    return buf.getvalue()


def _histogram(draw: Any, summary: Summary, size: tuple[int, int]) -> None:
    font, (width, height) = _font(), size
    left, top, right, bottom = 10, 36, width // 2 - 14, height - 20
    every = "" if summary.every == 1 else f"1 in {summary.every} of "
    left_out = f", {summary.nonfinite:,} not finite left out" if summary.nonfinite else ""
    draw.text((left, 18), f"histogram of {every}{summary.numel:,} values{left_out}", fill=GREY, font=font)
    assert summary.counts is not None
    tallest, step = float(summary.counts.max()) or 1.0, (right - left) / len(summary.counts)
    for i, n in enumerate(summary.counts.tolist()):
        if n > 0:
            bar = max(1, round((bottom - top) * n / tallest))
            draw.rectangle([round(left + i * step), bottom - bar, round(left + (i + 1) * step) - 1, bottom], fill=BLUE)
    draw.line([left, bottom, right, bottom], fill=GREY)
    hi = summary.hi if summary.hi > summary.lo else summary.lo + 1.0
    lo_label, hi_label = f"{summary.lo + 0.0:.3g}", f"{summary.hi + 0.0:.3g}"  # + 0.0: no "-0"
    if summary.lo < 0 < hi:
        x = left + (right - left) * (0 - summary.lo) / (hi - summary.lo)
        draw.line([x, bottom, x, bottom + 3], fill=GREY)
        if x - left > 8 * len(lo_label) and right - x > 8 * len(hi_label):  # room between the end labels
            draw.text((x - 3, bottom + 3), "0", fill=GREY, font=font)
    draw.text((left, bottom + 3), lo_label, fill=GREY, font=font)
    draw.text((right - 6 * len(hi_label), bottom + 3), hi_label, fill=GREY, font=font)


def _maps(image: Any, draw: Any, summary: Summary, size: tuple[int, int]) -> None:
    from PIL import Image

    (width, height), preview = size, summary.preview
    assert preview is not None and summary.maps is not None
    x0, x1, top = width // 2 + 6, width - 8, 36
    draw.text((x0, 18), f"first {summary.maps[0]} of {summary.maps[1]} maps (sample 0)", fill=GREY, font=_font())
    scale = min((x1 - x0) / preview.shape[1], (height - top - 4) / preview.shape[0])
    h, w = max(1, int(preview.shape[0] * scale)), max(1, int(preview.shape[1] * scale))
    resized = F.interpolate(preview[None, None].float(), size=(h, w), mode="nearest" if scale >= 1 else "area")[0, 0]
    levels = (resized.clamp(0, 1) * (LEVELS - 1)).round().to(torch.uint8) + RAMP  # palette indices of greys
    image.paste(Image.fromarray(levels.numpy(), mode="P"), (x0, top))


def _values(draw: Any, values: torch.Tensor, size: tuple[int, int]) -> None:
    width, height = size
    x0, x1, y0, y1 = width // 2 + 6, width - 8, 36, height - 20
    draw.text((x0, 18), f"first {len(values)} values", fill=GREY, font=_font())
    lo, hi = float(values.min()), float(values.max())
    span, n = (hi - lo) or 1.0, max(len(values) - 1, 1)
    points = [(x0 + (x1 - x0) * i / n, y1 - (y1 - y0) * (v - lo) / span) for i, v in enumerate(values.tolist())]
    if len(points) > 1:
        draw.line(points, fill=BLUE, width=1)
    else:
        draw.point(points, fill=BLUE)
    draw.line([x0, y1, x1, y1], fill=GREY)
    draw.text((x0, y1 + 3), f"{lo + 0.0:.3g} to {hi + 0.0:.3g}", fill=GREY, font=_font())
