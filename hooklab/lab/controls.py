"""A panel's controls (:class:`Controls`): named widgets, the hooks behind its checkboxes in the
order they were ticked, and text boxes that narrow a dropdown.

This is the one module of hooklab that reads an ipywidgets private attribute: a dropdown's
``_options_values`` (the values it lists).
"""

from __future__ import annotations

import contextlib
import fnmatch
from typing import Any, Callable, Iterator, Mapping, Sequence

import ipywidgets as W

from ..hooks import Hooks

__all__ = ["Controls", "filter_options"]


def filter_options(options: Sequence[Any], text: str) -> list[Any]:
    """The options whose label matches every word of ``text`` (all of them when ``text`` is blank).

    Options are labels, or ``(label, value)`` pairs as ``ipywidgets.Dropdown`` takes them. Case
    does not matter. A word with a glob character (``*``, ``?``, ``[``) must match one whole word
    of the label; any other word must appear somewhere in it.

    >>> layers = ["conv1 · Conv2d · leaf", "layer1.0.conv1 · Conv2d · leaf", "layer1 · Sequential · container"]
    >>> filter_options(layers, "layer1.*")
    ['layer1.0.conv1 · Conv2d · leaf']
    >>> filter_options([("relu · ReLU", "relu"), ("fc · Linear", "fc")], "lin")
    [('fc · Linear', 'fc')]
    """
    def matches(label: str, term: str) -> bool:
        return any(fnmatch.fnmatchcase(w, term) for w in label.split()) if set("*?[") & set(term) else term in label
    terms = text.lower().split()
    return [o for o in options if all(matches(str(o[0] if isinstance(o, tuple) else o).lower(), t) for t in terms)]


def _value(option: Any) -> Any:
    return option[1] if isinstance(option, tuple) else option


