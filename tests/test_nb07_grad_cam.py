"""hooklab.course.nb07_grad_cam: Grad-CAM from a forward hook and a tensor hook.

And its exercises: Exercises of notebook 07: the solutions pass, typical mistakes are named.
"""

from __future__ import annotations

import math
import pytest
import torch
from torch import nn
import hooklab
import hooklab.course.nb07_grad_cam as gradcam
import hooklab.course.shapes as shapes
from hooklab.inspection import count_hooks
from hooklab.plots import figure, to_png
import doctest
import hooklab.course._solutions.nb07_grad_cam as solved
import hooklab.course.nb07_grad_cam as ex
from .checking import mistakes


def test_cam_from_by_hand():
    a = torch.zeros(1, 2, 2, 2)
    a[0, 0, 0, 0] = 2.0
    a[0, 1, 1, 1] = 1.0
    g = torch.ones(1, 2, 2, 2)
    g[0, 1] = -1.0  # channel 1 counts against the class: its place drops out (ReLU)
    assert gradcam.cam_from(a, g).tolist() == [[[1.0, 0.0], [0.0, 0.0]]]
    assert gradcam.cam_from(a, g, size=(4, 4)).shape == (1, 4, 4)
    assert gradcam.cam_from(torch.zeros(1, 1, 2, 2), torch.ones(1, 1, 2, 2)).abs().sum() == 0
    with pytest.raises(ValueError, match="same shape"):
        gradcam.cam_from(a, g[:, :1])


def test_gradcam_matches_autograd_grad_and_survives_inplace():
    model = shapes.tiny_cnn(inplace=True).eval()
    x = torch.randn(3, 1, 32, 32)
    with gradcam.GradCAM(model, "conv2", name="t-cam") as cam:  # conv2 is followed by an in-place ReLU
        heat = cam(x, target=1)
    # reference: the same quantities without hooks, on a model without in-place ops
    ref = shapes.tiny_cnn(inplace=False).eval()
    ref.load_state_dict(model.state_dict())
    a = ref.conv2(ref.pool1(ref.relu1(ref.conv1(x))))
    rest = nn.Sequential(*list(ref.children())[4:])
    score = rest(a)[:, 1].sum()
    (grad,) = torch.autograd.grad(score, a)
    assert torch.allclose(cam.activations, a.detach(), atol=1e-6)  # cloned before the ReLU overwrote it
    assert torch.allclose(cam.gradients, grad, atol=1e-6)
    assert torch.allclose(heat, gradcam.cam_from(a.detach(), grad, (32, 32)), atol=1e-6)
    assert heat.shape == (3, 32, 32) and float(heat.max()) <= 1.0 and float(heat.min()) >= 0.0
    assert hooklab.count_hooks(model) == 0 and "removed" in repr(cam)
    assert all(p.grad is None for p in model.parameters())  # no gradients left behind


def test_gradcam_target_forms_and_no_grad_context():
    model = shapes.tiny_cnn()
    x = torch.randn(2, 1, 32, 32)
    with gradcam.GradCAM(model, "relu3", name="t-cam2") as cam:
        predicted = cam(x)
        with torch.no_grad():
            also = cam(x)  # works inside no_grad: the pass enables grad itself
        per_image = cam(x, target=cam.logits.argmax(1))
    assert torch.allclose(predicted, also) and torch.allclose(predicted, per_image)
    assert model.training  # mode restored


def test_gradcam_unknown_layer_and_replacing():
    model = shapes.tiny_cnn()
    with pytest.raises(KeyError, match="relu3"):
        gradcam.GradCAM(model, "relu4")
    gradcam.GradCAM(model, "relu1", name="t-same")
    gradcam.GradCAM(model, "relu2", name="t-same")
    assert hooklab.count_hooks(model) == 1
    hooklab.Hooks("t-same")  # clears the previous owner of that name
    assert hooklab.count_hooks(model) == 0


def test_peak_positions():
    cams = torch.zeros(2, 5, 5)
    cams[0, 1, 3] = 1.0
    cams[1, 4, 0] = 1.0
    assert gradcam.peak_positions(cams).tolist() == [[1, 3], [4, 0]]


def test_peak_distance():
    cams = torch.zeros(3, 5, 5)
    cams[0, 1, 3] = 1.0
    cams[1, 4, 0] = 1.0
    cams[2, 0, 0] = 1.0
    masks = torch.zeros(3, 5, 5, dtype=torch.bool)
    masks[0, 1, 3] = True
    masks[1, 3, 1] = True  # diagonal neighbour of the peak
    masks[1, 0, 4] = True  # farther away: the nearest pixel counts
    assert gradcam.peak_distance(cams, masks).tolist()[:2] == [0.0, pytest.approx(2 ** 0.5)]
    assert gradcam.peak_distance(cams, masks)[2] == float("inf")  # empty mask
    with pytest.raises(ValueError):
        gradcam.peak_distance(cams, masks[:1])


