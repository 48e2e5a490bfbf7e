"""Matplotlib figures for notebooks and panels, made without pyplot's global state."""

from __future__ import annotations

import io
import math
from typing import Any, Hashable, Sequence

import torch
from matplotlib.figure import Figure

from ..kinds import KINDS

__all__ = ["DPI", "PX_PER_INCH", "figure", "to_png", "fixed_layout", "round_limit", "LiveCanvas", "feature_grid",
           "timeline", "show"]


#: How wide a notebook shows one inch of a figure, in CSS pixels (what matplotlib's 100 dpi gives).
PX_PER_INCH = 100
#: Pixels per inch of every figure: twice what the page shows, so that a figure stays sharp on a
#: zoomed page, a high-density screen or a projector. (Label sizes are in points: they scale with it.)
DPI = 2 * PX_PER_INCH


def figure(size: tuple[float, float] = (5.0, 2.6)) -> Figure:
    """A new figure that pyplot does not know about (nothing is shown twice in a notebook).

    >>> fig = figure((4.5, 2.2))
    >>> fig.dpi, [int(v) for v in fig.get_size_inches() * fig.dpi]   # pixels: twice what the page shows
    (200, [900, 440])
    """
    return Figure(figsize=size, dpi=DPI, layout="constrained")


def fixed_layout(fig: Figure, **margins: float) -> Figure:
    """No layout engine, fixed margins (``subplots_adjust``): for a figure redrawn on every change
    of a live panel, where the constrained layout costs more than the drawing.

    >>> fixed_layout(figure(), left=0.1).get_layout_engine() is None
    True
    """
    fig.set_layout_engine(None)
    fig.subplots_adjust(**{"left": 0.07, "right": 0.98, **margins})
    return fig


def to_png(fig: Figure, compress_level: int = 1) -> bytes:
    """The figure as PNG bytes at its own dpi (for an ``ipywidgets.Image``, or :func:`show`).
    Light compression by default: encoding is a visible part of a live panel's update time."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi="figure", pil_kwargs={"compress_level": compress_level})
    return buf.getvalue()


def round_limit(x: float) -> float:
    """The smallest of 1, 2, 2.5 and 5 times a power of ten that is at least ``x`` (1 for 0): an
    axis limit that stays put while a live panel's values move a little, so the axes (and a
    :class:`LiveCanvas` background) are drawn again only when it changes.

    >>> [round_limit(v) for v in (0.0, 0.3, 4.2, 8.4, 24.0)]
    [1.0, 0.5, 5.0, 10.0, 25.0]
    """
    if not math.isfinite(x):
        raise ValueError(f"no axis limit fits {x}: the values to show must be finite.")
    if x <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(x))
    return next(m * power for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * power >= x)


class LiveCanvas:
    """Redraw only what moves: matplotlib's blitting, for a figure a live panel redraws on every change.

    The figure is drawn in full once per ``key`` (what its still parts depend on, such as the axis
    limits) with the ``moving`` artists hidden, and that picture is kept (the last ``keep`` of
    them). Each :meth:`png` restores the picture for its key, draws only the moving artists on top,
    in their ``zorder`` (as a full draw orders them within one Axes; axes that overlap, such as
    twins or insets, are not ordered), and encodes the PNG: a few milliseconds instead of a full
    draw. A still artist drawn above a moving one in a full draw (an axis spine over a line; grid
    lines, under a style that puts them above) must be in ``moving`` too, or the picture differs
    there. Change the moving artists' data (and whatever ``key`` stands for) before calling it.

    >>> fig = fixed_layout(figure((3, 2)))
    >>> ax = fig.add_subplot()
    >>> bar, = ax.bar([0], [1.0])
    >>> live = LiveCanvas(fig, [bar])
    >>> bar.set_height(0.5)
    >>> live.png(key=ax.get_ylim())[:4], live.full_draws
    (b'\\x89PNG', 1)
    """

    def __init__(self, fig: Figure, moving: Sequence[Any], keep: int = 8) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        self.fig, self.keep = fig, keep
        self.moving = sorted(moving, key=lambda artist: artist.get_zorder())  # stable: ties keep their order
        self.canvas = FigureCanvasAgg(fig)
        self._backgrounds: dict[Hashable, Any] = {}
        #: how many full draws (one per new key) so far
        self.full_draws = 0

    def png(self, key: Hashable = None, compress_level: int = 1) -> bytes:
        from PIL import Image

        background = self._backgrounds.pop(key, None)
        if background is None:
            for artist in self.moving:
                artist.set_visible(False)
            try:
                self.canvas.draw()
            finally:
                for artist in self.moving:
                    artist.set_visible(True)
            background = self.canvas.copy_from_bbox(self.fig.bbox)
            self.full_draws += 1
        self._backgrounds[key] = background  # the most recent last
        while len(self._backgrounds) > self.keep:
            del self._backgrounds[next(iter(self._backgrounds))]
        self.canvas.restore_region(background)
        renderer = self.canvas.get_renderer()
        for artist in self.moving:
            artist.draw(renderer)
        width, height = self.canvas.get_width_height()
        image = Image.frombuffer("RGBA", (width, height), self.canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
        buf = io.BytesIO()
        image.save(buf, format="png", compress_level=compress_level)
        return buf.getvalue()


def show(fig: Figure) -> Any:
    """Display a figure in a notebook cell (as a PNG) without going through pyplot: shown
    :data:`PX_PER_INCH` CSS pixels per inch wide, with :data:`DPI` pixels per inch behind it."""
    from IPython.display import Image

    # stored in the notebook file, and not redrawn while you click: compressed harder than a panel's
    # (level 6: within a few percent of level 9's size, at half its encoding time or less)
    return Image(to_png(fig, compress_level=6), width=round(fig.get_figwidth() * PX_PER_INCH))


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


_KIND_COLORS = {k.name: k.colour for k in KINDS.values() if k.colour}  # the hook kinds a trace shows


def timeline(fig: Figure, events: Sequence[Any], title: str = "When each hook fires") -> Figure:
    """Draw traced hook events (from :func:`hooklab.trace`): one row per module, time to the right."""
    modules: list[str] = []
    for e in events:
        if e.module not in modules:
            modules.append(e.module)
    types = {e.module: e.type for e in events}
    ax = fig.add_subplot()
    for e in events:
        y = modules.index(e.module)
        ax.scatter(e.step, y, s=70, color=_KIND_COLORS.get(e.kind, "gray"), zorder=3,
                   marker="o" if e.phase == "forward" else "s")
    for kind, color in _KIND_COLORS.items():
        ax.scatter([], [], color=color, label=kind, marker="o" if KINDS[kind].phase == "forward" else "s")
    if events:
        split = max((e.step for e in events if e.phase == "forward"), default=0) + 0.5
        ax.axvline(split, color="#999", ls="--", lw=1)
    ax.set_yticks(range(len(modules)), [f"{m} ({types[m]})" for m in modules], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("order in which the hooks ran", fontsize=8)
    ax.grid(axis="y", color="#eee", zorder=0)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.set_title(title, fontsize=9)
    return fig
