"""Live panels: controls that register and remove hooks while you watch the effect.

A :class:`Panel` holds checkboxes (each one a hook you switch on and off), sliders, dropdowns and
text boxes (values the hooks and the view read; :mod:`hooklab.lab.controls`), and a view rebuilt
after every change. The view is made of widget *values* (an ``HTML`` table, an optional ``Image``):
nothing is printed from a callback, so the panel behaves the same under nbval as in a browser. A
**reset** button puts every control back where it started; a status line says "updating…" while a
change is computed. A cell can drive the panel from code, which fires the same callbacks a click does:

>>> import torch, torch.nn as nn, hooklab
>>> layer = nn.Linear(1, 1, bias=False); _ = nn.init.ones_(layer.weight)
>>> panel = hooklab.Panel("demo", lambda p: {"output": layer(torch.ones(1)).item()})
>>> _ = panel.toggle("double", lambda hooks, p: hooks.forward(layer, lambda m, a, out: out * 2))
>>> panel.set(double=True)["output"], panel.set(double=False)["output"]
(2.0, 1.0)
>>> _ = panel.textbox("find"); _ = panel.dropdown("layer", ["conv1", "bn1", "fc"], filter_by="find")
>>> panel.set(find="conv")["layer"], panel.options("layer")
('conv1', ['conv1'])

What a screen reader gets is what ipywidgets gives: the title is a heading; checkboxes, dropdowns,
text boxes and the reset button carry their labels; the view sits in an ``aria-live`` region, but
ipywidgets replaces that region on every update, and slider handles have no accessible name.
"""

from __future__ import annotations

import contextlib
import html
import re
import threading
from typing import Any, Callable, ClassVar, Iterator, Mapping, Union

import ipywidgets as W

from ..claims import show
from ..hooks import Hooks
from ..threads import one_thread_off_main
from .controls import Controls, filter_options

__all__ = ["Panel", "filter_options", "BUSY_HTML"]

#: What a render function returns: an HTML string, or rows ``{label: value}`` shown as a table.
View = Union[str, Mapping[str, Any]]
#: Shown in the status line while a change is computed (the view still shows the previous state).
BUSY_HTML = "<span class='hooklab-busy' style='color:#8a5a00'>⏳ updating…</span>"


