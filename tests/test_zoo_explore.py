"""Conformance: ``hooklab.explore`` on models it was not built around (tests/zoo.py).

For every model: every module's view renders and agrees with hand-written hooks (calls per forward,
shape, mean, gradient norm); an intervention either changes the module's output as it says and moves
the final output by what a hand-written forward hook doing the same edit moves it, or says it could
not; 0 hooks after every pick, reset and close; parameters, buffers, modes, flags and threads as they
were; after ``close()`` the model can be garbage-collected.

The default run intervenes on a sample of each model's modules (and picks a quarter of a big model's
modules); ``--zoo-full`` (``.ci/run``) picks every module of every model, zeroes and scales each one.
"""

from __future__ import annotations

import gc
import math
import weakref
from typing import Any, Callable

import pytest
import torch
from torch import nn

import hooklab

from .zoo import CASES, BY_NAME, PART_KINDS, Case, EvalPasses, WithPart, grad_wrt_params, total, walk

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning",
                                        "ignore::DeprecationWarning")


# ------------------------------------------------------------------ references, by hand
def _clean_reference(model: nn.Module, args: tuple, kwargs: dict) -> dict[str, dict[str, Any]]:
    """Per module: calls, the last call's first floating-point tensor, and the gradient norm of
    the last call's output, from hand-written hooks in one pass with autograd."""
    seen: dict[str, dict[str, Any]] = {name: {"calls": 0, "main": None, "squares": {}} for name, _ in
                                       model.named_modules()}
    handles = []

    def hook_for(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, a: tuple, output: Any) -> None:
            entry = seen[name]
            call = entry["calls"]
            entry["calls"] += 1
            floats = [t for _, t in walk(output) if t.is_floating_point()]
            entry["main"] = floats[0].detach().clone() if floats else None
            for _, t in walk(output):
                if t.requires_grad:
                    def keep(grad: torch.Tensor | None, call: int = call) -> None:
                        if grad is not None:
                            entry["squares"][call] = entry["squares"].get(call, 0.0) + float(grad.double().pow(2).sum())
                    t.register_hook(keep)
        return hook

    for name, module in model.named_modules():
        handles.append(module.register_forward_hook(hook_for(name)))
    try:
        with EvalPasses(model), torch.enable_grad():
            grad_wrt_params(model, total(model(*args, **kwargs)))
    finally:
        for h in handles:
            h.remove()
    return seen


def _edited(kind: str, t: torch.Tensor, seed: list[int]) -> torch.Tensor:
    """What an intervention does to one floating-point tensor (as explore documents it)."""
    std = t.float().std() if t.numel() > 1 else torch.zeros(())
    if kind == "zero":
        return torch.zeros_like(t)
    if kind == "scale":
        return t * 2.0
    if kind == "clamp":
        bound = 1.0 * std.item()
        return t.clamp(-bound, bound)
    seed[0] += 1
    noise = torch.randn(t.shape, generator=torch.Generator().manual_seed(seed[0])).to(t.dtype)
    return t + 0.5 * std.to(t.dtype) * noise


def _replace(value: Any, kind: str, seed: list[int]) -> Any:
    if isinstance(value, torch.Tensor):
        return _edited(kind, value, seed) if value.is_floating_point() else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_replace(v, kind, seed) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_replace(v, kind, seed) for v in value)
    if isinstance(value, dict) and not hasattr(value, "__dataclass_fields__"):
        return type(value)((k, _replace(v, kind, seed)) for k, v in value.items())
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses
        return dataclasses.replace(value, **{f.name: _replace(getattr(value, f.name), kind, seed)
                                             for f in dataclasses.fields(value) if f.init})
    return value


