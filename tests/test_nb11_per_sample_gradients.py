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
from hooklab.course.data import seeded
from hooklab.plots import figure, to_png

from .checking import embedding_hook_inputs, failed_checks, mistakes, png_pixels

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


def test_per_sample_grads_leaves_no_hook_no_stack_and_grad_as_it_was(trained):
    data, model = trained
    nb11.per_sample_grads(model, data.x, data.y)
    assert hooklab.count_hooks(model) == 0
    assert all(not hasattr(m, "inputs") for m in model.modules())
    assert all(p.grad is None for p in model.parameters()), "no .grad appears"
    before = {name: torch.full_like(p, 7.0) for name, p in model.named_parameters()}
    for name, p in model.named_parameters():
        p.grad = before[name].clone()
    nb11.per_sample_grads(model, data.x, data.y)
    for name, p in model.named_parameters():
        assert torch.equal(p.grad, before[name]), f"{name}.grad changed"
    model.zero_grad(set_to_none=True)


def test_per_sample_grads_refuses_a_trainable_parameter_outside_nn_linear():
    model = seeded(0, lambda: nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 4)))
    x, y = torch.randn(12, 8), torch.randint(0, 4, (12,))
    with pytest.raises(ValueError, match=r"\['1\.weight', '1\.bias'\].*func_grads"):
        nb11.per_sample_grads(model, x, y)
    assert hooklab.count_hooks(model) == 0
    model[1].requires_grad_(False)  # frozen: it has no gradient, and the rest is exact
    hooks, func = nb11.per_sample_grads(model, x, y), nb11.func_grads(model, x, y)
    assert list(hooks) == ["0.weight", "0.bias", "3.weight", "3.bias"]
    for name in hooks:
        torch.testing.assert_close(hooks[name], func[name])


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


class _TiedLinears(nn.Module):
    """Two nn.Linear sharing one weight (weight tying): its gradient is the sum over both uses."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 6)
        self.b.weight = self.a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)))


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_a_weight_tied_across_two_linears_adds_up_both_uses(reduction):
    model = seeded(1, _TiedLinears)
    x, y = torch.randn(10, 6), torch.randint(0, 6, (10,))
    hooks, func = nb11.per_sample_grads(model, x, y, reduction=reduction), nb11.func_grads(model, x, y)
    assert list(hooks) == ["a.weight", "a.bias", "b.bias"]  # named_parameters lists the tied weight once
    for name in hooks:
        torch.testing.assert_close(hooks[name], func[name])


class _TiedEmbedding(nn.Module):
    """An input embedding tied to the output projection, as in many language models."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.out = nn.Embedding(6, 6), nn.Linear(6, 6, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.emb(idx)))


def test_an_embedding_tied_to_a_linear_is_refused_by_name():
    model = seeded(2, _TiedEmbedding)
    idx, y = torch.randint(0, 6, (10,)), torch.randint(0, 6, (10,))
    with pytest.raises(ValueError, match=r"\['emb\.weight'\].*func_grads"):
        nb11.per_sample_grads(model, idx, y)
    assert hooklab.count_hooks(model) == 0
    model.emb.weight.requires_grad_(False)  # frozen: nothing left to compute, nothing refused
    assert nb11.per_sample_grads(model, idx, y) == {}


def test_frozen_parameters_are_left_out_of_the_result():
    model = seeded(3, lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 5), nn.ReLU(),
                                            nn.Linear(5, 4)))
    model[2].weight.requires_grad_(False)  # a frozen weight next to a trainable bias
    model[4].requires_grad_(False)  # a frozen layer after trainable ones
    x, y = torch.randn(10, 6), torch.randint(0, 4, (10,))
    hooks, func = nb11.per_sample_grads(model, x, y), nb11.func_grads(model, x, y)
    assert list(hooks) == ["0.weight", "0.bias", "2.bias"]
    for name in hooks:
        torch.testing.assert_close(hooks[name], func[name])


