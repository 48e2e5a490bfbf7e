"""hooklab.explore: the live lab for any model, on the model families it must handle (torchvision's
resnet18, nn.TransformerEncoder with a padding mask, nn.LSTM, a dict output, keyword-only inputs),
its clean-up, its errors, and what an update recomputes."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torchvision
from torch import nn

import hooklab
from hooklab.threads import threads
from hooklab.lab.explore import InterventionError, sum_target
from hooklab.lab.interventions import INTERVENTIONS
from hooklab.nested import describe, map_tensors, tensors_in
from hooklab.lab.panel import Panel


def _seeded(build):
    torch.manual_seed(0)
    return build()


@pytest.fixture(scope="module")
def resnet():
    model = _seeded(lambda: torchvision.models.resnet18(weights=None).eval())
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    return model, x


@pytest.fixture
def panel(resnet):
    model, x = resnet
    p = hooklab.explore(model, x, name="test: resnet")
    yield p
    p.remove()
    assert hooklab.count_hooks(model) == 0


def _encoder():
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=True).eval()


class LastHidden(nn.Module):
    """An LSTM whose head reads only the last hidden state h, not the output sequence (whose
    tensor hook autograd then calls with None)."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        _, (h, _) = self.lstm(x)
        return self.head(h[-1])


class DictOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 6)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        features = torch.relu(self.body(x))
        return {"logits": self.head(features), "features": features}


class KeywordsOnly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, *, x, scale=1.0):
        return self.b(self.a(x) * scale)


