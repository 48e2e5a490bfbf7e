"""Live panels: controls that register and remove hooks while you watch the effect.

A :class:`Panel` holds checkboxes (each one a hook you switch on and off), sliders and
dropdowns (values the hooks and the view read), and a view rebuilt after every change. The
view is made of widget *values* (an ``HTML`` table and an optional matplotlib ``Image``);
nothing is printed from a callback, so the panel behaves the same under nbval as in a browser.

Under the controls, a **reset** button puts every control back where it started (and with it
every hook), and a status line says "updating…" while a change is being computed. The title is a
heading, every control carries its label for screen readers (slider handles included), and the
view is a polite live region, so a screen reader reads out each new view.

A cell can drive the panel from code, which fires the same callbacks a click does:

>>> import torch, torch.nn as nn, hooklab
>>> layer = nn.Linear(1, 1, bias=False); _ = nn.init.ones_(layer.weight)
>>> panel = hooklab.Panel("demo", lambda p: {"output": layer(torch.ones(1)).item()})
>>> _ = panel.toggle("double", lambda hooks, p: hooks.forward(layer, lambda m, a, out: out * 2))
>>> panel.set(double=True)["output"], panel.set(double=False)["output"]
(2.0, 1.0)
"""

from __future__ import annotations

import contextlib
import fnmatch
import html
import re
import threading
import time
from typing import Any, Callable, ClassVar, Iterator, Mapping, Sequence, Union

import ipywidgets as W

from ._threads import one_thread_off_main
from .hooks import Hooks
from .portable import PerRun

__all__ = ["Panel", "filter_options"]

#: What a render function returns: an HTML string, or rows ``{label: value}`` shown as a table.
View = Union[str, Mapping[str, Any]]

_GLOB = set("*?[")


def _label(option: Any) -> str:
    return str(option[0]) if isinstance(option, tuple) else str(option)


def filter_options(options: Sequence[Any], text: str) -> list[Any]:
    """The options whose label matches every word of ``text`` (all of them when ``text`` is blank).

    Options are labels, or ``(label, value)`` pairs as ``ipywidgets.Dropdown`` takes them. Case
    does not matter. A word with a glob character (``*``, ``?``, ``[``) must match one whole word
    of the label; any other word must appear somewhere in it.

    >>> layers = ["conv1 · Conv2d · leaf", "layer1.0.conv1 · Conv2d · leaf", "layer1 · Sequential · container"]
    >>> filter_options(layers, "layer1.*")
    ['layer1.0.conv1 · Conv2d · leaf']
    >>> filter_options(layers, "conv2d"), len(filter_options(layers, "  "))
    (['conv1 · Conv2d · leaf', 'layer1.0.conv1 · Conv2d · leaf'], 3)
    >>> filter_options([("relu · ReLU", "relu"), ("fc · Linear", "fc")], "lin")
    [('fc · Linear', 'fc')]
    """
    terms = text.lower().split()
    kept = []
    for option in options:
        label = _label(option).lower()
        words = label.split()
        if all(any(fnmatch.fnmatchcase(w, t) for w in words) if _GLOB & set(t) else t in label for t in terms):
            kept.append(option)
    return kept


#: Shown in the status line while a change is computed (the view still shows the previous state).
BUSY_HTML = "<span class='hooklab-busy' style='color:#8a5a00'>⏳ updating…</span>"

#: Runs once in the page where the panel's title is shown (an image that fails to load runs it: an
#: HTML widget runs no <script>). ipywidgets gives slider handles no accessible name, so this names
#: each handle (and its editable readout) after the slider's label, whenever the controls are
#: (re)drawn, and makes the view's element a polite live region that stays in the page.
_A11Y_JS = """(function (img) {
  var tries = 0;
  function label(panel) {
    panel.querySelectorAll('.hooklab-controls .widget-slider').forEach(function (s) {
      var l = s.querySelector('.widget-label');
      var name = l ? l.textContent.trim() : '';
      if (!name) return;
      var h = s.querySelector('.noUi-handle');
      if (h && h.getAttribute('aria-label') !== name) h.setAttribute('aria-label', name);
      var r = s.querySelector('.widget-readout');
      if (r && r.getAttribute('aria-label') !== name + ' value') {
        r.setAttribute('role', 'textbox'); r.setAttribute('aria-label', name + ' value');
      }
    });
    var v = panel.querySelector('.hooklab-view');
    if (v && v.getAttribute('aria-live') !== 'polite') v.setAttribute('aria-live', 'polite');
  }
  function start() {
    var panel = img.closest('.hooklab-panel');
    if (!panel) { if (tries++ < 400) setTimeout(start, 50); return; }
    label(panel);
    new MutationObserver(function () { label(panel); }).observe(panel, {childList: true, subtree: true});
  }
  start();
})(this)"""


