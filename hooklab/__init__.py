"""hooklab: helpers for notebooks that teach PyTorch hooks.

The path from a notebook cell to PyTorch stays short: one ``hooklab`` call, then PyTorch's own
``register_*``. Three layers, each importing only the ones before it:

* the hook core: :class:`Hooks` owns hook handles by key (re-registering replaces; ``with`` removes
  all; :mod:`hooklab.kinds` is the table of hook kinds); :func:`select` / :func:`module` pick
  modules; :class:`Recorder` records inputs, outputs and gradients, call by call;
  :func:`trace` lists the hook events of one pass; :func:`registered_hooks` / :func:`count_hooks`
  show what is registered right now; :func:`claim` and :func:`approx` print figures that hold on
  any CPU (:mod:`hooklab.claims`);
* the lab (:mod:`hooklab.lab`): :class:`Panel`, a live lab; :func:`explore`, a live lab for any
  model; :class:`Exercise`, checks that say what is wrong; :mod:`hooklab.plots`;
* the course (:mod:`hooklab.course`): one module per notebook.
"""

from . import plots
from .callbacks import Callbacks
from .claims import approx, claim, recorded_with
from .hooks import Hooks
from .inspection import count_hooks, registered_hooks
from .lab import Explorer, Panel, explore
from .lab.exercises import Exercise, Mistake, Verdict
from .recording import Recorder, detach
from .selection import module, module_names, select
from .tracing import shape_of, trace

__version__ = "0.1.0"

__all__ = ["Callbacks", "Exercise", "Explorer", "Hooks", "Mistake", "Panel", "Recorder", "Verdict", "approx", "claim",
           "count_hooks", "detach", "explore", "module", "module_names", "plots", "recorded_with", "registered_hooks",
           "select", "shape_of", "trace"]
