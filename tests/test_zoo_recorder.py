"""Conformance: ``hooklab.Recorder`` on models it was not built around (tests/zoo.py) records, for
every module and every call, what hand-written hooks record: ``register_forward_hook`` for the
input and output, ``output.register_hook`` on each tensor of the output for its gradient."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hooklab

from .zoo import CASES, Case, HandHooks, WithPart, grad_wrt_params, same, snapshot, total, walk

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning",
                                        "ignore::DeprecationWarning")


def _run(case: Case) -> tuple[nn.Module, HandHooks, hooklab.Recorder, hooklab.Recorder]:
    model = case.build()
    args, kwargs = case.example()
    names = [name for name, _ in model.named_modules()]  # "" is the model itself
    every = hooklab.Recorder(model, *names, what=("input", "output", "grad"), keep=None)
    last = hooklab.Recorder(model, *names, what=("output", "grad"))
    hand = HandHooks(model)
    try:
        grad_wrt_params(model, total(model(*args, **kwargs)))
    finally:
        hand.remove()
        every.remove()
        last.remove()
    return model, hand, every, last


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_recorder_records_each_call_as_hand_written_hooks_do(case: Case) -> None:
    model, hand, every, last = _run(case)
    assert hooklab.count_hooks(model) == 0
    checked_grads = twice = 0
    for name in every:
        record, calls = every[name], hand.calls[name]
        assert record.calls == len(calls) == len(record.history), name
        for call, want in zip(record.history, calls):
            assert same(snapshot(call.input), want["args"]) and same(snapshot(call.output), want["output"]), name
            assert call.reached == want["reached"] and list(call.grads) == want["hooked"], name
            for path, grad in call.grads.items():
                expected = want["grads"].get(path)
                assert (grad is None and expected is None) or torch.equal(grad, expected), (name, path)
                checked_grads += grad is not None
        if not calls:
            with pytest.raises(LookupError, match="has not run"):
                last[name].output
            continue
        # keep=1: the latest call's output, and that same call's gradient
        final = calls[-1]
        assert same(snapshot(last[name].output), final["output"]), name
        twice += len(calls) > 1
        if final["reached"]:
            grad = last[name].grad
            got = grad if isinstance(grad, dict) else {"output": grad}  # one tensor: the gradient itself
            assert list(got) == final["hooked"], name
            for path in final["hooked"]:
                expected = final["grads"].get(path)  # None: backward reached the call, not this tensor
                assert (got[path] is None and expected is None) or torch.equal(got[path], expected), (name, path)
        elif not final["hooked"]:
            with pytest.raises(LookupError, match="holds no tensor that requires grad"):
                last[name].grad
    assert checked_grads > 0
    if case.name in ("resnet18", "shared-layer", "swin-train"):
        assert twice > 0  # the case of issue: a module called several times per forward pass


def test_the_gradient_belongs_to_the_same_call_as_the_output() -> None:
    """torchvision's BasicBlock calls its relu twice; backward reaches the second call first."""
    from .zoo import BY_NAME
    model, hand, _, last = _run(BY_NAME["resnet18"])
    calls = hand.calls["layer1.0.relu"]
    assert len(calls) == 2
    assert torch.equal(last["layer1.0.relu"].output, calls[1]["output"]["output"])
    assert torch.equal(last["layer1.0.relu"].grad, calls[1]["grads"]["output"])
    assert not torch.equal(last["layer1.0.relu"].grad, calls[0]["grads"]["output"])


def test_tuple_and_dict_outputs_get_their_gradients_by_path() -> None:
    from .zoo import BY_NAME
    _, hand, _, last = _run(BY_NAME["lstm-state-train"])  # nn.LSTM alone: (output, (h, c))
    grad = last[""].grad
    assert list(grad) == ["output[0]", "output[1][0]", "output[1][1]"]
    assert all(torch.equal(grad[p], hand.calls[""][0]["grads"][p]) for p in grad)
    model = BY_NAME["multihead-attention"].build()
    args, kwargs = BY_NAME["multihead-attention"].example()
    wrapper = nn.Sequential()
    wrapper.add_module("attn", model)
    with hooklab.Recorder(wrapper, "attn", what=("grad",)) as rec:
        out, weights = wrapper.attn(*args, **kwargs)
        (out.sum() + weights.sum()).backward()
    assert list(rec["attn"].grad) == ["output[0]", "output[1]"]
    assert all(g.shape == t.shape for g, (_, t) in zip(rec["attn"].grad.values(), walk((out, weights))))


def test_a_compiled_model_is_refused_with_what_to_do() -> None:
    from .zoo import Compilable
    model = Compilable()
    compiled = torch.compile(model, backend="eager")
    compiled(torch.randn(2, 4))
    with pytest.raises(TypeError, match=r"model\._orig_mod"):
        hooklab.Recorder(compiled, "_orig_mod.a")
    with pytest.raises(TypeError, match=r"model\._orig_mod"):
        hooklab.select(compiled, "*")
    # the eager module, run eagerly, records as usual
    with hooklab.Recorder(compiled._orig_mod, "a", what=("output", "grad")) as rec:
        compiled._orig_mod(torch.randn(2, 4)).sum().backward()
    assert rec["a"].grad.shape == (2, 8)
    # the module it silently misses when run compiled: "has not run", with the reason named
    with hooklab.Recorder(model, "b") as rec:
        compiled(torch.randn(2, 4))
        with pytest.raises(LookupError, match=r"has not run.*torch\.compile"):
            rec["b"].output


