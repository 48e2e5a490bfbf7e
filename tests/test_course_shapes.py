"""hooklab.course.shapes: the generated image set, the tiny CNN, training and the cached trained model."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

import hooklab.course.shapes as shapes
from hooklab.course.data import fit


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


def test_make_patterns_class_is_the_pattern_not_the_outline():
    a, b = shapes.make_patterns(200, seed=3), shapes.make_patterns(200, seed=3)
    assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels) and torch.equal(a.masks, b.masks)
    assert a.classes == shapes.PATTERNS and "horizontal: 50" in repr(a)
    assert torch.bincount(a.labels, minlength=4).tolist() == [50, 50, 50, 50]
    assert not (a.masks[:, 0].any() or a.masks[:, -1].any() or a.masks[:, :, 0].any() or a.masks[:, :, -1].any())
    # the outline is a disc or a square whatever the class: a square fills its bounding box, a disc does not
    rows, cols = a.masks.any(2), a.masks.any(1)
    box = rows.sum(1) * cols.sum(1)
    square = a.masks.flatten(1).sum(1) == box
    for c in range(4):
        assert 0 < int(square[a.labels == c].sum()) < int((a.labels == c).sum())
    # inside the shape: bright and dark stripes; outside only noise
    clean = shapes.make_patterns(8, seed=0, noise=0.0)
    for image, mask in zip(clean.images[:, 0], clean.masks):
        assert image[~mask].abs().max() == 0
        assert image[mask].min() > 0.2 and image[mask].max() > 3 * image[mask].min()  # dark stripes at 30%
    # the pattern: horizontal stripes are constant along a row, vertical ones along a column
    for image, mask, label in zip(clean.images[:, 0], clean.masks, clean.labels):
        inside = torch.where(mask, image, torch.nan)
        along_rows = torch.nan_to_num(inside - inside.nanmean(1, keepdim=True)).abs().max()
        along_cols = torch.nan_to_num(inside - inside.nanmean(0, keepdim=True)).abs().max()
        if label == 0:
            assert along_rows < 1e-6 < along_cols
        elif label == 1:
            assert along_cols < 1e-6 < along_rows
    with pytest.raises(ValueError, match="period"):
        shapes.make_patterns(4, period=1)


def test_default_data_kinds_are_cached_and_checked():
    train_a, test_a = shapes.default_data(64, 32, kind="patterns")
    assert shapes.default_data(64, 32, kind="patterns")[0] is train_a and test_a.classes == shapes.PATTERNS
    assert shapes.default_data(64, 32)[1].classes == shapes.CLASSES
    with pytest.raises(ValueError, match="choose one of"):
        shapes.default_data(kind="faces")


def test_tiny_cnn_names_shapes_and_inplace():
    model = shapes.tiny_cnn(inplace=True)
    names = [n for n, _ in model.named_children()]
    assert names == ["conv1", "relu1", "pool1", "conv2", "relu2", "pool2", "conv3", "relu3", "gap", "flatten", "fc"]
    assert model(torch.zeros(3, 1, 32, 32)).shape == (3, 4)
    assert all(m.inplace for m in model.modules() if isinstance(m, nn.ReLU))
    assert torch.equal(shapes.tiny_cnn().conv1.weight, shapes.tiny_cnn().conv1.weight)  # seeded



def _pool_cases() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    relu = torch.randn(4, 8, 32, 32, generator=g).relu()  # about half zeros: ties in most windows
    steps = torch.randint(0, 3, (2, 5, 9, 7), generator=g).float()  # odd sizes, many ties between equal values
    nan = torch.randn(2, 3, 6, 6, generator=g)
    nan[0, 0, 0, 1] = nan[1, 2, 3, 3] = float("nan")
    wide = torch.randint(-1, 2, (2, 32, 6, 5), generator=g).float()  # 16 and more channels: the vector loop
    wide[0, 17, 2, 2] = float("nan")
    wide[1, 3] = float("-inf")
    one = torch.randn(3, 16, 2, 3, dtype=torch.float64, generator=g)  # a 1 x 1 output
    return [relu, steps, nan, torch.randn(1, 2, 4, 4, dtype=torch.float64, generator=g), torch.zeros(2, 3, 4, 4),
            wide, one]


@pytest.mark.parametrize("case", range(7))
def test_max_pool_2x2_equals_nn_max_pool2d_bit_for_bit(case):
    """Output, its strides, and the gradient (which element of each window gets it: ties, NaN) on the
    usual layout (the fast path); the output on others (handed to nn.MaxPool2d)."""
    x = _pool_cases()[case]
    grad = torch.randn(x.shape[0], x.shape[1], x.shape[2] // 2, x.shape[3] // 2, dtype=x.dtype,
                       generator=torch.Generator().manual_seed(1))
    results = []
    for pool in (nn.MaxPool2d(2), shapes.MaxPool2x2()):
        a = x.clone().requires_grad_()
        out = pool(a)
        out.backward(grad)
        results.append((out, a.grad))
    (want, want_grad), (got, got_grad) = results
    assert "MaxPool2x2" in type(got.grad_fn).__name__  # the fast path ran
    want, got = want.detach(), got.detach()
    assert torch.equal(got.nan_to_num(7.0), want.nan_to_num(7.0)) and torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got_grad, want_grad) and got.stride() == want.stride()
    cl = x.contiguous(memory_format=torch.channels_last)
    assert torch.equal(shapes.MaxPool2x2()(cl).nan_to_num(7.0), want.nan_to_num(7.0))
    assert torch.equal(shapes.MaxPool2x2()(x[0]).nan_to_num(7.0), nn.MaxPool2d(2)(x[0]).nan_to_num(7.0))


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")  # torch.func's own import
def test_max_pool_2x2_under_torch_func_and_forward_ad_equals_nn_max_pool2d():
    import torch.autograd.forward_ad as fwAD
    g = torch.Generator().manual_seed(2)
    x, t = torch.randn(2, 16, 6, 6, dtype=torch.float64, generator=g), torch.randn(2, 16, 6, 6, dtype=torch.float64,
                                                                                   generator=g)

    def forward_ad(pool):
        with fwAD.dual_level():
            return fwAD.unpack_dual(pool(fwAD.make_dual(x, t))).tangent

    for name, use in {"grad": lambda pool: torch.func.grad(lambda v: (pool(v) ** 2).sum())(x),
                      "vmap": lambda pool: torch.func.vmap(pool)(torch.stack([x, t])),
                      "jvp": lambda pool: torch.func.jvp(pool, (x,), (t,))[1],
                      "forward AD": forward_ad}.items():
        assert torch.equal(use(shapes.MaxPool2x2()), use(nn.MaxPool2d(2))), name
    fast = shapes.MaxPool2x2()(x.requires_grad_())
    assert torch.autograd.gradcheck(shapes.MaxPool2x2(), (x[:1, :2],))
    assert "MaxPool2x2" in type(fast.grad_fn).__name__


def test_max_pool_2x2_hands_other_settings_and_dtypes_to_nn_max_pool2d():
    x = torch.randn(1, 16, 5, 5)
    pool = shapes.MaxPool2x2()
    pool.ceil_mode = True
    assert pool(x).shape == nn.MaxPool2d(2, ceil_mode=True)(x).shape == (1, 16, 3, 3)
    pool = shapes.MaxPool2x2()
    pool.return_indices = True
    out, indices = pool(x)
    assert torch.equal(indices, nn.MaxPool2d(2, return_indices=True)(x)[1])
    half = torch.randn(1, 16, 2, 2).bfloat16()
    half[:, :, 0, 0] = float("nan")  # the channels-last kernel writes other NaN bits for bfloat16
    assert torch.equal(shapes.MaxPool2x2()(half).view(torch.int16), nn.MaxPool2d(2)(half).view(torch.int16))


def test_fast_pooling_swaps_only_plain_2x2_max_pools():
    model = nn.Sequential(nn.MaxPool2d(2), nn.Sequential(nn.MaxPool2d(2, 2)), nn.MaxPool2d(3), nn.MaxPool2d(2, 1),
                          nn.MaxPool2d(2, ceil_mode=True), nn.MaxPool2d(2, padding=1), nn.AvgPool2d(2))
    assert shapes.fast_pooling(model) is model
    kinds = [type(m).__name__ for m in model.modules()][1:]
    assert kinds == ["MaxPool2x2", "Sequential", "MaxPool2x2", "MaxPool2d", "MaxPool2d", "MaxPool2d", "MaxPool2d",
                     "AvgPool2d"]
    tiny = shapes.fast_pooling(shapes.tiny_cnn())
    assert [n for n, m in tiny.named_modules() if isinstance(m, shapes.MaxPool2x2)] == ["pool1", "pool2"]
    assert torch.equal(tiny.conv1.weight, shapes.tiny_cnn().conv1.weight)  # nothing else changed


def test_init_weights_kinds():
    model = shapes.init_weights(shapes.tiny_cnn(), "tiny")
    assert abs(model.conv3.weight.std().item() - 0.01) < 0.002
    model = shapes.init_weights(shapes.tiny_cnn(), "negative bias")
    assert bool((model.conv2.bias == -1).all()) and bool((model.fc.bias == 0).all())
    model = shapes.init_weights(shapes.tiny_cnn(), "kaiming")
    assert abs(model.conv3.weight.std().item() - (2 / (16 * 9)) ** 0.5) < 0.02
    with pytest.raises(ValueError, match="unknown initialisation"):
        shapes.init_weights(shapes.tiny_cnn(), "zeros")


def test_train_is_deterministic_and_restores_the_threads():
    data = shapes.make_shapes(128, seed=5)
    before = torch.get_num_threads()
    r1 = shapes.train(shapes.tiny_cnn(), data, max_steps=4)
    r2 = shapes.train(shapes.tiny_cnn(), data, max_steps=4)
    assert len(r1.losses) == 4 and r1.losses == r2.losses
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("channels_last", [False, True])
def test_adam_written_out_equals_torch_optim_adam_bitwise(channels_last):
    """shapes.Adam (which spares a kernel the torch._dynamo import) trains to the same bits as
    torch.optim.Adam with the same settings, in both layouts, a weight without a gradient included."""
    data = shapes.make_shapes(96, seed=6)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    images = data.images.contiguous(memory_format=layout)
    results = []
    for make in (lambda params: torch.optim.Adam(params, lr=0.02), lambda params: shapes.Adam(params, lr=0.02)):
        model = shapes.init_weights(shapes.tiny_cnn(), "kaiming", seed=3).to(memory_format=layout)
        spare = torch.ones(3, requires_grad=True)  # never gets a gradient: both leave it (and its step count) alone
        opt = make([*model.parameters(), spare])
        losses = [fit(model, opt, nn.functional.cross_entropy, [(images[i:i + 32], data.labels[i:i + 32])])[0]
                  for i in (0, 32, 64, 0, 32)]
        results.append((losses, [p.detach().clone() for p in model.parameters()], spare.detach().clone()))
    (losses_torch, params_torch, spare_torch), (losses_ours, params_ours, spare_ours) = results
    assert losses_ours == losses_torch
    assert all(torch.equal(a, b) for a, b in zip(params_ours, params_torch))
    assert torch.equal(spare_ours, spare_torch) and torch.equal(spare_ours, torch.ones(3))


def test_train_does_not_import_torch_dynamo():
    """A fresh process that trains with shapes.train never imports torch._dynamo (seconds of a
    fresh kernel): the reason shapes.Adam exists."""
    code = ("import sys; import hooklab.course.shapes as s; s.train(s.tiny_cnn(), s.make_shapes(64), max_steps=2); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_trained_models_side_by_side_equal_one_after_the_other(monkeypatch):
    """Two models trained at once (one thread each) get the weights they get alone, and the
    generator of the caller's thread is left as it was."""
    monkeypatch.setattr(shapes, "_TRAINED", {})
    monkeypatch.setattr(shapes, "default_data", lambda kind="shapes": (shapes.make_patterns(96, seed=1),
                                                                       shapes.make_patterns(32, seed=2)))
    torch.manual_seed(5)
    expected_random = torch.randn(3)
    torch.manual_seed(5)
    together = shapes.trained_models([7, 8], kind="patterns", epochs=1)
    assert torch.equal(torch.randn(3), expected_random)
    monkeypatch.setattr(shapes, "_TRAINED", {})
    alone = [shapes.trained_model(kind="patterns", epochs=1, seed=seed) for seed in (7, 8)]
    for a, b in zip(together, alone):
        assert a.losses == b.losses and a.test_accuracy == b.test_accuracy
        assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    assert not torch.equal(together[0].model.conv1.weight, together[1].model.conv1.weight)  # two seeds, two models


