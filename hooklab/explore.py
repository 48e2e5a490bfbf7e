"""A live lab for any model: ``hooklab.explore(model, example)``.

Pick a module by name (a filter narrows a long list), see what comes out of it, switch
interventions on and off, and watch the model's final output move. Everything it shows comes
from the hooks the course teaches:

* what a module outputs: a **forward hook** on it reads the output (its structure, shape, dtype,
  how often the module runs per forward pass, mean, std, share of zeros, a histogram and, for a
  4-D output, the first feature maps);
* the gradient of a target with respect to that output: a **tensor hook registered from the
  forward hook** on the output, filled by one backward pass (an in-place ReLU after the module
  does not get in the way, as a full backward hook's would);
* an intervention (zero, add noise, scale, clamp): one **forward hook** on the chosen module that
  returns the edited output, registered when you tick its box and removed when you untick it.

>>> import torch, torch.nn as nn, hooklab
>>> _ = torch.manual_seed(0)
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).eval()
>>> panel = hooklab.explore(model, torch.randn(2, 4))
>>> rows = panel.set(module="1", zero=False)
>>> rows["module"], rows["type"], rows["output"], rows["calls per forward"]
('1', 'ReLU · leaf', 'Tensor[2, 8]', 1)
>>> rows = panel.set(zero=True)          # one forward hook on model[1] returns zeros
>>> rows["zeros"], rows["hooks on the model"], rows["output change"] > 0
(1.0, 1, True)
>>> panel.remove(); hooklab.count_hooks(model)
0

What does not change is not computed again. One pass with autograd at the start records every
module (its statistics, and the gradient norm of each call's output); picking another module
reads from that record. Only an intervention runs the model again (without autograd), once per
combination of module and interventions, plus once, at the first intervention, without any edit
(the output the others are compared with): results are kept, and the noise is seeded, so going
back to an earlier combination costs nothing. If the model's weights or the example change in
place, the record is made again at the next update. In a notebook, a build that takes more than
half a second shows its progress under the cell (:mod:`hooklab.progress`).

Every pass runs in eval mode: a module in training mode is switched to eval mode for the pass and
put back afterwards (the view's ``runs`` row says so). A compiled model is explored through its
eager module; a TorchScript one is refused (:mod:`hooklab.compiled`). What explore cannot do it
says in the view: an output it cannot reach into, an output whose shapes changed or that is empty.

PyTorch's fused transformer kernels (the "fast path" of ``nn.TransformerEncoderLayer`` and
``nn.MultiheadAttention`` in eval mode without autograd) skip the submodules, and with a padding
mask they turn the batch into a nested tensor. ``explore`` switches that fast path off while it
runs the model (``torch.backends.mha.set_fastpath_enabled(False)``, restored afterwards), so
every pass runs the same Python code and every hook sees ordinary tensors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import math
import time
from collections import Counter, OrderedDict
from typing import Any, Callable, Iterator

import ipywidgets as W
import torch
import torch.nn.functional as F
from torch import nn

from ._threads import threads as torch_threads
from .compiled import unwrap
from .hooks import Hooks, Registration
from .inspection import count_hooks, own_tensors
from .nested import describe, map_tensors, tensors_in, unreachable
from .portable import PerRun
from .progress import Progress
from .recording import watch_calls
from .widgets import Panel, filter_options

__all__ = ["explore", "Explorer", "Summary", "tensors_in", "describe", "map_tensors", "InterventionError"]

#: What ``example`` may be: a tensor, a tuple of positional arguments, or an ``(args, kwargs)`` pair.
Example = Any
#: The interventions, in the order their checkboxes appear.
INTERVENTIONS = ("zero", "noise", "scale", "clamp")
_BINS = 40
_MAPS = 16
_TILE = 40  # feature maps are stored at most this many pixels a side (the picture shows them smaller)
_VALUES = 256
_HISTOGRAM_VALUES = 1 << 16  # a larger output's histogram counts an evenly spaced sample of this size at most
_CACHE = 64  # intervened views kept


# ---------------------------------------------------------------------- what one output shows
def _sig(value: float, digits: int) -> float:
    """``value`` rounded to ``digits`` significant digits (``-0.0`` as ``0.0``)."""
    if value == 0 or not math.isfinite(value):
        return 0.0 if value == 0 else value
    return round(value, digits - 1 - math.floor(math.log10(abs(value)))) + 0.0


def _round_like(value: float, scale: float, digits: int) -> float:
    """``value`` rounded to the decimal place of ``scale``'s ``digits``-th significant digit.

    >>> _round_like(-2.8e-09, 1.003, 4), _round_like(0.002847, 0.2033, 4), _round_like(5.25, 0.1, 4)
    (0.0, 0.0028, 5.25)
    """
    if scale == 0 or not math.isfinite(scale) or not math.isfinite(value):
        return _sig(value, digits)
    places = digits - 1 - math.floor(math.log10(abs(scale)))
    return round(value, places) + 0.0


def _per_run(value: float, digits: int = 4) -> float:
    """A figure that comes out of the model's float arithmetic, rounded to ``digits`` significant
    digits and marked :class:`~hooklab.portable.PerRun` (shown ``≈``): another CPU may compute
    another last digit. Not a finite number (NaN, inf) is shown as it is."""
    return PerRun(value, f".{digits}g") if math.isfinite(value) else value


def _std(t: torch.Tensor) -> torch.Tensor:
    return t.float().std() if t.numel() > 1 else torch.zeros((), device=t.device)


@dataclasses.dataclass
class Summary:
    """What one output of a module shows: its structure, and the figures of its first
    floating-point tensor (``path``). Small: the output itself is not kept."""

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
    counts: torch.Tensor | None = None  # a histogram: _BINS counts between lo and hi
    every: int = 1  # the histogram counts every ``every``-th value (1: all of them)
    nonfinite: int = 0
    preview: torch.Tensor | None = None  # the first feature maps tiled [H, W] in [0, 1], or the first values
    maps: tuple[int, int] | None = None  # (shown, all) channels when the preview is feature maps

    @classmethod
    def of(cls, output: Any) -> "Summary":
        """Summarise ``output`` (read-only: nothing is kept that a later in-place operation could change)."""
        summary = cls(describe(output))
        main = next(((p, t) for p, t in tensors_in(output) if t.is_floating_point()), None)
        if main is None:
            return summary
        path, t = main
        with torch.no_grad():
            t = t.detach()
            summary.path, summary.shape, summary.numel = path, list(t.shape), t.numel()
            summary.dtype = str(t.dtype).replace("torch.", "")
            if t.numel() == 0:
                return summary
            values = t.float().flatten()
            lo, hi = torch.aminmax(values)
            if not (math.isfinite(lo.item()) and math.isfinite(hi.item())):  # NaN or inf somewhere: leave them out
                finite = torch.isfinite(values)
                summary.nonfinite = int((~finite).sum())
                values = values[finite]
                if values.numel() == 0:
                    return summary
                lo, hi = torch.aminmax(values)
            mean = values.mean()
            summary.mean, summary.std = mean.item(), 0.0
            if values.numel() > 1:  # two passes: mean, then the spread around it (much faster than std_mean)
                spread = values - mean
                summary.std = (spread.dot(spread) / (values.numel() - 1)).sqrt().item()
            summary.zeros = 1.0 - torch.count_nonzero(values).item() / values.numel()
            summary.lo, summary.hi = lo.item(), hi.item()
            top = summary.hi if summary.hi > summary.lo else summary.lo + 1.0
            step = -(-values.numel() // _HISTOGRAM_VALUES)  # a large output: every step-th value
            summary.counts, summary.every = _histogram(values[::step], summary.lo, top), step
            if t.dim() == 4 and t.shape[-1] * t.shape[-2] > 1:
                maps = t[0, :_MAPS].float().cpu()
                if maps.shape[-2] > _TILE or maps.shape[-1] > _TILE:
                    maps = F.adaptive_avg_pool2d(maps, (min(maps.shape[-2], _TILE), min(maps.shape[-1], _TILE)))
                summary.preview = _mosaic(maps)
                summary.maps = (maps.shape[0], t.shape[1])
            else:
                summary.preview = values[:_VALUES].cpu().clone()
        return summary


def _histogram(values: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """``_BINS`` counts of ``values`` between ``lo`` and ``hi`` (the top value in the last bin), as
    ``torch.histc`` counts them but several times faster on the CPU.

    >>> _histogram(torch.tensor([0.0, 0.5, 1.0]), 0.0, 1.0)[[0, 20, 39]].tolist()
    [1.0, 1.0, 1.0]
    """
    index = ((values - lo) * (_BINS / (hi - lo))).long().clamp_(0, _BINS - 1)
    return torch.bincount(index.cpu(), minlength=_BINS).float()


def _mosaic(maps: torch.Tensor, pad: int = 1) -> torch.Tensor:
    """``[C, H, W]`` tiled into one ``[H', W']`` image, each channel scaled to [0, 1], gaps of 1."""
    c, h, w = maps.shape
    lo = maps.amin(dim=(1, 2), keepdim=True)
    hi = maps.amax(dim=(1, 2), keepdim=True)
    maps = (maps - lo) / (hi - lo).clamp_min(1e-12)
    cols = math.ceil(math.sqrt(c))
    rows = math.ceil(c / cols)
    tiles = torch.ones(rows * cols, h + pad, w + pad)
    tiles[:c, :h, :w] = maps
    out = tiles.view(rows, cols, h + pad, w + pad).permute(0, 2, 1, 3).reshape(rows * (h + pad), cols * (w + pad))
    return out[: rows * (h + pad) - pad, : cols * (w + pad) - pad]


# ---------------------------------------------------------------------- the picture
_FONT: list[Any] = []
#: The picture's palette: white, ink, grey, blue, then a ramp of greys for the feature maps.
_WHITE, _INK, _GREY, _BLUE, _RAMP, _LEVELS = 0, 1, 2, 3, 4, 252
_PALETTE = [255, 255, 255, 34, 34, 34, 102, 102, 102, 76, 114, 176] + [
    round(255 * i / (_LEVELS - 1)) for i in range(_LEVELS) for _ in range(3)]


def _font() -> Any:
    if not _FONT:
        from PIL import ImageFont
        try:
            _FONT.append(ImageFont.load_default(size=12))
        except (TypeError, OSError):  # an older Pillow, or one without FreeType
            _FONT.append(ImageFont.load_default())
    return _FONT[0]


def picture(summary: Summary, title: str = "", size: tuple[int, int] = (460, 220)) -> bytes:
    """A PNG of one output: ``title`` on top, its histogram on the left, and on the right its
    first feature maps (4-D outputs) or its first values as a line.

    Drawn with Pillow straight into pixels (a few milliseconds, where a matplotlib figure takes
    tens), because a live panel redraws it on every change.

    >>> import torch
    >>> picture(Summary.of(torch.rand(1, 4, 8, 8)), "conv1")[:4]
    b'\\x89PNG'
    """
    from PIL import Image, ImageDraw

    width, height = size
    image = Image.new("P", size, _WHITE)  # one byte a pixel: encodes three times faster than RGB
    image.putpalette(_PALETTE)
    draw = ImageDraw.Draw(image)
    font = _font()
    half = width // 2
    if title:
        draw.text((8, 2), title, fill=_INK, font=font)
    if summary.counts is None:
        draw.text((8, 18), "no floating-point values to show", fill=_GREY, font=font)
        return _png(image)
    # the histogram
    left, top, right, bottom = 10, 36, half - 14, height - 20
    every = "" if summary.every == 1 else f"1 in {summary.every} of "
    shown = (f"{every}{summary.numel:,} values"
             + (f", {summary.nonfinite:,} not finite left out" if summary.nonfinite else ""))
    draw.text((left, 18), f"histogram of {shown}", fill=_GREY, font=font)
    counts = summary.counts
    tallest = float(counts.max()) or 1.0
    step = (right - left) / len(counts)
    for i, n in enumerate(counts.tolist()):
        if n > 0:
            bar = max(1, round((bottom - top) * n / tallest))
            draw.rectangle([round(left + i * step), bottom - bar, round(left + (i + 1) * step) - 1, bottom],
                           fill=_BLUE)
    draw.line([left, bottom, right, bottom], fill=_GREY)
    hi = summary.hi if summary.hi > summary.lo else summary.lo + 1.0
    lo_label, hi_label = f"{summary.lo + 0.0:.3g}", f"{summary.hi + 0.0:.3g}"  # + 0.0: no "-0"
    if summary.lo < 0 < hi:
        x = left + (right - left) * (0 - summary.lo) / (hi - summary.lo)
        draw.line([x, bottom, x, bottom + 3], fill=_GREY)
        if x - left > 8 * len(lo_label) and right - x > 8 * len(hi_label):  # room between the end labels
            draw.text((x - 3, bottom + 3), "0", fill=_GREY, font=font)
    draw.text((left, bottom + 3), lo_label, fill=_GREY, font=font)
    draw.text((right - 6 * len(hi_label), bottom + 3), hi_label, fill=_GREY, font=font)
    # the feature maps, or the first values
    x0, x1 = half + 6, width - 8
    preview = summary.preview
    if preview is None:
        return _png(image)
    if summary.maps is not None:
        shown_maps, all_maps = summary.maps
        draw.text((x0, 18), f"first {shown_maps} of {all_maps} maps (sample 0)", fill=_GREY, font=font)
        box_w, box_h = x1 - x0, height - top - 4
        scale = min(box_w / preview.shape[1], box_h / preview.shape[0])
        h, w = max(1, int(preview.shape[0] * scale)), max(1, int(preview.shape[1] * scale))
        resized = F.interpolate(preview[None, None].float(), size=(h, w), mode="nearest" if scale >= 1 else "area")[0, 0]
        levels = (resized.clamp(0, 1) * (_LEVELS - 1)).round().to(torch.uint8) + _RAMP  # palette indices of greys
        image.paste(Image.fromarray(levels.numpy(), mode="P"), (x0, top))
    else:
        values = preview.float()
        draw.text((x0, 18), f"first {len(values)} values", fill=_GREY, font=font)
        y0, y1 = top, height - 20
        lo, hi = float(values.min()), float(values.max())
        span = (hi - lo) or 1.0
        n = max(len(values) - 1, 1)
        points = [(x0 + (x1 - x0) * i / n, y1 - (y1 - y0) * (v - lo) / span) for i, v in enumerate(values.tolist())]
        if len(points) > 1:
            draw.line(points, fill=_BLUE, width=1)
        else:
            draw.point(points, fill=_BLUE)
        draw.line([x0, y1, x1, y1], fill=_GREY)
        draw.text((x0, y1 + 3), f"{lo + 0.0:.3g} to {hi + 0.0:.3g}", fill=_GREY, font=font)
    return _png(image)


def _png(image: Any) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="png", compress_level=1)
    return buf.getvalue()


# ---------------------------------------------------------------------- running the model
class InterventionError(RuntimeError):
    """The model raised while an intervention was on; the interventions were switched off."""


@dataclasses.dataclass
class _Seen:
    """What one module did in one pass: how often it ran, its last output, its gradient norm."""

    calls: int = 0
    summary: Summary | None = None
    grad_squares: dict[int, float] = dataclasses.field(default_factory=dict)  # per call: sum of squared gradients
    png: bytes | None = None
    no_grad: str = "no gradient reached it"  # why grad_norm is None, when it is

    @property
    def grad_norm(self) -> float | None:
        """The norm of the gradient with respect to the last call's output (all its tensors)."""
        square = self.grad_squares.get(self.calls - 1)
        return None if square is None else math.sqrt(square)