class Fragile(nn.Module):
    """Normalises a hidden vector, and refuses a zero one."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, x):
        h = self.a(x)
        norm = h.norm(dim=1, keepdim=True)
        if (norm == 0).any():
            raise ValueError("cannot normalise a zero vector")
        return self.b(h / norm)


# ---------------------------------------------------------------------- resnet18
def test_resnet_lists_every_module_marked_leaf_or_container(panel):
    options = panel.options("module")
    assert len(options) == 68 and options[0] == ("(model) · ResNet · container", "")
    labels = dict((v, label) for label, v in options)
    assert labels["conv1"] == "conv1 · Conv2d · leaf"
    assert labels["layer1"] == "layer1 · Sequential · container"
    assert labels["layer1.0.relu"] == "layer1.0.relu · ReLU · leaf · called 2×"
    assert sum(label.endswith("· leaf") or "· leaf ·" in label for label, _ in options) == 52


def test_resnet_first_view_is_conv1_without_hooks(panel):
    state = panel.state()
    assert state["module"] == "conv1" and state["type"] == "Conv2d · leaf"
    assert state["output"] == "Tensor[1, 64, 32, 32]" and state["shape"] == [1, 64, 32, 32]
    assert state["dtype"] == "float32" and state["calls per forward"] == 1
    assert state["hooks"] == 0 and state["hooks on the model"] == 0 and state["interventions"] == "none"
    assert state["output change"] == 0.0 and len(state["top-3 (sample 0)"]) == 3
    assert panel.picture.value[:4] == b"\x89PNG"


def test_resnet_statistics_match_the_output(panel, resnet):
    model, x = resnet
    with hooklab.Recorder(model, "layer1.0.bn1", name="test-explore-truth") as rec, torch.no_grad():
        model(x)
    out = rec["layer1.0.bn1"].output
    state = panel.set(module="layer1.0.bn1")
    assert state["mean"] == pytest.approx(out.mean().item(), abs=1e-3 * out.std().item())  # rounded on the std's scale
    assert state["std"] == pytest.approx(out.std().item(), rel=1e-3)
    assert state["zeros"] == pytest.approx((out == 0).float().mean().item(), abs=1e-4)


def test_a_mean_that_is_float_noise_prints_as_zero():
    norm = _seeded(lambda: nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8)).eval())
    p = hooklab.explore(norm, torch.randn(3, 4), module="1", name="test: layernorm")
    try:
        state = p.state()
        assert state["mean"] == 0.0 and state["std"] == pytest.approx(1.0, rel=0.1)  # LayerNorm: mean 0 up to ~1e-8
    finally:
        p.remove()


def test_figures_from_the_arithmetic_are_marked_per_run_and_exact_ones_are_not(panel):
    """A per-run figure stays a number for code but shows as ≈ (masked by the tests); an exact one
    (a count, a shape, an exact 0 or 1 by construction) shows as it is."""
    import re

    from hooklab.claims import MASK, MASKED, PerRun, is_per_run

    state = panel.set(module="layer1.0.relu")
    for key in ("mean", "std", "zeros", "grad norm (clean)"):
        assert isinstance(state[key], PerRun) and is_per_run(str(state[key])), key
    assert state["std"] > 0 and state["grad norm (clean)"] > 0 and 0 < state["zeros"] < 1  # numbers for code
    assert all(isinstance(v, PerRun) and type(i) is int for i, v in state["top-3 (sample 0)"])
    assert type(state["output change"]) is float and state["output change"] == 0.0  # the reference: exact
    assert type(state["relative change"]) is float and state["relative change"] == 0.0
    assert type(state["calls per forward"]) is int and state["shape"] == [1, 64, 16, 16]
    zeroed = panel.set(zero=True)  # all zeros: exact mean, std and share of zeros
    assert [type(zeroed[k]) for k in ("mean", "std", "zeros")] == [float] * 3
    assert (zeroed["mean"], zeroed["std"], zeroed["zeros"]) == (0.0, 0.0, 1.0)
    assert isinstance(zeroed["output change"], PerRun) and isinstance(zeroed["relative change"], PerRun)
    assert zeroed["output change"] > 0
    # the view and its stored snapshot show ≈ figures, which mask the same whatever their digits
    html = panel._repr_mimebundle_()["text/html"]
    assert f"<code>{zeroed['output change']}</code>" in html and "≈" in html
    assert "std: 0\n" in panel.text and f"output change: {zeroed['output change']}" in panel.text
    other = html.replace(str(zeroed["output change"]), "≈12.5")
    assert other != html and re.sub(MASK, MASKED, other) == re.sub(MASK, MASKED, html)
    panel.set(zero=False)
    conv = panel.set(module="conv1")  # a conv output has no exact zero: the share 0 is a count
    assert type(conv["zeros"]) is float and conv["zeros"] == 0.0


def test_a_reused_module_shows_its_calls_and_the_last_one(panel):
    state = panel.set(module="layer1.0.relu")
    assert state["calls per forward"] == 2
    assert 0 < state["zeros"] < 1  # the output of a ReLU


def test_gradient_norm_comes_through_an_in_place_relu(panel, resnet):
    """bn1's output is overwritten by the in-place ReLU after it; the tensor hook registered from
    the forward hook still gets the gradient with respect to bn1's output."""
    model, x = resnet
    grads: dict[tuple[str, int], float] = {}
    calls: dict[str, int] = {}

    def pair(name):
        def forward_hook(module, args, output):
            call = calls[name] = calls.get(name, 0) + 1

            def tensor_hook(grad):
                grads[name, call] = grad.norm().item()
            output.register_hook(tensor_hook)
        return forward_hook

    with hooklab.Hooks() as hooks:
        for name in ("bn1", "layer1.0.relu"):
            hooks.forward(hooklab.module(model, name), pair(name))
        model(x).sum().backward()
    model.zero_grad(set_to_none=True)
    assert calls == {"bn1": 1, "layer1.0.relu": 2}
    assert panel.set(module="bn1")["grad norm (clean)"] == pytest.approx(grads["bn1", 1], rel=1e-3)
    # a module called twice: the gradient with respect to its last call's output, like its statistics
    assert panel.set(module="layer1.0.relu")["grad norm (clean)"] == pytest.approx(grads["layer1.0.relu", 2], rel=1e-3)
    assert grads["layer1.0.relu", 1] != pytest.approx(grads["layer1.0.relu", 2], rel=1e-3)


def test_recording_the_gradient_leaves_no_grad_on_the_parameters(resnet):
    model, x = resnet
    p = hooklab.explore(model, x, name="test: no .grad")
    try:
        assert all(param.grad is None for param in model.parameters())
    finally:
        p.remove()


def test_each_intervention_is_one_hook_registered_and_removed_live(panel, resnet):
    model, _ = resnet
    clean = panel.set(module="layer2.0.conv1")
    for kind in INTERVENTIONS:
        on = panel.set(**{kind: True})
        assert on["hooks"] == 1 and on["hooks on the model"] == 1 and hooklab.count_hooks(model) == 1
        assert on["output change"] > 0 and on["interventions"].startswith(kind)
        [row] = hooklab.registered_hooks(model).rows
        assert row[0] == "layer2.0.conv1" and row[1] == "forward"
        off = panel.set(**{kind: False})
        assert off == clean and hooklab.count_hooks(model) == 0


