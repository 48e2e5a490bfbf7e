"""hooklab.params_lab: the toy task, the training loop, stale_parameters and the lab's picture."""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.nn.utils import prune

from hooklab.params_lab import draw_weights_and_output, stale_parameters, toy_regression, train
from hooklab.plots import figure, to_png


def test_toy_regression_is_repeatable_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a, Xa, ya = toy_regression()
    b, Xb, yb = toy_regression()
    assert torch.equal(torch.rand(1), expected_next)  # the global generator did not move
    assert torch.equal(a.weight, b.weight) and torch.equal(Xa, Xb) and torch.equal(ya, yb)
    assert not torch.equal(toy_regression(seed=1)[1], Xa)


def test_train_lowers_the_loss_and_rounds():
    model, X, y = toy_regression()
    losses = train(model, X, y, torch.optim.SGD(model.parameters(), lr=0.1), steps=5)
    assert len(losses) == 5 and losses == sorted(losses, reverse=True)
    assert all(round(v, 4) == v for v in losses)


def test_stale_parameters_finds_replaced_parameters_only():
    model, X, y = toy_regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert stale_parameters(model, opt) == []
    with torch.no_grad():
        model.weight.mul_(2)  # in place: still the same object
    assert stale_parameters(model, opt) == []
    model.bias = nn.Parameter(model.bias.detach().clone())
    assert stale_parameters(model, opt) == ["bias"]


def test_pruning_keeps_the_parameter_the_optimizer_holds():
    model, X, y = toy_regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prune.l1_unstructured(model, "weight", amount=0.5)
    assert stale_parameters(model, opt) == []  # weight_orig is the same object
    prune.remove(model, "weight")
    assert stale_parameters(model, opt) == []


def test_draw_weights_and_output_counts_zeros_and_is_fast():
    weight = torch.tensor([[0.0, 1.0], [-1.0, 0.0], [0.5, 0.0]])
    fig = draw_weights_and_output(figure(), weight, torch.ones(3), torch.zeros(3), limit=1.0)
    assert fig.axes[0].get_title() == "weight (3 of 6 are 0)"
    assert to_png(fig).startswith(b"\x89PNG")
    start = time.process_time()
    for _ in range(3):
        to_png(draw_weights_and_output(figure((7, 2.6)), torch.randn(12, 12), torch.randn(12), torch.randn(12)))
    assert (time.process_time() - start) / 3 < 0.5  # CPU seconds per picture (about 0.07 when measured)