def _title_html(title: str) -> str:
    """The panel's title as a heading, plus the one-off script that labels the sliders."""
    js = " ".join(line.strip() for line in _A11Y_JS.splitlines())
    return (f"<h3 class='hooklab-title' style='margin:0 0 4px 0;font-size:1.05em'>{html.escape(title)}</h3>"
            f"<img alt='' hidden src='data:,' onerror=\"{html.escape(js)}\">")


def _fmt(value: Any) -> str:
    """How the view shows a value: a :class:`~hooklab.portable.PerRun` figure as ``≈`` and its
    digits, another float with 4 significant digits, anything else as ``str``."""
    if isinstance(value, PerRun):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _descendants(widget: W.Widget) -> list[W.Widget]:
    """Every widget inside ``widget`` (its children, theirs, ...), deepest first."""
    found: list[W.Widget] = []
    for child in getattr(widget, "children", ()):
        found += _descendants(child) + [child]
    return found


def _closed_view(panel: "Panel") -> str:
    return "<i>this panel was closed</i>"


def _closed_register(hooks: Hooks, panel: "Panel") -> None:
    raise RuntimeError("this panel was closed: build it again (re-run the cell that made it).")


class Panel(W.VBox):
    """A live lab: controls on top, the view below.

    Args:
        title: shown above the controls; also names the panel. Building a panel with a title
            (or ``name``) already in use closes the older one (:meth:`close`), so the cell that
            builds a panel can be re-run safely.
        render: ``render(panel) -> str | dict``, called after every change. Return HTML, or
            ``{label: value}`` rows (shown as a table; ``panel.state()`` returns them too).
        plot: optional ``plot(panel, fig)`` drawing into a fresh ``matplotlib.figure.Figure``;
            shown as a PNG under the table. It may instead return PNG bytes of its own (a figure
            kept between updates, redrawn by :class:`hooklab.plots.LiveCanvas`); ``fig`` is then
            left unused.
        figsize: the plot's size in inches.

    Read ``panel.values`` (control name -> value) in hooks and in ``render``. The reset button
    (``panel.reset()`` from code) puts every control back where it started; ``panel.busy`` is True
    while a change is computed, and the status line beside the button says so in the page.
    """

    _open: ClassVar[dict[str, "Panel"]] = {}

    def __init__(self, title: str, render: Callable[["Panel"], View], *,
                 plot: Callable[["Panel", Any], bytes | None] | None = None, name: str | None = None,
                 figsize: tuple[float, float] = (5.0, 2.6)) -> None:
        self.title = title
        self.name = name or title
        previous = Panel._open.get(self.name)
        if previous is not None:
            previous.close()
        Panel._open[self.name] = self
        self._render, self._plot, self._figsize = render, plot, figsize
        self._toggles: dict[str, tuple[W.Checkbox, Hooks, Callable]] = {}
        self._inputs: dict[str, W.ValueWidget] = {}
        self._order: list[str] = []
        self.rows: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.last_update_ms = 0.0
        #: how many views have been shown; the view's HTML carries it as ``data-update``
        self.updates = 0
        #: True while a change is computed (the status line says "updating…" meanwhile)
        self.busy = False
        self._busy_depth = 0
        # one update at a time: a click that JupyterLab runs in a kernel subshell and a cell's
        # panel.set() may otherwise change the hooks and the picture together
        self._lock = threading.RLock()
        self._body = ""  # the view's HTML without its wrapper (the stored snapshot shows it)
        self._start: dict[str, Any] = {}  # each control's value when it was added: reset() goes back to it
        self._pending: list[str | None] | None = None  # inside set(): what changed, applied once at the end
        self._quiet = 0  # inside _silenced(): value changes re-register nothing and render nothing
        self._filters: dict[str, list[tuple[str, list[Any]]]] = {}  # text control -> [(dropdown, all its options)]
        self._controls = W.VBox([])
        self.view = W.HTML(self._wrap(""))
        self.image = W.Image(format="png", layout=W.Layout(max_width="640px")) if plot else None
        self.reset_button = W.Button(description="reset", tooltip="every control back to its start",
                                     layout=W.Layout(width="auto"))
        self.reset_button.on_click(lambda _: self._reset())
        self.status = W.HTML("", layout=W.Layout(min_width="8em", margin="0 0 0 8px"))
        actions = W.HBox([self.reset_button, self.status], layout=W.Layout(align_items="center"))
        children: list[W.Widget] = [W.HTML(_title_html(title)), self._controls, actions, self.view]
        if self.image is not None:
            children.append(self.image)
        super().__init__(children, layout=W.Layout(border="1px solid #ccc", padding="6px"))
        # stable CSS classes, for the browser test and for styling
        self.add_class("hooklab-panel")
        self._controls.add_class("hooklab-controls")
        actions.add_class("hooklab-actions")
        self.reset_button.add_class("hooklab-reset")
        self.status.add_class("hooklab-status")
        self.view.add_class("hooklab-view")
        if self.image is not None:
            self.image.add_class("hooklab-plot")
        self._stale = True  # rendered on display or first read, not once per control added

    def toggle(self, name: str, register: Callable[[Hooks, "Panel"], Any], *, value: bool = False,
               description: str | None = None) -> W.Checkbox:
        """A checkbox that, when ticked, calls ``register(hooks, panel)``; unticking removes
        every hook that call registered. Slider and dropdown changes re-register ticked hooks."""
        self._check_new(name)
        box = W.Checkbox(value=False, description=description or name, indent=False)
        self._toggles[name] = (box, Hooks(f"panel:{self.name}:{name}"), register)
        box.observe(lambda change, n=name: self._changed(n), names="value")
        self._add_control(box)
        if value:
            box.value = True
        self._start[name] = bool(value)
        return box

    def slider(self, name: str, min: float, max: float, step: float, value: float, *,
               description: str | None = None) -> W.FloatSlider:
        """A slider whose value hooks read from ``panel.values[name]``."""
        self._check_new(name)
        slider = W.FloatSlider(value=value, min=min, max=max, step=step, description=description or name,
                               continuous_update=False, readout_format=".2f",
                               style={"description_width": "initial"})
        widget = self._add_input(name, slider)
        self._start[name] = widget.value
        return widget

    def dropdown(self, name: str, options: Any, value: Any = None, *, description: str | None = None,
                 filter_by: str | None = None) -> W.Dropdown:
        """A dropdown whose value hooks read from ``panel.values[name]``.

        ``filter_by`` names a :meth:`textbox` of this panel that narrows the options, for a
        long list (every module of a model): only the options whose label matches the text are
        listed (see :func:`filter_options`). Text that matches nothing leaves the list as it was.
        The chosen option stays chosen while it is listed; when the filter hides it, the first one
        listed is chosen.
        """
        if filter_by is not None and not isinstance(self._inputs.get(filter_by), W.Text):
            raise ValueError(f"filter_by={filter_by!r} must name a textbox added before this dropdown: "
                             f"call panel.textbox({filter_by!r}) first.")
        self._check_new(name)
        dropdown = W.Dropdown(options=options, description=description or name,
                              style={"description_width": "initial"})
        if value is not None:
            dropdown.value = value
        if filter_by is not None:
            self._filters.setdefault(filter_by, []).append((name, list(dropdown.options)))
        widget = self._add_input(name, dropdown)
        if filter_by is not None:
            self._narrow(filter_by)
        self._start[name] = widget.value
        return widget

    def textbox(self, name: str, value: str = "", *, description: str | None = None,
             placeholder: str = "") -> W.Text:
        """A text box whose value hooks read from ``panel.values[name]``; it applies when you
        press Enter or leave the box. Pass its name as ``filter_by`` to a :meth:`dropdown` to make
        it narrow that dropdown's options.

        >>> import hooklab
        >>> panel = hooklab.Panel("filter demo", lambda p: {"picked": p.values["layer"]})
        >>> _ = panel.textbox("find"); _ = panel.dropdown("layer", ["conv1", "bn1", "layer1.conv1"], filter_by="find")
        >>> panel.set(find="conv")["picked"], panel.options("layer")
        ('conv1', ['conv1', 'layer1.conv1'])
        >>> panel.set(find="bn")["picked"]  # conv1 is no longer listed: the first one listed is picked
        'bn1'
        """
        self._check_new(name)
        box = W.Text(value=value, placeholder=placeholder, description=description or name,
                     continuous_update=False, style={"description_width": "initial"})
        widget = self._add_input(name, box)
        self._start[name] = widget.value
        return widget

    def _check_new(self, name: str) -> None:
        if name in self._order:
            raise ValueError(f"this panel already has a control named {name!r}; pick another name.")
        self._order.append(name)

    def _add_control(self, widget: W.Widget) -> None:
        self._controls.children = (*self._controls.children, widget)
        self._stale = True

    def _add_input(self, name: str, widget: W.ValueWidget) -> Any:
        self._inputs[name] = widget
        widget.observe(lambda change, n=name: self._changed(None, n), names="value")
        self._add_control(widget)
        return widget

    def options(self, name: str) -> list[Any]:
        """The options a dropdown lists right now (a filter may have narrowed them)."""
        return list(self._inputs[name].options)

    def _narrow(self, text_name: str) -> None:
        """List, in each dropdown this text control filters, the options that match its text."""
        text = self._inputs[text_name].value
        for dropdown_name, everything in self._filters.get(text_name, []):
            kept = filter_options(everything, text) if text.strip() else everything
            widget = self._inputs[dropdown_name]
            if kept and list(widget.options) != kept:  # a text that matches nothing changes nothing
                chosen = widget.value
                with self._silenced():  # the change of text re-renders once, below
                    widget.options = kept  # ipywidgets then picks the first option listed
                    if chosen in widget._options_values:
                        widget.value = chosen

    def _not_listed(self, name: str, value: Any) -> str:
        listed = list(self._inputs[name]._options_values)
        narrowed = [(t, opts) for t, pairs in self._filters.items() for d, opts in pairs if d == name]
        hint = ""
        if narrowed and len(listed) < len(narrowed[0][1]):
            text = narrowed[0][0]
            hint = f" while {text!r} is {self._inputs[text].value!r}: set {text}='' (or one that lists it) first"
        more = " ..." if len(listed) > 12 else ""
        return f"{value!r} is not an option of {name!r}{hint}. It lists {listed[:12]}{more}."

    @contextlib.contextmanager
    def _working(self) -> Iterator[None]:
        """Show the busy state (status line "updating…", ``panel.busy``) while a change is computed.
        The status widget's new value goes to the page before the work starts."""
        one_thread_off_main()  # a click in a kernel subshell: one PyTorch thread there (hooklab._threads)
        with self._lock:
            if self._busy_depth == 0:
                self.busy = True
                self.status.value = BUSY_HTML
            self._busy_depth += 1
            try:
                yield
            finally:
                self._busy_depth -= 1
                if self._busy_depth == 0:
                    self.busy = False
                    self.status.value = ""

    @contextlib.contextmanager
    def _silenced(self) -> Iterator[None]:
        """Change control values without re-registering hooks or rendering for each change."""
        self._quiet += 1
        try:
            yield
        finally:
            self._quiet -= 1

    @property
    def values(self) -> dict[str, Any]:
        """Every control's current value, by name."""
        return {n: self._toggles[n][0].value if n in self._toggles else self._inputs[n].value for n in self._order}

    def _changed(self, toggle: str | None, source: str | None = None) -> None:
        """A control changed (``toggle``: that checkbox; ``None``: a slider, dropdown or text
        ``source``, which every ticked hook may read). Inside :meth:`set`, only noted; applied once
        at its end."""
        if self._quiet:
            return
        if source in self._filters:
            self._narrow(source)
        if self._pending is not None:
            self._pending.append(toggle)
        else:
            self._apply(list(self._toggles) if toggle is None else [toggle])

    def _apply(self, names: list[str]) -> None:
        """Re-register the hooks of these toggles (each only if ticked), then rebuild the view."""
        with self._working():
            try:
                for name in names:
                    box, hooks, register = self._toggles[name]
                    hooks.remove()
                    if box.value:
                        register(hooks, self)
            except Exception as exc:  # shown in the view; set() re-raises it for code
                self._show_error(exc)
                return
            self.refresh()

    def _wrap(self, body: str) -> str:
        """The view's HTML: ``body`` in a polite live region that carries the update count."""
        return f"<div class='hooklab-view-body' data-update='{self.updates}' aria-live='polite'>{body}</div>"

    def _show(self, body: str) -> None:
        """Show a new view (every view shown counts as one update, ``data-update`` in the page)."""
        self.updates += 1
        self._body = body
        self.view.value = self._wrap(body)

    def _show_error(self, exc: Exception) -> None:
        self.error, self.rows = exc, {}  # the view shows only the error now
        self._show(f"<pre style='color:#b00'>{html.escape(type(exc).__name__)}: {html.escape(str(exc))}</pre>")

    def _fresh(self) -> None:
        if self._stale:
            self.refresh()

    def refresh(self) -> None:
        """Rebuild the view from ``render`` (and ``plot``)."""
        one_thread_off_main()
        with self._lock:
            self._refresh()

    def _refresh(self) -> None:
        self._stale = False
        start = time.perf_counter()
        try:
            result = self._render(self)
            if isinstance(result, Mapping):
                rows = dict(result)
                body = "<table>" + "".join(
                    f"<tr><td style='padding-right:1em'>{html.escape(str(k))}</td>"
                    f"<td><code>{html.escape(_fmt(v))}</code></td></tr>" for k, v in rows.items()) + "</table>"
            else:
                rows, body = {}, str(result)
            if self._plot is not None and self.image is not None:
                from .plots import figure, to_png
                fig = figure(self._figsize)
                drawn = self._plot(self, fig)
                # before the view: a new data-update means all of it arrived
                self.image.value = drawn if isinstance(drawn, bytes) else to_png(fig)
            self.rows, self.error = rows, None
            self._show(body)
        except Exception as exc:
            self._show_error(exc)
        self.last_update_ms = (time.perf_counter() - start) * 1000

    def set(self, **values: Any) -> dict[str, Any]:
        """Set controls by name, as clicks would, and return :meth:`state`.

        All the values are set first; then the hooks are re-registered and the view rebuilt once
        (not once per control, so no in-between combination is ever computed). An unknown name
        changes nothing. Raises the error a hook or the view raised, so a checked cell shows it.
        """
        unknown = [name for name in values if name not in self._toggles and name not in self._inputs]
        if unknown:
            raise KeyError(f"this panel has no control {unknown[0]!r}; it has {list(self.values)}.")
        with self._lock:  # a click arriving meanwhile (in a kernel subshell) waits
            return self._set(values)

    def _set(self, values: dict[str, Any]) -> dict[str, Any]:
        self._pending = []
        try:
            for name, value in values.items():
                if name in self._toggles:
                    self._toggles[name][0].value = bool(value)
                else:
                    widget = self._inputs[name]
                    if isinstance(widget, W.Dropdown) and value not in widget._options_values:
                        raise ValueError(self._not_listed(name, value))
                    widget.value = value
        finally:
            changed, self._pending = self._pending, None
        if changed:
            self._apply(list(self._toggles) if None in changed else [n for n in self._toggles if n in changed])
        if self.error is not None:
            raise self.error
        return self.state()

    def reset(self) -> dict[str, Any]:
        """Put every control back where it started, remove every hook, and show the view again
        (the first view, when the view depends only on the controls); return :meth:`state`.
        The reset button does this. A toggle that started ticked registers its hook again."""
        self._reset()
        if self.error is not None:
            raise self.error
        return self.state()

    def _reset(self) -> None:
        with self._working():
            with self._silenced():  # every value first, then the hooks and the view once
                for name in self._order:  # a filter's text comes before the dropdowns it narrows
                    widget = self._toggles[name][0] if name in self._toggles else self._inputs[name]
                    widget.value = self._start[name]
                    if name in self._filters:
                        self._narrow(name)
            for _, hooks, _ in self._toggles.values():
                hooks.remove()
            self._apply(list(self._toggles))

    def state(self) -> dict[str, Any]:
        """The controls' values, the number of hooks the panel holds, and the view's rows."""
        self._fresh()
        return {**self.values, "hooks": self.hook_count(), **self.rows}

    def hook_count(self) -> int:
        """How many PyTorch hooks the panel's toggles hold right now."""
        return sum(len(hooks) for _, hooks, _ in self._toggles.values())

    @property
    def text(self) -> str:
        """The view as plain text (tags stripped)."""
        self._fresh()
        if self.rows:
            return "\n".join(f"{k}: {_fmt(v)}" for k, v in self.rows.items())
        return html.unescape(re.sub(r"<[^>]+>", " ", self.view.value)).strip()

    def remove(self) -> None:
        """Remove every hook the panel holds and disable its controls."""
        for box, hooks, _ in self._toggles.values():
            hooks.remove()
            box.disabled = True
        for widget in self._inputs.values():
            widget.disabled = True
        self.reset_button.disabled = True
        if Panel._open.get(self.name) is self:
            del Panel._open[self.name]

    def close(self) -> None:
        """Remove the panel's hooks, close its widgets (every control and view in it), and let go of
        what it was built with (the render and plot functions, the hooks' register functions, and
        what they hold, such as a model): afterwards nothing the panel holds keeps them alive."""
        if "_toggles" in vars(self):  # also called on a panel whose construction failed
            self.remove()
            self._release()
        for widget in _descendants(self):
            widget.close()
        super().close()

    def _release(self) -> None:
        """Drop every reference to what the panel was built with (called by :meth:`close`)."""
        self._render = _closed_view
        self._plot = None
        self._toggles = {name: (box, hooks, _closed_register) for name, (box, hooks, _) in self._toggles.items()}
        self.rows = {}

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """The live widget, plus an HTML snapshot that a stored notebook shows before it runs."""
        self._fresh()
        parent = getattr(super(), "_repr_mimebundle_", None)
        if parent is not None:
            bundle = parent(**kwargs)
        else:  # ipywidgets 7: the widget's own bundle, as its _ipython_display_ builds it
            plain = repr(self)
            bundle = {"text/plain": plain if len(plain) <= 110 else plain[:110] + "…",
                      "application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0,
                                                                   "model_id": self._model_id}}
        if isinstance(bundle, dict):
            controls = ", ".join(f"{k} = {_fmt(v)}" for k, v in self.values.items()) or "no controls"
            bundle["text/html"] = (
                "<div style='border:1px solid #ccc;padding:6px'>"
                f"<b>{html.escape(self.title)}</b> <i>(a live panel: run the notebook to use its controls)</i>"
                f"<div>{html.escape(controls)}</div>{self._body}</div>"
            )
        return bundle

    if not hasattr(W.DOMWidget, "_repr_mimebundle_"):
        def _ipython_display_(self, **kwargs: Any) -> None:
            """ipywidgets 7 (Colab's) shows a widget through this method, which IPython prefers to
            ``_repr_mimebundle_``: show the same bundle, the first view rendered."""
            from IPython.display import display
            display(self._repr_mimebundle_(), raw=True)
            self._handle_displayed(**kwargs)

    def __repr__(self) -> str:
        controls = ", ".join(self.values) or "no controls"
        return f"<hooklab Panel {self.title!r}: {controls}>"
