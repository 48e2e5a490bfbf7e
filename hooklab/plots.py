"""``hooklab.plots``: the lab's matplotlib figures (:mod:`hooklab.lab.plots`) under the name the
notebooks import them by (``from hooklab.plots import figure, show``)."""

from .lab.plots import *  # noqa: F401,F403
from .lab.plots import __all__  # noqa: F401
