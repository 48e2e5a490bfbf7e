"""hooklab.select / module, Recorder, trace, registered_hooks."""

from __future__ import annotations

import contextlib
import gc
import weakref

import pytest
import torch
from torch import nn

import hooklab


def net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Sequential(nn.Linear(4, 8), nn.ReLU()),
        nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True)),
        nn.Linear(8, 2),
    )


# ---------------------------------------------------------------- select
def test_select_by_name_glob_type_predicate_and_leaves():
    model = net()
    assert list(hooklab.select(model, "1.0")) == ["1.0"]
    assert list(hooklab.select(model, "*.0")) == ["0.0", "1.0"]
    assert list(hooklab.select(model, type=nn.ReLU)) == ["0.1", "1.1"]
    assert list(hooklab.select(model, where=lambda n, m: n.startswith("1"))) == ["1", "1.0", "1.1"]
    assert list(hooklab.select(model, leaves=True)) == ["0.0", "0.1", "1.0", "1.1", "2"]
    assert list(hooklab.select(model, include_root=True))[0] == ""
    assert hooklab.module(model, "2") is model[2]


def test_unknown_name_lists_closest_real_names():
    model = net()
    with pytest.raises(KeyError) as err:
        hooklab.select(model, "1.2")
    assert "Closest names" in str(err.value) and "'1.0'" in str(err.value)
    with pytest.raises(KeyError, match="'1.0'"):
        hooklab.module(model, "1.O")
    with pytest.raises(KeyError, match="matches 'layer\\*'"):
        hooklab.select(model, "layer*")


def test_select_rejects_non_modules_and_non_strings():
    with pytest.raises(TypeError, match="nn.Module"):
        hooklab.select(torch.ones(2))
    with pytest.raises(TypeError, match="type="):
        hooklab.select(net(), nn.Linear)


def test_module_names_maps_each_module_once():
    model = net()
    names = hooklab.module_names(model)
    assert names[model[1][0]] == "1.0" and names[model] == ""


# ---------------------------------------------------------------- Recorder
def test_recorder_outputs_grads_inputs():
    model = net()
    x = torch.randn(3, 4)
    with hooklab.Recorder(model, "0.0", "2", what=("input", "output", "grad")) as rec:
        out = model(x)
        out.sum().backward()
    assert torch.equal(rec["0.0"].input[0], x)
    assert torch.equal(rec["2"].output, out.detach())
    assert rec["2"].grad.tolist() == [[1.0, 1.0]] * 3
    assert rec["0.0"].calls == 1 and len(rec) == 2
    assert hooklab.count_hooks(model) == 0
    assert set(rec.outputs()) == {"0.0", "2"} and set(rec.grads()) == {"0.0", "2"}


def test_recorder_clone_protects_against_inplace_relu():
    model = net()
    with hooklab.Recorder(model, "1.0") as rec:
        model(torch.randn(16, 4))
    assert (rec["1.0"].output < 0).any(), "the stored pre-ReLU output must keep its negative values"


def test_recorder_grad_works_with_inplace_relu_after_module():
    model = net()
    with hooklab.Recorder(model, "1.0", what=("grad",)) as rec:
        model(torch.randn(2, 4)).sum().backward()
    assert rec["1.0"].grad.shape == (2, 8)


def test_recorder_keep_last_n_and_keep_all_and_clear():
    model = net()
    rec = hooklab.Recorder(model, "2", keep=3, name="keep-test")
    for i in range(5):
        model(torch.full((1, 4), float(i)))
    assert len(rec["2"].outputs) == 3 and rec["2"].calls == 5
    rec.clear()
    assert rec["2"].calls == 0
    with pytest.raises(LookupError, match="run the model first"):
        rec["2"].output
    model(torch.zeros(1, 4))
    assert rec["2"].calls == 1
    rec.remove()
    all_rec = hooklab.Recorder(model, "2", keep=None, name="keep-all")
    for _ in range(7):
        model(torch.zeros(1, 4))
    assert len(all_rec["2"].outputs) == 7
    all_rec.remove()


