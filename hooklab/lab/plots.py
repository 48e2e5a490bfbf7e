"""Matplotlib figures for notebooks and panels, made without pyplot's global state."""

from __future__ import annotations

import base64
import io
import math
import sys
from typing import Any, Hashable, Sequence

from matplotlib.figure import Figure

from ..kinds import KINDS

__all__ = ["DPI", "PX_PER_INCH", "TITLE", "LABEL", "SMALL", "figure", "to_png", "fixed_layout", "round_limit",
           "LiveCanvas", "timeline", "show"]


#: How wide a notebook shows one inch of a figure, in CSS pixels (what matplotlib's 100 dpi gives).
PX_PER_INCH = 100
#: Pixels per inch of every figure: twice what the page shows, to stay sharp zoomed or projected (points scale).
DPI = 2 * PX_PER_INCH
#: Font sizes (points) of titles, axis labels, and ticks and legends: 18, 15 and 14 CSS px on the page, to read
#: from the back of a room at a projector's 1024 px.
TITLE, LABEL, SMALL = 13, 11, 10
_made: list[Figure] = []  # the figures made in the running IPython cell; warned about at its end if not shown


def figure(size: tuple[float, float] = (5.0, 2.6)) -> Figure:
    """A new figure that pyplot does not know about (nothing is shown twice in a notebook). In IPython, one not
    shown (:func:`show`; :func:`to_png` or :class:`LiveCanvas` for a widget) by the end of its cell: stderr warns.

    >>> fig = figure((4.5, 2.2))
    >>> fig.dpi, [int(v) for v in fig.get_size_inches() * fig.dpi]   # pixels: twice what the page shows
    (200, [900, 440])
    """
    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
    if shell is not None and _warn_unshown not in shell.events.callbacks["post_run_cell"]:
        shell.events.register("post_run_cell", _warn_unshown)
    _made.extend([fig] if shell is not None else [])
    return fig


def _warn_unshown(*_: Any) -> None:
    if unshown := sum(not getattr(fig, "hooklab_shown", False) for fig in _made):
        print(f"hooklab: {unshown} figure(s) made in this cell never shown: pass each to show(fig, caption)",
              file=sys.stderr)
    _made.clear()


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
    fig.hooklab_shown = True  # type: ignore[attr-defined]
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

    Drawn in full once per ``key`` (what the still parts depend on, e.g. the axis limits) with the
    ``moving`` artists hidden; the last ``keep`` pictures are kept. :meth:`png` restores its key's
    picture and draws the moving artists on it in ``zorder`` (overlapping axes are not ordered): a few
    ms, not a full draw. A still artist a full draw puts above a moving one (a spine over a line) must
    be in ``moving`` too. Change the moving artists' data (and ``key``) before calling it.

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
        fig.hooklab_shown = True  # type: ignore[attr-defined]  # a panel's widget shows it
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


def show(fig: Figure, caption: str) -> None:
    """Display a figure now, :data:`PX_PER_INCH` CSS pixels per inch wide (:data:`DPI` behind it), with the
    caption as its text and ``alt``, and under it for every reader (JupyterLab gives an image no ``alt``)."""
    from IPython.display import display

    caption = f"Figure: {' '.join(caption.split()).rstrip('.')}."
    # stored in the notebook file, and not redrawn while you click: compressed harder than a panel's
    png = base64.b64encode(to_png(fig, compress_level=6)).decode()
    display({"image/png": png, "text/plain": caption}, raw=True,
            metadata={"image/png": {"width": round(fig.get_figwidth() * PX_PER_INCH), "alt": caption}})
    display({"text/markdown": f"*{caption}*", "text/plain": caption}, raw=True)


_KIND_COLORS = {k.name: k.colour for k in KINDS.values() if k.colour}  # the hook kinds a trace shows


def timeline(fig: Figure, events: Sequence[Any], title: str = "When each hook fires") -> Figure:
    """Draw traced hook events (from :func:`hooklab.trace`): one row per module, time to the right."""
    modules = list(dict.fromkeys(e.module for e in events))
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
    ax.set_yticks(range(len(modules)), [f"{m} ({types[m]})" for m in modules], fontsize=SMALL)
    ax.invert_yaxis()
    ax.set_xlabel("order in which the hooks ran", fontsize=LABEL)
    ax.tick_params(labelsize=SMALL)
    ax.grid(axis="y", color="#eee", zorder=0)
    ax.legend(fontsize=SMALL, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.set_title(title, fontsize=TITLE)
    return fig