class Panel:
    """A live lab: controls on top, the view below; show it by ending a cell with it.

    ``title`` also names the panel (or ``name``): building one under a name in use closes the older one, so its cell can
    run again. ``render(panel)`` returns HTML or ``{label: value}`` rows, after every change; ``plot(panel, fig)`` draws
    into a fresh ``Figure`` (or returns PNG bytes) of ``figsize`` inches; ``beside`` is a widget right of the view;
    ``on_close()`` runs when it closes. Hooks and ``render`` read ``panel.values``. Checkboxes ticked together register
    their hooks in tick order (``panel.ticked``), and keep it when a slider makes them register again.
    """

    #: The open panels, by name: building one under a name in use closes the older one.
    open_panels: ClassVar[dict[str, "Panel"]] = {}

    def __init__(self, title: str, render: Callable[["Panel"], View], *,
                 plot: Callable[["Panel", Any], bytes | None] | None = None, name: str | None = None,
                 figsize: tuple[float, float] = (5.0, 2.6), beside: W.Widget | None = None,
                 on_close: Callable[[], None] | None = None) -> None:
        self.title, self.name = title, name or title
        previous = Panel.open_panels.get(self.name)
        if previous is not None:
            previous.close()
        Panel.open_panels[self.name] = self
        self._render, self._plot, self._figsize, self._on_close = render, plot, figsize, on_close
        self.controls = Controls(self._changed)  #: the controls, by name (a mapping to their widgets)
        self.rows: dict[str, Any] = {}  #: the view's rows (when render returns rows)
        self.error: BaseException | None = None  #: what the latest update raised, if anything
        self.updates = 0  #: views shown so far; the view's HTML carries it as ``data-update``
        self.busy = False  #: True while a change is computed
        self._busy_depth, self._lock = 0, threading.RLock()  # one update at a time (a click in a subshell waits)
        self._body, self._stale = "", True  # rendered when first shown, not once per control added
        self._pending: list[str] | None = None  # inside set(): what changed, applied once at its end
        self.view = W.HTML(self._wrap(""))
        self.image = W.Image(format="png", layout=W.Layout(max_width="640px")) if plot else None
        self.reset_button = W.Button(description="reset", tooltip="every control back to its start",
                                     layout=W.Layout(width="auto"))
        self.reset_button.on_click(lambda _: self._reset())
        self.status = W.HTML("", layout=W.Layout(min_width="8em", margin="0 0 0 8px"))
        heading = W.HTML(f"<h3 class='hooklab-title' style='margin:0 0 4px 0;font-size:1.05em'>{html.escape(title)}</h3>")
        actions = W.HBox([self.reset_button, self.status], layout=W.Layout(align_items="center"))
        view: W.Widget = self.view
        if beside is not None:
            self.view.layout = W.Layout(flex="0 0 auto", width="auto")
            view = W.HBox([self.view, beside], layout=W.Layout(align_items="flex-start", grid_gap="12px"))
        parts = [heading, self.controls.box, actions, view] + ([self.image] if self.image is not None else [])
        self.widget = W.VBox(parts, layout=W.Layout(border="1px solid #ccc", padding="6px"))  #: what is shown
        for widget, css in [(self.widget, "panel"), (self.controls.box, "controls"), (actions, "actions"),
                            (self.reset_button, "reset"), (self.status, "status"), (self.view, "view"),
                            (self.image, "plot")]:
            if widget is not None:
                widget.add_class(f"hooklab-{css}")  # stable classes, for the browser test and for styling

    # ------------------------------------------------------------------ controls
    def toggle(self, name: str, register: Callable[[Hooks, "Panel"], Any], *, value: bool = False,
               description: str | None = None) -> W.Checkbox:
        """A checkbox that, when ticked, calls ``register(hooks, panel)``; unticking removes every
        hook that call registered. Slider and dropdown changes register the ticked hooks again."""
        box = self._add(name, W.Checkbox(value=False, description=description or name, indent=False),
                        register=register, start=bool(value))
        box.value = bool(value)
        return box

    def slider(self, name: str, min: float, max: float, step: float, value: float, *,
               description: str | None = None) -> W.FloatSlider:
        """A slider whose value hooks read from ``panel.values[name]``."""
        return self._add(name, W.FloatSlider(value=value, min=min, max=max, step=step, readout_format=".2f",
                                             description=description or name, continuous_update=False,
                                             style={"description_width": "initial"}))

    def textbox(self, name: str, value: str = "", *, description: str | None = None,
                placeholder: str = "") -> W.Text:
        """A text box (applied on Enter or when you leave it); a :meth:`dropdown`'s ``filter_by``."""
        return self._add(name, W.Text(value=value, placeholder=placeholder, description=description or name,
                                      continuous_update=False, style={"description_width": "initial"}))

    def dropdown(self, name: str, options: Any, value: Any = None, *, description: str | None = None,
                 filter_by: str | None = None) -> W.Dropdown:
        """A dropdown. ``filter_by`` names a :meth:`textbox` that narrows its options (see
        :func:`filter_options`); the option picked stays listed, first, until another is picked."""
        dropdown = W.Dropdown(options=options, description=description or name, style={"description_width": "initial"})
        if value is not None:
            dropdown.value = value
        return self._add(name, dropdown, filter_by=filter_by)

    def _add(self, name: str, widget: Any, **how: Any) -> Any:
        self._stale = True
        return self.controls.add(name, widget, **how)

    values = property(lambda self: self.controls.current(), doc="Every control's value, by name.")
    ticked = property(lambda self: self.controls.ticked, doc="The ticked toggles, in the order they were ticked.")
    options = property(lambda self: self.controls.options, doc="``options(name)``: what a dropdown lists now.")

    # ------------------------------------------------------------------ changes
    @contextlib.contextmanager
    def _working(self) -> Iterator[None]:
        """The busy state (``panel.busy``, "updating…") while a change is computed."""
        one_thread_off_main()  # a click in a kernel subshell: one PyTorch thread there (hooklab.threads)
        with self._lock:
            if self._busy_depth == 0:
                self.busy, self.status.value = True, BUSY_HTML
            self._busy_depth += 1
            try:
                yield
            finally:
                self._busy_depth -= 1
                if self._busy_depth == 0:
                    self.busy, self.status.value = False, ""

    def _changed(self, name: str) -> None:
        if self._pending is not None:  # inside set(): applied once at its end
            self._pending.append(name)
        else:
            self._apply([name])

    def _apply(self, changed: list[str]) -> None:
        with self._working():
            try:
                self.controls.follow(changed, self)
            except Exception as exc:  # shown in the view; set() raises it for code
                self._show_error(exc)
                return
            self.refresh()

    # ------------------------------------------------------------------ the view
    def _wrap(self, body: str) -> str:
        return f"<div class='hooklab-view-body' data-update='{self.updates}' aria-live='polite'>{body}</div>"

    def _show(self, body: str) -> None:
        self.updates, self._body = self.updates + 1, body
        self.view.value = self._wrap(body)

    def _show_error(self, exc: Exception) -> None:
        self.error, self.rows = exc, {}
        self._show(f"<pre style='color:#b00'>{html.escape(type(exc).__name__)}: {html.escape(str(exc))}</pre>")

    def refresh(self) -> None:
        """Rebuild the view from ``render`` (and ``plot``)."""
        one_thread_off_main()
        with self._lock:
            self._stale = False
            try:
                result = self._render(self)
                rows, body = (dict(result), _table(result)) if isinstance(result, Mapping) else ({}, str(result))
                if self._plot is not None and self.image is not None:
                    from .plots import figure, to_png
                    fig = figure(self._figsize)
                    drawn = self._plot(self, fig)
                    self.image.value = drawn if isinstance(drawn, bytes) else to_png(fig)  # before the view
                    fig.hooklab_shown = True  # type: ignore[attr-defined]  # the panel's: unused when drawn is bytes
                self.rows, self.error = rows, None
                self._show(body)
            except Exception as exc:
                self._show_error(exc)

    def _fresh(self) -> None:
        if self._stale:
            self.refresh()

    # ------------------------------------------------------------------ driving from code
    def set(self, **values: Any) -> dict[str, Any]:
        """Set controls by name, as clicks would (in the order given), then register the hooks and rebuild the view
        once; return :meth:`state`. An unknown name changes nothing. Raises the error a hook or the view raised."""
        unknown = [name for name in values if name not in self.controls]
        if unknown:
            raise KeyError(f"this panel has no control {unknown[0]!r}; it has {list(self.controls)}.")
        with self._lock:  # a click arriving meanwhile (in a kernel subshell) waits
            self._pending = []
            try:
                self.controls.assign(values)
            finally:
                changed, self._pending = self._pending, None
            if changed:
                self._apply(changed)
            if self.error is not None:
                raise self.error
            return self.state()

    def reset(self) -> dict[str, Any]:
        """Every control back where it started, every hook removed (a toggle that started ticked
        registers again), the view shown again; return :meth:`state`. The reset button does this."""
        self._reset()
        if self.error is not None:
            raise self.error
        return self.state()

    def _reset(self) -> None:
        with self._working():
            self._apply(self.controls.restore())

    untick_all = property(lambda self: self.controls.untick_all, doc="Untick every toggle, remove its hooks, no update.")

    def state(self) -> dict[str, Any]:
        """The controls' values, the number of hooks the panel holds, and the view's rows."""
        self._fresh()
        return {**self.values, "hooks": self.hook_count(), **self.rows}

    hook_count = property(lambda self: self.controls.hook_count, doc="How many PyTorch hooks the toggles hold now.")

    @property
    def text(self) -> str:
        """The view as plain text (tags stripped)."""
        self._fresh()
        if self.rows:
            return "\n".join(f"{k}: {show(v)}" for k, v in self.rows.items())
        return html.unescape(re.sub(r"<[^>]+>", " ", self.view.value)).strip()

    # ------------------------------------------------------------------ ending
    def remove(self) -> None:
        """Remove every hook the panel holds and disable its controls."""
        self.controls.remove_hooks()
        for widget in (*self.controls.values(), self.reset_button):
            widget.disabled = True
        if Panel.open_panels.get(self.name) is self:
            del Panel.open_panels[self.name]

    def close(self) -> None:
        """Remove the hooks, close the widgets, and let go of what the panel was built with (render,
        plot, the hooks' register functions and what they hold, such as a model)."""
        self.remove()
        self.controls.release()
        self._render, self._plot, self.rows = _closed_view, None, {}
        for widget in (*_descendants(self.widget), self.widget):
            widget.close()
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()

    # ------------------------------------------------------------------ showing
    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The live widget, plus an HTML snapshot that a stored notebook shows before it runs."""
        self._fresh()
        plain = repr(self)
        controls = html.escape(", ".join(f"{k} = {show(v)}" for k, v in self.values.items()) or "no controls")
        return {"text/plain": plain if len(plain) <= 110 else plain[:110] + "…",
                "text/html": f"<div style='border:1px solid #ccc;padding:6px'><b>{html.escape(self.title)}</b> <i>(a "
                             f"live panel: run the notebook to use its controls)</i><div>{controls}</div>"
                             f"{self._body}</div>",
                "application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0,
                                                              "model_id": self.widget.model_id}}

    if not hasattr(W.DOMWidget, "_repr_mimebundle_"):
        def _ipython_display_(self, **kwargs: Any) -> None:
            """ipywidgets 7 (Colab's) shows a widget through this method, which IPython prefers."""
            from IPython.display import display
            display(self._repr_mimebundle_(), raw=True)

    def __repr__(self) -> str:
        return f"<hooklab Panel {self.title!r}: {', '.join(self.controls) or 'no controls'}>"


def _descendants(widget: Any) -> list[Any]:
    """Every widget inside ``widget``, deepest first."""
    return [w for child in getattr(widget, "children", ()) for w in (*_descendants(child), child)]


def _closed_view(panel: Panel) -> str:
    return "<i>this panel was closed</i>"


def _table(rows: Mapping[str, Any]) -> str:
    return "<table>" + "".join(f"<tr><td style='padding-right:1em'>{html.escape(str(k))}</td>"
                               f"<td><code>{html.escape(show(v))}</code></td></tr>" for k, v in rows.items()) + "</table>"
