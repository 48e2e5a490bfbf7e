"""hooklab.shapes: the generated image set, the tiny CNN, training and the cached trained model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hooklab.shapes as shapes


def test_make_shapes_is_seeded_balanced_and_masked():
    a, b = shapes.make_shapes(40, seed=3), shapes.make_shapes(40, seed=3)
    assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels) and torch.equal(a.masks, b.masks)
    assert not torch.equal(a.images, shapes.make_shapes(40, seed=4).images)
    assert a.images.shape == (40, 1, 32, 32) and a.masks.shape == (40, 32, 32) and a.masks.dtype == torch.bool
    assert torch.bincount(a.labels, minlength=4).tolist() == [10, 10, 10, 10]
    # every shape is drawn (some pixels), fully inside the image (no pixel on the border)
    assert bool((a.masks.flatten(1).sum(1) > 10).all())
    border = a.masks[:, 0].any() or a.masks[:, -1].any() or a.masks[:, :, 0].any() or a.masks[:, :, -1].any()
    assert not border
    # the shape is brighter than the background
    bright = (a.images[:, 0][a.masks]).mean()
    dark = (a.images[:, 0][~a.masks]).mean()
    assert bright > 0.6 and abs(dark) < 0.05


def test_make_shapes_rejects_bad_arguments_and_indexes():
    with pytest.raises(ValueError, match="at least 1"):
        shapes.make_shapes(0)
    with pytest.raises(ValueError, match="at least 12"):
        shapes.make_shapes(4, size=8)
    data = shapes.make_shapes(8)
    assert len(data[2]) == 1 and len(data[:3]) == 3
    assert "8 images of [32, 32] pixels" in repr(data)


def test_tiny_cnn_names_shapes_and_inplace():
    model = shapes.tiny_cnn(inplace=True)
    names = [n for n, _ in model.named_children()]
    assert names == ["conv1", "relu1", "pool1", "conv2", "relu2", "pool2", "conv3", "relu3", "gap", "flatten", "fc"]
    assert model(torch.zeros(3, 1, 32, 32)).shape == (3, 4)
    assert all(m.inplace for m in model.modules() if isinstance(m, nn.ReLU))
    assert torch.equal(shapes.tiny_cnn().conv1.weight, shapes.tiny_cnn().conv1.weight)  # seeded


def test_init_weights_kinds():
    model = shapes.init_weights(shapes.tiny_cnn(), "tiny")
    assert abs(model.conv3.weight.std().item() - 0.01) < 0.002
    model = shapes.init_weights(shapes.tiny_cnn(), "negative bias")
    assert bool((model.conv2.bias == -1).all()) and bool((model.fc.bias == 0).all())
    model = shapes.init_weights(shapes.tiny_cnn(), "kaiming")
    assert abs(model.conv3.weight.std().item() - (2 / (16 * 9)) ** 0.5) < 0.02
    with pytest.raises(ValueError, match="unknown initialisation"):
        shapes.init_weights(shapes.tiny_cnn(), "zeros")


def test_train_is_deterministic_and_calls_on_step():
    data = shapes.make_shapes(128, seed=5)
    steps = []
    r1 = shapes.train(shapes.tiny_cnn(), data, max_steps=4, on_step=lambda step, loss: steps.append(step))
    r2 = shapes.train(shapes.tiny_cnn(), data, max_steps=4)
    assert steps == [0, 1, 2, 3] and r1.losses == r2.losses
    assert torch.get_num_threads() >= 1  # restored after training


def test_accuracy_keeps_the_mode():
    model = shapes.tiny_cnn().train()
    acc = shapes.accuracy(model, shapes.make_shapes(16))
    assert 0.0 <= acc <= 1.0 and model.training


@pytest.mark.slow
def test_trained_model_reaches_95_percent_and_is_cached():
    first = shapes.trained_model()
    assert first.test_accuracy >= 0.95
    second = shapes.trained_model()
    assert second.model is not first.model
    assert torch.equal(first.model.conv1.weight, second.model.conv1.weight)
    with torch.no_grad():
        first.model.conv1.weight.zero_()  # changing one copy changes no later one
    assert not torch.equal(shapes.trained_model().model.conv1.weight, first.model.conv1.weight)
