"""What each notebook's live lab must show when clicked in a browser (tests/test_browser.py).

Every panel of every notebook already gets the generic checks (each checkbox changes the view
and unticking restores it exactly; each slider and dropdown changes the view, with no checkbox
or with one ticked, and going back restores it). Add a notebook here to say *what* must change.

An entry maps the notebook's file name to:

* ``panel``: the panel's title, when the notebook shows more than one live panel (optional);
* ``controls``: the labels of every control, in order (the panel must have exactly these);
* ``steps``: ``Step(what, set={label: value}, expect={row label: expectation})``, run in order.
  ``set`` changes controls as a person would (click a checkbox, type into a slider's readout,
  pick in a dropdown), in the order given; a control already at that value is left alone.
  Each expectation is the text the view's table shows in that row (``"0"``,
  ``"[-0.134, 0.037]"``), one of the relations below, or a list of these:

  - ``CHANGED``: differs from what the row showed before this step;
  - ``SAME``: what the row showed before this step;
  - ``FIRST``: what the row showed after the first step (to prove a reset restores the start).

The exact values are the ones the notebook's own driving cell prints (``panel.set(...)``), so
the browser must agree with the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CHANGED = "<changed>"
SAME = "<same>"
FIRST = "<as after the first step>"


@dataclass(frozen=True)
class Step:
    what: str
    set: dict[str, Any]
    expect: dict[str, Any] = field(default_factory=dict)


SCALE, FACTOR, ZERO = "scale layer 0's output", "factor", "zero the input"

EXPECTATIONS: dict[str, dict[str, Any]] = {
    "00_start_here.ipynb": {
        "controls": [SCALE, FACTOR, ZERO],
        "steps": [
            Step("start: everything off, factor 2",
                 {SCALE: False, FACTOR: 2.0, ZERO: False},
                 {"model output": "[-0.134, 0.037]", "hooks on the model": "0"}),
            Step("tick 'scale': one hook, a different output",
                 {SCALE: True},
                 {"model output": [CHANGED, "[-0.187, 0.021]"], "hooks on the model": "1"}),
            Step("untick 'scale': both rows back",
                 {SCALE: False},
                 {"model output": FIRST, "hooks on the model": "0"}),
            Step("the factor alone changes nothing while 'scale' is off",
                 {FACTOR: 4.0},
                 {"model output": FIRST, "hooks on the model": "0"}),
            Step("tick 'scale' at factor 4",
                 {SCALE: True},
                 {"model output": "[-0.294, -0.012]", "hooks on the model": "1"}),
            Step("tick 'zero the input' as well: two hooks",
                 {ZERO: True},
                 {"model output": [CHANGED, "[-0.099, 0.085]"], "hooks on the model": "2"}),
            Step("untick both: the start again, 0 hooks",
                 {SCALE: False, ZERO: False},
                 {"model output": FIRST, "hooks on the model": "0"}),
        ],
    },

    # ------------------------------------------------------------------ 01: forward hooks as callbacks
    "01_callbacks.ipynb": {
        "controls": ["double", "add one", "peek"],
        "steps": [
            Step("start: nothing ticked, the layer alone (3·x)",
                 {"double": False, "add one": False, "peek": False},
                 {"output for x = 1": "3", "hooks registered": "0", "ran, in order": "(no hook)"}),
            Step("tick 'double'",
                 {"double": True},
                 {"output for x = 1": "6", "hooks registered": "1", "ran, in order": "double"}),
            Step("tick 'add one': it runs after 'double'",
                 {"add one": True},
                 {"output for x = 1": "7", "hooks registered": "2", "ran, in order": "double → add one"}),
            Step("untick 'double'",
                 {"double": False},
                 {"output for x = 1": "4", "hooks registered": "1", "ran, in order": "add one"}),
            Step("tick 'double' again: registered last, it runs last",
                 {"double": True},
                 {"output for x = 1": "8", "hooks registered": "2", "ran, in order": "add one → double"}),
            Step("tick 'peek': it sees the output of the hooks before it",
                 {"peek": True},
                 {"peek saw": "8", "output for x = 1": SAME, "hooks registered": "3"}),
            Step("untick all: the start again, 0 hooks",
                 {"double": False, "add one": False, "peek": False},
                 {"output for x = 1": FIRST, "hooks registered": "0", "ran, in order": FIRST, "peek saw": "-"}),
        ],
    },
    # ------------------------------------------------------------------ 02: a chain of gradient hooks
    "02_tensor_hooks.ipynb": {
        "controls": ["scale (× factor)", "clip (± limit)", "peek", "factor", "limit"],
        "steps": [
            Step("start: nothing ticked, factor 2, limit 3: the plain gradient 2·v",
                 {"scale (× factor)": False, "clip (± limit)": False, "peek": False, "factor": 2.0, "limit": 3.0},
                 {"lab_v.grad": "[-6.0, -4.0, -2.0, 0.0, 2.0, 4.0, 6.0, 8.0]", "ran, in order": "(no hook)"}),
            Step("tick 'scale'",
                 {"scale (× factor)": True},
                 {"lab_v.grad": "[-12.0, -8.0, -4.0, 0.0, 4.0, 8.0, 12.0, 16.0]", "ran, in order": "scale ×2"}),
            Step("tick 'clip': it runs after 'scale'",
                 {"clip (± limit)": True},
                 {"lab_v.grad": "[-3.0, -3.0, -3.0, 0.0, 3.0, 3.0, 3.0, 3.0]", "ran, in order": "scale ×2 → clip ±3"}),
            Step("untick 'scale'",
                 {"scale (× factor)": False},
                 {"lab_v.grad": "[-3.0, -3.0, -2.0, 0.0, 2.0, 3.0, 3.0, 3.0]", "ran, in order": "clip ±3"}),
            Step("tick 'scale' again: now it runs after 'clip'",
                 {"scale (× factor)": True},
                 {"lab_v.grad": "[-6.0, -6.0, -4.0, 0.0, 4.0, 6.0, 6.0, 6.0]", "ran, in order": "clip ±3 → scale ×2"}),
            Step("untick all: the start again",
                 {"scale (× factor)": False, "clip (± limit)": False},
                 {"lab_v.grad": FIRST, "ran, in order": FIRST}),
        ],
    },
}