#: Per kind of part (tests/zoo.py's WithPart): the module hooked first in it, the refusal, and what to do.
_REFUSED = {"torch.compile": ("body.1._orig_mod.0", r"'body\.1\._orig_mod\.0', inside 'body\.1', a compiled submodule "
                              r"\(torch\.compile", r"Put its eager module, model\.get_submodule\('body\.1'\)\._orig_mod, "
                              r"in its place"),
            "jit.trace": ("body.1.0", r"'body\.1\.0', inside 'body\.1', a TorchScript submodule: PyTorch runs its "
                          r"compiled graph", r"Put the Python module in its place"),
            "jit.script": ("body.1.0", r"'body\.1\.0', inside 'body\.1', a TorchScript submodule: PyTorch runs its "
                           r"compiled graph", r"Put the Python module in its place"),
            "part.compile()": ("body.1.0", r"'body\.1\.0', inside 'body\.1', compiled in place by "
                               r"model\.get_submodule\('body\.1'\)\.compile\(\)",
                               r"build a new Sequential without \.compile\(\) and load this one's state_dict into it"),
            "model.compile()": ("body.0", r"'body\.0', inside the model, compiled in place by model\.compile\(\)",
                                r"build a new WithPart without \.compile\(\) and load this one's state_dict into it")}


@pytest.mark.parametrize("kind", list(_REFUSED))
def test_a_module_in_a_compiled_or_torchscript_part_is_refused_naming_the_part(kind: str) -> None:
    model, x = WithPart(kind), torch.randn(2, 4)
    inner, named, then = _REFUSED[kind]
    ran: list[int] = []  # the reason, by a hand-written hook: one added now on that module never runs
    if kind != "jit.script":  # a scripted module refuses new hooks outright (tested below)
        with model.get_submodule(inner).register_forward_hook(lambda *_: ran.append(1)):
            model(x)
        assert ran == []
    where = "the model" if kind == "model.compile()" else "'body\\.1'"
    with pytest.raises(TypeError, match=f"^cannot hook {named}.*{then}\\.$"):
        hooklab.Recorder(model)  # every leaf
    with pytest.raises(TypeError, match=f"^cannot hook .*{where}"):  # every module
        hooklab.trace(model, x)
    with pytest.raises(TypeError, match=f"^cannot hook .*{where}"):  # a user's own hooks on what select picks
        hooklab.Hooks().forward(hooklab.select(model, "body.*"), lambda *_: None)
    assert hooklab.count_hooks(model) == 0
    if kind == "model.compile()":
        return
    with hooklab.Recorder(model, "body.0", "head") as rec:  # outside the part: recorded as usual
        model(x)
    assert rec["body.0"].calls == rec["head"].calls == 1
    if kind != "jit.script":  # a new hook on the part itself runs; a scripted one refuses it (tested below)
        with hooklab.Recorder(model, "body.1") as rec:
            model(x)
        assert rec["body.1"].calls == 1


def test_a_model_without_compiled_or_torchscript_parts_is_recorded_in_every_module() -> None:
    model, x = WithPart("eager"), torch.randn(2, 4)
    with hooklab.Recorder(model, "*") as rec:
        model(x)
    names = ["body", "body.0", "body.1", "body.1.0", "body.1.1", "head"]  # "*": every module but the model
    assert {n: rec[n].calls for n in rec} == dict.fromkeys(names, 1)
    assert len(hooklab.trace(model, x)) == 2 * 7  # forward_pre and forward on each of the 7 modules, the model too


def test_a_torchscript_module_is_refused_with_what_to_do() -> None:
    from .zoo import Compilable
    with pytest.warns(FutureWarning):
        scripted = torch.jit.script(Compilable())
    for make in (lambda: hooklab.Recorder(scripted, "a"), lambda: hooklab.trace(scripted, torch.randn(1, 4)),
                 lambda: hooklab.explore(scripted, torch.randn(1, 4))):
        with pytest.raises(TypeError, match="TorchScript module.*a hook added after scripting or tracing does not "
                           "run inside it.*refuses new ones on any of them.*accept a new hook and never run it.*"
                           "Python module"):
            make()
    with pytest.raises(TypeError, match="TorchScript module .* takes no new hooks. Register the hook on the Python module"):
        hooklab.Hooks().forward(scripted, lambda m, a, o: None)  # PyTorch refuses; the message says what to do
    with pytest.warns(FutureWarning):
        traced = torch.jit.trace(Compilable(), torch.randn(1, 4))
    with hooklab.Hooks() as hooks:  # a traced module runs a forward hook on itself (not on the modules inside)
        hooks.forward(traced, lambda m, a, out: out * 0)
        assert traced(torch.randn(1, 4)).abs().sum() == 0
    # what the message says of the modules inside: a scripted one refuses a new hook, a traced one takes it and
    # never runs it
    with pytest.raises(RuntimeError, match="not supported on ScriptModules"):
        scripted.a.register_forward_hook(lambda m, a, out: None)
    with hooklab.Hooks() as hooks:
        hooks.forward(traced.a, lambda m, a, out: out * 0)
        assert traced(torch.randn(1, 4)).abs().sum() > 0