@dataclasses.dataclass
class _Entry:
    """One view of one combination of module and interventions."""

    seen: _Seen
    final: dict[str, Any]
    missed: dict[str, str] = dataclasses.field(default_factory=dict)  # intervention -> why it could not edit


def _split(example: Example) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(example, torch.Tensor):
        return (example,), {}
    if isinstance(example, tuple) and len(example) == 2 and isinstance(example[1], dict):
        args, kwargs = example
        if isinstance(args, (tuple, list)):
            return tuple(args), dict(kwargs)
        raise TypeError("example=(value, dict) is ambiguous: write ((x,), {'mask': m}) for keyword arguments, "
                        "or ((x, d), {}) to pass the dict as the second positional argument.")
    if isinstance(example, tuple):
        return example, {}
    if isinstance(example, dict):
        raise TypeError("a dict example is ambiguous: for keyword arguments write ((), {...}) "
                        "(an (args, kwargs) pair); for a model that takes one dict write ({...},).")
    if isinstance(example, list):
        raise TypeError("a list example is ambiguous: for positional arguments pass a tuple (x, y); "
                        "for a model that takes one list write ([...],).")
    raise TypeError(f"example must be a tensor, a tuple of positional arguments or an (args, kwargs) pair, "
                    f"got {type(example).__name__}; e.g. explore(model, torch.randn(1, 3, 224, 224)).")