def test_recorder_marks_a_call_a_checkpoint_made_in_backward_and_says_where_the_gradient_went():
    """Under gradient checkpointing backward calls the module again; the Recorder keeps that call as
    hand-written hooks see it, marked, and its latest-call gradient says why there is none."""
    torch.manual_seed(0)
    block, head = nn.Sequential(nn.Linear(4, 8), nn.Tanh()), nn.Linear(8, 2)
    x = torch.randn(2, 4)
    seen = []

    def hand_written(module, args, output):
        seen.append({"grad": None})
        call = seen[-1]
        output.register_hook(lambda grad: call.update(grad=grad.clone()))

    handle = block[0].register_forward_hook(hand_written)
    head(torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)).sum().backward()
    handle.remove()
    with hooklab.Recorder(block, "0", what=("output", "grad"), keep=None) as rec:
        head(torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)).sum().backward()
    history = rec["0"].history
    assert [c.in_backward for c in history] == [False, True] and len(seen) == 2
    assert torch.equal(history[0].grad, seen[0]["grad"]) and seen[1]["grad"] is None and history[1].grad is None
    with pytest.raises(LookupError, match="ran in a backward pass .gradient checkpointing.*keep=None"):
        rec["0"].grad


class OnAnotherDevice(torch.Tensor):
    """Stands in for a tensor on a GPU, which this machine lacks: moved to the CPU (``.cpu()`` or
    ``.to("cpu")``), it becomes a plain tensor."""

    def cpu(self, *args, **kwargs):
        return torch.Tensor.cpu(self, *args, **kwargs).as_subclass(torch.Tensor)

    def to(self, *args, **kwargs):
        out = torch.Tensor.to(self, *args, **kwargs)
        device = kwargs.get("device", next((a for a in args if isinstance(a, (str, torch.device))), None))
        return out.as_subclass(torch.Tensor) if device is not None and torch.device(device).type == "cpu" else out


def test_recorder_to_cpu_and_default_leaves():
    model = net()
    model[2].register_forward_hook(lambda m, args, out: out.as_subclass(OnAnotherDevice))  # runs first
    with hooklab.Recorder(model, to_cpu=True) as rec, hooklab.Recorder(model, "2") as kept:
        model(torch.zeros(1, 4))
    assert list(rec) == ["0.0", "0.1", "1.0", "1.1", "2"]
    assert all(type(t) is torch.Tensor and t.device.type == "cpu" for t in rec.outputs().values())
    assert type(kept["2"].output) is OnAnotherDevice  # without to_cpu, left where it was


def test_a_named_recorder_rebuilt_replaces_the_old_one_and_unnamed_ones_are_independent():
    model = net()
    for _ in range(3):  # re-running a cell that builds a named recorder
        rec = hooklab.Recorder(model, "2", name="rerun")
    assert hooklab.count_hooks(model) == 1
    rec.remove()
    first = hooklab.Recorder(model, "2")
    second = hooklab.Recorder(model, "2")  # the same selection, no name: a second, independent recorder
    model(torch.ones(1, 4))
    assert hooklab.count_hooks(model) == 2 and first["2"].calls == 1 and second["2"].calls == 1
    first.remove()
    model(torch.ones(1, 4))
    assert first["2"].calls == 1 and second["2"].calls == 2
    second.remove()


def test_recorder_bad_arguments():
    model = net()
    with pytest.raises(ValueError, match="what="):
        hooklab.Recorder(model, what=("outputs",))
    with pytest.raises(ValueError, match="keep"):
        hooklab.Recorder(model, keep=0)
    with pytest.raises(KeyError, match="Closest"):
        hooklab.Recorder(model, "3")
    with pytest.raises(ValueError, match="no module matched"):
        hooklab.Recorder(model, type=nn.Conv2d)
    with hooklab.Recorder(model, "2") as rec:
        with pytest.raises(KeyError, match="does not record"):
            rec["1"]
        model(torch.zeros(1, 4))
        with pytest.raises(LookupError, match=r"does not record 'grad' for '2': build it with what=\('output', 'grad'\)"):
            rec["2"].grad


