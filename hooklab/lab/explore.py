"""A live lab for any model: ``hooklab.explore(model, example)``. Pick a module (a filter narrows a
long list), read what comes out of it, switch interventions on and off, watch the output move.
Everything it shows comes from the hooks the course teaches: a **forward hook** reads each module's
output; a **tensor hook registered from it** gets the gradient of a target with respect to that
output (next to an in-place ReLU too); an intervention is one **forward hook** on the module picked
that returns the edited output, registered when its box is ticked, removed when it is unticked.

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

How the model is run, and what is computed when: :mod:`hooklab.lab.passes`.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Callable

import ipywidgets as W
import torch
from torch import nn

from ..claims import per_run
from ..compiled import unwrap
from ..hooks import Hooks, Registration
from ..inspection import count_hooks
from ..naming import closest
from .interventions import INTERVENTIONS, edit_hook, label
from .panel import Panel, filter_options
from .passes import Example, ModuleRecord, Passes, sum_target
from .picture import picture

__all__ = ["explore", "Explorer", "InterventionError", "sum_target"]

_KEPT = 64  # edited views kept


class InterventionError(RuntimeError):
    """The model raised while an intervention was on; the interventions were switched off."""


def _is_scores(path: str, t: torch.Tensor, top: int) -> bool:
    """Whether ``t`` (at ``path`` in the model's output) is a batch of scores whose top entries mean
    something: ``[batch, classes]``, the whole output or an entry named logits or scores."""
    named = path == "output" or path.rstrip("]'\"").endswith(("logits", "scores"))
    return named and t.dim() == 2 and t.shape[0] > 0 and t.shape[1] >= top > 0


class Explorer:
    """The live panel :func:`explore` returns: a :class:`hooklab.Panel` (``.panel``) over the model's
    passes (``.passes``). Controls (names for ``set``): ``filter``; ``module`` (``""``: the model);
    the boxes ``zero``, ``noise``, ``scale``, ``clamp`` and their sliders ``noise_std``, ``factor``,
    ``limit`` (noise and clamp in standard deviations of the output). Boxes ticked together run in
    tick order.

    The rows: ``runs`` (when explore runs a compiled model's eager module, or a model in training
    mode in eval mode), the module's type, how many modules are listed, its calls per forward, its
    output's structure; for the first floating-point tensor in it (``statistics of``) shape, dtype,
    mean, std, share of exact zeros; the norm of the gradient of ``target`` with respect to the
    output; the interventions (and why one could not edit anything); ``output change`` (the norm of
    the difference from the output without interventions, ``relative change`` over its norm, or a
    dash and why: nothing edited, shapes changed, an empty output); the top scores of a
    ``[batch, classes]`` output (or ``logits``/``scores`` entry); the hooks on the model. Figures
    out of float arithmetic are :class:`hooklab.claims.PerRun` (``≈``: another CPU may compute
    another last digit); counts, shapes and exact zeros are plain numbers.
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
        model, self.compiled = unwrap(model, "explore")
        self.passes = Passes(model, example, target, threads)
        if module is not None and module not in self.passes.names:
            raise KeyError(f"{type(model).__name__} has no module named {module!r}. Closest names: "
                           f"{closest(module, [n for n in self.passes.names if n])}.")
        self.top, self.digits = top, digits
        self._views: OrderedDict[tuple[Any, ...], tuple[ModuleRecord, dict[str, Any], dict[str, str]]] = OrderedDict()
        self._missed: dict[str, str] = {}  # intervention -> why it could not edit the output, in the latest pass
        self.passes.record()
        self.picture = W.Image(format="png", layout=W.Layout(flex="1 1 320px", min_width="280px", max_width="460px",
                                                             object_fit="contain"))
        self.picture.add_class("hooklab-plot")
        self.panel = Panel(f"Explore {type(model).__name__}", self._view, name=name, beside=self.picture,
                           on_close=self._let_go)
        self._controls(module)

    def _controls(self, module: str | None) -> None:
        names, clean = self.passes.names, self.passes.modules
        first = module if module is not None else next((n for n in names if n and clean[n].calls), next(iter(names)))
        self.panel.textbox("filter", description="filter", placeholder="glob or type: layer1.*, Conv2d, leaf")
        self.panel.dropdown("module", [(self._label(n), n) for n in names], first, description="module",
                            filter_by="filter")
        sliders = {"noise_std": (0.0, 2.0, 0.1, 0.5, "noise (× std)"), "factor": (-1.0, 3.0, 0.1, 2.0, "factor"),
                   "limit": (0.0, 3.0, 0.1, 1.0, "clamp at ± (× std)")}
        boxes = {"zero": "zero its output", "noise": "add noise", "scale": "scale its output", "clamp": "clamp its output"}
        for kind, slider in INTERVENTIONS.items():
            self.panel.toggle(kind, self._register(kind), description=boxes[kind])
            if slider:
                lo, hi, step, value, description = sliders[slider]
                self.panel.slider(slider, lo, hi, step, value, description=description)

    def _register(self, kind: str) -> Callable[[Hooks, Panel], Registration]:
        def register(hooks: Hooks, panel: Panel) -> Registration:
            hook = edit_hook(kind, panel.values, lambda: self.passes.recording, self._missed)
            return hooks.forward(self.passes.names[panel.values["module"]], hook, key=kind)
        return register

    def _label(self, name: str) -> str:
        module, calls = self.passes.names[name], self.passes.modules[name].calls
        kind = "container" if next(module.children(), None) is not None else "leaf"
        ran = "" if calls == 1 else (" · not called" if calls == 0 else f" · called {calls}×")
        return f"{name or '(model)'} · {type(module).__name__} · {kind}{ran}"

    # ------------------------------------------------------------------ the view
    def _active(self) -> list[tuple[str, float | None]]:
        """The ticked interventions, in the order they run (ticked), with their setting."""
        values = self.panel.values
        return [(kind, values[slider] if (slider := INTERVENTIONS[kind]) else None) for kind in self.panel.ticked]

    def _view(self, panel: Panel) -> dict[str, Any]:
        if self.passes.stale:
            self.passes.record()
            self._views.clear()
        name, active = panel.values["module"], self._active()
        missed: dict[str, str] = {}
        if not active:
            seen, final = self.passes.modules[name], self._compare(None)
        else:
            key = (name, tuple(active))
            if key not in self._views:
                self._views[key] = self._intervene(name, active)
                if len(self._views) > _KEPT:
                    self._views.popitem(last=False)
            self._views.move_to_end(key)
            seen, final, missed = self._views[key]
        if seen.png is None:
            seen.png = picture(seen.summary or _not_called(), f"{name or '(model)'}" + (" (edited)" if active else ""))
        self.picture.value = seen.png
        return self._rows(name, seen, active, missed, final)

    def _intervene(self, name: str, active: list[tuple[str, float | None]]) -> tuple[ModuleRecord, dict, dict]:
        reference = self.passes.reference()
        self._missed.clear()
        try:
            seen, output = self.passes.edited(self.passes.names[name])
        except Exception as exc:
            self.picture.value = b""
            ticked = self.panel.untick_all()
            raise InterventionError(
                f"the model raised {type(exc).__name__} with {', '.join(ticked)} on {name or '(model)'!r}: {exc} "
                f"(the intervention hooks were removed and their boxes unticked; hooks this panel holds: "
                f"{self.panel.hook_count()})") from exc
        missed = dict(self._missed) if seen.calls else {kind: "the module did not run in this pass" for kind, _ in active}
        final = self._compare(output, reference)
        if len(missed) == len(active):  # nothing was edited: the output cannot have changed because of it
            final = {"output change": "— (no intervention could edit the output: see interventions)",
                     "relative change": "—"}
        return seen, final, missed

    def _compare(self, found: list[tuple[str, torch.Tensor]] | None,
                 reference: list[tuple[str, torch.Tensor]] | None = None) -> dict[str, Any]:
        """How far the final output moved from the reference (``found`` None: no edits)."""
        rows: dict[str, Any] = {"output change": 0.0, "relative change": 0.0}
        now = [(p, t) for p, t in (self.passes.output if found is None else found) if t.is_floating_point()]
        if found is not None and reference is not None:
            rows.update(_change([(p, t) for p, t in reference if t.is_floating_point()], now))
        scores = next(((p, t) for p, t in now if _is_scores(p, t, self.top)), None)
        if scores is not None:
            path, main = scores
            values, indices = main[0].detach().float().topk(self.top)
            label_ = f"top-{self.top} of {path}[0]" if path != "output" else f"top-{self.top} (sample 0)"
            rows[label_] = [(int(i), per_run(v, 3)) for v, i in zip(values.tolist(), indices.tolist())]
        return rows

    def _rows(self, name: str, seen: ModuleRecord, active: list[tuple[str, float | None]], missed: dict[str, str],
              final: dict[str, Any]) -> dict[str, Any]:
        module, rows = self.passes.names[name], dict[str, Any]()
        runs = [note for note in (self.compiled, self._mode()) if note]
        if runs:
            rows["runs"] = "; ".join(runs)
        kind = "container" if next(module.children(), None) is not None else "leaf"
        rows.update({"type": f"{type(module).__name__} · {kind}", "listed": self._listed(),
                     "calls per forward": seen.calls})
        rows.update(_statistics(seen.summary, self.digits))
        clean = self.passes.modules[name]
        if not self.passes.has_grad:
            rows["grad norm (clean)"] = "— (nothing the output was computed from requires grad)"
        else:
            norm = clean.grad_norm
            rows["grad norm (clean)"] = f"— ({clean.no_grad})" if norm is None else per_run(norm, self.digits)
        shown = [label(k, v) + (f" (could not intervene: {missed[k]})" if k in missed else "") for k, v in active]
        rows["interventions"] = " → ".join(shown) or "none"
        rows.update(final)
        rows["hooks on the model"] = count_hooks(self.passes.model, include_global=False)
        return rows

    def _listed(self) -> str:
        everything, listed = self.passes.names, self.panel.options("module")
        text = self.panel.values["filter"].strip()
        if not text:
            return f"all {len(everything)} modules"
        matching = filter_options([(self._label(n), n) for n in everything], text)
        if not matching:
            return f"no module matches {text!r}: the list is unchanged ({len(listed)} of {len(everything)})"
        kept = "" if len(listed) == len(matching) else f", and {self.panel.values['module'] or '(model)'!r}, picked"
        return f"{len(matching)} of {len(everything)} match {text!r}{kept}"

    def _mode(self) -> str | None:
        if not any(m.training for m in self.passes.names.values()):
            return None
        return ("in eval mode: the model is in training mode, so explore switches every module to eval mode for "
                "its passes (no dropout, BatchNorm's running statistics) and puts each back afterwards")

    # ------------------------------------------------------------------ the panel's calls
    def set(self, **values: Any) -> dict[str, Any]:
        """Set controls by name, as clicks would, and return the state (see :meth:`Panel.set`).
        ``filter`` is applied before ``module``, whatever order you write them in."""
        if "filter" in values:
            values = {"filter": values.pop("filter"), **values}
        return self.panel.set(**values)

    def state(self) -> dict[str, Any]:
        """The controls' values, the hooks the panel holds, and the view's rows."""
        return self.panel.state()

    def reset(self) -> dict[str, Any]:
        """Every control back where it started (:meth:`Panel.reset`)."""
        return self.panel.reset()

    def remove(self) -> None:
        """Remove every hook the panel holds, disable its controls and forget its edited views."""
        self.panel.remove()
        self._views.clear()

    def close(self) -> None:
        """Remove the hooks, close the widgets, and let go of the model, its example and every view
        (as a newer panel of the same name does)."""
        self.panel.close()

    def _let_go(self) -> None:
        self._views.clear()
        self.passes = None  # type: ignore[assignment]
        self.picture.close()

    def options(self, name: str) -> list[Any]:
        return self.panel.options(name)

    values = property(lambda self: self.panel.values, doc="Every control's current value, by name.")
    text = property(lambda self: self.panel.text, doc="The view as plain text.")
    error = property(lambda self: self.panel.error, doc="What the latest update raised, if anything.")

    def hook_count(self) -> int:
        return self.panel.hook_count()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return self.panel._repr_mimebundle_(**kwargs)

    if not hasattr(W.DOMWidget, "_repr_mimebundle_"):
        def _ipython_display_(self, **kwargs: Any) -> None:
            """ipywidgets 7 (Colab's): shown as its panel is."""
            from IPython.display import display
            display(self.panel)

    def __repr__(self) -> str:
        return repr(self.panel)


def _not_called() -> Any:
    from .summary import Summary
    return Summary("not called")


def _change(ref: list[tuple[str, torch.Tensor]], now: list[tuple[str, torch.Tensor]]) -> dict[str, Any]:
    """``output change`` and ``relative change`` of ``now`` against ``ref``, or why there are none."""
    by_path, paths = dict(now), dict(ref)
    changed = [f"{p} {list(t.shape)} → " + (str(list(by_path[p].shape)) if p in by_path else "missing")
               for p, t in ref if p not in by_path or by_path[p].shape != t.shape]
    changed += [f"{p} new {list(t.shape)}" for p, t in now if p not in paths]
    if changed:
        return {"output change": f"— (the output's shapes changed: {'; '.join(changed[:3])})", "relative change": "—"}
    if sum(t.numel() for _, t in ref) == 0:
        return {"output change": "— (every tensor of the output is empty, with and without the interventions)",
                "relative change": "—"}
    diff = sum(float((by_path[p].float() - t.float()).pow(2).sum()) for p, t in ref)
    size = sum(float(t.float().pow(2).sum()) for _, t in ref)
    if size > 0 and all(torch.count_nonzero(t) == 0 for _, t in now):
        relative: Any = 1.0  # every value of the output is zero (an exact fact): all of it went
    else:
        relative = per_run(math.sqrt(diff / size), 3) if size > 0 else float("nan")
    return {"output change": per_run(math.sqrt(diff), 3), "relative change": relative}


def _statistics(s: Any, digits: int) -> dict[str, Any]:
    """The rows of the first floating-point tensor of a module's output."""
    if s is None:
        return {"output": "— (not called by this example)", **dict.fromkeys(
            ("statistics of", "shape", "dtype", "mean", "std", "zeros"), "—")}
    rows: dict[str, Any] = {"output": s.structure, "statistics of": s.path or "—",
                            "shape": s.shape if s.shape is not None else "—", "dtype": s.dtype or "—"}
    for key in ("mean", "std", "zeros"):
        value = getattr(s, key)
        rows[key] = per_run(value, digits) if value is not None else "—"
    if s.mean is not None and s.std is not None:  # a mean far below the spread (LayerNorm's ~1e-9) is float noise
        rows["mean"] = per_run(s.mean, digits, scale=max(abs(s.mean), s.std))
    if s.zeros in (0.0, 1.0):
        rows["zeros"] = s.zeros  # none or all of the values are zero: an exact count, not a rounded ratio
        if s.zeros == 1.0:
            rows["mean"], rows["std"] = 0.0, 0.0
    return rows


def explore(model: nn.Module, example: Example, *, target: Callable[[Any], torch.Tensor] | None = None,
            module: str | None = None, name: str | None = None, threads: int | None = 1) -> Explorer:
    """A live panel for any model (see :class:`Explorer`).

    ``example``: a tensor, a tuple of positional arguments, or an ``(args, kwargs)`` pair such as
    ``((tokens,), {"src_key_padding_mask": pad})``. ``target(output)`` returns the one number whose
    gradient the panel shows (default :func:`sum_target`). ``module``: the one shown first. ``name``:
    building another panel of this name (its cell run again) closes the older one. ``threads``:
    PyTorch threads while it runs the model (``None``: as set). Every pass runs in eval mode (the
    view says when the model was not); a compiled model is explored through ``model._orig_mod``; a
    TorchScript module raises ``TypeError``. Weights or an example changed in place (an optimizer step,
    ``load_state_dict``) are noticed at the next update, which runs the model again; a change made through
    ``.data`` is not (PyTorch does not count it): call ``explore`` again after one. ``panel.remove()`` takes
    its hooks off; ``panel.close()`` also closes its widgets and lets go of the model.
    """
    return Explorer(model, example, target=target, module=module, name=name, threads=threads)