def test_threads_are_restored_and_give_the_same_map():
    model = shapes.tiny_cnn(inplace=True)
    x = torch.randn(2, 1, 32, 32)
    before = torch.get_num_threads()
    with gradcam.GradCAM(model, "relu2", name="t-threads") as cam:
        plain = cam(x)
    with gradcam.GradCAM(model, "relu2", name="t-threads", threads=1) as cam:
        one = cam(x)
    assert torch.get_num_threads() == before
    assert torch.allclose(plain, one, atol=1e-6)


def test_peak_check_summarises_distances_per_class():
    check = gradcam.PeakCheck("relu2", (16, 16), torch.tensor([0.0, 0.0, 1.5, 0.0]), torch.tensor([0, 0, 1, 1]),
                              ("a", "b", "c"), 5)
    assert check.share == 0.75
    per_class = check.per_class()
    assert per_class["a"] == 1.0 and per_class["b"] == 0.5 and math.isnan(per_class["c"])
    assert "≈75.0% of ≈4 correctly classified" in str(check) and "misses ≈1, the farthest ≈1.5 px off" in str(check)
    assert check.report().splitlines()[2].split() == ["b", "peak", "on", "the", "shape", "≈50.0%", "misses", "≈1,",
                                                      "the", "farthest", "≈1.5", "px", "off"]
    none = gradcam.PeakCheck("x", (8, 8), torch.zeros(2), torch.zeros(2, dtype=torch.long), ("a",), 2)
    assert "misses ≈0, the farthest ≈0.0 px off" in str(none)


def test_peak_check_counts_only_correctly_classified_images_and_removes_its_hook():
    model = shapes.tiny_cnn(inplace=True)
    data = shapes.make_patterns(12, seed=3)
    check = gradcam.peak_check(model, data, "relu3")
    with torch.no_grad():
        correct = model(data.images).argmax(1) == data.labels
    assert len(check.distance) == int(correct.sum()) and check.n_images == 12
    assert torch.equal(check.labels, data.labels[correct]) and check.positions == (8, 8)
    assert count_hooks(model) == 0



def test_peak_checks_gives_each_layer_what_its_own_pass_gives():
    """One forward and one backward pass for several layers (in-place ReLUs included): the same
    distances, labels and positions as one peak_check per layer, and no hook left behind."""
    model = shapes.tiny_cnn(inplace=True)
    data = shapes.make_patterns(24, seed=4)
    layers = ["conv1", "relu1", "conv2", "relu2", "relu3"]
    together = gradcam.peak_checks(model, data, layers)
    assert list(together) == layers
    for layer in layers:
        alone = gradcam.peak_check(model, data, layer)
        assert torch.equal(together[layer].distance, alone.distance)
        assert torch.equal(together[layer].labels, alone.labels)
        assert together[layer].positions == alone.positions and together[layer].n_images == 24
    assert count_hooks(model) == 0
    with pytest.raises(ValueError, match="at least one layer"):
        gradcam.peak_checks(model, data, [])

@pytest.mark.slow
@pytest.mark.kernels
def test_grad_cam_peak_lies_on_the_shape_for_90_percent_over_several_seeds():
    """The floor, strict (maps scaled up to 32x32 first, the peak pixel on a mask pixel), on
    the pattern data, for four training seeds, not one: relu2 >= 90% for every one, in every class,
    with every miss within 5 pixels (what notebook 07 claims; measured 99.2-100% and at most 3 px
    over 10 seeds and two kernel sets)."""
    _, test_set = shapes.default_data(kind="patterns")
    for seed in range(4):
        result = shapes.trained_model(kind="patterns", seed=seed)
        assert result.test_accuracy >= 0.95
        check = gradcam.peak_check(result.model, test_set, "relu2")
        assert len(check.distance) >= 0.95 * len(test_set)
        assert check.share >= 0.9, f"seed {seed}: peak on the shape for only {check.share:.1%}"
        assert min(check.per_class().values()) >= 0.9
        assert check.distance.max().item() <= 5.0
        assert gradcam.peak_check(result.model, test_set, "conv1").share < check.share


