"""hooklab.course.nb11_per_sample_gradients: the data with planted wrong labels, the three ways to
compute per-sample gradients (hooks, torch.func, a loop), and the three exercises (the solutions pass,
the typical mistakes are named). The notebook's claims about the ranking are checked on other seeds."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hooklab
import hooklab.course.nb11_per_sample_gradients as nb11
import hooklab.course._solutions.nb11_per_sample_gradients as solved
from hooklab.plots import figure, to_png

from .checking import failed_checks, mistakes

#: the first layer's full backward hook warns that its input (the data) needs no gradient; it still fires
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")


@pytest.fixture(scope="module")
def trained():
    data = nb11.make_data()
    return data, nb11.train(nb11.make_model(), data)


# ---------------------------------------------------------------------- the data
def test_the_data_plants_one_wrong_label_in_every_twelve_examples():
    data = nb11.make_data()
    assert data.x.shape == (96, nb11.FEATURES)
    wrong = (data.y != data.true).nonzero().flatten()
    assert wrong.tolist() == sorted(data.flipped.tolist()) and len(wrong) == 8
    assert (data.flipped // 12).tolist() == list(range(8)), "one in each block of 12"
    assert torch.equal(data.y[data.flipped], (data.true[data.flipped] + 1) % nb11.CLASSES)
    assert torch.equal(nb11.make_data().x, data.x), "seeded"


# ---------------------------------------------------------------------- the three ways agree
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_hooks_equal_torch_func_and_the_loop(trained, reduction):
    data, model = trained
    hooks = nb11.per_sample_grads(model, data.x, data.y, reduction=reduction)
    func, loop = nb11.func_grads(model, data.x, data.y), nb11.loop_grads(model, data.x, data.y)
    assert list(hooks) == [name for name, _ in model.named_parameters()]
    for name in hooks:
        torch.testing.assert_close(hooks[name], func[name])
        torch.testing.assert_close(hooks[name], loop[name])


def test_the_mean_of_the_per_sample_gradients_is_grad(trained):
    data, model = trained
    grads = nb11.per_sample_grads(model, data.x, data.y)
    F.cross_entropy(model(data.x), data.y).backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name].mean(0), p.grad)
    model.zero_grad(set_to_none=True)


def test_per_sample_grads_leaves_no_hook_no_stack_and_no_grad(trained):
    data, model = trained
    nb11.per_sample_grads(model, data.x, data.y)
    assert hooklab.count_hooks(model) == 0
    assert all(not hasattr(m, "inputs") for m in model.modules())
    assert all(p.grad is None for p in model.parameters())


def test_per_sample_grads_removes_its_hooks_when_the_forward_raises():
    model = nb11.make_model()
    with pytest.raises(RuntimeError):
        nb11.per_sample_grads(model, torch.randn(3, 5), torch.zeros(3, dtype=torch.long))  # 5 features, not 8
    assert hooklab.count_hooks(model) == 0


def test_a_layer_called_twice_adds_up_its_calls():
    layer = nn.Linear(4, 4)
    model = nn.Sequential(layer, nn.Tanh(), layer)  # the same module twice
    x, y = torch.randn(6, 4), torch.randint(0, 4, (6,))
    hooks, func = nb11.per_sample_grads(model, x, y), nb11.func_grads(model, x, y)
    assert list(hooks) == ["0.weight", "0.bias"]  # named_parameters lists a shared parameter once
    for name in hooks:
        torch.testing.assert_close(hooks[name], func[name])


def test_a_sequence_input_sums_over_the_positions():
    model = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 5, 2))
    x, y = torch.randn(6, 4, 3), torch.randint(0, 2, (6,))
    hooks, loop = nb11.per_sample_grads(model, x, y), nb11.loop_grads(model, x, y)
    for name in hooks:
        torch.testing.assert_close(hooks[name], loop[name])


def test_flat_norms_take_every_parameter_together():
    grads = {"a": torch.tensor([[3.0], [0.0]]), "b": torch.tensor([[4.0, 0.0], [0.0, 1.0]])}
    assert nb11.flat_norms(grads).tolist() == [5.0, 1.0]


# ---------------------------------------------------------------------- the notebook's claims, other seeds
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_planted_labels_have_the_largest_norms_after_20_steps(seed):
    data = nb11.make_data(seed=seed)
    model = nb11.train(nb11.make_model(seed), data)
    norms = nb11.flat_norms(nb11.per_sample_grads(model, data.x, data.y))
    planted = torch.isin(torch.arange(len(norms)), data.flipped)
    assert set(norms.topk(8).indices.tolist()) == set(data.flipped.tolist())
    assert norms[planted].min() > norms[~planted].max()


def test_after_300_steps_the_wrong_labels_are_learned():
    data = nb11.make_data()
    model = nb11.train(nb11.make_model(), data, steps=300)
    assert (model(data.x).argmax(1)[data.flipped] == data.y[data.flipped]).sum() >= 6


def test_draw_norms_marks_the_planted_examples_and_the_clip_line(trained):
    data, model = trained
    fig = figure((6, 2))
    nb11.draw_norms(fig, nb11.flat_norms(nb11.per_sample_grads(model, data.x, data.y)), data.flipped, 1.0)
    ax = fig.axes[0]
    orange = [bar for bar in ax.patches if bar.get_facecolor()[:3] == pytest.approx((0xe6 / 255, 0x61 / 255, 0))]
    assert len(ax.patches) == 96 and len(orange) == 8
    assert [bar.get_x() + 0.5 for bar in orange] == list(range(8)), "the planted ones are ranked first"
    assert [line.get_ydata()[0] for line in ax.lines] == [1.0]
    assert to_png(fig)[:4] == b"\x89PNG"


# ---------------------------------------------------------------------- the exercises
def test_the_solutions_pass():
    assert nb11.linear_exercise.check(solved.per_sample_linear).passed
    assert nb11.clip_exercise.check(solved.clip_and_sum).passed
    assert nb11.conv_exercise.check(solved.per_sample_conv2d).passed


def test_linear_for_vectors_only_fails_on_sequences():
    verdict = nb11.linear_exercise.check(lambda a, g: (torch.einsum("no,ni->noi", g, a), g))
    failed = failed_checks(verdict)
    assert "a batch of vectors [n, in]" not in failed
    assert "a batch of sequences [n, positions, in]" in failed


def test_linear_mistakes_are_named():
    assert "return two tensors" in mistakes(nb11.linear_exercise, lambda a, g: torch.einsum("n...o,n...i->noi", g, a))
    swapped = mistakes(nb11.linear_exercise, lambda a, g: (torch.einsum("n...o,n...i->nio", g, a), g.sum(1)))
    assert "[5, 4, 3]" in swapped and "expected [5, 3, 4]" in swapped
    bias_mean = mistakes(nb11.linear_exercise,
                         lambda a, g: (torch.einsum("n...o,n...i->noi", g, a), g.flatten(1, -2).mean(1)
                                       if g.dim() > 2 else g))
    assert "bias gradients differ" in bias_mean and "sum over the positions" in bias_mean


def _clip_per_parameter(grads, max_norm):
    return {k: torch.einsum("n,n...->...", (max_norm / g.flatten(1).norm(dim=1)).clamp(max=1.0), g)
            for k, g in grads.items()}


def _clip_scales_up(grads, max_norm):
    norms = torch.cat([g.flatten(1) for g in grads.values()], dim=1).norm(dim=1)
    return {k: torch.einsum("n,n...->...", max_norm / norms, g) for k, g in grads.items()}


def _clip_in_place(grads, max_norm):
    norms = torch.cat([g.flatten(1) for g in grads.values()], dim=1).norm(dim=1)
    factor = (max_norm / norms).clamp(max=1.0)
    for g in grads.values():
        g *= factor.view(-1, *[1] * (g.dim() - 1))
    return {k: g.sum(0) for k, g in grads.items()}


def test_clip_mistakes_are_named():
    assert "each parameter was clipped on its own" in mistakes(nb11.clip_exercise, _clip_per_parameter)
    failed = failed_checks(nb11.clip_exercise.check(_clip_scales_up))
    assert "never scaled up" in failed["clips each example over all parameters together, never scales up"]
    assert "nothing is clipped" in failed["a huge max_norm clips nothing"]
    failed = failed_checks(nb11.clip_exercise.check(_clip_in_place))
    assert list(failed) == ["leaves the per-sample gradients as they were"]
    assert "in-place" in failed["leaves the per-sample gradients as they were"]


def _conv_ignores_stride(conv, a, g):
    patches = F.unfold(a, conv.kernel_size, dilation=conv.dilation, padding=conv.padding)
    weight = torch.einsum("nop,nkp->nok", g.flatten(2), patches[..., :g[0, 0].numel()])
    return weight.reshape(len(a), *conv.weight.shape)


def test_conv_mistakes_are_named():
    failed = failed_checks(nb11.conv_exercise.check(_conv_ignores_stride))
    assert "a 3×3 kernel" not in failed and "padding 1 and stride 2" in failed
    assert "stride" in failed["padding 1 and stride 2"]
    flat = mistakes(nb11.conv_exercise, lambda conv, a, g: torch.einsum(
        "nop,nkp->nok", g.flatten(2), F.unfold(a, conv.kernel_size, dilation=conv.dilation, padding=conv.padding,
                                              stride=conv.stride)))
    assert "reshape at the end" in flat


def test_the_worked_solutions_show_their_code():
    assert "einsum" in nb11.linear_exercise.solution().code
    assert "clamp(max=1.0)" in nb11.clip_exercise.solution().code
    assert "F.unfold" in nb11.conv_exercise.solution().code
