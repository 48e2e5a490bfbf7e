"""Helpers for notebook 05 (traversing a ResNet): tables, statistics, the photograph.

The notebook keeps the hooks in plain sight; this module holds only what is not about hooks:
printing rows as an aligned table, a tensor's statistics and how the notebook prints them, and
turning the normalised photograph back into an image. (The live lab is ``hooklab.explore``.)

A statistic of a random-weight network depends on the CPU's float kernels in its last bits, and
rounding cannot hide that: a value near a rounding boundary flips a printed digit. So
:func:`figure` prints it as a per-run figure (``≈0.296``, masked by the tests) and leaves only an
exact zero exact; the notebook prints claims beside the figures.

>>> import torch, hooklab.course.nb05_resnet_traversal as lab
>>> lab.stats(torch.tensor([[-1.0, 0.0], [1.0, 2.0]]))["zeros"]
0.25
>>> lab.figure(0.2959), lab.figure(0.0), lab.figure(0.5024, ".1%")
('≈0.296', '0', '≈50.2%')
>>> print(lab.table(["layer", "shape"], [["conv1", [1, 64, 32, 32]]]))
layer  shape
-----  ---------------
conv1  [1, 64, 32, 32]

Exercises of notebook 05 (traversing a ResNet): save outputs by name, count calls, save gradients.

Each ``Exercise`` runs the learner's function on small models built here (a conv -> BatchNorm ->
in-place ReLU stem; residual blocks that are not ``nn.Sequential`` and call one ReLU twice) and
names the typical mistakes. The worked solutions are in ``hooklab.course._solutions``, imported only
when one is shown.

>>> from hooklab.course.nb05_resnet_traversal import saver_exercise
>>> print(saver_exercise.check(saver_exercise.worked()))  # the worked solution
Save outputs by name: all 5 checks passed
  ✓ returns a forward hook
  ✓ stores one entry per module, under its name
  ✓ keeps only the latest run
  ✓ stores tensors without their graph
  ✓ stores a copy that later in-place operations cannot change
"""

from __future__ import annotations

from math import ceil, sqrt
from typing import Any, Callable, Sequence

import torch
from torch import nn

from ..table import Table
from ..lab.exercises import Exercise, Mistake
from .checks import grad_of, made_hook
from ..hooks import Hooks
from ..inspection import count_hooks
from ..claims import approx
from ..lab.plots import TITLE
from ..recording import Recorder
from .data import IMAGENET_MEAN, IMAGENET_STD, seeded


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> Table:
    """Rows under a header: prints as aligned text, shows as an HTML table in a notebook.

    >>> print(table(["a", "b"], [[1, 2]], title="demo"))
    demo
    a  b
    -  -
    1  2
    """
    return Table(header, rows, title)


def figure(value: float, spec: str = ".3f") -> str:
    """How the notebook prints a statistic: ``"0"`` for an exact zero (a ReLU's minimum, the share
    of zeros of a convolution), else a per-run figure (:func:`hooklab.claims.approx`).

    >>> figure(-0.002275), figure(-0.0), figure(20.89, ".3g")
    ('≈-0.002', '0', '≈20.9')
    """
    return "0" if value == 0 else approx(value, spec)


def feature_grid(fig: Any, maps: torch.Tensor, n: int = 16, title: str = "") -> Any:
    """Draw the first ``n`` channels of a ``[C, H, W]`` (or ``[1, C, H, W]``) tensor as a grid:
    each map in viridis over its own range (as ``imshow`` shows one map alone), a gap of a fifth
    of a map between them. The grid is one picture in one axes (:func:`tile`): 16 axes of their
    own cost about a second more to build and draw on a slow CPU."""
    if maps.dim() == 4:
        maps = maps[0]
    if maps.dim() != 3:
        raise ValueError(f"feature maps must be [C, H, W] or [1, C, H, W], got shape {list(maps.shape)}.")
    from matplotlib import colormaps

    ax = fig.add_subplot()
    viridis = colormaps["viridis"].with_extremes(bad=(0.0, 0.0, 0.0, 0.0))  # the gaps: transparent
    ax.imshow(tile(maps[:n]).numpy(), cmap=viridis, vmin=0.0, vmax=1.0)
    ax.set_axis_off()
    if title:
        fig.suptitle(title, fontsize=TITLE)
    return fig