def _output_with(model: nn.Module, args: tuple, kwargs: dict, module: nn.Module | None, kind: str) -> Any:
    """The model's output (no autograd, eval mode), with a hand-written forward hook doing ``kind``
    to ``module``'s output on every call (``module=None``: no hook)."""
    def hook(m: nn.Module, a: tuple, output: Any) -> Any:
        return _replace(output, kind, [0])

    handle = module.register_forward_hook(hook) if module is not None else None
    try:
        with EvalPasses(model), torch.no_grad():
            return walk(model(*args, **kwargs))
    finally:
        if handle is not None:
            handle.remove()


def _change(clean: list[tuple[str, torch.Tensor]], edited: list[tuple[str, torch.Tensor]]) -> str | float:
    """The norm of the difference over floating-point tensors, "shapes" when they differ, "empty"."""
    a = {p: t for p, t in clean if t.is_floating_point()}
    b = {p: t for p, t in edited if t.is_floating_point()}
    if a.keys() != b.keys() or any(a[p].shape != b[p].shape for p in a):
        return "shapes"
    if sum(t.numel() for t in a.values()) == 0:
        return "empty"
    return math.sqrt(sum(float((b[p].double() - a[p].double()).pow(2).sum()) for p in a))


def _close(got: float, want: float, digits: int) -> bool:
    """``got`` is ``want`` rounded to ``digits`` significant digits (one unit of the last digit)."""
    return abs(got - want) <= 10 ** (math.floor(math.log10(abs(want))) - digits + 1) if want else got == 0


# ------------------------------------------------------------------ state that must come back
def _state(model: nn.Module) -> dict[str, Any]:
    return {
        "tensors": {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()},
        "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
        "grad": {n: p.grad is None for n, p in model.named_parameters()},
        "modes": {n: m.training for n, m in model.named_modules()},
        "flags": (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.backends.mha.get_fastpath_enabled(),
                  torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()),
    }