class _Logged(nn.Module):
    """A layer called a second time for a statistic only; ``quietly``: that call runs under no_grad."""

    def __init__(self, quietly: bool) -> None:
        super().__init__()
        self.quietly, self.shared, self.head = quietly, nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.head(torch.tanh(self.shared(x)))
        with torch.set_grad_enabled(not self.quietly):
            self.shared(2 * x)
        return out


@pytest.mark.parametrize("quietly", [True, False])
def test_a_call_under_no_grad_leaves_nothing_on_the_stack(quietly):
    model = seeded(4, lambda: _Logged(quietly))
    x, y = torch.randn(10, 6), torch.randint(0, 3, (10,))
    hooks, func = nb11.per_sample_grads(model, x, y), nb11.func_grads(model, x, y)
    same = torch.allclose(hooks["shared.weight"], func["shared.weight"], atol=1e-5)
    assert same == quietly, "right only when the call that misses the loss runs under no_grad"
    torch.testing.assert_close(hooks["head.weight"], func["head.weight"])


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


def test_after_300_steps_the_wrong_labels_are_learned_and_the_ranking_blurs():
    """Notebook 11, cell 22's claims, with their margins."""
    data = nb11.make_data()
    model = nb11.train(nb11.make_model(), data, steps=300)
    logits = model(data.x)[data.flipped]
    top2 = logits.topk(2, dim=1)
    assert torch.equal(top2.indices[:, 0], data.y[data.flipped]), "all 8 planted labels are predicted"
    assert (top2.values[:, 0] - top2.values[:, 1]).min() > 0.5, "by a clear margin"
    norms = nb11.flat_norms(nb11.per_sample_grads(model, data.x, data.y))
    order = norms.argsort(descending=True).tolist()
    ranks = sorted(order.index(i) for i in data.flipped.tolist())
    assert sum(r < 8 for r in ranks) <= 6, "the 8 largest are no longer the planted 8 (here 5 of them)"
    assert ranks[-1] < 18, "all planted ones still among the 20 largest, with room"
    planted = torch.isin(torch.arange(len(norms)), data.flipped)
    assert norms[planted].min() > 100 * norms[~planted].median()


def test_the_live_picture_is_draw_norms_picture():
    """LiveNorms redraws only the bars, the clipping line and its label (and the spines over them), yet
    every picture is pixel for pixel draw_norms' full drawing of the same norms, clip and y axis; the
    axes are drawn again only for a new upper end (a round number above the bars and the line)."""
    flipped, generator = torch.tensor([3, 10, 50]), torch.Generator().manual_seed(0)
    live = nb11.LiveNorms(96, flipped, "t")
    tops = []
    for scale, clip in [(1.0, 0.5), (1.0, 0.9), (5.0, 1.0), (1.0, 3.0), (1.0, 0.1)]:
        norms = torch.rand(96, generator=generator) * scale
        full = figure((7.5, 2.2))
        tops.append(live.top(norms, clip))
        nb11.draw_norms(full, norms, flipped, clip, "t", top=tops[-1])
        got, want = png_pixels(live.png(norms, clip)), png_pixels(to_png(full))
        assert got.shape == want.shape and (got == want).all(), (scale, clip, int((got != want).any(-1).sum()))
    assert tops == [2.0, 2.0, 10.0, 5.0, 2.0] and live.canvas.full_draws == 3  # 2.0 drawn once, kept


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
    assert nb11.embedding_exercise.check(solved.per_sample_embedding).passed
    assert nb11.conv_exercise.check(solved.per_sample_conv2d).passed


def test_linear_for_vectors_only_fails_on_sequences_and_says_why():
    verdict = nb11.linear_exercise.check(lambda a, g: (torch.einsum("no,ni->noi", g, a), g))
    failed = failed_checks(verdict)
    assert "a batch of vectors [n, in]" not in failed
    assert "`...`" in failed["a batch of sequences [n, positions, in]"]
    assert "RuntimeError" not in failed["a batch of sequences [n, positions, in]"], "a hint, not the raw error"


