"""hooklab: helpers for notebooks that teach PyTorch hooks.

The path from a notebook cell to PyTorch stays short: one ``hooklab`` call, then PyTorch's own
``register_*``.

* :class:`Hooks` owns hook handles by key (re-registering replaces; ``with`` removes all).
* :func:`select` / :func:`module` pick modules by name, glob, type or test.
* :class:`Recorder` records inputs, outputs and gradients, detached.
* :func:`trace` lists the hook events of one forward/backward pass.
* :func:`registered_hooks` / :func:`count_hooks` show what is registered right now.
* :class:`Panel` is a live lab; :mod:`hooklab.checker` checks exercises.
* :func:`explore` is a live lab for any model: pick a module, watch its output, intervene.
* :func:`claim` and :func:`approx` print figures that hold on any CPU (:mod:`hooklab.portable`);
  :func:`recorded_with` says so when this torch is not the one that recorded the stored outputs.
"""

from . import checker, plots
from .callbacks import Callbacks
from .checker import Exercise, Mistake, Verdict
from .explore import Explorer, explore
from .hooks import Hooks
from .inspection import count_hooks, registered_hooks
from .portable import approx, claim, recorded_with
from .recording import Recorder, detach
from .selection import module, module_names, select
from .tracing import shape_of, trace
from .widgets import Panel

__version__ = "0.1.0"

__all__ = [
    "Callbacks",
    "Exercise",
    "Explorer",
    "Hooks",
    "Mistake",
    "Panel",
    "Recorder",
    "Verdict",
    "approx",
    "checker",
    "claim",
    "count_hooks",
    "detach",
    "explore",
    "module",
    "module_names",
    "plots",
    "recorded_with",
    "registered_hooks",
    "select",
    "shape_of",
    "trace",
]
