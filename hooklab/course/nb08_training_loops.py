"""Hooks inside a real training loop: gradient accumulation, mixed precision, activation
checkpointing, saved tensors. The helpers and exercises of notebook 08.

* :func:`make_data` and :func:`mlp`: a seeded regression problem and a small MLP to train on it.
* :func:`in_backward` (:func:`hooklab.inspection.in_backward`): whether code runs inside a backward
  pass, the test a forward hook uses to tell a checkpoint's recomputation from a real forward pass.
* :class:`Recomputing` and :func:`checkpoint`: the documented way to the same answer, through
  ``torch.utils.checkpoint``'s ``context_fn``.
* :func:`saved_by_layer`: what each layer's autograd graph keeps for backward, in bytes.
* :func:`lab_train` and :func:`lab_view`: the live lab's training loop and its view.
* :func:`ddp_worker` and :func:`free_port`: one process of a two-process DDP run over gloo, started by
  ``torch.multiprocessing.spawn`` through :func:`ddp_process`: what a parameter's tensor hook sees and
  what lands in ``.grad``.

>>> model = mlp()
>>> x, y = make_data(8)
>>> [name for name, _ in model.named_children()], list(x.shape), list(y.shape)
(['fc1', 'relu1', 'fc2', 'relu2', 'fc3'], [8, 8], [8, 1])

Exercises of notebook 08, with checkers and worked solutions.

>>> print(clamp.check(clamp.worked()))  # the worked solution
A clamp that holds under accumulation and GradScaler: all 4 checks passed
  ✓ clamps the gradient summed over 3 micro-batches, without a scaler
  ✓ clamps the true gradient while GradScaler scales by 65536
  ✓ leaves small gradients alone and lets scaler.step(optimizer) run
  ✓ leaves a float16 overflow for scaler.step to find (the step is skipped, the scale halves)
"""

from __future__ import annotations

import contextlib
import datetime
import inspect
import os
import socket
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, cast

import torch
import torch.utils.checkpoint as torch_checkpoint
from torch import nn

from ..claims import approx
from ..inspection import in_backward
from ..lab.exercises import Exercise, Mistake
from .checks import grad_of, made_hook

SEED = 0
#: this module under the name the notebook gives it, so that a worked solution reads as it runs there
#: (``nb08.in_backward()``) and runs when pasted into the notebook
nb08 = sys.modules[__name__]


