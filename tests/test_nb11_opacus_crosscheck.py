"""Notebook 11's per-sample gradients against Opacus (a test-only dependency, pinned in
requirements.txt): ``opacus.GradSampleModule`` fills ``p.grad_sample`` from its own forward and
backward hooks; on the same model and batch it must equal what the notebook's hooks compute.

* the notebook's model and data (``nb11.per_sample_grads``, loss averaged over the batch, and summed);
* a layer called twice in one forward (both add up their calls);
* ``nn.Conv2d``: exercise 3's worked solution (``F.unfold``) against Opacus's conv sampler;
* ``nn.Embedding``: exercise 2's worked solution against Opacus's embedding sampler;
* the notebook's DP-SGD step (noise 0) against ``DPOptimizer``: both divide by the expected batch size.
* a later call whose output misses the loss: Opacus leaves ``p.grad_sample`` None and ``DPOptimizer.step()``
  raises ``ValueError`` (the notebook's hooks pair the calls wrongly instead);
* ``padding_idx``: Opacus's embedding sampler gives the padding row a gradient, ``nn.Embedding``'s backward none.

Nothing is downloaded.
"""

from __future__ import annotations

import copy
import os
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hooklab
import hooklab.course.nb11_per_sample_gradients as nb11
import hooklab.course._solutions.nb11_per_sample_gradients as solved
from hooklab.course.data import seeded

from .checking import embedding_hook_inputs

try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # opacus warns about its optional dependencies on import
        from opacus import GradSampleModule
except ImportError:  # a test-only dependency: under CI it must be there
    if os.environ.get("CI"):
        raise
    pytest.skip("opacus is missing: pip install -r requirements.txt", allow_module_level=True)

#: the first layer's full backward hook warns that its input (the data) needs no gradient; it still fires
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")


def opacus_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor, reduction: str) -> dict[str, torch.Tensor]:
    """``p.grad_sample`` for every parameter, from GradSampleModule around a copy of ``model``."""
    wrapped = GradSampleModule(copy.deepcopy(model), loss_reduction=reduction)
    F.cross_entropy(wrapped(x), y, reduction=reduction).backward()
    grads = {name.removeprefix("_module."): p.grad_sample for name, p in wrapped.named_parameters()}
    wrapped.remove_hooks()
    return grads


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_the_notebooks_model_and_batch(reduction):
    data = nb11.make_data()
    model = nb11.train(nb11.make_model(), data)
    ours = nb11.per_sample_grads(model, data.x, data.y, reduction=reduction)
    theirs = opacus_grads(model, data.x, data.y, reduction)
    assert list(ours) == list(theirs) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name])
    assert hooklab.count_hooks(model) == 0


class Twice(nn.Module):
    """One ``nn.Linear`` called twice in a forward pass."""

    def __init__(self) -> None:
        super().__init__()
        self.shared, self.head = nn.Linear(6, 6), nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.shared(torch.tanh(self.shared(x))))


def test_a_layer_called_twice():
    model = seeded(3, Twice)
    x, y = torch.randn(10, 6), torch.randint(0, 3, (10,))
    ours, theirs = nb11.per_sample_grads(model, x, y), opacus_grads(model, x, y, "mean")
    assert set(ours) == set(theirs)
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name])


def test_conv2d_by_unfold_equals_opacus():
    torch.manual_seed(0)
    conv = nn.Conv2d(2, 3, kernel_size=3, padding=1, stride=2)
    model = nn.Sequential(conv, nn.Flatten(), nn.Linear(3 * 4 * 3, 2))
    x, y = torch.randn(5, 2, 7, 6), torch.randint(0, 2, (5,))
    saved = {}
    handles = [conv.register_forward_hook(lambda m, args, out: saved.update(a=args[0].detach())),
               conv.register_full_backward_hook(lambda m, gi, go: saved.update(g=go[0]))]
    F.cross_entropy(model(x), y, reduction="sum").backward()
    for handle in handles:
        handle.remove()
    ours = solved.per_sample_conv2d(conv, saved["a"], saved["g"])
    theirs = opacus_grads(model, x, y, "sum")
    torch.testing.assert_close(ours, theirs["0.weight"])
    torch.testing.assert_close(saved["g"].sum(dim=(2, 3)), theirs["0.bias"])