def tile(maps: torch.Tensor) -> torch.Tensor:
    """``[C, H, W]`` maps as one ``[rows * H + gaps, cols * W + gaps]`` picture, row by row in a
    square-ish grid: each map scaled to ``[0, 1]`` over its own range (a constant map to 0, as
    ``imshow`` does), NaN in the gaps (a fifth of a map wide) and in the unused places.

    >>> tile(torch.tensor([[[1.0, 3.0]], [[5.0, 5.0]]]))
    tensor([[0., 1., nan, 0., 0.]])
    """
    maps = maps.detach().float().cpu()
    count, h, w = maps.shape
    cols = ceil(sqrt(count))
    rows = ceil(count / cols)
    low, high = maps.amin(dim=(1, 2), keepdim=True), maps.amax(dim=(1, 2), keepdim=True)
    scaled = (maps - low) / (high - low).clamp(min=1e-12)
    gap_h, gap_w = max(1, round(h / 5)), max(1, round(w / 5))
    picture = torch.full((rows * h + (rows - 1) * gap_h, cols * w + (cols - 1) * gap_w), float("nan"))
    for i in range(count):
        top, left = (i // cols) * (h + gap_h), (i % cols) * (w + gap_w)
        picture[top:top + h, left:left + w] = scaled[i]
    return picture


def stats(t: torch.Tensor) -> dict[str, float]:
    """Mean, standard deviation, min, max and the share of exact zeros of ``t``, as floats.

    >>> stats(torch.zeros(3))
    {'mean': 0.0, 'std': 0.0, 'min': 0.0, 'max': 0.0, 'zeros': 1.0}
    """
    t = t.detach().float()
    return {
        "mean": t.mean().item(),
        "std": t.std().item() if t.numel() > 1 else 0.0,
        "min": t.min().item(),
        "max": t.max().item(),
        "zeros": (t == 0).float().mean().item(),
    }


def photo_image(x: torch.Tensor) -> torch.Tensor:
    """Undo the ImageNet normalisation of :func:`hooklab.course.data.sample_photo`: ``[H, W, 3]`` in [0, 1].

    >>> import hooklab
    >>> photo_image(hooklab.course.data.sample_photo(32)).shape
    torch.Size([32, 32, 3])
    """
    if x.dim() == 4:
        x = x[0]
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    return (x.detach() * std + mean).clamp(0, 1).permute(1, 2, 0)


# -------------------------------------------------------------------- exercises



# ---------------------------------------------------------------- small models the checks run
def _stem() -> nn.Sequential:
    """conv -> bn -> in-place ReLU -> pool -> flatten -> linear, like the start and end of a ResNet."""
    return seeded(0, lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
                                           nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)).eval())


class _Block(nn.Module):
    """A residual block that calls its one ReLU twice (as torchvision's BasicBlock does)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.fc1(x))
        return self.relu(self.fc2(out) + x)


def _blocks() -> nn.Sequential:
    """Blocks that are not ``nn.Sequential``, one of them inside a ``Sequential``."""
    return seeded(0, lambda: nn.Sequential(nn.Linear(3, 4), _Block(4), nn.Sequential(_Block(4), nn.Linear(4, 2))))


def _names(model: nn.Module) -> dict[nn.Module, str]:
    return {m: n for n, m in model.named_modules() if n}


# ---------------------------------------------------------------- exercise 1: save outputs by name
def _run_saver(fn: Callable, runs: int = 2) -> tuple[dict, list[dict[str, torch.Tensor]], nn.Module]:
    """Register ``fn(name, store)`` on every module of the stem; run it ``runs`` times; return the
    store and what the true outputs were in each run (recorded with hooklab's own recorder)."""
    model = _stem()
    store: dict = {}
    truth: list[dict[str, torch.Tensor]] = []
    names = _names(model)
    hook = made_hook(fn, "0", store, kind="forward", call="make_saver", inner="hook")
    with Hooks() as hooks:
        for module, name in names.items():
            hooks.forward(module, fn(name, store), key=name)
        for run in range(runs):
            with Recorder(model, *names.values(), name="exercise-saver-truth") as rec:
                model(torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(run)))
            truth.append({n: rec[n].output for n in rec})
    return store, truth, model