def _describe_intervention(kind: str, value: float | None) -> str:
    if kind == "noise":
        return f"noise {value:g}×std"
    if kind == "scale":
        return f"scale ×{value:g}"
    if kind == "clamp":
        return f"clamp ±{value:g}×std"
    return kind


def sum_target(output: Any) -> torch.Tensor:
    """The default target: the sum of every floating-point tensor in the model's output
    (``output.sum()`` for a plain tensor)."""
    parts = [t.sum() for _, t in tensors_in(output) if t.is_floating_point()]
    if not parts:
        raise ValueError("the model's output holds no floating-point tensor to sum: pass target=, "
                         "a function of the output that returns one number.")
    return torch.stack(parts).sum() if len(parts) > 1 else parts[0]


def _unreachable_reason(output: Any) -> str:
    """Why an intervention found nothing to edit in ``output``."""
    hidden = unreachable(output)
    if hidden:
        objects = ", ".join(f"{kind} at {path}" for path, kind in hidden[:3])
        return (f"its output, {describe(output)}, holds no floating-point tensor explore can reach ({objects}: "
                "an object explore cannot look inside; it edits tensors in tuples, lists, dicts, namedtuples and "
                "dataclasses)")
    return f"its output, {describe(output)}, holds no floating-point tensor"


def _is_scores(path: str, t: torch.Tensor, top: int) -> bool:
    """Whether ``t`` (at ``path`` in the model's output) is a batch of scores whose top entries mean
    something: ``[batch, classes]``, the whole output or an entry named logits or scores."""
    named = path == "output" or path.rstrip("]'\"").endswith(("logits", "scores"))
    return named and t.dim() == 2 and t.shape[0] > 0 and t.shape[1] >= top > 0