def test_zero_noise_scale_and_clamp_do_what_they_say(panel):
    panel.set(module="layer1.0.conv2")
    clean = panel.state()
    assert panel.set(zero=True)["zeros"] == 1.0 and panel.state()["std"] == 0.0
    panel.set(zero=False)
    scaled = panel.set(scale=True, factor=2.0)
    assert scaled["std"] == pytest.approx(2 * clean["std"], rel=1e-3)
    assert scaled["mean"] == pytest.approx(2 * clean["mean"], abs=2e-3 * clean["std"])
    assert panel.set(factor=1.0)["output change"] == 0.0  # ×1 changes nothing
    panel.set(scale=False)
    noisy = panel.set(noise=True, noise_std=1.0)
    assert noisy["std"] == pytest.approx(math.sqrt(2) * clean["std"], rel=0.05)
    assert panel.set(noise_std=0.0)["output change"] == 0.0
    panel.set(noise=False)
    clamped = panel.set(clamp=True, limit=0.5)
    assert clamped["std"] < clean["std"] and clamped["interventions"] == "clamp ±0.5×std"


def test_interventions_ticked_together_run_in_the_order_they_were_ticked(panel):
    panel.set(module="layer1.0.conv1")
    first = panel.set(noise=True, noise_std=1.0)
    assert first["interventions"] == "noise 1×std"
    both = panel.set(clamp=True, limit=0.5)
    assert both["interventions"] == "noise 1×std → clamp ±0.5×std"
    panel.set(noise=False)
    reordered = panel.set(noise=True)
    assert reordered["interventions"] == "clamp ±0.5×std → noise 1×std"
    assert reordered["std"] != both["std"]
    assert panel.set(noise=False, clamp=False)["hooks"] == 0


def test_the_hooks_follow_the_module_picked(panel, resnet):
    model, _ = resnet
    panel.set(module="conv1", zero=True)
    state = panel.set(module="layer4.1.bn2")
    assert state["zeros"] == 1.0 and state["shape"] == [1, 512, 2, 2]
    assert [r[0] for r in hooklab.registered_hooks(model).rows] == ["layer4.1.bn2"]


@contextlib.contextmanager
def passes_of(model):
    """The model's forward passes, counted from outside by a forward hook on the model itself:
    one entry per pass, True when autograd was on (the panel's record), False otherwise."""
    passes = []
    handle = model.register_forward_hook(lambda module, args, output: passes.append(torch.is_grad_enabled()))
    try:
        yield passes
    finally:
        handle.remove()


def test_an_update_runs_the_model_only_for_a_new_combination(panel, resnet):
    model, _ = resnet
    panel.state()
    with passes_of(model) as passes:
        for name in ("layer1", "layer2.0.conv1", "fc", "conv1"):
            panel.set(module=name)  # no intervention: read from the pass recorded at the start
        assert passes == []
        panel.set(zero=True)  # the reference pass without edits, then the edited one
        assert passes == [False, False]
        panel.set(noise_std=1.5, factor=0.5, limit=2.0)  # sliders of interventions that are off
        panel.set(zero=False)
        panel.set(zero=True)  # seen before
        assert passes == [False, False]  # and no pass with autograd: the record was not made again


def test_changing_the_weights_in_place_records_the_model_again(resnet):
    model, x = resnet
    p = hooklab.explore(model, x, name="test: weights change")
    try:
        before = p.set(module="fc")["mean"]
        with torch.no_grad():
            model.fc.bias += 1.0
        with passes_of(model) as passes:
            after = p.set(module="conv1", zero=True) and p.set(module="fc", zero=False)["mean"]
        assert passes[0] is True and after == pytest.approx(before + 1.0, rel=1e-3)  # recorded again, at once
    finally:
        with torch.no_grad():
            model.fc.bias -= 1.0
        p.remove()


def test_a_model_in_training_mode_is_run_in_eval_mode_and_put_back(resnet):
    model, x = resnet
    model.train()
    model.layer1.eval()  # a mixed state: each module gets its own mode back
    running_mean = model.bn1.running_mean.clone()
    modes = {n: m.training for n, m in model.named_modules()}
    p = hooklab.explore(model, x, name="test: training mode")
    try:
        state = p.set(module="fc")
        assert state["runs"].startswith("in eval mode: the model is in training mode")
        with torch.no_grad(), threads(1):  # as the explorer's passes run (threads=1)
            model.eval()
            expected = model(x)
            model.train(), model.layer1.eval()
        assert p.set(scale=True, factor=1.0)["output change"] == 0.0  # eval-mode passes: the same logits
        # the same bits: another thread count adds up in another order (off by 1e-5 on AVX-512)
        assert torch.equal(p.passes.reference()[0][1], expected)
        assert {n: m.training for n, m in model.named_modules()} == modes
        assert torch.equal(model.bn1.running_mean, running_mean)  # no pass updated BatchNorm's statistics
        model.eval()
        assert "runs" not in p.set(scale=False)  # the note goes with the training mode
    finally:
        model.eval()
        p.remove()