def _returns_hook(fn: Callable) -> None:
    _run_saver(fn, runs=1)


def _keyed_by_name(fn: Callable) -> None:
    store, truth, model = _run_saver(fn, runs=1)
    if not store:
        raise Mistake("after a forward pass your store is still empty: inside the hook, write "
                      "`store[name] = ...`.")
    if any(isinstance(k, nn.Module) for k in store):
        raise Mistake("your store is keyed by module objects: keys like `Conv2d(3, 4, ...)` cannot be "
                      "looked up by name and keep the modules alive. Use the name: `store[name] = ...`.")
    missing = sorted(set(truth[0]) - set(store), key=int)
    if missing:
        raise Mistake(f"nothing stored under {missing}: each hook must write to store[name] with the name "
                      "it was made for.")
    extra = sorted(map(str, set(store) - set(truth[0])))
    if extra:
        raise Mistake(f"unexpected keys {extra} in the store: use exactly the name given to make_saver.")


def _latest_only(fn: Callable) -> None:
    store, truth, _ = _run_saver(fn)
    value = store.get("0")
    if isinstance(value, (list, tuple)):
        raise Mistake(f"store['0'] is a {type(value).__name__} that grows with every forward pass "
                      f"({len(value)} entries after 2 runs): memory grows, and old runs mix with new ones. "
                      "Keep only the latest: `store[name] = ...`, not `.append(...)`.")
    if not isinstance(value, torch.Tensor):
        raise Mistake(f"store['0'] should be the output tensor, got {type(value).__name__}.")


def _no_graph(fn: Callable) -> None:
    store, _, _ = _run_saver(fn, runs=1)
    kept = sorted(n for n, v in store.items() if isinstance(v, torch.Tensor) and v.grad_fn is not None)
    if kept:
        raise Mistake(f"the tensors stored under {kept} still carry a grad_fn: each keeps the whole autograd "
                      "graph of its forward pass alive, and memory grows with every stored batch. "
                      "Store `output.detach()`.")


def _a_copy(fn: Callable) -> None:
    store, truth, _ = _run_saver(fn)
    bn = store.get("1")
    if not isinstance(bn, torch.Tensor):
        raise Mistake("store['1'] (the BatchNorm's output) is missing or not a tensor.")
    if (bn < 0).sum() == 0 and (truth[-1]["1"] < 0).sum() > 0:
        raise Mistake("the stored BatchNorm output has no negative values, but the real one had: the "
                      "in-place ReLU that runs next overwrote the tensor you stored, because detach() "
                      "shares its memory. Store a copy with its own memory.")
    for name, want in truth[-1].items():
        if not torch.equal(store[name], want):
            raise Mistake(f"store[{name!r}] does not hold module {name}'s output from the latest run.")


saver_exercise = Exercise(
    "Save outputs by name",
    [
        ("returns a forward hook", _returns_hook),
        ("stores one entry per module, under its name", _keyed_by_name),
        ("keeps only the latest run", _latest_only),
        ("stores tensors without their graph", _no_graph),
        ("stores a copy that later in-place operations cannot change", _a_copy),
    ],
    solution="hooklab.course._solutions.nb05_resnet_traversal:make_saver",
)


# ---------------------------------------------------------------- exercise 2: count the calls
def _expected_counts(model: nn.Module) -> dict[str, int]:
    counts = {n: 1 for n, _ in model.named_modules() if n}
    for n, m in model.named_modules():
        if isinstance(m, _Block):
            counts[f"{n}.relu"] = 2
    return counts