# ------------------------------------------------------------------------ data and model
def make_data(n: int = 64, seed: int = SEED) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` examples of 8 features and a target ``y = 4·(x @ w) + 0.1·noise`` (``w`` fixed by ``seed``),
    scaled so that the first gradients are larger than 1."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    w = torch.randn(8, 1, generator=g)
    y = 4.0 * (x @ w) + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def mlp(seed: int = SEED) -> nn.Sequential:
    """``fc1 → relu1 → fc2 → relu2 → fc3``: 8 → 16 → 16 → 1, initialised from ``seed``."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return nn.Sequential(OrderedDict([
            ("fc1", nn.Linear(8, 16)), ("relu1", nn.ReLU()),
            ("fc2", nn.Linear(16, 16)), ("relu2", nn.ReLU()),
            ("fc3", nn.Linear(16, 1)),
        ]))


# ------------------------------------------------------------------------ recomputation
class Recomputing:
    """A flag that is ``True`` while :func:`checkpoint` recomputes a segment.

    It uses ``context_fn``, the documented argument of ``torch.utils.checkpoint.checkpoint``
    (``use_reentrant=False`` only): a function that returns two context managers, one around the
    forward pass and one around the recomputation.
    """

    def __init__(self) -> None:
        self.active = False

    @contextlib.contextmanager
    def _on(self) -> Iterator[None]:
        self.active = True
        try:
            yield
        finally:
            self.active = False

    def context_fn(self) -> tuple[Any, Any]:
        """What ``checkpoint(..., context_fn=flag.context_fn)`` takes."""
        return contextlib.nullcontext(), self._on()

    def __bool__(self) -> bool:
        return self.active


def checkpoint(segment: Callable, *args: Any, flag: Recomputing | None = None) -> Any:
    """``torch.utils.checkpoint.checkpoint(segment, *args, use_reentrant=False)``, with ``flag``
    (a :class:`Recomputing`) raised while the segment is recomputed."""
    if flag is None:
        return torch_checkpoint.checkpoint(segment, *args, use_reentrant=False)
    return torch_checkpoint.checkpoint(segment, *args, use_reentrant=False, context_fn=flag.context_fn)


# ------------------------------------------------------------------------ saved tensors
@dataclass
class Saved:
    """What autograd saved for backward during one forward pass, per layer."""

    tensors: dict[str, int] = field(default_factory=dict)
    nbytes: dict[str, int] = field(default_factory=dict)
    param_bytes: dict[str, int] = field(default_factory=dict)
    activations: dict[int, int] = field(default_factory=dict)  # data_ptr -> bytes, parameters left out

    def total(self) -> int:
        return sum(self.nbytes.values())

    def distinct_activation_bytes(self) -> int:
        """The bytes of the saved tensors that are not parameters, each tensor counted once (a tensor
        saved by two layers, or by a layer and a checkpoint, shares one storage)."""
        return sum(self.activations.values())

    def rows(self) -> list[str]:
        return [f"{name:<9} {self.tensors[name]} tensors  {self.nbytes[name]:>6} bytes"
                f"  (of which parameters: {self.param_bytes[name]})" for name in self.nbytes]


def saved_by_layer(model: nn.Module, x: torch.Tensor, run: Callable[[], Any] | None = None) -> Saved:
    """Run ``model(x)`` (or ``run()``) inside ``torch.autograd.graph.saved_tensors_hooks`` and sum,
    per layer of ``model`` (a forward pre-hook names the layer that is running), the tensors and
    bytes autograd saves for backward. A saved parameter costs no new memory: it is counted apart.

    >>> saved = saved_by_layer(mlp(), torch.randn(4, 8))
    >>> saved.nbytes["relu1"], saved.tensors["relu1"]
    (256, 1)
    >>> saved.distinct_activation_bytes()  # x, relu1's output, relu2's output: 4 x (8 + 16 + 16) floats
    640
    """
    saved = Saved()
    params = {p.data_ptr() for p in model.parameters()}
    current = ["(outside)"]

    def enter(name: str) -> Callable:
        def pre(module: nn.Module, args: tuple) -> None:
            current.append(name)
        return pre

    def leave(module: nn.Module, args: tuple, output: Any) -> None:
        current.pop()

    def pack(t: torch.Tensor) -> torch.Tensor:
        name = current[-1]
        size = t.numel() * t.element_size()
        saved.tensors[name] = saved.tensors.get(name, 0) + 1
        saved.nbytes[name] = saved.nbytes.get(name, 0) + size
        is_param = t.data_ptr() in params
        saved.param_bytes[name] = saved.param_bytes.get(name, 0) + (size if is_param else 0)
        if not is_param:
            saved.activations[t.data_ptr()] = size
        return t

    handles = []
    for name, module in model.named_children():
        handles.append(module.register_forward_pre_hook(enter(name)))
        handles.append(module.register_forward_hook(leave))
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            run() if run is not None else model(x)
    finally:
        for h in handles:
            h.remove()
    return saved


# ------------------------------------------------------------------------ the live lab
CLAMPS = ("off", "tensor hook", "after unscale")
LAB_STEPS = 20
LAB_BATCH = 16
LAB_LR = 0.02
LIMIT = 1.0


@dataclass
class StepRecord:
    """What the hooks saw during one optimizer step."""

    tensor_hook_calls: int = 0
    post_accumulate_calls: int = 0
    forward_real: int = 0
    forward_recomputed: int = 0
    clamp_calls: int = 0  # how often the clamp ran: per weight and micro-batch (tensor hook) or once
    seen_max: float = 0.0  # the largest |gradient| a tensor hook on fc3.weight saw (as it saw it)
    seen_sum: torch.Tensor | None = None  # what that hook saw, summed over the micro-batches (no clamp)
    true_max: float = 0.0  # the largest |value| of seen_sum in true units (divided by the scale), never clamped
    applied_max: float = 0.0  # the largest |fc3.weight.grad| the optimizer used (after any clamp), true units


@dataclass
class LabRun:
    """One training run of the lab: its settings, a record per optimizer step and the losses."""

    accumulation: int
    scaler: bool
    checkpointing: bool
    clamp: str
    scale: float
    steps: list[StepRecord]
    losses: list[float]
    start_loss: float = 0.0  # on all the examples, before training
    end_loss: float = 0.0  # on all the examples, after training


def lab_train(accumulation: int = 1, scaler: bool = False, checkpointing: bool = False, clamp: str = "off",
              *, steps: int = LAB_STEPS) -> LabRun:
    """Train a fresh :func:`mlp` for ``steps`` optimizer steps (SGD, lr 0.02) on batches of 16
    examples, each split into ``accumulation`` micro-batches.

    ``scaler``: use ``torch.amp.GradScaler("cpu")`` (scale 65536, no growth within the run).
    ``checkpointing``: run ``fc2 → relu2`` under :func:`checkpoint`. ``clamp``: ``"off"``,
    ``"tensor hook"`` (``g.clamp(-1, 1)`` in a tensor hook on each weight: every micro-batch, in the
    units the hook sees) or ``"after unscale"`` (``scaler.unscale_`` then ``clip_grad_value_`` once
    per optimizer step). Hooks record what they saw on ``fc3.weight`` and the forward calls of
    ``fc2`` and ``relu2`` (a recomputation counted apart); all hooks are removed at the end.

    >>> r = lab_train(2, scaler=True, checkpointing=True, steps=2)
    >>> r.scale, [(s.tensor_hook_calls, s.forward_real, s.forward_recomputed) for s in r.steps]
    (65536.0, [(2, 4, 2), (2, 4, 2)])
    """
    if accumulation not in (1, 2, 4, 8):
        raise ValueError(f"accumulation must be 1, 2, 4 or 8 (it splits a batch of {LAB_BATCH}); got {accumulation!r}.")
    if clamp not in CLAMPS:
        raise ValueError(f"clamp must be one of {CLAMPS}; got {clamp!r}.")
    lab = _LabTraining(accumulation, scaler, checkpointing, clamp)
    x, y = make_data(steps * LAB_BATCH)
    with torch.no_grad():
        start_loss = nn.functional.mse_loss(lab.model(x), y).item()
    records, losses = [], []
    try:
        for step in range(steps):
            batch = slice(step * LAB_BATCH, (step + 1) * LAB_BATCH)
            record, loss = lab.step(x[batch], y[batch])
            records.append(record)
            losses.append(loss)
    finally:
        lab.remove()
    with torch.no_grad():
        end_loss = nn.functional.mse_loss(lab.model(x), y).item()
    return LabRun(accumulation, scaler, checkpointing, clamp, float(lab.grad_scaler.get_scale() if scaler else 1.0),
                  records, losses, start_loss, end_loss)


class _LabTraining:
    """One lab run: a fresh :func:`mlp`, its optimizer and scaler, and the hooks that watch it."""

    def __init__(self, accumulation: int, scaler: bool, checkpointing: bool, clamp: str) -> None:
        self.accumulation, self.scaler, self.checkpointing, self.clamp = accumulation, scaler, checkpointing, clamp
        self.model = mlp()
        layer = dict(self.model.named_children())
        self.fc1, self.relu1, fc2, relu2, self.fc3 = (layer[n] for n in ("fc1", "relu1", "fc2", "relu2", "fc3"))
        self.w3 = cast(torch.Tensor, self.fc3.weight)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LAB_LR)
        self.grad_scaler = torch.amp.GradScaler("cpu", enabled=scaler, growth_interval=10_000)
        self.flag, self.record = Recomputing(), StepRecord()
        self.handles = [self.w3.register_hook(self.watch),  # before any clamp hook: sees the unclamped gradient
                        self.w3.register_post_accumulate_grad_hook(self.count_accumulate),
                        fc2.register_forward_hook(self.count_forward), relu2.register_forward_hook(self.count_forward)]
        if clamp == "tensor hook":
            self.handles += [cast(torch.Tensor, m.weight).register_hook(self.clamp_hook) for m in (self.fc1, fc2, self.fc3)]
        self.middle = nn.Sequential(fc2, relu2)

    def watch(self, grad: torch.Tensor) -> None:
        record = self.record
        record.tensor_hook_calls += 1
        record.seen_max = max(record.seen_max, grad.abs().max().item())
        record.seen_sum = grad.detach().clone() if record.seen_sum is None else record.seen_sum + grad

    def count_accumulate(self, param: torch.Tensor) -> None:
        self.record.post_accumulate_calls += 1

    def count_forward(self, module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        if self.flag:
            self.record.forward_recomputed += 1
        else:
            self.record.forward_real += 1

    def clamp_hook(self, grad: torch.Tensor) -> torch.Tensor:
        self.record.clamp_calls += 1
        return grad.clamp(-LIMIT, LIMIT)

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> tuple[StepRecord, float]:
        """One optimizer step over ``accumulation`` micro-batches: what the hooks saw, and the loss."""
        record = self.record = StepRecord()
        self.opt.zero_grad()
        total = 0.0
        for xm, ym in zip(xb.chunk(self.accumulation), yb.chunk(self.accumulation)):
            h = self.relu1(self.fc1(xm))
            h = checkpoint(self.middle, h, flag=self.flag) if self.checkpointing else self.middle(h)
            loss = nn.functional.mse_loss(self.fc3(h), ym) / self.accumulation
            self.grad_scaler.scale(loss).backward()
            total += loss.item()
        scale = self.grad_scaler.get_scale() if self.scaler else 1.0
        record.true_max = cast(torch.Tensor, record.seen_sum).abs().max().item() / scale
        if self.clamp == "after unscale":
            self.grad_scaler.unscale_(self.opt)
            nn.utils.clip_grad_value_(self.model.parameters(), LIMIT)
            record.clamp_calls += 1
            record.applied_max = grad_of(self.w3).abs().max().item()
        else:  # p.grad as the optimizer will use it: after any clamp in a hook, divided by the scale
            record.applied_max = grad_of(self.w3).abs().max().item() / scale
        record.seen_sum = None  # keep only the figures
        self.grad_scaler.step(self.opt)
        self.grad_scaler.update()
        return record, total

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


LAB_ROWS = {  # row label -> what it means, for the notebook's explanation
    "micro-batches per optimizer step": "backward() calls before each optimizer step",
    "loss scale": "what GradScaler multiplies the loss by (1: no GradScaler)",
    "tensor-hook calls per step (fc3.weight)": "one per backward pass",
    "post-accumulate-grad calls per step (fc3.weight)": "one per backward pass",
    "forward-hook calls per step: real": "fc2's and relu2's hooks, in forward passes of the loop",
    "forward-hook calls per step: recomputed": "the same hooks, while a checkpoint recomputes",
    "clamp calls per step": "per weight and micro-batch (tensor hook) or once (after unscale)",
    "step 1, fc3.weight: largest |grad| one tensor hook call saw": "one micro-batch, in the units the hook sees",
    "step 1, fc3.weight: largest |true gradient|": "all micro-batches summed, divided by the scale, never clamped",
    "step 1, fc3.weight: largest |grad| the optimizer used": "p.grad after any clamp, in true units",
    "loss on all examples, before training": "the same fresh model in every setting",
    "loss on all examples, after training": "after 20 optimizer steps",
    "every step's update used |grad| ≤ 1 (fc3.weight)": "checked on fc3.weight, every step",
    "loss on all examples fell by 10% or more": "after training against before",
}


def lab_view(run: LabRun) -> dict[str, Any]:
    """The lab's table (its labels are the keys of :data:`LAB_ROWS`): counts per optimizer step and
    the loss scale (exact), the figures of the first step and the losses (per-run, marked ``≈``),
    and yes/no verdicts. The true gradient is measured by a tensor hook that never clamps."""
    first = run.steps[0]
    values = [
        run.accumulation, int(run.scale), first.tensor_hook_calls, first.post_accumulate_calls,
        first.forward_real, first.forward_recomputed, first.clamp_calls,
        approx(first.seen_max, ".3g"), approx(first.true_max, ".3g"), approx(first.applied_max, ".3g"),
        approx(run.start_loss, ".3g"), approx(run.end_loss, ".3g"),
        all(s.applied_max <= LIMIT + 1e-6 for s in run.steps),
        run.end_loss <= 0.9 * run.start_loss,
    ]
    return dict(zip(LAB_ROWS, values, strict=True))


def lab_lines(view: dict[str, Any]) -> str:
    """``view``'s rows as aligned text, one a line, for a printed table."""
    width = max(len(label) for label in view)
    return "\n".join(f"  {label:<{width}}  {value}" for label, value in view.items())


# ------------------------------------------------------------------------ DDP with two processes
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the system picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ddp_worker(rank, world_size, port, results):
    """One process of a DDP run over gloo; ``torch.multiprocessing.spawn`` starts ``world_size`` of
    them and passes each its ``rank`` first. Each rank feeds its own input, ``rank + 1`` in every
    feature, so the weight's local gradient (the input) differs from rank to rank. The same
    ``Linear(3, 1)`` is trained one step three times: with DDP's own all-reduce, with PyTorch's
    ``allreduce_hook`` as communication hook, and with a hook that only sums. Puts one dict on
    ``results`` (a multiprocessing queue): per run, what a tensor hook on the weight saw, the
    weight's ``.grad`` after backward, and the buckets the summing hook sent."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))  # a rank that never comes: an error, no hang
    try:
        x = torch.full((1, 3), float(rank + 1))  # this rank's data; the weight's gradient is x
        row = {"rank": rank}
        for comm in ("DDP's own all-reduce", "allreduce_hook", "a hook that only sums"):
            torch.manual_seed(0)  # the same initial weights on every rank (DDP also copies rank 0's)
            model = nn.Linear(3, 1)
            ddp = DDP(model)
            sent = []
            if comm == "allreduce_hook":
                ddp.register_comm_hook(None, default_hooks.allreduce_hook)  # PyTorch's: divides, then sums
            elif comm == "a hook that only sums":
                def sum_only(state, bucket):
                    sent.append(bucket.buffer().tolist())
                    work = dist.all_reduce(bucket.buffer(), async_op=True)  # the sum over the processes
                    return work.get_future().then(lambda fut: fut.value()[0])

                ddp.register_comm_hook(None, sum_only)
            seen = []
            handle = model.weight.register_hook(lambda grad: seen.append(grad.flatten().tolist()))
            ddp(x).sum().backward()
            handle.remove()
            row[comm] = {"tensor hook": seen, "grad": model.weight.grad.flatten().tolist(), "sent": sent}
        results.put(row)
    finally:
        dist.destroy_process_group()


def ddp_process(rank, world_size, port, results):
    """What ``torch.multiprocessing.spawn`` runs in each process: :func:`ddp_worker`, then the end of the
    process at once, with ``os._exit(0)``. Once a DDP model was built, its gloo group and gloo's threads stay alive
    after ``destroy_process_group``, the DDP object deleted or not (torch 2.14.1, on Linux; a test of this module checks it), and Python's shutdown
    with those threads still running sometimes aborts the process ("terminate called without an active
    exception", SIGABRT), so ``spawn`` raises although the work was done. What the worker sent is already
    in ``results``. An error in the worker is raised as usual, before this point."""
    ddp_worker(rank, world_size, port, results)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ------------------------------------------------------------------------ exercises
# ----------------------------------------------------------- 1: a clamp that survives accumulation and AMP
def _run_clamp(fn: Callable, grad: list[float], *, scale: float | None) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """Three micro-batches, each giving ``grad``; then ``fn(optimizer, scaler)``; returns the gradient
    after ``fn``, the weight after ``scaler.step`` (lr 1) and an error from ``scaler.step``, if any."""
    w = torch.zeros(len(grad), requires_grad=True)
    opt = torch.optim.SGD([w], lr=1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale or 1.0, enabled=scale is not None)
    target = torch.tensor(grad)
    for _ in range(3):
        scaler.scale((w * target).sum()).backward()
    fn(opt, scaler)
    after = grad_of(w, "the weight").clone()
    try:
        scaler.step(opt)
        error = None
    except RuntimeError as exc:
        error = exc
    return after, w.detach().clone(), error


def _describe(got: torch.Tensor | list[float]) -> str:
    """Values with 3 significant digits, so that a gradient 65536 times too small still shows."""
    values = got.tolist() if isinstance(got, torch.Tensor) else got
    return "[" + ", ".join(f"{v:.3g}" for v in values) + "]"


def _step_failed(error: BaseException) -> str:
    """What to say when the loop's ``scaler.step(optimizer)``, after the learner's function, raised."""
    text = str(error).strip()
    said = f'scaler.step(optimizer), which the training loop calls after your function, raised "{text}"'
    if "step() has already been called" in text:
        return (f"{said}: your function called scaler.step itself. Leave scaler.step (and scaler.update) to the "
                "training loop; clamp_step only brings the gradients to true units and clamps them.")
    return said


def _why_not_clamped(after: torch.Tensor, step: torch.Tensor, scale: float, true: list[float],
                     want: list[float]) -> str | None:
    """Name the cause when the optimizer did not use ``want`` (the true sum ``true``, clamped at 1).
    ``after``: p.grad after the learner's function; ``step``: the gradient the optimizer used (lr 1)."""
    true_t, want_t = torch.tensor(true), torch.tensor(want)
    if torch.allclose(step, want_t, atol=1e-5):
        return None
    divided_again = torch.allclose(step * scale, after, rtol=1e-4, atol=1e-6)  # scaler.step unscaled after fn
    if divided_again and torch.allclose(after, want_t, atol=1e-5):
        return (f"p.grad held {_describe(after)} after your function, already in true units, but scaler.unscale_"
                f"(optimizer) was not called, so scaler.step divided by the scale again: the optimizer used "
                f"{_describe(step)}, {scale:g} times too small. Call scaler.unscale_(optimizer) instead of "
                "dividing by hand: it divides once and tells scaler.step not to divide again.")
    if divided_again and torch.allclose(after.abs(), torch.ones_like(after), atol=1e-5):
        return (f"the optimizer used {_describe(step)}, {scale:g} times too small: your function clamped the scaled "
                f"gradient (the true {_describe(true)} times {scale:g}) at 1, then scaler.step divided it by the "
                "scale. Call scaler.unscale_(optimizer) first, then clamp in true units (or clamp at "
                "limit * scaler.get_scale()).")
    if torch.allclose(step, true_t, atol=1e-4):
        if torch.allclose(after, true_t, atol=1e-4):
            return (f"scaler.unscale_ ran (p.grad held the true gradient {_describe(true)} after your function), but "
                    "nothing clamped p.grad: p.grad.clamp(...) returns a new tensor and leaves p.grad as it was. "
                    "Clamp in place: p.grad.clamp_(...) or torch.nn.utils.clip_grad_value_.")
        return (f"the optimizer used the unclamped true gradient {_describe(true)} (scaler.step unscaled it): your "
                "function changed nothing in p.grad. Call scaler.unscale_(optimizer), then clamp p.grad in place "
                "(p.grad.clamp_(...) or torch.nn.utils.clip_grad_value_).")
    if divided_again:
        return (f"p.grad held {_describe(after)} after your function, and since scaler.unscale_(optimizer) was not "
                f"called, scaler.step divided it by {scale:g}: the optimizer used {_describe(step)}; expected "
                f"{_describe(want)} (the true sum {_describe(true)}, clamped at 1).")
    return (f"with GradScaler at scale {scale:g} the optimizer used the gradient {_describe(step)} (true units); "
            f"expected {_describe(want)} (the true sum {_describe(true)}, clamped at 1).")


def _check_accumulated(fn: Callable) -> None:
    got, _, _ = _run_clamp(fn, [0.8, -0.8], scale=None)
    if torch.allclose(got, torch.tensor([2.4, -2.4])):
        raise Mistake("after 3 micro-batches of 0.8 each the gradient is still [2.4, -2.4]: clamp p.grad, the sum "
                      "of the micro-batches, in place (p.grad.clamp_ or torch.nn.utils.clip_grad_value_; "
                      "p.grad.clamp(...) returns a new tensor), once per step.")
    if not torch.allclose(got, torch.tensor([1.0, -1.0]), atol=1e-5):
        raise Mistake(f"after 3 micro-batches of [0.8, -0.8] (sum [2.4, -2.4]) the gradient became "
                      f"{_describe(got)}; expected [1, -1].")


def _check_scaled(fn: Callable) -> None:
    # the third entry, 0.1 per micro-batch, is inside the limit in true units and far above it in scaled units:
    # it tells a clamp in scaled units from one in true units
    after, w, error = _run_clamp(fn, [0.8, -0.8, 0.1], scale=65536.0)
    if error is not None:
        raise Mistake(_step_failed(error))
    why = _why_not_clamped(after, -w, 65536.0, [2.4, -2.4, 0.3], [1.0, -1.0, 0.3])  # lr 1: the step is -w
    if why is not None:
        raise Mistake(why)


def _check_small(fn: Callable) -> None:
    after, w, error = _run_clamp(fn, [0.1, -0.2], scale=65536.0)
    if error is not None:
        raise Mistake(_step_failed(error))
    if not torch.allclose(-w, torch.tensor([0.3, -0.6]), atol=1e-5):
        why = _why_not_clamped(after, -w, 65536.0, [0.3, -0.6], [0.3, -0.6])
        raise Mistake(f"a true gradient of [0.3, -0.6] (3 micro-batches of [0.1, -0.2]) is inside [-1, 1] and must "
                      f"reach the optimizer as it is; {why}")


def _run_overflow(fn: Callable) -> tuple[torch.Tensor, torch.Tensor, float, Any]:
    """One backward pass through float16 at scale 65536, which overflows: 65536 is above float16's
    largest value (65504), so both gradients are inf. Then ``fn(optimizer, scaler)``, ``scaler.step``
    (lr 1) and ``scaler.update()``. Returns the gradient before ``fn``, the weight after the step,
    the scale after the update and an error from ``scaler.step``, if any."""
    w = torch.zeros(2, requires_grad=True)
    opt = torch.optim.SGD([w], lr=1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=65536.0)
    loss = (w.half() * torch.tensor([0.1, -0.2]).half()).sum()  # a float16 computation
    scaler.scale(loss).backward()
    before = grad_of(w, "the weight").clone()
    fn(opt, scaler)
    try:
        scaler.step(opt)
        scaler.update()
        error = None
    except RuntimeError as exc:
        error = exc
    return before, w.detach().clone(), scaler.get_scale(), error


def _check_overflow(fn: Callable) -> None:
    before, w, scale, error = _run_overflow(fn)
    if torch.isfinite(before).any():  # the checker's own premise
        raise AssertionError(f"the float16 overflow did not happen: the gradient is {before.tolist()}")
    if error is not None:
        raise Mistake(_step_failed(error))
    if not torch.equal(w, torch.zeros(2)):
        moved = [f"{v:.3g}" for v in w.tolist()]
        raise Mistake(f"the gradients overflowed in float16 (p.grad held {before.tolist()}), yet the optimizer "
                      f"took a step (the weight moved to [{', '.join(moved)}]) and the scale is {scale:g}: "
                      "scaler.step never saw the overflow. A clamp in scaled units turns inf into a finite "
                      "number: call scaler.unscale_(optimizer) before clamping (it records the overflow), or "
                      "clamp only when every gradient is finite.")
    if scale != 32768.0:
        raise Mistake(f"after an overflow the step was skipped, but the scale is {scale:g}, not 32768: "
                      "leave scaler.update() to the training loop.")


clamp = Exercise(
    "A clamp that holds under accumulation and GradScaler",
    [
        ("clamps the gradient summed over 3 micro-batches, without a scaler", _check_accumulated),
        ("clamps the true gradient while GradScaler scales by 65536", _check_scaled),
        ("leaves small gradients alone and lets scaler.step(optimizer) run", _check_small),
        ("leaves a float16 overflow for scaler.step to find (the step is skipped, the scale halves)",
         _check_overflow),
    ],
    solution="hooklab.course._solutions.nb08_training_loops:clamp_step",
)


# ----------------------------------------------------------- 2: count each real forward pass once
def _stats_run(make_hook: Callable, *, checkpointed: bool, passes: int, no_grad: bool = False) -> tuple[list, list]:
    store: list = []
    hook = made_hook(make_hook, store, kind="forward", call="make_stats_hook(store)", inner="record")
    with torch.random.fork_rng():
        torch.manual_seed(1)
        segment = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        xs = [torch.randn(2, 3, requires_grad=True) for _ in range(passes)]
    expected = [segment[0](x).mean().item() for x in xs]
    handle = segment[0].register_forward_hook(hook)  # the Linear: a checkpoint recomputes it
    try:
        for x in xs:
            if no_grad:
                with torch.no_grad():
                    segment(x)
                continue
            out = checkpoint(segment, x) if checkpointed else segment(x)
            out.sum().backward()
    finally:
        handle.remove()
    return store, expected


def _floats_only(store: list) -> None:
    """A :class:`Mistake` unless every entry of ``store`` is a number (before the checker compares them)."""
    if any(isinstance(v, torch.Tensor) for v in store):
        raise Mistake("the store holds tensors: append floats (.item()).")
    other = [v for v in store if isinstance(v, bool) or not isinstance(v, (int, float))]
    if other:
        shown = repr(other[0])
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise Mistake(f"the store holds {type(other[0]).__name__} entries ({shown}): append one float per pass, "
                      "the mean of the whole output (output.mean().item(), no dim).")


def _check_plain(make_hook: Callable) -> None:
    store, expected = _stats_run(make_hook, checkpointed=False, passes=2)
    if len(store) != 2:
        raise Mistake(f"2 forward passes (no checkpointing) left {len(store)} entries; append one float per pass.")
    _floats_only(store)
    if not all(abs(a - b) < 1e-6 for a, b in zip(store, expected)):
        raise Mistake(f"the entries are {[round(v, 4) for v in store]}, expected the output means "
                      f"{[round(v, 4) for v in expected]}.")


def _check_checkpointed(make_hook: Callable) -> None:
    store, expected = _stats_run(make_hook, checkpointed=True, passes=2)
    if len(store) == 4:
        raise Mistake("under checkpointing 2 forward passes left 4 entries: the hook also recorded the 2 "
                      "recomputations during backward. Return early when nb08.in_backward() is True (inside a "
                      "backward pass; it reads the private torch._C._current_graph_task_id(), -1 outside).")
    if len(store) != 2:
        raise Mistake(f"under checkpointing 2 forward passes left {len(store)} entries, expected 2.")
    _floats_only(store)
    if not all(abs(a - b) < 1e-6 for a, b in zip(store, expected)):
        raise Mistake(f"the entries are {[round(v, 4) for v in store]}, expected {[round(v, 4) for v in expected]}.")


def _check_no_grad(make_hook: Callable) -> None:
    store, _ = _stats_run(make_hook, checkpointed=False, passes=1, no_grad=True)
    if len(store) != 1:
        raise Mistake(f"a forward pass under torch.no_grad() left {len(store)} entries; it is a real forward "
                      "pass too (evaluation). torch.is_grad_enabled() does not tell a recomputation apart: "
                      "grad mode is on during it.")


stats_once = Exercise(
    "A statistics hook that counts each real forward pass once",
    [
        ("records one mean per forward pass without checkpointing", _check_plain),
        ("records one mean per forward pass under checkpointing", _check_checkpointed),
        ("still records a forward pass under torch.no_grad()", _check_no_grad),
    ],
    solution="hooklab.course._solutions.nb08_training_loops:make_stats_hook", level="stretch",
)


# ----------------------------------------------------------- 3: load a checkpoint saved from DDP or torch.compile
PREFIXES = ("module.", "_orig_mod.")


def _target() -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(2)
        return nn.Sequential(OrderedDict([("submodule", nn.Linear(2, 2)), ("fc", nn.Linear(2, 1))]))


def _expected_key(key: str, prefix: str) -> str:
    """What ``key`` must become: every ``module.`` / ``_orig_mod.`` right after ``prefix`` removed."""
    if not key.startswith(prefix):
        return key
    rest = key[len(prefix):]
    while rest.startswith(PREFIXES):
        rest = rest.split(".", 1)[1]
    return prefix + rest


def _renames_at_root(hook: Callable) -> bool:
    """Whether ``hook``, called as on the model itself (prefix ""), strips ``module.`` from a key."""
    keys: dict[str, Any] = {"module.weight": None}
    try:
        hook(None, keys, "", {}, True, [], [], [])
    except Exception:
        return False
    return "weight" in keys


def _why_not_loaded(hook: Callable, saved: dict, renamed: dict[str, str | None], returned: list, prefix: str) -> str:
    """Name the cause of a failed load from what the hook did: ``renamed`` maps each saved key to the key its
    tensor had after the hook (``None``: under no key)."""
    for key in saved:
        want, got = _expected_key(key, prefix), renamed.get(key)
        if got == want:
            continue
        if got is None:
            return f"after your hook the tensor saved as {key!r} is under no key; expected {want!r}."
        if got == key:
            if any(r is not None for r in returned):
                return (f"{key!r} stayed as it was: your hook returns a {type(returned[0]).__name__}, and PyTorch "
                        "ignores what a load_state_dict pre-hook returns. Rename the keys of the dict it is given, "
                        "in place: state_dict[new] = state_dict.pop(old).")
            if prefix and _renames_at_root(hook):
                return (f"{key!r} stayed as it was, expected {want!r}. A hook on the submodule fc gets "
                        f"prefix={prefix!r} and keys that start with it: look for module. and _orig_mod. after "
                        "prefix (key[len(prefix):]) and put prefix back in front of the new key.")
            return (f"{key!r} stayed as it was, expected {want!r}: rename the keys of the dict your hook is given, in "
                    "place (state_dict[new] = state_dict.pop(old)). `state_dict = {...}` only binds the name to a "
                    "new dict, which PyTorch never sees.")
        said = f"{key!r} became {got!r}, expected {want!r}"
        rest = got[len(prefix):] if got.startswith(prefix) else got
        if got.startswith(prefix) and rest.startswith(PREFIXES) and key.endswith(rest):
            return (f"{said}: after one strip the key still starts with {rest.split('.', 1)[0] + '.'!r}. Strip "
                    "again while it starts with module. or _orig_mod. (torch.compile of a DDP model saves "
                    "'_orig_mod.module.').")
        if "submodule." in key and "submodule." not in got:
            return (f"{said}: replace() also removes the 'module.' inside 'submodule.'. Strip only at the start of "
                    "the key (after prefix): key.startswith(...) and key[len(...):].")
        return f"{said}."
    return ""


def _load(hook: Callable, keys_prefix: str, *, on_fc: bool = False) -> tuple[nn.Module, dict, dict, list]:
    """Load a checkpoint whose keys carry ``keys_prefix`` into a fresh :func:`_target` through ``hook``:
    on the model (every key) or, with ``on_fc``, on its submodule ``fc`` (then only fc's keys carry it)."""
    try:
        inspect.signature(hook).bind(*range(8))
    except TypeError:
        raise Mistake("a load_state_dict pre-hook takes 8 arguments: (module, state_dict, prefix, local_metadata, "
                      "strict, missing_keys, unexpected_keys, error_msgs).") from None
    source = _target()
    with torch.no_grad():
        for p in source.parameters():
            p.add_(1.0)
    prefix = "fc." if on_fc else ""
    saved = OrderedDict(((prefix + keys_prefix + k[len(prefix):]) if k.startswith(prefix) else k, v)
                        for k, v in source.state_dict().items())
    before = OrderedDict((k, v.clone()) for k, v in saved.items())
    objects = list(saved.values())
    model = _target()
    hooked = cast(nn.Module, model.fc) if on_fc else model
    returned: list = []
    after: dict[str, Any] = {}

    def learner(*args: Any) -> None:  # PyTorch ignores what a pre-hook returns; the checker keeps it
        returned.append(hook(*args))

    def spy(module, state_dict, prefix, *rest):  # runs after the learner's hook: the keys it left
        after.update(state_dict)

    handles = [hooked.register_load_state_dict_pre_hook(learner), hooked.register_load_state_dict_pre_hook(spy)]
    try:
        model.load_state_dict(saved)
    except NotImplementedError:
        raise
    except RuntimeError as exc:
        by_object = {id(v): k for k, v in after.items()}
        renamed = {k: (by_object.get(id(v)) if k.startswith(prefix) else k) for k, v in saved.items()}
        why = _why_not_loaded(hook, saved, renamed, returned, prefix)
        if not why:
            why = "load_state_dict failed: " + " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise Mistake(why) from None
    finally:
        for h in handles:
            h.remove()
    return model, saved, before, objects


def _check_module(hook: Callable) -> None:
    model, _, before, _ = _load(hook, "module.")
    for key, value in model.state_dict().items():
        if not torch.equal(value, before["module." + key]):
            raise Mistake(f"{key} did not get the saved values.")


def _check_orig_mod(hook: Callable) -> None:
    _load(hook, "_orig_mod.")
    _load(hook, "_orig_mod.module.")


def _check_plain_keys(hook: Callable) -> None:
    _load(hook, "")


def _check_on_submodule(hook: Callable) -> None:
    model, _, before, _ = _load(hook, "_orig_mod.", on_fc=True)  # as if only fc was compiled: fc._orig_mod.weight
    for key, value in model.state_dict().items():
        old = "fc._orig_mod." + key[len("fc."):] if key.startswith("fc.") else key
        if not torch.equal(value, before[old]):
            raise Mistake(f"{key} did not get the saved values.")


def _check_untouched(hook: Callable) -> None:
    _, saved, before, objects = _load(hook, "module.")
    if list(saved) != list(before):
        raise Mistake(f"the caller's dict changed: its keys are now {list(saved)[:3]}, were {list(before)[:3]}.")
    for (key, value), obj in zip(saved.items(), objects):
        if value is not obj:
            raise Mistake(f"the caller's dict holds another tensor under {key!r}: leave its entries alone.")
        if not torch.equal(value, before[key]):
            raise Mistake(f"the tensor under {key!r} changed: your hook must not change the values.")


strip = Exercise(
    "A load_state_dict pre-hook that strips module. and _orig_mod.",
    [
        ("loads keys saved from DDP (module.fc.weight)", _check_module),
        ("loads keys saved from torch.compile (_orig_mod., also _orig_mod.module.)", _check_orig_mod),
        ("keeps plain keys and a layer named 'submodule' as they are", _check_plain_keys),
        ("leaves the caller's dict and its tensors untouched", _check_untouched),
        ("loads through a hook on the submodule fc (prefix 'fc.')", _check_on_submodule),
    ],
    solution="hooklab.course._solutions.nb08_training_loops:strip_prefixes", level="stretch",
)