def test_the_filter_narrows_the_module_list_and_keeps_the_module_picked(panel):
    assert panel.state()["module"] == "conv1"
    state = panel.set(filter="layer1.*")  # conv1 does not match: it stays listed, first, and picked
    names = {n for n, _ in panel.passes.model.named_modules() if n.startswith("layer1.")}
    assert [v for _, v in panel.options("module")][0] == "conv1" and {v for _, v in panel.options("module")} == names | {"conv1"}
    assert state["module"] == "conv1" and state["listed"] == f"{len(names)} of 68 match 'layer1.*', and 'conv1', picked"
    assert panel.set(filter="Conv2d")["listed"] == "20 of 68 match 'Conv2d'"  # conv1 matches: listed once
    state = panel.set(filter="layer4 bn", module="layer4.0.bn1")  # every word must match
    assert [v for _, v in panel.options("module")] == ["layer4.0.bn1", "layer4.0.bn2", "layer4.1.bn1", "layer4.1.bn2"]
    assert state["module"] == "layer4.0.bn1" and state["listed"] == "4 of 68 match 'layer4 bn'"
    nothing = panel.set(filter="no-such-module")
    assert nothing["listed"].startswith("no module matches 'no-such-module'") and len(panel.options("module")) == 4
    assert panel.set(filter="")["listed"] == "all 68 modules"


def test_an_intervention_stays_on_the_module_picked_when_the_filter_hides_it(panel, resnet):
    model, _ = resnet
    panel.set(module="layer2.0.bn1", zero=True)
    state = panel.set(filter="linear")  # nothing matches: the list and the pick stay
    state = panel.set(filter="fc")
    assert state["module"] == "layer2.0.bn1" and state["zeros"] == 1.0
    assert [r[0] for r in hooklab.registered_hooks(model).rows] == ["layer2.0.bn1"]


def test_picking_a_module_the_filter_hides_says_what_to_do(panel):
    panel.set(filter="Conv2d")
    with pytest.raises(ValueError, match="filter"):
        panel.set(module="layer1")
    state = panel.set(filter="", module="layer1")  # filter first, whatever the order
    assert state["module"] == "layer1"


def test_the_picture_changes_with_an_intervention_and_comes_back(panel):
    panel.set(module="layer1.0.conv1")
    clean = panel.picture.value
    panel.set(scale=True, factor=-1.0)
    assert panel.picture.value != clean
    panel.set(scale=False)
    assert panel.picture.value == clean


def test_remove_and_close_leave_no_hook(resnet):
    model, x = resnet
    p = hooklab.explore(model, x, name="test: close")
    p.set(module="layer3", zero=True, noise=True)
    assert hooklab.count_hooks(model) == 2
    p.close()
    assert hooklab.count_hooks(model) == 0
    assert all(widget.comm is None for widget in p.panel.controls.values())  # closed, with its controls