def test_tiny_cnn_leaves_the_global_generator_alone():
    torch.manual_seed(11)
    expected = torch.randn(3)
    torch.manual_seed(11)
    shapes.tiny_cnn(seed=0)
    assert torch.equal(torch.randn(3), expected)


def test_accuracy_keeps_the_mode():
    model = shapes.tiny_cnn().train()
    acc = shapes.accuracy(model, shapes.make_shapes(16))
    assert 0.0 <= acc <= 1.0 and model.training


@pytest.mark.slow
@pytest.mark.kernels
def test_trained_models_learn_and_are_cached(monkeypatch):
    """Floors that hold on any CPU: measured over 10 seeds and two kernel sets, the outline data
    (notebook 06's shapes) reaches 93.2-99.2% and the patterns (notebook 07) 97.5-100%."""
    trainings = []
    train = shapes.train
    monkeypatch.setattr(shapes, "train", lambda *args, **kwargs: trainings.append(1) or train(*args, **kwargs))
    first = shapes.trained_model()  # trained now, or by an earlier test in this process
    assert first.test_accuracy >= 0.9
    assert len(trainings) <= 1
    trained = len(trainings)
    second = shapes.trained_model()
    assert len(trainings) == trained, "the second call trained the model again instead of using the cache"
    assert second.model is not first.model
    assert torch.equal(first.model.conv1.weight, second.model.conv1.weight)
    with torch.no_grad():
        first.model.conv1.weight.zero_()  # changing one copy changes no later one
    assert not torch.equal(shapes.trained_model().model.conv1.weight, first.model.conv1.weight)
    patterns = shapes.trained_model(kind="patterns")
    assert patterns.test_accuracy >= 0.95 and patterns.model.fc.out_features == len(shapes.PATTERNS)