def test_recording_1000_passes_keeps_no_graph_alive():
    model = net()
    with hooklab.Recorder(model, what=("input", "output", "grad"), keep=None) as rec:
        for _ in range(1000):
            model(torch.randn(2, 4, requires_grad=True)).sum().backward()
    stored = [t for r in rec.records.values() for store in (r.inputs, r.outputs, r.grads)
              for item in store for t in (item if isinstance(item, tuple) else (item,))]
    assert len(stored) == 5 * 3 * 1000
    assert all(t.grad_fn is None and not t.requires_grad for t in stored)


def test_detach_walks_containers():
    x = torch.ones(2, requires_grad=True) * 2
    out = hooklab.detach({"a": (x, [x]), "b": 3})
    assert out["a"][0].grad_fn is None and out["a"][1][0].grad_fn is None and out["b"] == 3


def test_recorder_does_not_leak_memory_in_the_model():
    model = net()
    rec = hooklab.Recorder(model, "2", name="gc-test")
    model(torch.zeros(1, 4))
    rec.remove()
    assert hooklab.count_hooks(model) == 0
    recorder, recorded = weakref.ref(rec), weakref.ref(model)
    del rec, model
    gc.collect()
    assert recorder() is None, "the removed recorder is still alive: something keeps a reference to it"
    assert recorded() is None, "the model of a removed recorder is still alive"


def _encoder_on_padded_batch() -> tuple[nn.TransformerEncoder, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2).eval()
    return enc, torch.randn(2, 5, 16), torch.tensor([[False] * 5, [False] * 3 + [True] * 2])


def _frozen(enc: nn.Module) -> contextlib.AbstractContextManager:
    enc.requires_grad_(False)
    return contextlib.nullcontext()


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("how", [lambda enc: torch.no_grad(), lambda enc: torch.inference_mode(), _frozen],
                         ids=["no_grad", "inference_mode", "frozen"])
def test_recorder_records_the_nested_tensors_of_the_encoder_fast_path_as_hand_written_hooks_see_them(how):
    """In eval mode without autograd, with a padding mask, nn.TransformerEncoder hands nested tensors
    (one component per sequence, padding left out) between its layers."""
    enc, x, pad = _encoder_on_padded_batch()
    names = ("layers.0.linear1", "layers.1")
    seen: dict[str, list] = {name: [] for name in names}
    handles = [hooklab.module(enc, n).register_forward_hook(lambda m, a, o, n=n: seen[n].append((a, o))) for n in names]
    try:
        with how(enc), hooklab.Recorder(enc, *names, what=("input", "output"), keep=None) as rec:
            enc(x, src_key_padding_mask=pad)
            assert "2 calls, recording" in repr(rec)
    finally:
        for handle in handles:
            handle.remove()
    assert hooklab.count_hooks(enc) == 0
    for name in names:
        (args, output), = seen[name]
        record = rec[name]
        assert output.is_nested and record.calls == len(record.history) == 1
        for got, want in ((record.output, output), (rec.outputs()[name], output), (record.input[0], args[0])):
            assert got.is_nested and got.data_ptr() != want.data_ptr()  # a copy
            assert len(got.unbind()) == 2 and all(torch.equal(g, w) for g, w in zip(got.unbind(), want.unbind()))
    assert rec["layers.0.linear1"].history[0].structure == "NestedTensor[2, (5, 3), 32]"
    assert hooklab.shape_of(rec["layers.1"].input) == "tuple(NestedTensor[2, (5, 3), 16])"