def _dp_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, max_norm: float, lr: float,
             expected_batch_size: int) -> None:
    """Notebook 11's DP-SGD step without noise: clip each example, add up, divide by the expected batch size."""
    grads = nb11.per_sample_grads(model, x, y)
    factor = (max_norm / (nb11.flat_norms(grads) + 1e-6)).clamp(max=1.0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in grads:  # a frozen parameter has none
                p -= lr * torch.einsum("n,n...->...", factor, grads[name]) / expected_batch_size


@pytest.mark.parametrize("drawn", [96, 60])
def test_the_dp_step_divides_by_the_expected_batch_size_as_dpoptimizer_does(drawn):
    """DPOptimizer (noise 0) divides the clipped sum by expected_batch_size, whatever batch was drawn."""
    from opacus.optimizers import DPOptimizer

    data = nb11.make_data()
    x, y = data.x[:drawn], data.y[:drawn]
    ours, by_realised = nb11.make_model(), nb11.make_model()
    _dp_step(ours, x, y, max_norm=1.0, lr=0.5, expected_batch_size=96)
    _dp_step(by_realised, x, y, max_norm=1.0, lr=0.5, expected_batch_size=drawn)
    wrapped = GradSampleModule(nb11.make_model())
    optimizer = DPOptimizer(torch.optim.SGD(wrapped.parameters(), lr=0.5), noise_multiplier=0.0, max_grad_norm=1.0,
                            expected_batch_size=96)
    F.cross_entropy(wrapped(x), y).backward()
    optimizer.step()
    theirs = list(wrapped._module.parameters())
    assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(ours.parameters(), theirs))
    same_as_realised = all(torch.allclose(p, q, atol=1e-6) for p, q in zip(by_realised.parameters(), theirs))
    assert same_as_realised == (drawn == 96), "dividing by the drawn batch's size matches only when it is 96"
    wrapped.remove_hooks()


@pytest.mark.parametrize("how", ["sum", "mean, two backward passes"])
def test_dpoptimizer_divides_by_expected_batch_size_times_the_passes_only_under_mean(how):
    """DPOptimizer's loss_reduction="mean" divides by expected_batch_size × the backward passes accumulated
    before the step; "sum" does not divide."""
    from opacus.optimizers import DPOptimizer

    data = nb11.make_data()
    reduction, passes = ("sum", 1) if how == "sum" else ("mean", 2)
    ours = nb11.make_model()
    _dp_step(ours, data.x, data.y, max_norm=1.0, lr=0.5, expected_batch_size=1 if reduction == "sum" else 96)
    wrapped = GradSampleModule(nb11.make_model(), loss_reduction=reduction)
    optimizer = DPOptimizer(torch.optim.SGD(wrapped.parameters(), lr=0.5), noise_multiplier=0.0, max_grad_norm=1.0,
                            expected_batch_size=96, loss_reduction=reduction)
    for _ in range(passes):  # the same batch again: the clipped sum doubles, and so does the divisor
        F.cross_entropy(wrapped(data.x), data.y, reduction=reduction).backward()
    optimizer.step()
    assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(ours.parameters(), wrapped._module.parameters()))
    wrapped.remove_hooks()


def test_embedding_by_its_hooks_equals_opacus():
    """Exercise 2's worked solution against Opacus's nn.Embedding sampler (no padding_idx: Opacus's sampler
    does not zero that row, nn.Embedding's backward does)."""
    model = seeded(4, lambda: nn.Sequential(nn.Embedding(11, 3), nn.Flatten(), nn.Linear(6 * 3, 2)))
    idx = torch.randint(0, 5, (7, 6), generator=torch.Generator().manual_seed(4))  # repeated tokens
    y = torch.randint(0, 2, (7,), generator=torch.Generator().manual_seed(5))
    ours = solved.per_sample_embedding(model[0], *embedding_hook_inputs(model, idx, y))
    torch.testing.assert_close(ours, opacus_grads(model, idx, y, "sum")["0.weight"])