def test_linear_mistakes_are_named():
    assert "return two tensors" in mistakes(nb11.linear_exercise, lambda a, g: torch.einsum("n...o,n...i->noi", g, a))
    transposed = mistakes(nb11.linear_exercise, lambda a, g: (torch.einsum("n...o,n...i->nio", g, a), g.sum(1)))
    assert "[5, 4, 3]" in transposed and "expected [5, 3, 4]" in transposed and "in and out are swapped" in transposed
    swapped = mistakes(nb11.linear_exercise, lambda a, g: (torch.einsum("n...o->no", g),
                                                           torch.einsum("n...o,n...i->noi", g, a)))
    assert "came first" in swapped
    batch_summed = mistakes(nb11.linear_exercise, lambda a, g: (torch.einsum("n...o,n...i->oi", g, a), g.sum(0)))
    assert "summed away" in batch_summed
    bias_mean = mistakes(nb11.linear_exercise,
                         lambda a, g: (torch.einsum("n...o,n...i->noi", g, a), g.flatten(1, -2).mean(1)
                                       if g.dim() > 2 else g))
    assert "bias gradients are the mean over the positions" in bias_mean
    bias_kept = mistakes(nb11.linear_exercise, lambda a, g: (torch.einsum("n...o,n...i->noi", g, a), g))
    assert "positions between the batch and the features are still there" in bias_kept


def _last_position_only(a, g):
    a, g = a.reshape(len(a), -1, a.shape[-1])[:, -1], g.reshape(len(g), -1, g.shape[-1])[:, -1]
    return torch.einsum("no,ni->noi", g, a), g


def _rows_flipped(a, g):
    return torch.einsum("n...o,n...i->noi", g, a).flip(1), torch.einsum("n...o->no", g)


def test_the_positions_hint_comes_only_when_vectors_pass():
    failed = failed_checks(nb11.linear_exercise.check(_last_position_only))
    assert "a batch of vectors [n, in]" not in failed
    assert "sum over every position" in failed["a batch of sequences [n, positions, in]"]
    failed = failed_checks(nb11.linear_exercise.check(_rows_flipped))
    assert len(failed) == 3
    assert all("outer product" in m and "position" not in m for m in failed.values()), failed


def _embedding_by_assignment(emb, idx, g):  # repeated tokens: one position wins
    out = g.new_zeros(len(idx), emb.num_embeddings, emb.embedding_dim)
    out[torch.arange(len(idx))[:, None], idx] = g
    return out


def _embedding_one_hot(emb, idx, g):  # right, except the padding row
    return torch.einsum("nlv,nld->nvd", F.one_hot(idx, emb.num_embeddings).to(g.dtype), g)


def test_embedding_mistakes_are_named():
    failed = failed_checks(nb11.embedding_exercise.check(_embedding_by_assignment))
    assert "every token once per example" not in failed
    assert "more than once" in failed["a token repeated in one example: its gradients add up"]
    failed = failed_checks(nb11.embedding_exercise.check(_embedding_one_hot))
    assert list(failed) == ["padding_idx: the padding row gets no gradient"]
    assert "padding_idx row has a gradient" in failed["padding_idx: the padding row gets no gradient"]
    assert "one gradient per position" in mistakes(nb11.embedding_exercise, lambda emb, idx, g: g)
    summed = mistakes(nb11.embedding_exercise, lambda emb, idx, g: _embedding_one_hot(emb, idx, g).sum(0))
    assert "summed away" in summed
    assert "row v of example i" in mistakes(nb11.embedding_exercise,
                                            lambda emb, idx, g: _embedding_one_hot(emb, idx, g).flip(1))


def test_the_embedding_solution_fed_by_hooks_equals_torch_func_and_the_loop():
    model = seeded(4, lambda: nn.Sequential(nn.Embedding(11, 3, padding_idx=0), nn.Flatten(), nn.Linear(6 * 3, 2)))
    idx = torch.randint(0, 5, (7, 6), generator=torch.Generator().manual_seed(4))  # repeats and padding
    idx[:, -1] = 0
    y = torch.randint(0, 2, (7,), generator=torch.Generator().manual_seed(5))
    seen, g = embedding_hook_inputs(model, idx, y)
    assert list(g.shape) == [7, 6, 3]
    got = solved.per_sample_embedding(model[0], seen, g)
    torch.testing.assert_close(got.sum(0), model[0].weight.grad)
    torch.testing.assert_close(got, nb11.func_grads(model, idx, y)["0.weight"])
    torch.testing.assert_close(got, nb11.loop_grads(model, idx, y)["0.weight"])


