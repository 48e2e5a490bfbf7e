"""The lab layer: what the notebooks show and check, built on the hook core.

* :mod:`~hooklab.lab.panel`: :class:`Panel`, a live lab of checkboxes (hooks on and off), sliders
  and a view;
* :mod:`~hooklab.lab.explore`: :func:`explore`, a live lab for any model, built from a Panel, the
  model's passes (:mod:`~hooklab.lab.passes`), what one output shows (:mod:`~hooklab.lab.summary`),
  its picture (:mod:`~hooklab.lab.picture`) and the interventions (:mod:`~hooklab.lab.interventions`);
* :mod:`~hooklab.lab.exercises`: exercise checks that say precisely what is wrong;
* :mod:`~hooklab.lab.plots` (also ``hooklab.plots``) and :mod:`~hooklab.lab.progress`.

It imports the core (``hooklab.hooks``, ``recording``, ...); the core never imports it, and it
never imports ``hooklab.course`` (``tests/test_layout.py`` checks both).
"""

from .explore import Explorer, explore
from .panel import Panel

__all__ = ["Explorer", "Panel", "explore"]