class Learned(nn.Module):
    """Returns its parameter as it is (a leaf tensor)."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Parameter(torch.ones(3))

    def forward(self):
        return self.q


class ScoresAndQuery(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.learned = nn.Linear(4, 2), Learned()

    def forward(self, x):
        return {"scores": self.lin(x), "query": self.learned()}


def test_close_leaves_no_hook_on_an_example_passed_through_as_it_is():
    model = _seeded(lambda: nn.Sequential(nn.Identity(), nn.Linear(4, 2)))
    x = torch.randn(2, 4, requires_grad=True)  # Identity outputs this leaf
    hooklab.explore(model, x, name="test: identity").close()
    assert not x._backward_hooks and hooklab.count_hooks(model) == 0


def test_close_leaves_no_hook_on_a_returned_parameter_the_target_never_reaches():
    """The gradient hook on a leaf removes itself when it runs; one the backward pass never reaches
    (the target reads only the scores) must go with the panel all the same."""
    model = _seeded(ScoresAndQuery)
    p = hooklab.explore(model, torch.randn(2, 4), target=lambda out: out["scores"].sum(), name="test: unreached")
    assert p.set(module="learned")["grad norm (clean)"] == "— (no gradient reached it)"
    p.close()
    assert not model.learned.q._backward_hooks and hooklab.count_hooks(model) == 0


def test_rebuilding_under_the_same_name_closes_the_older_panel(resnet):
    model, x = resnet
    first = hooklab.explore(model, x, name="test: rebuilt")
    first.set(zero=True)
    second = hooklab.explore(model, x, name="test: rebuilt")
    try:
        assert hooklab.count_hooks(model) == 0 and first.hook_count() == 0
        assert first.panel.controls["zero"].disabled and Panel.open_panels["test: rebuilt"] is second.panel
        assert first.passes is None and first.panel.widget.comm is None  # closed: the model let go
        assert second.state()["output change"] == 0.0
    finally:
        second.remove()


def test_many_flips_leave_at_most_one_hook_and_none_at_the_end():
    model = _seeded(lambda: nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).eval())
    p = hooklab.explore(model, torch.ones(1, 3), name="test: flips")
    for i in range(300):
        state = p.set(zero=i % 2 == 0, module=["0", "1", "2"][i % 3])
        assert state["hooks on the model"] == (1 if i % 2 == 0 else 0)
    p.remove()
    assert hooklab.count_hooks(model) == 0


# ---------------------------------------------------------------------- transformer
def test_transformer_encoder_with_a_padding_mask_as_a_keyword():
    enc = _seeded(_encoder)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    p = hooklab.explore(enc, ((x,), {"src_key_padding_mask": pad}), name="test: transformer")
    try:
        labels = [label for label, _ in p.options("module")]
        assert "layers · ModuleList · container · not called" in labels
        # nn.MultiheadAttention uses out_proj's weight directly and never calls the module
        assert "layers.0.self_attn.out_proj · NonDynamicallyQuantizableLinear · leaf · not called" in labels
        attention = p.set(module="layers.0.self_attn")
        assert attention["output"] == "tuple(Tensor[2, 5, 16], None)" and attention["statistics of"] == "output[0]"
        for name in ("layers.0.linear1", "layers.1.norm2", "layers.0.dropout"):
            state = p.set(module=name)
            assert state["calls per forward"] == 1 and math.isfinite(state["std"])
        assert p.set(module="layers.1.linear2")["grad norm (clean)"] > 0
        zeroed = p.set(module="layers.0.linear1", zero=True)
        assert zeroed["output change"] > 0 and zeroed["hooks on the model"] == 1
        assert p.set(zero=False, scale=True, factor=1.0)["output change"] == 0.0
        assert torch.backends.mha.get_fastpath_enabled()  # switched off only while the panel runs the model
    finally:
        p.remove()
    assert hooklab.count_hooks(enc) == 0


def test_the_fast_path_skips_submodules_and_explore_switches_it_off():
    """In eval mode without autograd, TransformerEncoderLayer runs one fused kernel: a global hook
    never sees linear1. (A hook registered on the layer or inside it makes PyTorch take the normal
    path for that layer only.) explore turns the fast path off, so linear1 runs in every pass."""
    enc = _seeded(_encoder)
    x = torch.randn(2, 5, 16)
    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: seen.append(type(m).__name__))
    try:
        with torch.no_grad():
            enc(x)
        fast = list(seen)
        seen.clear()
        enc(x)  # with autograd: the normal path
        normal = list(seen)
    finally:
        handle.remove()
    assert "Linear" not in fast and normal.count("Linear") == 4
    p = hooklab.explore(enc, x, name="test: fast path")
    try:
        assert p.set(module="layers.1.linear1", noise=True)["calls per forward"] == 1
    finally:
        p.remove()


def test_under_no_grad_explore_runs_the_encoder_with_a_padding_mask_on_the_padded_path():
    """Without autograd, the fast path would hand nested tensors between the layers; explore's passes
    turn it off, so every module's output is an ordinary tensor, padding included."""
    enc = _seeded(_encoder)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    with torch.no_grad():
        p = hooklab.explore(enc, ((x,), {"src_key_padding_mask": pad}), module="layers.0.linear1",
                            name="test: nested")
        try:
            assert p.set(noise=False)["output"] == "Tensor[2, 5, 32]"
            assert p.set(noise=True)["output change"] > 0
        finally:
            p.remove()
    assert hooklab.count_hooks(enc) == 0


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_the_statistics_of_a_nested_output_are_those_of_all_its_components_values():
    from hooklab.lab.summary import Summary
    g = torch.Generator().manual_seed(3)
    parts = [torch.randn(5, 4, generator=g), torch.zeros(3, 4)]
    s = Summary.of((torch.nested.nested_tensor(parts),))
    values = torch.cat([t.flatten() for t in parts])
    assert s.structure == "tuple(NestedTensor[2, (5, 3), 4])" and s.path == "output[0]" and s.dtype == "float32"
    assert s.shape is None  # no one shape: the structure gives each component's
    assert s.numel == 32 and s.zeros == 12 / 32 and s.lo == values.min().item() and s.hi == values.max().item()
    assert s.mean == values.mean().item() and s.std == pytest.approx(values.std().item())


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_explore_refuses_a_nested_example_and_says_what_to_pass():
    layer = nn.Linear(16, 8)
    nested = torch.nested.nested_tensor([torch.ones(5, 16), torch.ones(3, 16)])
    with pytest.raises(TypeError, match=r"nested tensor \(NestedTensor\[2, \(5, 3\), 16\]\).*to_padded_tensor"):
        hooklab.explore(layer, nested)
    assert hooklab.count_hooks(layer) == 0