class Query(nn.Module):
    """Returns its parameter as it is (a learned query): the output is a leaf tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Parameter(torch.arange(12.0).reshape(3, 4))

    def forward(self) -> torch.Tensor:
        return self.q


class Queried(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query = Query()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.query().T  # with x of the wrong width, raises after the query ran


def test_recorder_removes_the_gradient_hooks_it_put_on_a_parameter_returned_as_it_is():
    model = Queried()
    q = model.query.q
    with hooklab.Recorder(model, "query", what=("output", "grad")):
        for _ in range(3):  # forward passes without backward: no gradient hook ran, none removed itself
            model(torch.ones(2, 4))
        assert len(q._backward_hooks) == 3 and hooklab.count_hooks(model) == 1 + 3  # and the forward hook
    assert hooklab.count_hooks(model) == 0 and not q._backward_hooks


def test_recorder_gives_each_call_the_gradient_of_the_leaf_it_returned():
    x, y = torch.randn(2, 3, requires_grad=True), torch.randn(2, 3, requires_grad=True)
    same = nn.Identity()  # called twice in a pass, each time returning a leaf that requires grad
    with hooklab.Recorder(same, "", what=("grad",), keep=None) as rec:
        (same(x) * 2 + same(y) * 3).sum().backward()
    assert [c.grad.tolist() for c in rec[""].history] == [[[2.0] * 3] * 2, [[3.0] * 3] * 2]
    assert not x._backward_hooks and not y._backward_hooks  # each ran and removed itself


def test_recorder_removes_the_gradient_hooks_on_a_returned_parameter_when_the_forward_raises():
    model = Queried()
    with pytest.raises(RuntimeError), hooklab.Recorder(model, "query", what=("output", "grad")):
        model(torch.ones(2, 4))
        model(torch.ones(2, 5))
    assert hooklab.count_hooks(model) == 0 and not model.query.q._backward_hooks


def test_a_removed_recorder_is_not_kept_alive_by_a_parameter_it_recorded():
    model = Queried()
    rec = hooklab.Recorder(model, "query", what=("output", "grad"))
    model(torch.ones(2, 4))
    rec.remove()
    recorder = weakref.ref(rec)
    del rec
    gc.collect()
    assert recorder() is None, "the removed recorder is still alive: a hook on the parameter holds it"


def test_recorder_gradient_of_a_returned_parameter_and_its_hook_removes_itself_once_it_ran():
    model = Queried()
    q = model.query.q
    by_hand: list[torch.Tensor] = []
    q.register_hook(lambda grad: by_hand.append(grad.clone()))
    with hooklab.Recorder(model, "query", what=("output", "grad")) as rec:
        (model(torch.arange(8.0).reshape(2, 4)) ** 2).sum().backward()
        assert torch.equal(rec["query"].grad, by_hand[0])
        assert len(q._backward_hooks) == 1  # the recorder's hook removed itself: only the hand-written one
        (q * 3).sum().backward()  # a later backward pass through the parameter, not through a recorded call
        assert len(by_hand) == 2 and torch.equal(rec["query"].grad, by_hand[0])


# ---------------------------------------------------------------- trace
def test_trace_forward_order_containers_after_children():
    model = net()
    t = hooklab.trace(model, torch.zeros(1, 4))
    fwd = [e.module for e in t.filter(kind="forward")]
    assert fwd == ["0.0", "0.1", "0", "1.0", "1.1", "1", "2", "(model)"]
    pre = [e.module for e in t.filter(kind="forward_pre")]
    assert pre[:3] == ["(model)", "0", "0.0"]
    assert t.filter(kind="forward", module="2")[0].shapes == "Tensor[1, 2]"
    assert hooklab.count_hooks(model) == 0


def test_trace_with_backward_on_model_without_inplace():
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    t = hooklab.trace(model, torch.ones(1, 2, requires_grad=True), backward=True)
    kinds = [(e.kind, e.module) for e in t.filter(phase="backward")]
    assert kinds == [("backward_pre", "(model)"), ("backward_pre", "2"), ("backward", "2"), ("backward_pre", "1"),
                     ("backward", "1"), ("backward_pre", "0"), ("backward", "0"), ("backward", "(model)")]
    # PyTorch's rule: when no input of a module requires grad, its full backward hook fires as soon
    # as the gradient of its output is known (with grad_input None), not after its inputs' gradients
    early = hooklab.trace(model, torch.ones(1, 2), backward=True).filter(phase="backward")
    assert [(e.kind, e.module) for e in early][:2] == [("backward_pre", "(model)"), ("backward", "(model)")]
    text = str(t)
    assert text.splitlines()[0].split() == ["step", "phase", "hook", "module", "type", "shapes"]
    assert "<table" in t._repr_html_()
    assert hooklab.count_hooks(model) == 0


def test_trace_removes_hooks_when_the_pass_raises():
    model = nn.Sequential(nn.Linear(2, 3))
    with pytest.raises(RuntimeError):
        hooklab.trace(model, torch.ones(1, 5))
    assert hooklab.count_hooks(model) == 0


def test_shape_of():
    assert hooklab.shape_of((torch.ones(1, 2), None)) == "tuple(Tensor[1, 2], None)"
    assert hooklab.shape_of((torch.ones(3),)) == "tuple(Tensor[3])"
    assert hooklab.shape_of({"x": torch.ones(2)}) == "dict(x: Tensor[2])"
    assert hooklab.shape_of(3) == "int"


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_shape_of_a_nested_tensor_gives_its_components_and_each_ragged_size():
    ragged = torch.nested.nested_tensor([torch.ones(5, 16), torch.ones(3, 16)])
    assert hooklab.shape_of((ragged, None)) == "tuple(NestedTensor[2, (5, 3), 16], None)"
    assert hooklab.shape_of(torch.nested.nested_tensor([torch.ones(2, 3, dtype=torch.int64)] * 2)) == \
        "NestedTensor[2, 2, 3] int64"
    many = torch.nested.nested_tensor([torch.ones(n % 4 + 1, 2) for n in range(9)], layout=torch.jagged)
    assert hooklab.shape_of(many) == "NestedTensor[9, ?, 2]"


# ---------------------------------------------------------------- registered_hooks
def test_registered_hooks_per_module_and_global():
    model = net()
    h1 = model[2].register_forward_hook(lambda m, a, o: None)
    h2 = model.register_full_backward_hook(lambda m, gi, go: None)
    h3 = torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: None)
    try:
        report = hooklab.registered_hooks(model)
        assert report.count() == 3
        assert report.count(module="(model)", kind="backward") == 1
        assert report.count(module="(global)") == 1
        assert report.count(module="2") == 1 and report.count(module="(model)") == 1 and report.count(module="(global)") == 1
        assert "forward" in str(report)
        assert hooklab.count_hooks(model, include_global=False) == 2
    finally:
        h1.remove(), h2.remove(), h3.remove()
    assert hooklab.count_hooks(model) == 0
    assert str(hooklab.registered_hooks(model)) == "no hooks registered"


def test_registered_hooks_marks_deprecated_backward_hooks():
    layer = nn.Linear(2, 2)
    handle = layer.register_backward_hook(lambda m, gi, go: None)
    assert hooklab.registered_hooks(layer).rows == [["(model)", "backward (deprecated)", "<lambda>"]]
    handle.remove()
    with pytest.raises(TypeError):
        hooklab.registered_hooks("model")


@pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated:DeprecationWarning")
def test_a_parametrized_or_dynamically_quantized_layer_is_a_leaf_and_its_weight_parts_are_not():
    from torch.nn.utils import parametrizations, parametrize

    class Symmetric(nn.Module):
        def forward(self, w: torch.Tensor) -> torch.Tensor:
            return w.triu() + w.triu(1).T

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Conv1d(1, 2, 3))
    parametrize.register_parametrization(model[0], "weight", Symmetric())
    parametrizations.weight_norm(model[2])
    assert "0.parametrizations.weight.0" in dict(model.named_modules())  # a module, but part of a weight
    own = hooklab.count_hooks(model)  # weight_norm's own state-dict hook
    assert list(hooklab.select(model, leaves=True)) == list(hooklab.select(model, "?")) == ["0", "1", "2"]
    seen = {}  # the reference: hand-written forward hooks on the layers
    handles = [model[i].register_forward_hook(lambda m, a, out, i=i: seen.__setitem__(str(i), out.detach().clone()))
               for i in range(3)]
    with hooklab.Recorder(model) as rec:  # no pattern: every leaf
        model(torch.randn(2, 1, 4))
    for h in handles:
        h.remove()
    assert list(rec) == ["0", "1", "2"] and all(torch.equal(rec[n].output, seen[n]) for n in seen)
    quantized = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)),
                                                       {nn.Linear}, dtype=torch.qint8)
    assert "0._packed_params" in dict(quantized.named_modules())
    with hooklab.Recorder(quantized) as rec:
        quantized(torch.randn(2, 4))
    assert {n: rec[n].calls for n in rec} == {"0": 1, "1": 1, "2": 1}
    assert hooklab.count_hooks(model) - own == hooklab.count_hooks(quantized) == 0