def _conv_source(path: str):
    namespace = {"torch": torch, "F": F}
    exec(path, namespace)
    return namespace["per_sample_conv2d"]


def _conv(unfold_args: str, tail: str = "w.reshape(a.shape[0], *conv.weight.shape)", g: str = "g.flatten(2)"):
    return _conv_source(f"""
def per_sample_conv2d(conv, a, g):
    cols = F.unfold(a, conv.kernel_size, {unfold_args})
    w = torch.einsum("nop,nkp->nok", {g}, cols)
    return {tail}
""")


def _conv_ignores_stride(conv, a, g):
    patches = F.unfold(a, conv.kernel_size, dilation=conv.dilation, padding=conv.padding)
    weight = torch.einsum("nop,nkp->nok", g.flatten(2), patches[..., :g[0, 0].numel()])
    return weight.reshape(len(a), *conv.weight.shape)


def test_conv_names_the_unfold_setting_that_differs():
    everything = "dilation=conv.dilation, padding=conv.padding, stride=conv.stride"
    assert nb11.conv_exercise.check(_conv(everything)).passed
    failed = failed_checks(nb11.conv_exercise.check(_conv("dilation=conv.dilation")))
    message = failed["padding 1 and stride 2"]
    assert "20 positions" in message and "has 12" in message and "stride and padding differ" in message
    assert "RuntimeError" not in message
    failed = failed_checks(nb11.conv_exercise.check(_conv("dilation=conv.dilation, padding=conv.padding")))
    assert list(failed) == ["padding 1 and stride 2"] and "stride differs" in failed["padding 1 and stride 2"]
    failed = failed_checks(nb11.conv_exercise.check(_conv("padding=conv.padding, stride=conv.stride")))
    assert list(failed) == ["a 2×3 kernel with dilation 2"]
    assert "dilation differs" in failed["a 2×3 kernel with dilation 2"]
    failed = failed_checks(nb11.conv_exercise.check(_conv_ignores_stride))  # cut to size: no einsum error
    assert list(failed) == ["padding 1 and stride 2"] and "stride differs" in failed["padding 1 and stride 2"]


def test_conv_mistakes_are_named():
    everything = "dilation=conv.dilation, padding=conv.padding, stride=conv.stride"
    assert "reshape at the end" in mistakes(nb11.conv_exercise, _conv(everything, tail="w"))
    assert "(n, out, in, kh, kw)" in mistakes(nb11.conv_exercise, _conv(everything, tail="w"))
    assert "return only the weight gradients" in mistakes(
        nb11.conv_exercise, _conv(everything, tail="w.reshape(a.shape[0], *conv.weight.shape), g.sum((2, 3))"))
    mean = mistakes(nb11.conv_exercise, _conv(everything, tail="w.reshape(a.shape[0], *conv.weight.shape) / "
                                                                "g[0, 0].numel()"))
    assert "mean over the positions" in mean and "unfold" not in mean
    order = mistakes(nb11.conv_exercise, _conv(everything, tail="w.reshape(len(a), conv.out_channels, "
                                                                 "*conv.kernel_size, conv.in_channels)"
                                                                 ".permute(0, 1, 4, 2, 3)"))
    assert "wrong places" in order and "(in, kh, kw)" in order
    unflattened = mistakes(nb11.conv_exercise, _conv(everything, g="g"))
    assert "layout [n, out, positions]" in unflattened and "RuntimeError" not in unflattened


def test_the_worked_solutions_show_their_code():
    assert "einsum" in nb11.linear_exercise.solution().code
    assert "scatter_add_" in nb11.embedding_exercise.solution().code
    assert "F.unfold" in nb11.conv_exercise.solution().code