def _call_count(fn: Callable, model: nn.Module | None = None) -> tuple[Any, nn.Module]:
    model = model if model is not None else _blocks()
    got = fn(model, torch.ones(1, 3))
    if got is None:
        raise Mistake("count_calls returned None: `return counts` at the end.")
    if not isinstance(got, dict):
        raise Mistake(f"count_calls should return a dict {{name: count}}, got {type(got).__name__}.")
    return got, model


def _names_as_keys(fn: Callable) -> None:
    got, _ = _call_count(fn)
    if any(isinstance(k, nn.Module) for k in got):
        raise Mistake("the keys are module objects: use their names (build `{module: name}` once from "
                      "model.named_modules() and look the name up in the hook).")
    if not got:
        raise Mistake("the dict is empty: did the hooks run? Register them before calling model(x).")


def _every_module(fn: Callable) -> None:
    got, model = _call_count(fn)
    want = _expected_counts(model)
    missing = [n for n in want if n not in got]
    if missing:
        inside = [n for n in missing if n.startswith(("1.", "2.0."))]
        hint = (" Those are inside blocks that are not nn.Sequential: a recursion that only descends into "
                "nn.Sequential (or looks only at named_children) never reaches them. Walk "
                "model.named_modules(), which visits every module at every depth."
                if inside else " Walk model.named_modules().")
        raise Mistake(f"no count for {missing}.{hint}")


def _reused_twice(fn: Callable) -> None:
    got, model = _call_count(fn)
    want = _expected_counts(model)
    wrong = {n: got.get(n) for n, c in want.items() if n in got and got[n] != c}
    if wrong:
        relu = [n for n in wrong if n.endswith("relu")]
        hint = (" The block calls its one ReLU twice, so its hook fires twice: add 1 on each call "
                "(`counts[name] = counts.get(name, 0) + 1`) instead of setting it."
                if relu else "")
        raise Mistake(f"wrong counts {wrong}; expected {({n: want[n] for n in wrong})}.{hint}")


def _hooks_removed(fn: Callable) -> None:
    _, model = _call_count(fn)
    left = count_hooks(model, include_global=False)
    if left:
        raise Mistake(f"{left} hooks are still on the model after count_calls returned: every later forward "
                      "pass would keep counting. Remove them (`with hooklab.Hooks() as hooks:` or "
                      "`handle.remove()` for each).")


def _same_twice(fn: Callable) -> None:
    model = _blocks()
    first, _ = _call_count(fn, model)
    first = dict(first)
    second, _ = _call_count(fn, model)
    if dict(second) != first:
        raise Mistake("calling count_calls twice on the same model gave different counts: the dict (or the "
                      "hooks) outlive the call. Create the counts dict inside count_calls and remove the hooks "
                      "before returning.")


count_exercise = Exercise(
    "Count every module's calls",
    [
        ("keys are module names", _names_as_keys),
        ("counts every module, at every depth", _every_module),
        ("counts a reused module once per call", _reused_twice),
        ("leaves no hook behind", _hooks_removed),
        ("gives the same counts when called again", _same_twice),
    ],
    solution="hooklab.course._solutions.nb05_resnet_traversal:count_calls",
)