@pytest.mark.slow
@pytest.mark.kernels
def test_grad_cam_on_the_outline_data_misses_by_a_few_pixels():
    """Notebook 07's contrast: on notebook 06's shapes (the class is the outline) relu2's peak is on
    the shape for fewer than 90% of the images, and every miss lies within 6 pixels of it
    (measured 19-81% and at most 4.2 px over 10 seeds and two kernel sets)."""
    _, test_set = shapes.default_data(kind="shapes")
    for seed in range(2):
        check = gradcam.peak_check(shapes.trained_model(kind="shapes", seed=seed).model, test_set, "relu2")
        assert check.share < 0.9
        assert check.distance.max().item() <= 6.0


def test_plot_overlay():
    data = shapes.make_shapes(1)
    fig = figure()
    gradcam.plot_overlay(fig.add_subplot(), data.images[0], torch.rand(32, 32), data.masks[0], title="t")
    assert to_png(fig)[:4] == b"\x89PNG"


def test_quick_overlay_is_one_cheap_picture():
    data = shapes.make_shapes(1)
    fig = figure((3.6, 2.0))
    heat = torch.zeros(32, 32)
    heat[5, 7] = 1.0
    shown = gradcam.quick_overlay(fig, data.images[0], heat, data.masks[0], title="t")
    assert fig.axes == [] and fig.get_layout_engine() is None  # no axes, no layout engine
    picture = shown.get_array()
    # at 200 dpi a 3.6 x 2 inch figure is 720 x 400 pixels: blocks of 11 x 11 pixels fit, under a title
    assert fig.dpi == 200 and picture.shape == (352, 710, 3)
    block = 11
    right = picture[:, 32 * block + 6:]
    assert (right[5 * block + block // 2, 7 * block + block // 2] == 1.0).all()  # the cross on the peak
    mask = data.masks[0].repeat_interleave(block, 0).repeat_interleave(block, 1).numpy()
    outline = (right == 1.0).all(axis=-1) & mask
    assert outline.any() and not outline[mask].all()  # an outline, not the filled shape
    assert to_png(fig)[:4] == b"\x89PNG"
    flat = gradcam.quick_overlay(figure(), data.images[0], torch.zeros(32, 32)).get_array()  # no mask, flat map
    assert not (flat[:, flat.shape[1] // 2 + 3:] == 1.0).all(axis=-1).any()  # an all-zero map has no peak: no cross


def test_solutions_pass():
    assert ex.heat_map.check(solved.my_cam).passed
    assert ex.cam_hooks.check(solved.make_cam_hook).passed
    assert "def my_cam" in ex.heat_map.solution().code
    assert "register_hook" in ex.cam_hooks.solution().code
    assert doctest.testmod(ex).failed == 0


def test_heat_map_mistakes():
    assert "not written yet" in mistakes(ex.heat_map, lambda a, g: (_ for _ in ()).throw(NotImplementedError()))
    assert "returns None" in mistakes(ex.heat_map, lambda a, g: None)
    assert "channel dimension" in mistakes(ex.heat_map, lambda a, g: torch.relu(g.mean((2, 3), keepdim=True) * a))
    assert "apply torch.relu" in mistakes(ex.heat_map, lambda a, g: (g.mean((2, 3), keepdim=True) * a).sum(1))
    assert "averages the gradient over the positions" in mistakes(ex.heat_map, lambda a, g: torch.relu((g * a).sum(1)))
    assert "[N, h, w]" in mistakes(ex.heat_map, lambda a, g: torch.relu((g.mean(1, keepdim=True) * a).sum((1, 2))))


def test_cam_hooks_mistakes():
    def no_clone(saved):
        def save(module, args, output):
            saved["activations"] = output.detach()
            output.register_hook(lambda grad: saved.__setitem__("gradients", grad))
        return save
    assert "in-place ReLU" in mistakes(ex.cam_hooks, no_clone)

    def no_tensor_hook(saved):
        def save(module, args, output):
            saved["activations"] = output.detach().clone()
        return save
    assert "register a tensor hook on the output" in mistakes(ex.cam_hooks, no_tensor_hook)

    def keeps_graph(saved):
        def save(module, args, output):
            saved["activations"] = output.clone()
            output.register_hook(lambda grad: saved.__setitem__("gradients", grad))
        return save
    assert "autograd graph" in mistakes(ex.cam_hooks, keeps_graph)

    def returns_output(saved):
        def save(module, args, output):
            saved["activations"] = output.detach().clone()
            output.register_hook(lambda grad: saved.__setitem__("gradients", grad))
            return output
        return save
    assert "replaces the layer's output" in mistakes(ex.cam_hooks, returns_output)

    def wrong_signature(saved):
        def save(module, output):
            pass
        return save
    assert "hook(module, args, output)" in mistakes(ex.cam_hooks, wrong_signature)

    assert "return the forward hook function itself" in mistakes(ex.cam_hooks, lambda saved: None)