@contextlib.contextmanager
def _running(model: nn.Module, threads: int | None) -> Iterator[None]:
    """PyTorch set up for one of explore's passes: ``threads`` threads, the fused transformer fast
    path off (it skips submodules and their hooks), and every module in eval mode; all restored
    afterwards (each module's own mode)."""
    fast = torch.backends.mha.get_fastpath_enabled()
    modes = [(m, m.training) for m in model.modules()]
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        for m, _ in modes:
            m.training = False
        with torch_threads(threads):  # off the main thread: one thread (hooklab._threads)
            yield
    finally:
        for m, training in modes:
            m.training = training
        torch.backends.mha.set_fastpath_enabled(fast)


# ---------------------------------------------------------------------- the panel
class Explorer(Panel):
    """The live panel :func:`explore` returns (a :class:`hooklab.Panel`).

    Controls (their names for ``panel.set``): ``filter`` (narrows the module list: a glob such
    as ``layer1.*``, a type such as ``Conv2d``, ``leaf`` or ``container``, or any part of a
    name), ``module`` (a qualified name, ``""`` for the model itself), the checkboxes ``zero``,
    ``noise``, ``scale``, ``clamp`` and their sliders ``noise_std`` (noise of that many standard
    deviations of the output), ``factor`` and ``limit`` (clamp to ± that many standard
    deviations). Each ticked box is one forward hook on the chosen module; boxes ticked together
    run in the order they were ticked.

    The view's rows: the module's type, how many modules the filter lists, its calls per forward, its
    output's structure, then for the first floating-point tensor in it (``statistics of``) its
    shape, dtype, mean, std and share of exact zeros; the norm of the gradient of ``target``
    with respect to the output (all its tensors; from the pass without interventions); the
    interventions that are on (and any that could not reach a tensor of the output, with the
    reason), how far the model's final output moved (``output change``: the norm of the difference
    from the output without interventions; ``relative change``: divided by that output's norm; a
    dash and the reason when no intervention ran or the output's shapes changed), the top scores
    when the output is a batch of scores (a ``[batch, classes]`` tensor, or a ``logits`` or
    ``scores`` entry of that shape), and the hooks on the model. A ``runs`` row says when explore
    runs something else than the model as you called it: a compiled model's eager module, or a
    model in training mode run in eval mode.

    Figures that come out of the model's float arithmetic (mean, std, a share of zeros strictly
    between 0 and 1, grad norm, output change, relative change, the top logits' values) are
    :class:`hooklab.portable.PerRun` floats: numbers for code (``state["std"] > 0``), shown
    ``≈0.4402`` (``digits`` significant digits; 3 for the output's figures), because another CPU
    may compute another last digit. Exact by construction, and shown as plain numbers: shapes,
    counts, indices, ``0.0`` for the output change and relative change without interventions,
    ``zeros`` of exactly 0 or 1 (no value or every value is zero: a count), mean and std ``0.0``
    of an output that is all zeros, and a relative change of exactly ``1.0`` when the final
    output is all zeros.
    """

    def __init__(self, model: nn.Module, example: Example, *, target: Callable[[Any], torch.Tensor] | None = None,
                 module: str | None = None, name: str | None = None, threads: int | None = 1, top: int = 3,
                 digits: int = 4) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"explore needs an nn.Module, got {type(model).__name__}.")
        if target is not None and not callable(target):
            raise TypeError(f"target must be a function of the model's output returning one number, e.g. "
                            f"target=lambda out: out[0, 3]; got {type(target).__name__}.")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be a positive number (or None for PyTorch's setting), got {threads}.")
        model, compiled = unwrap(model, "explore")
        self.explored = model
        self.args, self.kwargs = _split(example)
        self.target: Callable[[Any], torch.Tensor] = target or sum_target
        self.threads, self.top, self.digits = threads, top, digits
        self.named: dict[str, nn.Module] = dict(model.named_modules())
        if module is not None and module not in self.named:
            from .selection import _closest
            raise KeyError(f"{type(model).__name__} has no module named {module!r}. Closest names: "
                           f"{_closest(module, [n for n in self.named if n])}.")
        #: what explore runs instead of the model as called (a compiled model's eager module), if anything
        self.compiled_note = compiled
        #: counts of what the updates did: "clean passes", "forward passes", "cache hits", "pictures drawn"
        self.profile: Counter[str] = Counter()
        #: milliseconds spent per phase of the latest update ("clean pass", "forward", "picture")
        self.timings: dict[str, float] = {}
        self._entries: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
        self._reference: list[tuple[str, torch.Tensor]] | None = None  # the output without interventions, no grad
        self._bypass = False
        self._missed: dict[str, str] = {}  # intervention -> why it could not edit the output (in the latest pass)
        title = f"Explore {type(model).__name__}"
        super().__init__(title, Explorer._view, name=name)
        try:
            self._record()
        except BaseException:
            self.close()
            raise
        # the table and the picture side by side; the picture shrinks to the width that is left
        self.picture = W.Image(format="png", layout=W.Layout(flex="1 1 320px", min_width="280px", max_width="460px",
                                                             object_fit="contain"))
        self.picture.add_class("hooklab-plot")
        self.view.layout = W.Layout(flex="0 0 auto", width="auto")
        body = W.HBox([self.view, self.picture], layout=W.Layout(align_items="flex-start", grid_gap="12px"))
        self.set_trait("children", tuple(body if child is self.view else child for child in getattr(self, "children")))
        first = module if module is not None else next(
            (n for n in self.named if n and self._clean[n].calls), next(iter(self.named)))
        self.textbox("filter", description="filter", placeholder="glob or type: layer1.*, Conv2d, leaf")
        self.dropdown("module", [(self._label(n), n) for n in self.named], first, description="module",
                      filter_by="filter")
        self.toggle("zero", self._intervention("zero"), description="zero its output")
        self.toggle("noise", self._intervention("noise"), description="add noise")
        self.slider("noise_std", 0.0, 2.0, 0.1, 0.5, description="noise (× std)")
        self.toggle("scale", self._intervention("scale"), description="scale its output")
        self.slider("factor", -1.0, 3.0, 0.1, 2.0, description="factor")
        self.toggle("clamp", self._intervention("clamp"), description="clamp its output")
        self.slider("limit", 0.0, 3.0, 0.1, 1.0, description="clamp at ± (× std)")

    # ------------------------------------------------------------------ the pass without interventions
    def _call(self) -> Any:
        return self.explored(*self.args, **self.kwargs)

    def _fingerprint(self) -> tuple[Any, ...]:
        """Which tensors the model and the example hold, and their versions (an in-place change
        bumps a tensor's ``_version``): when it changes, the record is made again."""
        tensors = [t for m in self.named.values() for t in own_tensors(m)]
        inputs = [t for _, t in tensors_in((self.args, self.kwargs))]
        return tuple((id(t), t._version) for t in (*tensors, *inputs))

    def _record(self) -> None:
        """One pass with autograd: every module's output summarised and the gradient norm of each
        call's output kept. Interventions are bypassed. (The output without interventions, which
        interventions are compared with, is computed without autograd when first needed.)"""
        start = time.perf_counter()
        self._clean = {n: _Seen() for n in self.named}
        self._reference = None
        self._entries.clear()
        self._bypass = True
        modules = len(self.named)
        try:
            with Progress(f"explore {type(self.explored).__name__}:") as progress, \
                    _running(self.explored, self.threads), Hooks() as hooks:
                ran: set[str] = set()
                hooked = [0, 0]  # gradient hooks registered, and run

                def on_call(name: str, args: tuple, output: Any, paths: list[str]) -> tuple[_Seen, int]:
                    seen = self._clean[name]
                    seen.calls += 1
                    seen.summary = Summary.of(output)
                    if not paths:
                        seen.no_grad = ("its output holds no tensor explore can reach" if unreachable(output)
                                        else "no tensor of its output requires grad")
                    hooked[0] += len(paths)
                    ran.add(name)
                    progress.update(len(ran), 2 * modules, f"forward pass: {len(ran)} of {modules} modules ran")
                    return seen, seen.calls - 1

                def on_grad(token: tuple[_Seen, int], path: str, grad: torch.Tensor | None) -> None:
                    hooked[1] += 1
                    progress.update(modules + modules * hooked[1] / max(hooked[0], 1), 2 * modules,
                                    f"backward pass: {hooked[1]} of {hooked[0]} gradients")
                    if grad is None:  # a sibling output of the same operation got a gradient, this one none
                        return
                    seen, call = token
                    square = grad.detach().float().pow(2).sum().item()
                    seen.grad_squares[call] = seen.grad_squares.get(call, 0.0) + square

                for n, m in self.named.items():
                    watch_calls(hooks, m, functools.partial(on_call, n), on_grad)
                with torch.enable_grad():
                    output = self._call()
                    value = self.target(output)
                    if not isinstance(value, torch.Tensor) or value.numel() != 1:
                        got = f"shape {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
                        raise ValueError(f"target(output) must return one number as a tensor, got {got}; "
                                         "e.g. target=lambda out: out[0, 3] or target=lambda out: out.sum().")
                    params = [p for p in self.explored.parameters() if p.requires_grad]
                    self._has_grad = value.requires_grad and bool(params)
                    if self._has_grad:  # fills the tensor hooks; accumulates nothing into .grad
                        torch.autograd.grad(value, params, allow_unused=True)
                self._clean_output = [(p, t.detach()) for p, t in tensors_in(output)]
                del output, value
        finally:
            self._bypass = False
        self._stamp = self._fingerprint()
        self.profile["clean passes"] += 1
        self.timings = {"clean pass": (time.perf_counter() - start) * 1000}

    def _reference_output(self) -> list[tuple[str, torch.Tensor]]:
        """The model's output without interventions, computed as the intervened passes are (no autograd)."""
        if self._reference is None:
            self._bypass = True
            try:
                with _running(self.explored, self.threads), torch.no_grad():
                    self._reference = tensors_in(self._call())
            finally:
                self._bypass = False
        return self._reference

    # ------------------------------------------------------------------ interventions
    def _intervention(self, kind: str) -> Callable[[Hooks, Panel], Registration]:
        def register(hooks: Hooks, panel: Panel) -> Registration:
            module = self.named[self.values["module"]]
            return hooks.forward(module, self._edit(kind), key=kind)
        return register

    def _edit(self, kind: str) -> Callable[..., Any]:
        """The forward hook of one intervention, with the sliders' values at registration."""
        values = self.values
        noise_std, factor, limit = float(values["noise_std"]), float(values["factor"]), float(values["limit"])

        def noisy(t: torch.Tensor, seed: list[int]) -> torch.Tensor:
            seed[0] += 1
            generator = torch.Generator().manual_seed(seed[0])
            noise = torch.randn(t.shape, generator=generator).to(device=t.device, dtype=t.dtype)
            return t + noise_std * _std(t).to(t.dtype) * noise

        def clamp(t: torch.Tensor) -> torch.Tensor:
            bound = limit * _std(t).item()
            return t.clamp(-bound, bound)

        def edit(output: Any) -> Any:
            if kind == "zero":
                return map_tensors(output, torch.zeros_like)
            if kind == "noise":
                seed = [0]  # the same noise on every run: the i-th tensor of the output gets seed i (from 1)
                return map_tensors(output, lambda t: noisy(t, seed))
            if kind == "scale":
                return map_tensors(output, lambda t: t * factor)
            return map_tensors(output, clamp)

        def intervene(module: nn.Module, args: Any, output: Any) -> Any:
            if self._bypass:
                return None
            if not any(t.is_floating_point() for _, t in tensors_in(output)):
                self._missed[kind] = _unreachable_reason(output)
                return None
            self._missed.pop(kind, None)
            return edit(output)

        intervene.__name__ = intervene.__qualname__ = f"{kind}_output"
        return intervene

    def _active(self) -> list[tuple[str, float | None]]:
        """The interventions whose hooks are registered, in the order they run, with their setting."""
        values = self.values
        setting = {"zero": None, "noise": values["noise_std"], "scale": values["factor"], "clamp": values["limit"]}
        live = []
        for kind in INTERVENTIONS:
            hooks = self._toggles[kind][1]
            for key in hooks:
                registration = hooks._entries[key]
                if len(registration):
                    live.append((registration.handles[0].id, kind))
        return [(kind, setting[kind]) for _, kind in sorted(live)]

    def _switch_off(self) -> list[str]:
        """Remove every intervention's hook and untick its box (without another update)."""
        ticked = [kind for kind in INTERVENTIONS if self._toggles[kind][0].value]
        with self._silenced():
            for kind in INTERVENTIONS:
                box, hooks, _ = self._toggles[kind]
                hooks.remove()
                box.value = False
        return ticked

    # ------------------------------------------------------------------ the view
    def _label(self, name: str) -> str:
        module = self.named[name]
        kind = "container" if next(module.children(), None) is not None else "leaf"
        calls = self._clean[name].calls
        ran = "" if calls == 1 else (" · not called" if calls == 0 else f" · called {calls}×")
        return f"{name or '(model)'} · {type(module).__name__} · {kind}{ran}"

    def _view(self) -> dict[str, Any]:
        if self._fingerprint() != self._stamp:
            if [id(m) for m in self.explored.modules()] != [id(m) for m in self.named.values()]:
                raise RuntimeError("the model's modules changed since explore() was called: call explore() again.")
            self._record()
        name = self.values["module"]
        active = self._active()
        key = (name, tuple(active))
        self.timings = {}
        if not active:
            entry = _Entry(self._clean[name], self._compare(None))
            self.profile["cache hits"] += 1
        elif key in self._entries:
            entry = self._entries[key]
            self._entries.move_to_end(key)
            self.profile["cache hits"] += 1
        else:
            entry = self._intervene(name, active)
            self._entries[key] = entry
            if len(self._entries) > _CACHE:
                self._entries.popitem(last=False)
        if entry.seen.png is None:
            start = time.perf_counter()
            summary = entry.seen.summary or Summary("not called")
            entry.seen.png = picture(summary, f"{name or '(model)'}" + (" (edited)" if active else ""))
            self.timings["picture"] = (time.perf_counter() - start) * 1000
            self.profile["pictures drawn"] += 1
        self.picture.value = entry.seen.png
        return self._rows(name, entry, active)

    def _intervene(self, name: str, active: list[tuple[str, float | None]]) -> _Entry:
        reference = self._reference_output()
        seen = _Seen()
        start = time.perf_counter()
        self._missed = {}
        try:
            with _running(self.explored, self.threads), Hooks() as watch:
                watch.forward(self.named[name], self._watcher(seen))  # after the interventions
                with torch.no_grad():
                    output = self._call()
        except Exception as exc:
            ticked = self._switch_off()
            self.picture.value = b""
            raise InterventionError(
                f"the model raised {type(exc).__name__} with {', '.join(ticked)} on {name or '(model)'!r}: {exc} "
                f"(the intervention hooks were removed and their boxes unticked; hooks this panel holds: "
                f"{self.hook_count()})") from exc
        self.profile["forward passes"] += 1
        self.timings["forward"] = (time.perf_counter() - start) * 1000
        missed = dict(self._missed)
        if seen.calls == 0:
            missed = {kind: "the module did not run in this pass" for kind, _ in active}
        final = self._compare(tensors_in(output), reference)
        if len(missed) == len(active):  # nothing was edited: the output cannot have changed because of it
            final = {"output change": "— (no intervention could edit the output: see interventions)",
                     "relative change": "—"}
        return _Entry(seen, final, missed)

    def _watcher(self, seen: _Seen) -> Callable[..., None]:
        def watch(module: nn.Module, args: Any, output: Any) -> None:
            seen.calls += 1
            seen.summary = Summary.of(output)
        return watch

    def _compare(self, found: list[tuple[str, torch.Tensor]] | None,
                 reference: list[tuple[str, torch.Tensor]] | None = None) -> dict[str, Any]:
        """How far the final output moved from the reference (``found`` ``None``: it is the output
        without interventions, from the pass that recorded every module)."""
        rows: dict[str, Any] = {}
        if found is None or reference is None:
            rows["output change"], rows["relative change"] = 0.0, 0.0
            now = [(p, t) for p, t in self._clean_output if t.is_floating_point()]
        else:
            ref = [(p, t) for p, t in reference if t.is_floating_point()]
            now = [(p, t) for p, t in found if t.is_floating_point()]
            by_path = dict(now)
            changed = [f"{p} {list(t.shape)} → " + (str(list(by_path[p].shape)) if p in by_path else "missing")
                       for p, t in ref if p not in by_path or by_path[p].shape != t.shape]
            changed += [f"{p} new {list(t.shape)}" for p, t in now if p not in dict(ref)]
            if changed:
                rows["output change"] = f"— (the output's shapes changed: {'; '.join(changed[:3])})"
                rows["relative change"] = "—"
            elif sum(t.numel() for _, t in ref) == 0:
                rows["output change"] = "— (every tensor of the output is empty, with and without the interventions)"
                rows["relative change"] = "—"
            else:
                diff = sum(float((by_path[p].float() - t.float()).pow(2).sum()) for p, t in ref)
                size = sum(float(t.float().pow(2).sum()) for _, t in ref)
                rows["output change"] = _per_run(_sig(math.sqrt(diff), 3), 3)
                if size > 0 and all(torch.count_nonzero(t) == 0 for _, t in now):
                    rows["relative change"] = 1.0  # every value of the output is zero (an exact fact): all of it went
                else:
                    rows["relative change"] = _per_run(_sig(math.sqrt(diff / size), 3), 3) if size > 0 else float("nan")
        scores = next(((p, t) for p, t in now if _is_scores(p, t, self.top)), None)
        if scores is not None:
            path, main = scores
            values, indices = main[0].detach().float().topk(self.top)
            label = f"top-{self.top} of {path}[0]" if path != "output" else f"top-{self.top} (sample 0)"
            rows[label] = [(int(i), _per_run(_sig(v, 3), 3)) for v, i in zip(values.tolist(), indices.tolist())]
        return rows

    def _rows(self, name: str, entry: _Entry, active: list[tuple[str, float | None]]) -> dict[str, Any]:
        seen, digits = entry.seen, self.digits
        everything = self._filters["filter"][0][1]
        listed = len(self.options("module"))
        text = self.values["filter"].strip()
        if not text:
            listing = f"all {len(everything)} modules"
        elif not filter_options(everything, text):
            listing = f"no module matches {text!r}: the list is unchanged ({listed} of {len(everything)})"
        else:
            listing = f"{listed} of {len(everything)} match {text!r}"
        module = self.named[name]
        kind = "container" if next(module.children(), None) is not None else "leaf"
        rows: dict[str, Any] = {}
        runs = [note for note in (self.compiled_note, self._mode_note()) if note]
        if runs:
            rows["runs"] = "; ".join(runs)
        rows.update({"type": f"{type(module).__name__} · {kind}", "listed": listing, "calls per forward": seen.calls})
        s = seen.summary
        missing = "—"
        if s is None:
            rows["output"] = "— (not called by this example)"
        else:
            rows["output"] = s.structure
        rows["statistics of"] = s.path if s is not None and s.path else missing
        rows["shape"] = s.shape if s is not None and s.shape is not None else missing
        rows["dtype"] = s.dtype if s is not None and s.dtype else missing
        for key in ("mean", "std", "zeros"):
            value = getattr(s, key) if s is not None else None
            rows[key] = _per_run(_sig(value, digits), digits) if value is not None else missing
        if s is not None and s.mean is not None and s.std is not None:
            # a mean far below the spread (a LayerNorm's ~1e-9) is float noise: round it on the spread's scale
            rows["mean"] = _per_run(_round_like(s.mean, max(abs(s.mean), s.std), digits), digits)
        if s is not None and s.zeros is not None and s.zeros in (0.0, 1.0):
            rows["zeros"] = s.zeros  # none or all of the values are zero: an exact count, not a rounded ratio
            if s.zeros == 1.0:  # all zeros (a zeroed output): its mean and std are exactly 0
                rows["mean"], rows["std"] = 0.0, 0.0
        clean = self._clean[name]
        if not self._has_grad:
            rows["grad norm (clean)"] = "— (nothing in the model requires grad)"
        elif clean.grad_norm is None:
            rows["grad norm (clean)"] = f"— ({clean.no_grad})"
        else:
            rows["grad norm (clean)"] = _per_run(_sig(clean.grad_norm, digits), digits)
        shown = []
        for kind, value in active:
            label = _describe_intervention(kind, value)
            shown.append(f"{label} (could not intervene: {entry.missed[kind]})" if kind in entry.missed else label)
        rows["interventions"] = " → ".join(shown) or "none"
        rows.update(entry.final)
        rows["hooks on the model"] = count_hooks(self.explored, include_global=False)
        return rows

    def _mode_note(self) -> str | None:
        if not any(m.training for m in self.named.values()):
            return None
        return ("in eval mode: the model is in training mode, so explore switches every module to eval mode for "
                "its passes (no dropout, BatchNorm's running statistics) and puts each back afterwards")

    # ------------------------------------------------------------------ driving and closing
    def set(self, **values: Any) -> dict[str, Any]:
        """Set controls by name, as clicks would, and return the state (see :meth:`Panel.set`).
        ``filter`` is applied before ``module``, whatever order you write them in."""
        if "filter" in values:
            values = {"filter": values.pop("filter"), **values}
        return super().set(**values)

    def remove(self) -> None:
        """Remove every hook the panel holds, disable its controls and forget its cached views."""
        super().remove()
        self._entries.clear()

    def _release(self) -> None:
        """Let go of the model, its example and everything computed from them (after close)."""
        super()._release()
        for attribute in ("explored", "args", "kwargs", "target", "named", "_clean", "_clean_output", "_reference",
                          "_stamp"):
            self.__dict__.pop(attribute, None)
        self._entries = OrderedDict()


def explore(model: nn.Module, example: Example, *, target: Callable[[Any], torch.Tensor] | None = None,
            module: str | None = None, name: str | None = None, threads: int | None = 1) -> Explorer:
    """A live panel for any model: pick a module, see what flows out of it, intervene.

    Args:
        model: any ``nn.Module``. Its passes run in eval mode (a training-mode pass is random and
            changes BatchNorm's statistics): a module in training mode is switched to eval mode for
            each pass and back afterwards, and the view says so. A compiled model
            (``torch.compile``) is explored through its eager module, ``model._orig_mod`` (hooks
            inside a compiled model do not run), and the view says so too. A TorchScript module
            raises ``TypeError`` (it takes no Python hooks): explore the module you scripted.
        example: what to run the model on: a tensor, a tuple of positional arguments, or an
            ``(args, kwargs)`` pair such as ``((tokens,), {"src_key_padding_mask": pad})``
            (keyword arguments only: ``((), {"x": x})``).
        target: ``target(output) -> a one-element tensor``, whose gradient with respect to each
            module's output the panel shows (default: the sum of the output, see :func:`sum_target`).
        module: the module shown first (default: the first one that runs).
        name: the panel's name; building another panel of this name (re-running the cell)
            closes the older one first (its hooks removed, its widgets closed, its model let go).
            Default: the title, ``"Explore <model class>"``.
        threads: PyTorch threads while the panel runs the model (restored afterwards). One
            thread keeps a panel quick when other programs keep the cores busy; ``None`` uses
            PyTorch's setting.

    Returns the :class:`Explorer` panel; show it by ending a cell with it, drive it with
    ``panel.set(...)``, and take its hooks off with ``panel.remove()``. ``panel.close()`` also closes
    its widgets and lets go of the model (nothing the panel holds keeps it alive afterwards).
    """
    return Explorer(model, example, target=target, module=module, name=name, threads=threads)