# ---------------------------------------------------------------- exercise 3: save gradients by name
def _run_grads(fn: Callable) -> tuple[dict, dict[str, torch.Tensor], dict[str, torch.Tensor], nn.Module]:
    """Register ``fn(name, grads)`` on every module of the stem, run forward + backward; return
    the learner's grads, the true gradients, the true parameter gradients, and the model."""
    x = torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(0))
    reference = _stem()
    with Recorder(reference, what=("grad",), name="exercise-grad-truth") as rec:
        reference(x).pow(2).sum().backward()
    truth = rec.grads()
    param_truth = {n: grad_of(p) for n, p in reference.named_parameters()}

    model = _stem()
    grads: dict = {}
    hook = made_hook(fn, "0", grads, kind="forward", call="make_grad_saver", inner="hook")
    probe = nn.Linear(2, 2)
    probe_out = probe(torch.ones(1, 2))
    returned = hook(probe, (torch.ones(1, 2),), probe_out)
    if returned is not None and returned is not probe_out:
        raise Mistake(f"your forward hook returns a {type(returned).__name__}, which replaces the module's "
                      "output. `output.register_hook(...)` returns a handle; do not return it: end the hook "
                      "without `return`.")
    with Hooks() as hooks:
        for module, name in _names(model).items():
            hooks.forward(module, fn(name, grads), key=name)
        out = model(x)
        if not isinstance(out, torch.Tensor):
            raise Mistake(f"the model returned a {type(out).__name__} instead of a tensor: your forward hook "
                          "returns something, which replaces the module's output. `output.register_hook(...)` "
                          "returns a handle; do not return it: end the hook without `return`.")
        out.pow(2).sum().backward()
    return grads, truth, param_truth, model


def _grad_returns_hook(fn: Callable) -> None:
    _run_grads(fn)


def _grad_by_name(fn: Callable) -> None:
    grads, truth, _, _ = _run_grads(fn)
    if not grads:
        raise Mistake("no gradient was stored: inside the forward hook, register a tensor hook on the output "
                      "whose function stores the gradient it receives under the module's name.")
    if any(isinstance(k, nn.Module) for k in grads):
        raise Mistake("the gradients are keyed by module objects: use the name given to make_grad_saver.")
    for name, want in truth.items():
        if name not in grads:
            continue
        got = grads[name]
        if isinstance(got, (list, tuple)):
            raise Mistake(f"grads[{name!r}] is a {type(got).__name__}: keep only the latest gradient, "
                          "`grads[name] = grad`.")
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            shape = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise Mistake(f"grads[{name!r}] has shape {shape}, but the module's output has shape "
                          f"{list(want.shape)}: store the gradient with respect to the output (the tensor "
                          "hook goes on `output`, not on `args[0]`).")
        if not torch.allclose(got, want, atol=1e-6):
            raise Mistake(f"grads[{name!r}] is not the gradient with respect to module {name}'s output.")
    missing = sorted(set(truth) - set(grads), key=int)
    if missing:
        hint = (" Module 0 is the first layer: its input does not require grad, but its output does. Put the "
                "tensor hook on `output`, not on `args[0]`." if missing == ["0"] else "")
        raise Mistake(f"no gradient stored under {missing}.{hint}")


def _grad_unchanged(fn: Callable) -> None:
    _, _, param_truth, model = _run_grads(fn)
    for name, p in model.named_parameters():
        if p.grad is None or not torch.allclose(p.grad, param_truth[name], atol=1e-6):
            raise Mistake(f"the parameters' gradients changed ({name} first): your tensor hook returned a new "
                          "gradient or changed `grad` in place. Store a copy (`grad.detach().clone()`) and "
                          "return nothing.")


def _grad_no_grad(fn: Callable) -> None:
    model = _stem()
    with Hooks() as hooks:
        for module, name in _names(model).items():
            hooks.forward(module, fn(name, {}), key=name)
        try:
            with torch.no_grad():
                model(torch.ones(1, 3, 5, 5))
        except NotImplementedError:
            raise
        except RuntimeError as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise Mistake(f"under torch.no_grad() your hook fails ({first}): outputs then "
                          "do not require grad, and a tensor hook cannot go on them. Register the "
                          "tensor hook only on an output that requires grad.") from None


grad_exercise = Exercise(
    "Save gradients by name (the in-place-safe way)",
    [
        ("returns a forward hook that leaves the output alone", _grad_returns_hook),
        ("stores each module's output gradient under its name", _grad_by_name),
        ("leaves the gradients themselves unchanged", _grad_unchanged),
        ("works under torch.no_grad()", _grad_no_grad),
    ],
    solution="hooklab.course._solutions.nb05_resnet_traversal:make_grad_saver", level="stretch",
)
