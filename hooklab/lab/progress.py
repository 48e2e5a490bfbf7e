"""A progress line for a long step in a notebook: what it is doing and how far it got, gone when the step ends.

It is a small widget (a bar and a line of text) shown under the running cell once the step has taken half a second (a
quick step shows nothing), and taken away again at the end: the cell's stored output then holds an empty output, nothing
to read or compare. Outside a notebook kernel it shows nothing. Its updates are widget messages, sent at most every 0.1
s, so a step that reports often costs almost nothing.

>>> with Progress("recording") as progress:   # outside a notebook: nothing is shown
...     progress.update(1, 2, "forward pass")
>>> progress.shown
False
"""

from __future__ import annotations

import html
import time
from typing import Any

__all__ = ["Progress"]

_EVERY_S = 0.1
_AFTER_S = 0.5


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class Progress:
    """``with Progress(title) as p: ... p.update(done, total, text) ...`` shows ``title``, a bar at
    ``done / total`` and ``text`` under the running cell, and removes them when the block ends."""

    def __init__(self, title: str, *, after: float | None = None) -> None:
        self.title = title
        self.after = _AFTER_S if after is None else after
        self.shown = False
        self._live = False
        self._handle: Any = None
        self._start = self._last = 0.0

    def __enter__(self) -> "Progress":
        self._live = _in_kernel()
        self._start = time.perf_counter()
        return self

    def _show(self) -> None:
        import ipywidgets as W
        from IPython.display import display

        self._bar = W.FloatProgress(value=0.0, min=0.0, max=1.0, layout=W.Layout(width="200px"))
        self._text = W.HTML(f"<b>{html.escape(self.title)}</b>")
        self._box = W.HBox([self._text, self._bar], layout=W.Layout(align_items="center", grid_gap="8px"))
        # the widget's view only (no text/plain): nothing of it is compared or read in a stored output
        bundle = {"application/vnd.jupyter.widget-view+json": {
            "version_major": 2, "version_minor": 0, "model_id": self._box.model_id}}
        self._handle = display(bundle, raw=True, display_id=True)
        self.shown = True

    def update(self, done: float, total: float, text: str) -> None:
        """Show ``text`` and the bar at ``done / total`` (at most every 0.1 s, from 0.5 s on)."""
        if not self._live:
            return
        now = time.perf_counter()
        if now - self._last < _EVERY_S and done < total:
            return
        if not self.shown:
            if now - self._start < self.after:
                return
            self._show()
        self._last = now
        self._bar.value = min(1.0, done / total) if total else 0.0
        self._text.value = f"<b>{html.escape(self.title)}</b> {html.escape(text)}"

    def __exit__(self, *exc: object) -> None:
        if self.shown:
            self._handle.update({}, raw=True)  # the output becomes empty
            for widget in (self._box, self._text, self._bar):
                widget.close()
            self.shown = False
        self._live = False