# ---------------------------------------------------------------------- LSTM
def test_lstm_tuple_output():
    lstm = _seeded(lambda: nn.LSTM(3, 8).eval())
    x = torch.randn(6, 2, 3, generator=torch.Generator().manual_seed(1))
    p = hooklab.explore(lstm, x, name="test: lstm")
    try:
        state = p.state()
        assert state["module"] == "" and state["type"] == "LSTM · leaf"
        assert state["output"] == "tuple(Tensor[6, 2, 8], tuple(Tensor[1, 2, 8], Tensor[1, 2, 8]))"
        assert state["statistics of"] == "output[0]" and state["shape"] == [6, 2, 8]
        with torch.no_grad():
            out, (h, c) = lstm(x)
        # the default target sums all three tensors: its gradient is all ones on each
        assert state["grad norm (clean)"] == pytest.approx(math.sqrt(out.numel() + h.numel() + c.numel()), rel=1e-3)
        zeroed = p.set(zero=True)  # every tensor of the output zeroed
        whole = math.sqrt(sum(t.pow(2).sum().item() for t in (out, h, c)))
        assert zeroed["output change"] == pytest.approx(whole, rel=1e-2) and zeroed["relative change"] == 1.0
    finally:
        p.remove()


def test_lstm_inside_a_model_gets_the_gradient_of_the_state_it_uses():
    model = _seeded(lambda: LastHidden().eval())
    p = hooklab.explore(model, torch.randn(6, 2, 3), name="test: lstm inside")
    try:
        state = p.set(module="lstm")
        assert state["output"] == "tuple(Tensor[6, 2, 8], tuple(Tensor[1, 2, 8], Tensor[1, 2, 8]))"
        assert state["grad norm (clean)"] > 0  # through h, although output[0] is unused
        assert p.set(noise=True)["output change"] > 0
    finally:
        p.remove()


# ---------------------------------------------------------------------- dict output, keyword-only inputs
def test_dict_output_and_a_target_on_one_logit():
    model = _seeded(lambda: DictOut().eval())
    p = hooklab.explore(model, torch.randn(2, 4), target=lambda out: out["logits"][0, 1], name="test: dict")
    try:
        root = p.set(module="")
        assert root["output"] == "dict(logits: Tensor[2, 3], features: Tensor[2, 6])"
        assert root["statistics of"] == "output['logits']"
        assert [i for i, _ in root["top-3 of output['logits'][0]"]] and root["output change"] == 0.0
        head = p.set(module="head")
        assert head["grad norm (clean)"] == 1.0  # d logits[0, 1] / d logits: a single one
        assert p.set(module="body", scale=True, factor=3.0)["output change"] > 0
    finally:
        p.remove()
    assert hooklab.count_hooks(model) == 0


def test_keyword_only_inputs():
    model = _seeded(lambda: KeywordsOnly().eval())
    p = hooklab.explore(model, ((), {"x": torch.randn(3, 4), "scale": 2.0}), name="test: keywords")
    try:
        state = p.set(module="a", clamp=True, limit=0.5)
        assert state["shape"] == [3, 4] and state["output change"] > 0 and state["hooks on the model"] == 1
    finally:
        p.remove()


# ---------------------------------------------------------------------- errors
def test_a_forward_that_raises_under_an_intervention_shows_the_error_and_leaves_no_hook():
    model = _seeded(lambda: Fragile().eval())
    p = hooklab.explore(model, torch.randn(3, 4), name="test: fragile")
    try:
        with pytest.raises(InterventionError, match="cannot normalise a zero vector") as info:
            p.set(module="a", zero=True)
        assert "zero on 'a'" in str(info.value)
        assert "InterventionError" in p.panel.view.value and "cannot normalise" in p.text
        assert p.values["zero"] is False and hooklab.count_hooks(model) == 0 and p.hook_count() == 0
        assert torch.backends.mha.get_fastpath_enabled() and torch.get_num_threads() >= 1
        assert p.set(module="b", zero=True)["output change"] > 0  # the panel goes on working
    finally:
        p.remove()
    assert hooklab.count_hooks(model) == 0


def test_bad_input_gets_a_clear_error():
    model = _seeded(lambda: nn.Sequential(nn.Linear(4, 2))).eval()
    x = torch.randn(1, 4)
    with pytest.raises(TypeError, match="nn.Module"):
        hooklab.explore(lambda t: t, x)
    with pytest.raises(TypeError, match=r"\(\(\), \{\.\.\.\}\)"):
        hooklab.explore(model, {"input": x})
    with pytest.raises(TypeError, match="tuple"):
        hooklab.explore(model, [x])
    with pytest.raises(TypeError, match="ambiguous"):
        hooklab.explore(model, (x, {"mask": None}))
    with pytest.raises(TypeError, match="target"):
        hooklab.explore(model, x, target=3)
    with pytest.raises(ValueError, match="one number"):
        hooklab.explore(model, x, target=lambda out: out)
    with pytest.raises(KeyError, match="'0'"):
        hooklab.explore(model, x, module="O")
    with pytest.raises(RuntimeError, match="mat1 and mat2"):
        hooklab.explore(model, torch.randn(1, 5))  # the model's own error, raised at once
    assert hooklab.count_hooks(model) == 0


