"""What each notebook's live lab must show when clicked in a browser (tests/test_browser.py).

Every panel of every notebook already gets the generic checks (each checkbox changes the view
and unticking restores it exactly; each slider and dropdown changes the view, with no checkbox
or with one ticked, and going back restores it). Add a notebook here to say *what* must change.

An entry maps the notebook's file name to:

* ``panel``: the panel's title, when the notebook shows more than one live panel (optional);
* ``controls``: the labels of every control, in order (the panel must have exactly these);
* ``type``: for each text box, what the generic checks type into it (each text must change the
  view or a dropdown's options; typing the original back must restore both);
* ``steps``: ``Step(what, set={label: value}, expect={row label: expectation})``, run in order.
  ``set`` changes controls as a person would (click a checkbox, type into a slider's readout,
  pick in a dropdown, type into a text box and press Enter), in the order given; a control already
  at that value is left alone.
  Each expectation is the text the view's table shows in that row (``"0"``,
  ``"[-0.134, 0.037]"``), one of the relations below, or a list of these:

  - ``CHANGED``: differs from what the row showed before this step;
  - ``SAME``: what the row showed before this step;
  - ``FIRST``: what the row showed after the first step (to prove a reset restores the start);
  - ``About("≈90.8%", within=5)``: a row with per-run figures (``≈``, a trained model's number,
    which differs from machine to machine): the text must be the same with each figure masked (its
    sign, its exponent's sign and ``%`` stay), and each figure within ``within`` of the one given,
    in the figure's own unit (percentage points for ``%``). A plain string may hold no ``≈`` figure.

The values are the ones the notebook's own driving cell prints (``panel.set(...)``), so the
browser must agree with the kernel; everything but an ``About`` figure must be exact. Each
``within`` covers what another CPU's float kernels make of the figure (``python3 dev.py test
--other-cpu``'s kernels, measured on this machine), with room to spare. The yes/no rows carry the
claims.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

CHANGED = "<changed>"
SAME = "<same>"
FIRST = "<as after the first step>"
#: A per-run figure's number (what follows the ``≈``), as hooklab.claims.approx prints it.
FIGURE = re.compile(r"\u2248([-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?)%?")


def figures(text: str) -> list[float]:
    """The per-run figures of ``text``, as numbers (``≈90.8%`` is 90.8)."""
    return [float(f.replace(",", "")) for f in FIGURE.findall(text)]


@dataclass(frozen=True)
class About:
    """A row holding per-run figures, each within ``within`` of the one in ``text``."""

    text: str
    within: float

    def __post_init__(self) -> None:
        assert figures(self.text), f"About({self.text!r}): no per-run figure (≈) in it; expect the text itself"
        assert self.within >= 0

    def matches(self, shown: str, sanitize: Any) -> bool:
        """Whether ``shown`` is this text with figures near the given ones (``sanitize``: as nbval masks)."""
        want, got = figures(self.text), figures(shown)
        return (sanitize(shown) == sanitize(self.text) and len(got) == len(want)
                and all(abs(g - w) <= self.within for g, w in zip(got, want)))

    def __str__(self) -> str:
        return f"{self.text} (each figure within ±{self.within:g})"


@dataclass(frozen=True)
class Step:
    what: str
    set: dict[str, Any]
    expect: dict[str, Any] = field(default_factory=dict)


SCALE, FACTOR, ZERO = "scale layer 0's output", "factor", "zero the input"
NORM2_0, NORM2_1 = "encoder.layers.0.norm2 · LayerNorm · leaf", "encoder.layers.1.norm2 · LayerNorm · leaf"
CONV1, BN2_4_1 = "conv1 · Conv2d · leaf", "layer4.1.bn2 · BatchNorm2d · leaf"
RELU_1_0 = "layer1.0.relu · ReLU · leaf · called 2×"
PATCH = "patch from the clean run"
BN1_4_0, LINEAR2_0 = "layer4.0.bn1 · BatchNorm2d · leaf", "encoder.layers.0.linear2 · Linear · leaf"
#: The controls of every hooklab.explore panel, in order.
EXPLORE_CONTROLS = ["filter", "module", "zero its output", "add noise", "noise (× std)", "scale its output",
                    "factor", "clamp its output", "clamp at ± (× std)"]

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

    # ------------------------------------------------------------------ 03: module hooks on a small model
    "03_module_hooks.ipynb": {
        "controls": ["double the input", "double the output", "scale the gradient ×0.1",
                     "dropout after the hidden layers", "dropout p"],
        "steps": [
            Step("start: everything off, p 0.5",
                 {"double the input": False, "double the output": False, "scale the gradient ×0.1": False,
                  "dropout after the hidden layers": False, "dropout p": 0.5},
                 {"output": "[-0.9, -0.235]", "x.grad": "[0.057, 0.091, -0.369]", "hooks on the model": "0"}),
            Step("double the input: a pre-hook",
                 {"double the input": True},
                 {"output": "[-0.948, -0.504]", "x.grad": "[0.104, 0.188, -0.736]", "hooks on the model": "1"}),
            Step("double the output instead: the output is exactly twice the start",
                 {"double the input": False, "double the output": True},
                 {"output": "[-1.8, -0.469]", "hooks on the model": "1"}),
            Step("scale the gradient instead: the output is back, x.grad is a tenth",
                 {"double the output": False, "scale the gradient ×0.1": True},
                 {"output": FIRST, "x.grad": "[0.006, 0.009, -0.037]", "hooks on the model": "1"}),
            Step("dropout after the hidden layers, p 0.5: two hooks",
                 {"scale the gradient ×0.1": False, "dropout after the hidden layers": True},
                 {"output": "[-0.524, -0.048]", "hooks on the model": "2"}),
            Step("p 0: dropout drops nothing, the output is the start's",
                 {"dropout p": 0.0},
                 {"output": FIRST, "x.grad": FIRST, "hooks on the model": "2"}),
            Step("everything off, p back to 0.5: the start again",
                 {"dropout after the hidden layers": False, "dropout p": 0.5},
                 {"output": FIRST, "x.grad": FIRST, "hooks on the model": "0"}),
        ],
    },
    # ------------------------------------------------------------------ 04: prune and clamp a layer's weights
    "04_editing_parameters.ipynb": {
        # 'limit' is left where the generic checks put it: typing into that slider's readout (min 0.05,
        # step 0.05) lands one step higher in this ipywidgets version (0.15 -> 0.2, 0.05 -> 0.1). So the
        # clamp works at 0.2 here, where the driving cell prints the output change at 0.15 (≈0.2763) and 0.05
        "controls": ["prune", "method", "amount", "clamp", "limit"],
        "steps": [
            Step("start: nothing on; the weight is the original",
                 {"prune": False, "method": "smallest |w|", "amount": 0.5, "clamp": False},
                 {"zero weights": "0", "largest |weight|": "0.288", "largest output change": "0",
                  "weight equals the original": "True", "forward pre-hooks on the layer": "1"}),
            Step("clamp: one more pre-hook, the largest weight shrinks, the output moves (a per-run figure)",
                 {"clamp": True},
                 {"largest |weight|": [CHANGED, "0.2"], "largest output change": About("≈0.1523", within=0.002),
                  "weight equals the original": "False", "forward pre-hooks on the layer": "2"}),
            Step("prune half the weights as well",
                 {"prune": True},
                 {"zero weights": "72", "largest |weight|": SAME, "forward pre-hooks on the layer": "3"}),
            Step("amount 0.8",
                 {"amount": 0.8},
                 {"zero weights": "115"}),
            Step("whole rows instead of the smallest weights",
                 {"method": "whole rows"},
                 {"zero weights": "120"}),
            Step("everything off: the original weight exactly",
                 {"prune": False, "clamp": False, "method": "smallest |w|", "amount": 0.5},
                 {"zero weights": "0", "largest |weight|": "0.288", "largest output change": "0",
                  "weight equals the original": "True", "forward pre-hooks on the layer": "1"}),
        ],
    },
    # ------------------------------------------------------------------ 05: inside any layer of ResNet-18
    "05_resnet_traversal.ipynb": {
        # std and output change depend on the CPU's float kernels: the driving cell compares them in claims,
        # so here they are exact only where they are exact (0) and otherwise relations
        "controls": EXPLORE_CONTROLS,
        "type": {"filter": ["layer4.*.bn?", "no-such-module"]},
        "steps": [
            Step("start: conv1, nothing on",
                 {"filter": "", "module": CONV1, "zero its output": False, "add noise": False, "noise (× std)": 0.5,
                  "scale its output": False, "factor": 2.0, "clamp its output": False, "clamp at ± (× std)": 1.0},
                 {"shape": "[1, 64, 56, 56]", "calls per forward": "1", "interventions": "none",
                  "output change": "0", "hooks on the model": "0", "listed": "all 68 modules"}),
            Step("zero conv1's output: std 0, the logits move",
                 {"zero its output": True},
                 {"std": "0", "interventions": "zero", "output change": CHANGED, "hooks on the model": "1"}),
            Step("the zero hook follows the module picked to layer4.1.bn2: the logits move another distance",
                 {"module": BN2_4_1},
                 {"shape": "[1, 512, 4, 4]", "std": "0", "output change": CHANGED, "hooks on the model": "1"}),
            Step("layer1.0.relu: one module, called twice per forward",
                 {"module": RELU_1_0},
                 {"shape": "[1, 64, 28, 28]", "calls per forward": "2", "std": "0", "output change": CHANGED}),
            Step("noise instead of zeros",
                 {"zero its output": False, "add noise": True},
                 {"std": CHANGED, "interventions": "noise 0.5×std", "output change": CHANGED,
                  "hooks on the model": "1"}),
            Step("more noise",
                 {"noise (× std)": 2.0},
                 {"std": CHANGED, "interventions": "noise 2×std", "output change": CHANGED}),
            Step("the filter lists four BatchNorms of layer4 and keeps layer1.0.relu picked (listed first)",
                 {"filter": "layer4.*.bn?"},
                 {"listed": "4 of 68 match 'layer4.*.bn?', and 'layer1.0.relu', picked", "type": "ReLU · leaf",
                  "shape": "[1, 64, 28, 28]", "output change": SAME, "hooks on the model": "1"}),
            Step("pick the first of the four: the noise moves with it",
                 {"module": BN1_4_0},
                 {"listed": "4 of 68 match 'layer4.*.bn?'", "type": "BatchNorm2d · leaf", "shape": "[1, 512, 4, 4]",
                  "std": CHANGED, "output change": CHANGED, "hooks on the model": "1"}),
            Step("noise off, the whole list, back to conv1: the start again",
                 {"add noise": False, "filter": "", "module": CONV1},
                 {"shape": FIRST, "std": FIRST, "interventions": "none", "output change": "0",
                  "hooks on the model": "0", "listed": "all 68 modules"}),
        ],
    },
    # ------------------------------------------------------------------ 06: training diagnostics
    # every new (initialisation, learning rate) pair trains a fresh 192-step run in the kernel
    "06_training_diagnostics.ipynb": {
        "controls": ["initialisation", "learning rate", "layer"],
        "steps": [
            Step("start: kaiming, lr 0.006, relu3: a healthy run",
                 {"initialisation": "kaiming", "learning rate": "0.006", "layer": "relu3"},
                 {"test accuracy": About("≈90.8%", within=5), "relu3 dead units": About("≈9%", within=6),
                  "learned (test accuracy ≥ 50%)": "True",
                  "most units of relu3 dead (≥ 80%)": "False"}),
            Step("tiny weights: most of relu3 dead, nothing learned",
                 {"initialisation": "tiny"},
                 {"test accuracy": CHANGED, "learned (test accuracy ≥ 50%)": "False",
                  "most units of relu3 dead (≥ 80%)": "True"}),
            Step("tiny weights, relu1: the same run, another layer; relu1 is not mostly dead",
                 {"layer": "relu1"},
                 {"test accuracy": SAME, "relu1 std": About("≈0.002", within=0.001),
                  "most units of relu1 dead (≥ 80%)": "False"}),
            Step("kaiming with lr 0.05: relu3 dies",
                 {"initialisation": "kaiming", "learning rate": "0.05", "layer": "relu3"},
                 {"learned (test accuracy ≥ 50%)": "False", "most units of relu3 dead (≥ 80%)": "True"}),
            Step("back to the healthy run (kept, not retrained), relu1",
                 {"learning rate": "0.006", "layer": "relu1"},
                 {"learned (test accuracy ≥ 50%)": "True", "most units of relu1 dead (≥ 80%)": "False"}),
        ],
    },
    # ------------------------------------------------------------------ 07: Grad-CAM
    "07_grad_cam.ipynb": {
        "controls": ["test image", "class", "layer"],
        "steps": [
            Step("start: image 0, the predicted class, relu2",
                 {"test image": "0", "class": "predicted", "layer": "relu2"},
                 {"true class": "horizontal", "predicted": About("horizontal (≈100%)", within=2),
                  "peak": About("row ≈10, column ≈27", within=3),
                  "peak on the shape": "True", "hooks on the model": "0"}),
            Step("image 11: vertical stripes",
                 {"test image": "11"},
                 {"true class": "vertical", "predicted": About("vertical (≈100%)", within=2), "peak": CHANGED,
                  "peak on the shape": "True"}),
            Step("ask relu3 where it sees 'diagonal': off the shape",
                 {"class": "diagonal", "layer": "relu3"},
                 {"heat map for": About("diagonal (≈0%)", within=2), "peak on the shape": "False", "predicted": SAME,
                  "hooks on the model": "0"}),
            Step("back to the start",
                 {"test image": "0", "class": "predicted", "layer": "relu2"},
                 {"true class": FIRST, "peak": FIRST, "peak on the shape": FIRST}),
        ],
    },
    # ------------------------------------------------------------------ 08: hooks in a training loop
    "08_training_loops.ipynb": {
        "controls": ["micro-batches", "GradScaler", "checkpointing", "clamp"],
        "steps": [
            Step("start: the plain loop, nothing on",
                 {"micro-batches": "1", "GradScaler": False, "checkpointing": False, "clamp": "off"},
                 {"tensor-hook calls per step (fc3.weight)": "1", "clamp calls per step": "0",
                  "loss scale": "1", "forward-hook calls per step: recomputed": "0",
                  "every step's update used |grad| ≤ 1 (fc3.weight)": "False",
                  "loss on all examples fell by 10% or more": "True"}),
            Step("4 micro-batches, clamp in a tensor hook: 12 clamps per step, the update still exceeds 1",
                 {"micro-batches": "4", "clamp": "tensor hook"},
                 {"tensor-hook calls per step (fc3.weight)": "4", "clamp calls per step": "12",
                  "forward-hook calls per step: real": "8",
                  "every step's update used |grad| ≤ 1 (fc3.weight)": "False"}),
            Step("GradScaler on: hooks see 65536 × the gradient, the clamp stops learning",
                 {"GradScaler": True},
                 {"loss scale": "65536", "every step's update used |grad| ≤ 1 (fc3.weight)": "True",
                  "loss on all examples fell by 10% or more": "False"}),
            Step("clip after unscale: once per step, and it learns",
                 {"clamp": "after unscale"},
                 {"clamp calls per step": "1", "every step's update used |grad| ≤ 1 (fc3.weight)": "True",
                  "loss on all examples fell by 10% or more": "True"}),
            Step("checkpointing: one recomputed forward-hook call per micro-batch",
                 {"checkpointing": True},
                 {"forward-hook calls per step: real": "8", "forward-hook calls per step: recomputed": "4"}),
            Step("everything off: the first view again",
                 {"micro-batches": "1", "GradScaler": False, "checkpointing": False, "clamp": "off"},
                 {"tensor-hook calls per step (fc3.weight)": FIRST, "clamp calls per step": FIRST,
                  "loss scale": FIRST, "every step's update used |grad| ≤ 1 (fc3.weight)": FIRST,
                  "loss on all examples, after training": FIRST}),
        ],
    },
    # ------------------------------------------------------------------ 09: hooklab.explore on a text classifier
    "09_bring_your_own_model.ipynb": {
        # std and output change come out of float arithmetic: the view marks them ≈ (each within 1% of the
        # figure; CHANGED says that it moved); a zeroed output's std and the reference's output change are exact
        "controls": EXPLORE_CONTROLS,
        "type": {"filter": ["linear2", "no-such-module"]},
        "steps": [
            Step("start: encoder.layers.0.norm2, nothing on",
                 {"filter": "", "module": NORM2_0, "zero its output": False, "add noise": False, "noise (× std)": 0.5,
                  "scale its output": False, "factor": 2.0, "clamp its output": False, "clamp at ± (× std)": 1.0},
                 {"std": About("≈1.003", within=0.01), "calls per forward": "1", "output change": "0",
                  "hooks on the model": "0",
                  "listed": "all 25 modules"}),
            Step("zero its output: the scores move",
                 {"zero its output": True},
                 {"std": "0", "interventions": "zero", "output change": About("≈1.89", within=0.02),
                  "hooks on the model": "1"}),
            Step("the zero hook follows the module picked",
                 {"module": NORM2_1},
                 {"output change": [CHANGED, About("≈0.798", within=0.008)], "hooks on the model": "1"}),
            Step("the filter lists the two linear2 layers and keeps encoder.layers.1.norm2 picked (listed first)",
                 {"filter": "linear2"},
                 {"listed": "2 of 25 match 'linear2', and 'encoder.layers.1.norm2', picked", "type": "LayerNorm · leaf",
                  "std": "0", "output change": SAME, "hooks on the model": "1"}),
            Step("pick the first linear2: the hook moves with it",
                 {"module": LINEAR2_0},
                 {"listed": "2 of 25 match 'linear2'", "type": "Linear · leaf", "std": "0",
                  "output change": [CHANGED, About("≈0.221", within=0.003)], "hooks on the model": "1"}),
            Step("scale by -1 instead of zeroing",
                 {"zero its output": False, "scale its output": True, "factor": -1.0},
                 {"interventions": "scale ×-1", "std": [CHANGED, About("≈0.2388", within=0.003)],
                  "output change": [CHANGED, About("≈0.479", within=0.005)]}),
            Step("noise of 2 standard deviations instead",
                 {"scale its output": False, "add noise": True, "noise (× std)": 2.0},
                 {"interventions": "noise 2×std", "std": [CHANGED, About("≈0.5455", within=0.006)],
                  "output change": [CHANGED, About("≈0.317", within=0.004)]}),
            Step("noise off, the whole list, back to encoder.layers.0.norm2: the start again",
                 {"add noise": False, "filter": "", "module": NORM2_0},
                 {"std": FIRST, "output change": "0", "hooks on the model": "0", "listed": "all 25 modules"}),
        ],
    },
    # ------------------------------------------------------------------ 10: patch and steer a tiny transformer
    "10_transformer_interpretability.ipynb": {
        # the logit difference and the recovered share come out of float arithmetic (≈); the yes/no row carries
        # the claims, and a logit difference must come back exactly (FIRST) when nothing is on
        "controls": [PATCH, "layer", "position", "steer", "strength"],
        "steps": [
            Step("start: nothing patched, nothing steered",
                 {PATCH: False, "layer": "embed", "position": "3", "steer": False, "strength": 1.0},
                 {"patched": "nothing", "steered": "no", "answers 3 for at least 90%": "False",
                  "hooks on the model": "0"}),
            Step("patch embed at the digit's position: the clean answer comes back",
                 {PATCH: True},
                 {"patched": "embed at position 3 (3)", "recovered": CHANGED, "answers 3 for at least 90%": "True",
                  "hooks on the model": "1"}),
            Step("position 5 carries nothing",
                 {"position": "5"},
                 {"patched": "embed at position 5 (4)", "logit difference 3 − 7": FIRST,
                  "answers 3 for at least 90%": "False", "hooks on the model": "1"}),
            Step("blocks.1 at the last position: everything comes back",
                 {"layer": "blocks.1", "position": "7"},
                 {"patched": "blocks.1 at position 7 (?)", "answers 3 for at least 90%": "True"}),
            Step("blocks.1 at the digit's position: nothing (the answer has moved on)",
                 {"position": "3"},
                 {"patched": "blocks.1 at position 3 (3)", "logit difference 3 − 7": FIRST,
                  "answers 3 for at least 90%": "False"}),
            Step("no patch; steer at strength 1 instead",
                 {PATCH: False, "steer": True},
                 {"patched": "nothing", "steered": "blocks.0 + 1 × vector at 3", "answers 3 for at least 90%": "True",
                  "hooks on the model": "1"}),
            Step("strength 0: the corrupted run exactly",
                 {"strength": 0.0},
                 {"steered": "blocks.0 + 0 × vector at 3", "logit difference 3 − 7": FIRST,
                  "answers 3 for at least 90%": "False", "hooks on the model": "1"}),
            Step("everything off: the first view again",
                 {"steer": False, "strength": 1.0, "layer": "embed"},
                 {"patched": "nothing", "steered": "no", "logit difference 3 − 7": FIRST,
                  "the map at this cell (if patched)": FIRST, "hooks on the model": "0"}),
        ],
    },
    # ------------------------------------------------------------------ 11: per-sample gradients, clipped
    "11_per_sample_gradients.ipynb": {
        # norms come out of float arithmetic (≈); the yes/no rows carry the claims, and the first view must come
        # back exactly when the hooks go
        "controls": ["per-sample hooks", "loss", "C", "σ"],
        "steps": [
            Step("start: no hooks, no per-sample gradients",
                 {"per-sample hooks": False, "loss": "mean", "C": 1.0, "σ": 0.0},
                 {"per-sample gradients": "none: tick the hooks", "hooks on the model": "0"}),
            Step("tick the hooks: a forward and a full backward hook on each nn.Linear",
                 {"per-sample hooks": True},
                 {"per-sample gradients": "96 examples, loss mean", "every clipped norm ≤ C": "True",
                  "8 largest = the 8 planted": "True", "hooks on the model": "4"}),
            Step("loss summed instead of averaged",
                 {"loss": "sum"},
                 {"per-sample gradients": "96 examples, loss sum", "8 largest = the 8 planted": "True",
                  "hooks on the model": "4"}),
            Step("averaged, without × n: the norms are 1/96 of the true ones, nothing is clipped",
                 {"loss": "mean, no × n"},
                 {"per-sample gradients": "96 examples, loss mean, no × n", "largest norm": CHANGED,
                  "clipped": About("≈0 of 96", within=0), "8 largest = the 8 planted": "True"}),
            Step("back to mean, C = 10: fewer clipped",
                 {"loss": "mean", "C": 10.0},
                 {"per-sample gradients": "96 examples, loss mean", "clipped": CHANGED,
                  "clipped update's norm": CHANGED, "every clipped norm ≤ C": "True", "hooks on the model": "4"}),
            Step("noise σ = 1: the noisy update's norm grows, the clipped update's stays",
                 {"σ": 1.0},
                 {"noisy update's norm": CHANGED, "clipped update's norm": SAME, "clipped": SAME,
                  "hooks on the model": "4"}),
            Step("everything off: the first view again",
                 {"per-sample hooks": False, "C": 1.0, "σ": 0.0},
                 {"per-sample gradients": FIRST, "hooks on the model": "0"}),
        ],
    },
}