class Logged(nn.Module):
    """A layer called a second time for a statistic only: that call's output never reaches the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.shared, self.head = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.head(torch.tanh(self.shared(x)))
        self.shared(2 * x)
        return out


def test_a_call_that_misses_the_loss_leaves_grad_sample_none_and_the_dp_step_raises():
    """Notebook 11, section 7: Opacus counts a layer's calls; with one call's backward missing it leaves
    p.grad_sample None, and DPOptimizer.step() raises ValueError instead of stepping."""
    from opacus.optimizers import DPOptimizer

    wrapped = GradSampleModule(seeded(5, Logged))
    optimizer = DPOptimizer(torch.optim.SGD(wrapped.parameters(), lr=0.1), noise_multiplier=0.0, max_grad_norm=1.0,
                            expected_batch_size=10)
    x, y = torch.randn(10, 6), torch.randint(0, 3, (10,))
    before = [p.detach().clone() for p in wrapped.parameters()]
    F.cross_entropy(wrapped(x), y).backward()
    assert wrapped._module.shared.weight.grad_sample is None
    assert wrapped._module.head.weight.grad_sample is not None, "the head, called once, is sampled"
    with pytest.raises(ValueError, match="Per sample gradient is not initialized"):
        optimizer.step()
    assert all(torch.equal(p, q) for p, q in zip(wrapped.parameters(), before)), "no parameter moved"
    wrapped.remove_hooks()


def test_opacus_embedding_sampler_gives_the_padding_row_a_gradient():
    """Notebook 11, exercise 2: nn.Embedding's backward (and torch.func) give the padding_idx row zero;
    Opacus's embedding sampler does not zero it, so its per-sample norms count the padding positions."""
    model = seeded(6, lambda: nn.Sequential(nn.Embedding(10, 4, padding_idx=0), nn.Flatten(), nn.Linear(5 * 4, 2)))
    idx, y = torch.tensor([[1, 4, 4, 0, 0], [3, 3, 3, 0, 9]]), torch.tensor([0, 1])
    func = nb11.func_grads(model, idx, y)["0.weight"]
    theirs = opacus_grads(model, idx, y, "mean")["0.weight"]
    assert torch.equal(func[:, 0], torch.zeros_like(func[:, 0]))
    assert theirs[:, 0].norm() > 0.01
    torch.testing.assert_close(theirs[:, 1:], func[:, 1:])


def test_the_dp_step_with_a_frozen_layer_leaves_it_and_steps_the_rest_as_dpoptimizer_does():
    """A frozen parameter has no per-sample gradient: the notebook's step skips it (no noise, no step),
    as DPOptimizer does, and the trainable ones move as DPOptimizer moves them."""
    from opacus.optimizers import DPOptimizer

    data = nb11.make_data()
    ours, theirs = nb11.make_model(), nb11.make_model()
    for model in (ours, theirs):
        model[0].requires_grad_(False)
    before = [p.detach().clone() for p in ours.parameters()]
    _dp_step(ours, data.x, data.y, max_norm=1.0, lr=0.5, expected_batch_size=96)
    wrapped = GradSampleModule(theirs)
    optimizer = DPOptimizer(torch.optim.SGD(wrapped.parameters(), lr=0.5), noise_multiplier=0.0, max_grad_norm=1.0,
                            expected_batch_size=96)
    F.cross_entropy(wrapped(data.x), data.y).backward()
    optimizer.step()
    moved = [not torch.equal(p, b) for p, b in zip(ours.parameters(), before)]
    assert moved == [p.requires_grad for p in ours.parameters()] and not all(moved)
    assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(ours.parameters(), theirs.parameters()))
    wrapped.remove_hooks()