# ---------------------------------------------------------------------- the helpers
def test_structure_helpers():
    lstm_like = (torch.zeros(5, 1, 3), (torch.zeros(1, 1, 3), torch.zeros(1, 1, 3)))
    assert describe(lstm_like) == "tuple(Tensor[5, 1, 3], tuple(Tensor[1, 1, 3], Tensor[1, 1, 3]))"
    packed = nn.utils.rnn.pack_padded_sequence(torch.zeros(2, 3, 1), [3, 2], batch_first=True)
    assert describe(packed).startswith("PackedSequence(data: Tensor[5, 1], batch_sizes: Tensor[3] int64")
    doubled = map_tensors(packed, lambda t: t + 1)
    assert type(doubled).__name__ == "PackedSequence" and torch.equal(doubled.batch_sizes, packed.batch_sizes)
    assert [p for p, _ in tensors_in({"a": [torch.ones(1), None]})] == ["output['a'][0]"]
    assert sum_target((torch.ones(2), torch.ones(3))).item() == 5.0
    with pytest.raises(ValueError, match="target="):
        sum_target({"ids": torch.arange(3)})


def test_panel_textbox_filters_a_dropdown_generically():
    seen = []
    p = Panel("test: textbox", lambda panel: {"picked": panel.values["layer"]})
    p.textbox("find")
    p.dropdown("layer", [("conv1 · Conv2d", "conv1"), ("bn1 · BatchNorm2d", "bn1"), ("fc · Linear", "fc")],
               filter_by="find")
    p.toggle("watch", lambda hooks, panel: seen.append(panel.values["layer"]))
    try:
        state = p.set(watch=True, find="norm")  # conv1, picked, does not match: it stays listed, first
        assert state["picked"] == "conv1" and p.options("layer") == [("conv1 · Conv2d", "conv1"), ("bn1 · BatchNorm2d", "bn1")]
        assert p.set(layer="bn1")["picked"] == "bn1" and p.options("layer") == [("bn1 · BatchNorm2d", "bn1")]
        assert seen[-1] == "bn1"  # the toggle's hook was registered again, on the module picked
        assert p.set(find="*1")["picked"] == "bn1" and len(p.options("layer")) == 2
        with pytest.raises(ValueError, match="find"):
            p.set(layer="fc")
        with pytest.raises(ValueError, match="textbox"):
            p.dropdown("other", ["a"], filter_by="missing")
    finally:
        p.remove()


def test_building_shows_its_progress_in_a_notebook_and_leaves_nothing(monkeypatch):
    """In a kernel, a build that takes longer than half a second shows what it is doing and how
    far it got, then empties its output (here the delay is 0 and the display is recorded)."""
    import IPython.display

    import hooklab.lab.progress as progress

    shown, updates = [], []

    class Handle:
        def update(self, data, raw=False):
            updates.append(data)

    def display(bundle, raw=False, display_id=False):
        shown.append(bundle)
        return Handle()

    monkeypatch.setattr(progress, "_in_kernel", lambda: True)
    monkeypatch.setattr(progress, "_AFTER_S", 0.0)
    monkeypatch.setattr(progress, "_EVERY_S", 0.0)
    monkeypatch.setattr(IPython.display, "display", display)
    texts = []
    original = progress.Progress.update

    def spy(self, done, total, text):
        original(self, done, total, text)
        if self.shown:
            texts.append((self._text.value, self._bar.value))
            widgets.update({self._box, self._text, self._bar})

    widgets: set = set()
    monkeypatch.setattr(progress.Progress, "update", spy)
    model = _seeded(lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).eval())
    panel = hooklab.explore(model, torch.randn(2, 4), name="test: progress")
    panel.close()
    assert len(shown) == 1 and list(shown[0]) == ["application/vnd.jupyter.widget-view+json"]  # no text/plain
    assert any("forward pass: 4 of 4 modules ran" in text for text, _ in texts)
    assert any("backward pass: 4 of 4 gradients" in text for text, _ in texts)
    bars = [bar for _, bar in texts]
    assert bars == sorted(bars) and bars[-1] == 1.0  # it only moves forward, and ends full
    assert updates == [{}] and all(w.comm is None for w in widgets)  # emptied, its widgets closed


