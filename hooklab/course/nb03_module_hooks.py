"""Helpers for notebook 03 (module hooks): its small models and a memory report for stored tensors.

>>> import torch, hooklab.course.nb03_module_hooks as lab
>>> model = lab.lab_model()
>>> kept = [model(torch.ones(1, 3)) for _ in range(2)]     # outputs stored with their graph
>>> lab.memory_held(kept).with_graph
2
>>> lab.memory_held([t.detach() for t in kept]).with_graph  # detached: no graph kept alive
0

Exercises of notebook 03 (module hooks), with their checkers and worked solutions.

* :data:`dropout_after_relus` — a function for ``model.apply`` that adds a dropout hook after every ReLU.
* :data:`halve_input_grad` — a full backward hook that replaces ``grad_input``.
* :data:`capture` — a class whose bound method captures a layer's outputs without their graph.

>>> import hooklab.course.nb03_module_hooks as ex
>>> ex.dropout_after_relus.check(ex.dropout_after_relus.worked()).passed  # the worked solution
True
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from ..inspection import hook_dicts
from ..kinds import check_hook_signature
from ..lab.exercises import Exercise, Mistake
from .checks import expect_close, grad_of
from .data import seeded, tiny_mlp


def lab_model(sizes: tuple[int, ...] = (3, 4, 4, 2), *, seed: int = 19) -> nn.Sequential:
    """``Linear -> ReLU -> Linear -> ReLU -> Linear`` with seeded weights (the live lab's model).

    The default seed gives weights for which every ReLU unit is active for the lab's input
    ``[[1.0, -2.0, 0.5]]``, so gradients reach every layer.

    >>> [type(m).__name__ for m in lab_model()]
    ['Linear', 'ReLU', 'Linear', 'ReLU', 'Linear']
    """
    return tiny_mlp(sizes, seed=seed)


def small_cnn(*, seed: int = 0) -> nn.Sequential:
    """A small convolutional network with two ``Conv2d`` layers, for ``[N, 1, H, W]`` images.

    ``Conv2d(1, 4) -> ReLU -> Conv2d(4, 8) -> ReLU -> AdaptiveAvgPool2d(1) -> Flatten -> Linear(8, 2)``,
    seeded so its weights (and outputs) are the same on every run.

    >>> small_cnn()(torch.ones(1, 1, 6, 6)).shape
    torch.Size([1, 2])
    """
    return seeded(seed, lambda: nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(),
        nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2),
    ))


@dataclass(frozen=True)
class MemoryReport:
    """What a collection of stored tensors keeps alive, computed from tensor sizes (repeatable).

    ``tensors``: how many tensors are stored; ``with_graph``: how many of them carry a
    ``grad_fn`` (and so keep their autograd graph alive); ``stored_bytes``: the bytes of the
    stored tensors themselves; ``graph_bytes``: the bytes of the tensors those graphs saved for
    backward (activations; parameters, which live anyway, and the stored tensors are not counted).
    """

    tensors: int
    with_graph: int
    stored_bytes: int
    graph_bytes: int

    @property
    def total_bytes(self) -> int:
        """``stored_bytes + graph_bytes``."""
        return self.stored_bytes + self.graph_bytes

    def __str__(self) -> str:
        return (f"{self.tensors} stored tensor{'' if self.tensors == 1 else 's'}, {self.with_graph} with a grad_fn, "
                f"{self.total_bytes:,} bytes kept alive ({self.stored_bytes:,} stored + "
                f"{self.graph_bytes:,} saved by their graphs)")


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple, set)) or hasattr(value, "__iter__") and not isinstance(value, (str, bytes)):
        for v in value:
            yield from _tensors(v)


def _storage(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def memory_held(stored: Any) -> MemoryReport:
    """Measure what ``stored`` (a tensor, or lists / tuples / dicts of them) keeps alive.

    Walks the autograd graph behind every stored tensor that has a ``grad_fn`` and adds up the
    tensors the graph saved for the backward pass (each storage counted once). Saved tensors
    already freed by a backward pass count as 0 bytes.

    >>> import torch
    >>> w = torch.ones(256, requires_grad=True)
    >>> y = w.exp().sum()                 # exp saves its result (256 floats) for backward
    >>> print(memory_held([y]))
    1 stored tensor, 1 with a grad_fn, 1,028 bytes kept alive (4 stored + 1,024 saved by their graphs)
    >>> print(memory_held([y.detach()]))
    1 stored tensor, 0 with a grad_fn, 4 bytes kept alive (4 stored + 0 saved by their graphs)
    """
    tensors = list(_tensors(stored))
    stored_storages = dict(_storage(t) for t in tensors)
    saved, leaves = _saved_by_graphs(tensors)
    graph_bytes = sum(n for ptr, n in saved.items() if ptr not in leaves and ptr not in stored_storages)
    return MemoryReport(
        tensors=len(tensors),
        with_graph=sum(t.grad_fn is not None for t in tensors),
        stored_bytes=sum(stored_storages.values()),
        graph_bytes=graph_bytes,
    )


def _saved_by_graphs(tensors: list[torch.Tensor]) -> tuple[dict[int, int], set[int]]:
    """The storages (pointer -> bytes) the graphs behind ``tensors`` saved for backward, and the
    storages of their leaves (parameters and the like, not kept alive by the graph)."""
    saved: dict[int, int] = {}
    leaves: set[int] = set()
    seen: set[int] = set()
    stack: list[Any] = [t.grad_fn for t in tensors if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)  # AccumulateGrad: a leaf such as a parameter
        if isinstance(variable, torch.Tensor):
            leaves.add(_storage(variable)[0])
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                value = getattr(node, attr)
            except RuntimeError:  # already freed by a backward pass
                continue
            for t in _tensors(value) if isinstance(value, (tuple, list)) else [value]:
                if isinstance(t, torch.Tensor):
                    ptr, nbytes = _storage(t)
                    saved[ptr] = nbytes
        stack.extend(next_node for next_node, _ in node.next_functions)
    return saved, leaves


# -------------------------------------------------------------------- exercises


#: The dropout probability exercise 1 asks for.
P_DROP = 0.25


# ====================================================================== exercise 1
def _relu_case() -> tuple[nn.Sequential, torch.Tensor]:
    """A seeded CNN (two ReLUs) and a batch of images."""
    return small_cnn(seed=3), seeded(4, lambda: torch.randn(8, 1, 8, 8))


def _check_one_argument(fn: Callable) -> None:
    if not callable(fn):
        raise Mistake(f"pass your function itself (no parentheses after its name), not a {type(fn).__name__}.")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(nn.ReLU())
    except TypeError:
        names = ", ".join(sig.parameters)
        raise Mistake(f"your function takes ({names}), but model.apply calls it as fn(module), with ONE "
                      "argument. Define it as `def add_dropout_after_relus(module):` (a stray `self` "
                      "belongs only to methods).") from None


def _applied(fn: Callable) -> tuple[nn.Sequential, torch.Tensor]:
    """A fresh model after ``model.apply(fn)``."""
    _check_one_argument(fn)
    model, images = _relu_case()
    model.apply(fn)
    return model, images


def _check_registers_on_relus(fn: Callable) -> None:
    model, _ = _applied(fn)
    relus = [m for m in model.modules() if isinstance(m, nn.ReLU)]
    hooks = {m: hook_dicts(m) for m in model.modules()}
    others = sorted({type(m).__name__ for m in model.modules()
                     if not isinstance(m, nn.ReLU) and (hooks[m]["forward"] or hooks[m]["forward_pre"])})
    if any(hooks[m]["forward_pre"] for m in relus) and not any(hooks[m]["forward"] for m in relus):
        raise Mistake("you registered forward PRE-hooks on the ReLUs: they change the ReLU's input. Dropout "
                      "after a ReLU changes its output: use module.register_forward_hook.")
    if others:
        raise Mistake(f"your function also registered hooks on {', '.join(others)}: model.apply calls it for "
                      "every module (the model itself too), so register only when `isinstance(module, nn.ReLU)`.")
    counts = [len(hooks[m]["forward"]) for m in relus]
    if not any(counts):
        raise Mistake("model.apply(your function) registered no forward hook on the ReLUs: inside it, check "
                      "`isinstance(module, nn.ReLU)` and call `module.register_forward_hook(...)`.")
    if counts != [1] * len(relus):
        raise Mistake(f"the ReLUs got {counts} forward hooks; each should get exactly one.")


def _probe(fn: Callable, training: bool) -> list[tuple[torch.Tensor, torch.Tensor, list[Callable]]]:
    """Run the model after ``model.apply(fn)``; per ReLU: (plain ReLU output, final output, its hooks)."""
    model, images = _applied(fn)
    model.train(training)
    seen = []
    relus = [m for m in model.modules() if isinstance(m, nn.ReLU)]
    for relu in relus:
        hooks = list(hook_dicts(relu)["forward"].values())
        relu.register_forward_hook(
            lambda module, args, output, hooks=hooks: seen.append((F.relu(args[0]).detach(), output, hooks)))
    seeded(0, lambda: model(images))  # the same dropout masks every time; the notebook's generator left alone
    return seen


def _check_returns_new_output(fn: Callable) -> None:
    seen = _probe(fn, training=True)
    for plain, out, hooks in seen:
        for hook in hooks:
            given = plain.clone()
            result = seeded(0, lambda: hook(nn.ReLU().train(), (plain,), given))
            if result is None and not torch.equal(given, plain):
                raise Mistake("your hook returns None and changes the output in place (inplace=True or "
                              "`output[...] = ...`). Return a new output with dropout applied instead; in-place "
                              "changes to a ReLU's output break the backward pass.")
            if result is None:
                raise Mistake("your hook returns None, so the output is unchanged: assigning `output = "
                              "F.dropout(...)` only rebinds a local name inside your function. Return the new output.")
    if not seen or all(torch.equal(plain, out) for plain, out, _ in seen):
        raise Mistake("in training mode the ReLUs' outputs are unchanged: the hook on each ReLU should "
                      "return the output with dropout applied (p=0.25), only while the module is training.")
    plain = torch.cat([p.flatten() for p, _, _ in seen])
    out = torch.cat([o.detach().flatten() for _, o, _ in seen])
    alive = plain != 0
    share = ((out == 0) & alive).float().sum().item() / alive.sum().item()
    if not 0.15 <= share <= 0.35:
        raise Mistake(f"in training mode your hooks dropped {share:.0%} of the ReLUs' non-zero outputs; with "
                      "p=0.25 about 25% should be dropped. Pass p=0.25 (the probability of dropping, not of "
                      "keeping).")
    kept = (out != 0) & alive
    ratio = out[kept] / plain[kept]
    if not torch.allclose(ratio, torch.full_like(ratio, 1 / (1 - P_DROP)), atol=1e-4):
        raise Mistake(f"the values that were kept are multiplied by {ratio.median().item():.3g}, expected "
                      f"1/(1-p) = {1 / (1 - P_DROP):.4g}: dropout rescales what it keeps, so the expected sum "
                      "stays the same. Use F.dropout instead of multiplying by a mask yourself.")


def _check_keeps_gradient(fn: Callable) -> None:
    seen = _probe(fn, training=True)
    if any(out.grad_fn is None for _, out, _ in seen):
        raise Mistake("a ReLU's new output has no grad_fn, so no gradient can flow back through it: do not "
                      "detach it or compute it under torch.no_grad().")


def _check_respects_training(fn: Callable) -> None:
    seen = _probe(fn, training=False)
    if not all(torch.allclose(out, plain) for plain, out, _ in seen):
        raise Mistake("after model.eval() your hooks still drop values: they ignore module.training. Pass "
                      "training=module.training to F.dropout, so dropout is only active while training.")


dropout_after_relus = Exercise(
    "Exercise 1 · dropout after every ReLU, with model.apply",
    [
        ("takes one argument, the module (as model.apply calls it)", _check_one_argument),
        ("registers one forward hook on each ReLU, nothing elsewhere", _check_registers_on_relus),
        ("returns the new output: about 25% dropped, the rest rescaled", _check_returns_new_output),
        ("lets the gradient flow", _check_keeps_gradient),
        ("does nothing after model.eval() (respects module.training)", _check_respects_training),
    ],
    solution="hooklab.course._solutions.nb03_module_hooks:add_dropout_after_relus",
)


# ====================================================================== exercise 2
def _linear_case() -> tuple[nn.Linear, torch.Tensor]:
    return seeded(4, lambda: (nn.Linear(3, 2), torch.randn(2, 3, requires_grad=True)))


def _grads(fn: Callable | None) -> tuple[torch.Tensor, torch.Tensor]:
    layer, x = _linear_case()
    if fn is not None:
        layer.register_full_backward_hook(fn)
    try:
        layer(x).pow(2).sum().backward()
    except NotImplementedError:
        raise
    except RuntimeError as exc:
        raise Mistake(f"PyTorch rejected what your hook returned ({exc}): return a tuple with one gradient "
                      "of the input's shape for each entry of grad_input.") from None
    return grad_of(x, "the input"), grad_of(layer.weight, "the weight")


def _sample_grads() -> tuple[tuple[torch.Tensor], tuple[torch.Tensor]]:
    layer, x = _linear_case()
    out = layer(x)
    (grad_x,) = torch.autograd.grad(out.pow(2).sum(), x, retain_graph=True)
    return (grad_x.detach(),), ((2 * out).detach(),)


def _check_returns_tuple(fn: Callable) -> None:
    layer, _ = _linear_case()
    grad_input, grad_output = _sample_grads()
    given = tuple(g.clone() for g in grad_input)
    result = fn(layer, given, grad_output)
    if result is None:
        if not torch.equal(given[0], grad_input[0]):
            raise Mistake("your hook changes grad_input in place and returns None. PyTorch's documentation says a "
                          "backward hook must not modify its arguments: build a new tuple of halved gradients and "
                          "return it.")
        raise Mistake("your hook returns None, so the gradient is unchanged: return the new grad_input as a "
                      "tuple with one entry per entry of grad_input.")
    if isinstance(result, torch.Tensor):
        raise Mistake("your hook returns a tensor; a full backward hook returns a tuple with one entry per "
                      "input of forward, like grad_input itself (a one-element tuple needs its trailing "
                      "comma). PyTorch's own error for this is the puzzling \"hook has changed the size of value\".")
    if not isinstance(result, (tuple, list)):
        raise Mistake(f"your hook returns a {type(result).__name__}; return a tuple like grad_input.")
    if len(result) != len(grad_input):
        raise Mistake(f"your hook returns {len(result)} gradients, but forward has {len(grad_input)} input: "
                      "return one entry per entry of grad_input.")
    first = result[0]
    if isinstance(first, torch.Tensor) and first.shape != grad_input[0].shape:
        hint = (" That is the shape of grad_output: scale grad_input (the gradient for the module's input), "
                "not grad_output." if first.shape == grad_output[0].shape else "")
        raise Mistake(f"the gradient you return has shape {list(first.shape)}, but the input has shape "
                      f"{list(grad_input[0].shape)}.{hint}")


def _check_halves_input_grad(fn: Callable) -> None:
    want, _ = _grads(None)
    got, _ = _grads(fn)
    expect_close(got, want * 0.5, "x.grad (the gradient that reaches the input)", atol=1e-5)


def _check_weight_grad_untouched(fn: Callable) -> None:
    _, want = _grads(None)
    _, got = _grads(fn)
    if not torch.allclose(got, want, atol=1e-6):
        raise Mistake("the layer's weight gradient changed too; only the gradient for the input should: "
                      "a full backward hook's return value replaces grad_input only.")


halve_input_grad = Exercise(
    "Exercise 2 · halve the gradient that reaches a layer's input",
    [
        ("returns a new grad_input tuple", _check_returns_tuple),
        ("halves the input's gradient", _check_halves_input_grad),
        ("leaves the weight's gradient alone", _check_weight_grad_untouched),
    ],
    hook_kind="backward",
    solution="hooklab.course._solutions.nb03_module_hooks:halve_input_grad", level="stretch",
)


# ====================================================================== exercise 3
def _make_capture(cls: Any) -> Any:
    capture_obj = cls() if isinstance(cls, type) else cls
    for attr in ("hook", "clear", "outputs"):
        if not hasattr(capture_obj, attr):
            raise Mistake(f"your class has no `{attr}`: keep the three parts of the template "
                          "(self.outputs = [] in __init__, a hook method, a clear method).")
    try:
        check_hook_signature(capture_obj.hook, "forward")
    except TypeError as exc:
        raise Mistake(str(exc)) from None
    return capture_obj


def _capture_case() -> tuple[nn.Sequential, torch.Tensor]:
    return lab_model(), torch.ones(2, 3)


def _run_capture(cls: Any, runs: int, clear: bool) -> tuple[Any, torch.Tensor]:
    model, x = _capture_case()
    capture_obj = _make_capture(cls)
    handle = model[2].register_forward_hook(capture_obj.hook)
    try:
        for _ in range(runs):
            if clear:
                capture_obj.clear()
            model(x)
    finally:
        handle.remove()
    with torch.no_grad():
        expected = model[2](model[1](model[0](x)))
    return capture_obj, expected


def _check_stores_output(cls: Any) -> None:
    capture_obj, expected = _run_capture(cls, runs=1, clear=False)
    outputs = list(capture_obj.outputs)
    if not outputs:
        raise Mistake("after one forward pass self.outputs is empty: append the output inside hook "
                      "(`self.outputs.append(...)`).")
    if len(outputs) != 1:
        raise Mistake(f"after one forward pass self.outputs holds {len(outputs)} items, expected 1.")
    stored = outputs[0]
    if not isinstance(stored, torch.Tensor):
        raise Mistake(f"self.outputs holds a {type(stored).__name__}; store the output tensor itself "
                      "(detached).")
    expect_close(stored, expected, "the stored output", atol=1e-6)


def _check_detached(cls: Any) -> None:
    capture_obj, _ = _run_capture(cls, runs=1, clear=False)
    outputs = list(capture_obj.outputs)
    if not outputs:
        raise Mistake("nothing was stored, so there is nothing to check yet: append the output in hook.")
    stored = outputs[0]
    if isinstance(stored, torch.Tensor) and (stored.grad_fn is not None or stored.requires_grad):
        raise Mistake("the stored tensor still has a grad_fn: it keeps the whole autograd graph of that "
                      "forward pass (and every activation the graph saved) alive for as long as you keep it. "
                      "Store `output.detach()` (add `.cpu()` on a GPU).")


def _check_clear(cls: Any) -> None:
    capture_obj, _ = _run_capture(cls, runs=3, clear=True)
    n = len(capture_obj.outputs)
    if n != 1:
        raise Mistake(f"after three runs with clear() before each, self.outputs holds {n} items, expected 1: "
                      "clear() should empty the list.")


capture = Exercise(
    "Exercise 3 · capture a layer's outputs without keeping the graph",
    [
        ("stores the layer's output", _check_stores_output),
        ("stores it detached (no graph kept alive)", _check_detached),
        ("clear() empties the store between runs", _check_clear),
    ],
    solution="hooklab.course._solutions.nb03_module_hooks:Capture",
)