class Controls(Mapping[str, Any]):
    """Named widgets in the order added (``controls[name]`` is the widget). ``on_change(name)`` is
    called when a value changes, except inside :meth:`silenced`. A toggle registers hooks through
    ``register(hooks, panel)`` when :meth:`follow` is told it changed; ``ticked`` keeps the tick order."""

    def __init__(self, on_change: Callable[[str], None]) -> None:
        self.box = W.VBox([])  #: the widget that shows them
        self.ticked: list[str] = []  #: the ticked toggles, in the order they were ticked
        self._widgets: dict[str, Any] = {}
        self._registers: dict[str, Callable[[Hooks, Any], Any]] = {}  # toggle -> its register function
        self._hooks: dict[str, Hooks] = {}  # toggle -> the hooks it holds
        self._start: dict[str, Any] = {}  # each control's value when added: restore() goes back to it
        self._filters: dict[str, list[tuple[str, list[Any]]]] = {}  # text box -> [(dropdown, all its options)]
        self._on_change, self._quiet = on_change, 0

    def __getitem__(self, name: str) -> Any:
        return self._widgets[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._widgets)

    def __len__(self) -> int:
        return len(self._widgets)

    def add(self, name: str, widget: Any, register: Callable[[Hooks, Any], Any] | None = None,
            filter_by: str | None = None, start: Any = None) -> Any:
        """Add ``widget`` under ``name`` (a toggle with its ``register``, a dropdown narrowed by the
        text box ``filter_by``); :meth:`restore` brings back ``start`` (default: its value now)."""
        if name in self._widgets:
            raise ValueError(f"this panel already has a control named {name!r}; pick another name.")
        if filter_by is not None:
            if not isinstance(self._widgets.get(filter_by), W.Text):
                raise ValueError(f"filter_by={filter_by!r} must name a textbox added before this dropdown: "
                                 f"call panel.textbox({filter_by!r}) first.")
            self._filters.setdefault(filter_by, []).append((name, list(widget.options)))
        if register is not None:
            self._registers[name], self._hooks[name] = register, Hooks()
        self._widgets[name], self._start[name] = widget, widget.value if start is None else start
        widget.observe(lambda change: self._changed(name), names="value")
        self.box.children = (*self.box.children, widget)
        if filter_by is not None:
            self._narrow(filter_by)
        return widget

    def current(self) -> dict[str, Any]:
        """Every control's value, by name."""
        return {name: widget.value for name, widget in self._widgets.items()}

    def options(self, name: str) -> list[Any]:
        """The options a dropdown lists right now (a filter may have narrowed them)."""
        return list(self._widgets[name].options)

    @contextlib.contextmanager
    def silenced(self) -> Iterator[None]:
        """Change values without calling ``on_change``."""
        self._quiet += 1
        try:
            yield
        finally:
            self._quiet -= 1

    def _changed(self, name: str) -> None:
        if self._quiet:
            return
        for text, pairs in self._filters.items():
            if text == name or any(name == dropdown for dropdown, _ in pairs):
                self._narrow(text)  # a new pick no longer needs to stay listed against the filter
        self._on_change(name)

    def _narrow(self, text: str) -> None:
        """List, in each dropdown this text box filters, the options that match its text; the one
        picked stays listed (first) until another is picked. Text that matches nothing changes nothing."""
        for name, everything in self._filters.get(text, []):
            widget, kept = self._widgets[name], everything
            if self._widgets[text].value.strip():
                kept = filter_options(everything, self._widgets[text].value)
                picked = [o for o in everything if _value(o) == widget.value]
                kept = picked + kept if kept and picked and picked[0] not in kept else kept
            if kept and list(widget.options) != kept:
                chosen = widget.value
                with self.silenced():
                    widget.options, widget.value = kept, chosen

    def assign(self, values: dict[str, Any]) -> None:
        """Set each control (a dropdown's value must be listed: ``ValueError`` says how to list it)."""
        for name, value in values.items():
            widget = self._widgets[name]
            if isinstance(widget, W.Dropdown) and value not in widget._options_values:
                raise ValueError(self._not_listed(name, value))
            widget.value = bool(value) if name in self._registers else value

    def _not_listed(self, name: str, value: Any) -> str:
        listed = list(self._widgets[name]._options_values)
        hint = next((f" while {text!r} is {self._widgets[text].value!r}: set {text}='' (or one that lists it) first"
                     for text, pairs in self._filters.items() for d, everything in pairs
                     if d == name and len(listed) < len(everything)), "")
        return f"{value!r} is not an option of {name!r}{hint}. It lists {listed[:12]}{' ...' if len(listed) > 12 else ''}."

    def follow(self, changed: list[str], panel: Any) -> None:
        """Hooks after ``changed`` controls changed: a toggle ticked goes last in the tick order and
        registers its hooks, one unticked removes them; when any other control changed, every ticked
        toggle registers again, in tick order."""
        for name in dict.fromkeys(n for n in changed if n in self._registers):
            ticked = self._widgets[name].value
            if ticked and name not in self.ticked:
                self.ticked.append(name)
            elif not ticked and name in self.ticked:
                self.ticked.remove(name)
        everything = any(n not in self._registers for n in changed)
        for name in self._registers:
            if everything or name in changed:
                self._hooks[name].remove()
        for name in self.ticked:
            if everything or name in changed:
                self._registers[name](self._hooks[name], panel)

    def restore(self) -> list[str]:
        """Every value back to its start (without ``on_change``; a filter before its dropdowns) and
        the hooks removed; return every control's name, for :meth:`follow`."""
        with self.silenced():
            for name, widget in self._widgets.items():
                widget.value = self._start[name]
                if name in self._filters:
                    self._narrow(name)
        self.ticked = [name for name in self._registers if self._start[name]]
        return list(self._widgets)

    def untick_all(self) -> list[str]:
        """Untick every toggle and remove its hooks, without ``on_change``; return what was ticked."""
        ticked, self.ticked = list(self.ticked), []
        with self.silenced():
            for name in self._registers:
                self._widgets[name].value = False
        self.remove_hooks()
        return ticked

    def hook_count(self) -> int:
        """How many PyTorch hooks the toggles hold right now."""
        return sum(len(hooks) for hooks in self._hooks.values())

    def remove_hooks(self) -> None:
        for hooks in self._hooks.values():
            hooks.remove()

    def release(self) -> None:
        """Let go of the register functions (and what they hold), after the hooks are removed."""
        self._registers = {}