# ---------------------------------------------------------------------- what backward() reaches
def _hand_written_grad_norms(model, x, names):
    """``{name: [grad norm of each call's output made outside backward]}`` from a forward hook and a
    tensor hook per module, after ``model(x).sum().backward()``: the reference."""
    norms: dict[str, list[float | None]] = {name: [] for name in names}

    def pair(name):
        def forward_hook(module, args, output):
            if torch._C._current_graph_task_id() != -1:  # a checkpoint recomputing: not a forward call
                return
            norms[name].append(None)
            call = len(norms[name]) - 1
            output.register_hook(lambda grad: norms[name].__setitem__(call, grad.norm().item()))
        return forward_hook

    handles = [model.get_submodule(name).register_forward_hook(pair(name)) for name in names]
    try:
        model(x).sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    return norms


def _frozen_mlp():
    model = _seeded(lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).eval())
    model.requires_grad_(False)
    return model


def test_the_gradient_reaches_a_frozen_model_through_an_example_that_requires_grad():
    """A saliency map's setting: every weight frozen, the input requires grad. backward() reaches
    every module's output through the input; so must explore, and still leave no .grad behind."""
    model = _frozen_mlp()
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(3), requires_grad=True)
    expected = _hand_written_grad_norms(model, x, ["0", "1", "2"])
    x.grad = None
    p = hooklab.explore(model, x, name="test: frozen, input requires grad")
    try:
        for name in ("0", "1", "2"):
            assert p.set(module=name)["grad norm (clean)"] == pytest.approx(expected[name][-1], rel=1e-3), name
        assert x.grad is None and all(w.grad is None for w in model.parameters())
    finally:
        p.remove()


def test_a_frozen_backbone_gets_its_gradient_through_the_input_too():
    """Only the head trainable, the input requires grad: the backbone's outputs are on the path from
    the input, so backward() reaches them (explore used to ask only for the head's weights)."""
    model = _seeded(lambda: torchvision.models.resnet18(weights=None, num_classes=5).eval())
    for name, w in model.named_parameters():
        w.requires_grad_(name.startswith("fc."))
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(1), requires_grad=True)
    expected = _hand_written_grad_norms(model, x, ["layer1", "layer4"])
    model.zero_grad(set_to_none=True)
    p = hooklab.explore(model, x, name="test: frozen backbone")
    try:
        for name in ("layer1", "layer4"):
            assert p.set(module=name)["grad norm (clean)"] == pytest.approx(expected[name][-1], rel=1e-3), name
    finally:
        p.remove()


def test_nothing_that_requires_grad_says_so():
    model = _frozen_mlp()
    p = hooklab.explore(model, torch.randn(2, 4), name="test: nothing requires grad")
    try:
        assert p.set(module="0")["grad norm (clean)"] == "— (nothing the output was computed from requires grad)"
    finally:
        p.remove()


def test_leaves_are_what_backward_accumulates_into():
    from hooklab.lab.passes import leaves

    model = _seeded(lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))
    model[0].requires_grad_(False)
    x = torch.randn(2, 4, requires_grad=True)
    unused = torch.ones(1, requires_grad=True)
    value = model(x).sum() + (unused * 0).detach().sum()
    found = leaves(value)
    value.backward()
    accumulated = [t for t in (x, unused, *model.parameters()) if t.grad is not None]
    assert {id(t) for t in found} == {id(t) for t in accumulated} == {id(x), id(model[2].weight), id(model[2].bias)}
    assert leaves(torch.ones(2).sum()) == []


class Checkpointed(nn.Module):
    """A block under gradient checkpointing (as timm's set_grad_checkpointing, in eval mode too):
    backward computes the block's outputs again, which calls its modules a second time."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False))


def test_a_checkpoint_recomputing_in_backward_is_not_a_call_of_the_forward_pass():
    model = _seeded(lambda: Checkpointed().eval())
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(2))
    calls = []
    handle = model.block[0].register_forward_hook(lambda m, a, o: calls.append(1))
    expected = _hand_written_grad_norms(model, x, ["block.0"])
    handle.remove()
    model.zero_grad(set_to_none=True)
    assert len(calls) == 2 and len(expected["block.0"]) == 1  # the forward call, then the recomputation
    p = hooklab.explore(model, x, name="test: checkpoint")
    try:
        clean = p.set(module="block.0")
        assert clean["calls per forward"] == 1
        assert clean["grad norm (clean)"] == pytest.approx(expected["block.0"][0], rel=1e-3)
        assert p.set(scale=True)["calls per forward"] == 1  # the edited pass (no autograd) agrees
    finally:
        p.remove()