def _same_state(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before["tensors"].keys() == after["tensors"].keys()
    assert all(torch.equal(before["tensors"][k], after["tensors"][k]) for k in before["tensors"])
    for key in ("requires_grad", "grad", "modes", "flags"):
        assert before[key] == after[key], key


def _sample(case: Case, names: list[str], clean: dict[str, dict[str, Any]]) -> list[str]:
    """The modules to intervene on in the default run: the model, the first and last to run, one
    that runs several times, and a few evenly spaced."""
    ran = [n for n in names if clean[n]["calls"]]
    chosen = {"", ran[0], ran[-1], *ran[:: max(1, len(ran) // (3 if case.big else 6))]}
    repeated = [n for n in ran if clean[n]["calls"] > 1]
    if repeated:
        chosen.add(repeated[0])
    return [n for n in names if n in chosen]


@pytest.fixture(params=CASES, ids=[c.name for c in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param


def _check_model(case: Case, full: bool) -> None:
    model = case.build()
    args, kwargs = case.example()
    before = _state(model)
    names = [n for n, _ in model.named_modules()]
    clean = _clean_reference(model, args, kwargs)
    _same_state(before, _state(model))
    panel = hooklab.explore(model, (args, kwargs), name=f"zoo: {case.name}")
    try:
        state = panel.state()
        modes_differ = any(m.training for m in model.modules())
        assert ("runs" in state) == modes_differ and (not modes_differ or "eval mode" in state["runs"])
        picks = names if full or not case.big else names[::4] + _sample(case, names, clean)
        for name in picks:  # every module's view (a quarter of a big model's), against hand-written hooks
            state = panel.set(module=name)
            assert panel.error is None and hooklab.count_hooks(model) == 0, name
            ref = clean[name]
            assert state["calls per forward"] == ref["calls"], name
            if ref["main"] is None:
                assert state["statistics of"] == "—", name
                continue
            assert state["shape"] == list(ref["main"].shape), name
            if ref["main"].numel():
                mean = ref["main"].double().mean().item()
                spread = max(abs(mean), ref["main"].double().std().item() if ref["main"].numel() > 1 else 0.0)
                assert abs(float(state["mean"]) - mean) <= 1e-3 * spread + 1e-12, name
            square = ref["squares"].get(ref["calls"] - 1)
            if square is None:
                assert str(state["grad norm (clean)"]).startswith("—"), name
            else:
                assert _close(float(state["grad norm (clean)"]), math.sqrt(square), 4), name
        clean_out = _output_with(model, args, kwargs, None, "zero")
        sample = _sample(case, names, clean)
        targets = [n for n in names if clean[n]["calls"]] if full else sample
        kinds = ("zero", "scale", "noise", "clamp")
        for name in targets:  # the full sweep: zero and scale everywhere, noise and clamp on the sample
            for kind in kinds if name in sample else kinds[:2]:
                panel.set(**{k: False for k in kinds})  # the reference runs without the panel's hooks
                want = _change(clean_out, _output_with(model, args, kwargs, model.get_submodule(name), kind))
                state = panel.set(module=name, **{k: k == kind for k in kinds})
                assert panel.error is None and hooklab.count_hooks(model) == 1, (name, kind)
                if "could not intervene" in state["interventions"]:
                    assert clean[name]["main"] is None, (name, kind)  # no floating-point tensor to edit
                    assert str(state["output change"]).startswith("—"), (name, kind)
                    continue
                assert state["interventions"].split(" ")[0] == kind
                if kind == "zero" and clean[name]["main"].numel():
                    assert state["zeros"] == 1.0 and state["mean"] == 0.0, name
                if kind == "scale" and clean[name]["main"].numel() and clean[name]["calls"] == 1:
                    mean = clean[name]["main"].double().mean().item() * 2
                    spread = 2 * max(abs(mean / 2), clean[name]["main"].double().std().item()
                                     if clean[name]["main"].numel() > 1 else 0.0)
                    assert abs(float(state["mean"]) - mean) <= 1e-3 * spread + 1e-12, name
                got = state["output change"]
                if want == "shapes":
                    assert str(got).startswith("— (the output's shapes changed"), (name, kind, got)
                elif want == "empty":
                    assert str(got).startswith("— (every tensor of the output is empty"), (name, kind, got)
                else:
                    assert isinstance(got, float) and _close(float(got), want, 3) or (want < 1e-6 and float(got) < 1e-5), \
                        (name, kind, got, want)
        panel.set(**{k: False for k in kinds})
        assert hooklab.count_hooks(model) == 0
        panel.set(module=targets[-1], zero=True)
        panel.reset()
        assert hooklab.count_hooks(model) == 0 and panel.state()["interventions"] == "none"
    finally:
        panel.close()
    assert hooklab.count_hooks(model) == 0
    _same_state(before, _state(model))
    alive = weakref.ref(model)
    del model, panel, args, kwargs, clean
    gc.collect()
    assert alive() is None, "the model is still referenced after panel.close()"


def test_explore_on_each_model_agrees_with_hand_written_hooks(case: Case) -> None:
    _check_model(case, full=False)


@pytest.mark.zoo_full
def test_explore_intervenes_on_every_module_of_each_model(case: Case) -> None:
    _check_model(case, full=True)


# ------------------------------------------------------------------ the bugs this suite was written to catch
def test_a_detector_without_detections_renders_every_view_and_resets() -> None:
    model = BY_NAME["fasterrcnn-empty"].build()
    args, kwargs = BY_NAME["fasterrcnn-empty"].example()
    panel = hooklab.explore(model, (args, kwargs), name="zoo: detector empty")
    try:
        first = panel.state()
        assert panel.error is None and first["output change"] == 0.0
        whole = panel.set(module="")
        assert whole["output"].startswith("list(dict(boxes: Tensor[0, 4]") and not any(k.startswith("top") for k in whole)
        zeroed = panel.set(module="transform", zero=True)  # its output: (ImageList, None)
        assert zeroed["interventions"].startswith("zero (could not intervene: its output, tuple(ImageList, None)")
        assert zeroed["output change"].startswith("— (no intervention could edit the output")
        assert panel.set(module="backbone.body")["output change"].startswith("— (every tensor of the output is empty")
        assert panel.reset()["interventions"] == "none" and hooklab.count_hooks(model) == 0
    finally:
        panel.close()


def test_boxes_are_not_called_top_k_and_a_changed_number_of_detections_is_said() -> None:
    model = BY_NAME["fasterrcnn-detections"].build()
    args, kwargs = BY_NAME["fasterrcnn-detections"].example()
    panel = hooklab.explore(model, (args, kwargs), name="zoo: detector")
    try:
        whole = panel.set(module="")
        assert "boxes: Tensor[5, 4]" in whole["output"] and not any(k.startswith("top") for k in whole)
        state = panel.set(module="roi_heads.box_predictor.cls_score", zero=True)  # equal scores: other boxes kept
        assert isinstance(state["output change"], float) or state["output change"].startswith("— (the output's shapes")
    finally:
        panel.close()


def test_a_compiled_model_is_explored_through_its_eager_module() -> None:
    from .zoo import Compilable
    torch.manual_seed(0)
    model = Compilable().eval()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(0))
    compiled(x)  # run once before exploring: its modules' hooks would not run inside it
    panel = hooklab.explore(compiled, x, name="zoo: compiled")
    try:
        state = panel.set(module="a")
        assert state["runs"].startswith("compiled (torch.compile): explore runs its eager module, model._orig_mod")
        assert [n for _, n in panel.options("module")] == ["", "a", "b"] and state["calls per forward"] == 1
        zeroed = panel.set(zero=True)
        panel.set(zero=False)
        with torch.no_grad():
            clean = model(x)
            handle = model.a.register_forward_hook(lambda m, args, out: torch.zeros_like(out))
            want = (model(x) - clean).norm().item()
            handle.remove()
        assert _close(float(zeroed["output change"]), want, 3)
    finally:
        panel.close()
    assert hooklab.count_hooks(model) == 0


@pytest.mark.parametrize("kind", PART_KINDS[1:])
def test_a_model_with_a_compiled_or_torchscript_part_is_refused_naming_it(kind: str) -> None:
    model = WithPart(kind)
    said = {"torch.compile": r"'body\.1\._orig_mod', inside 'body\.1', a compiled submodule",
            "jit.trace": r"'body\.1\.0', inside 'body\.1', a TorchScript submodule",
            "jit.script": r"'body\.1\.0', inside 'body\.1', a TorchScript submodule",
            "part.compile()": r"'body\.1\.0', inside 'body\.1', compiled in place by model\.get_submodule\('body\.1'\)"
                              r"\.compile\(\)",
            "model.compile()": r"'body', inside the model, compiled in place by model\.compile\(\)"}[kind]
    with pytest.raises(TypeError, match=f"^cannot hook {said}") as refused:  # it hooks every module
        hooklab.explore(model, torch.randn(2, 4))
    assert "in its place" in str(refused.value) or "without .compile()" in str(refused.value)
    assert hooklab.count_hooks(model) == 0


def test_a_model_without_compiled_or_torchscript_parts_is_explored() -> None:
    model, x = WithPart("eager").eval(), torch.randn(2, 4)
    panel = hooklab.explore(model, x, name="zoo: no compiled part")
    try:
        assert panel.set(module="body.1.0")["calls per forward"] == 1
        assert float(panel.set(zero=True)["output change"]) > 0
    finally:
        panel.close()


def test_a_cell_re_run_three_times_then_closed_keeps_no_model_alive() -> None:
    alive = []
    for _ in range(3):  # the same cell, run three times: each build replaces the panel of that name
        model = BY_NAME["shared-layer"].build()
        alive.append(weakref.ref(model))
        panel = hooklab.explore(model, BY_NAME["shared-layer"].example(), name="zoo: re-run")
        panel.set(module="shared", zero=True)
    panel.close()
    del model, panel
    gc.collect()
    assert [ref() is None for ref in alive] == [True, True, True]
