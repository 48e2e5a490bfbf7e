"""Notebook 03's exercises (hooklab.course.nb03_module_hooks) and helpers (hooklab.course.nb03_module_hooks)."""

from __future__ import annotations

import doctest

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hooklab
import hooklab.course._solutions.nb03_module_hooks as solved
import hooklab.course.nb03_module_hooks as ex
from hooklab.course import nb03_module_hooks as nb03

from .checking import failed_checks as failed, hooks_made


# ====================================================================== exercise 1: dropout after ReLUs
EX1 = ex.dropout_after_relus
SIGNATURE = "takes one argument, the module (as model.apply calls it)"
ON_RELUS = "registers one forward hook on each ReLU, nothing elsewhere"
RETURNS = "returns the new output: about 25% dropped, the rest rescaled"
GRADIENT = "lets the gradient flow"
TRAINING = "does nothing after model.eval() (respects module.training)"


def on_relus(hook):
    """An apply-function that registers ``hook`` on every ReLU."""
    def add(module):
        if isinstance(module, nn.ReLU):
            module.register_forward_hook(hook)
    return add


def test_ex1_solution_passes():
    verdict = EX1.check(solved.add_dropout_after_relus)
    assert verdict.passed, str(verdict)
    assert EX1.check(solved.add_dropout_after_relus).passed  # checking twice is the same
    assert EX1.check(on_relus(lambda m, a, out: F.dropout(out, 0.25, training=m.training))).passed


def test_ex1_stray_self_parameter_is_named():
    def add(self, module):
        if isinstance(module, nn.ReLU):
            module.register_forward_hook(lambda m, a, out: F.dropout(out, 0.25, training=m.training))

    msgs = failed(EX1.check(add))
    assert "ONE argument" in msgs[SIGNATURE] and "(self, module)" in msgs[SIGNATURE]


def test_ex1_hooks_on_every_module_are_named():
    msgs = failed(EX1.check(lambda module: module.register_forward_hook(
        lambda m, a, out: F.dropout(out, 0.25, training=m.training))))
    assert "isinstance(module, nn.ReLU)" in msgs[ON_RELUS] and "Sequential" in msgs[ON_RELUS]


def test_ex1_hooks_on_convs_instead_are_named():
    def add(module):
        if isinstance(module, nn.Conv2d):
            module.register_forward_hook(lambda m, a, out: F.dropout(out, 0.25, training=m.training))

    msgs = failed(EX1.check(add))
    assert "Conv2d" in msgs[ON_RELUS]
    assert "unchanged" in msgs[RETURNS]


def test_ex1_pre_hook_is_named():
    def add(module):
        if isinstance(module, nn.ReLU):
            module.register_forward_pre_hook(lambda m, a: F.dropout(a[0], 0.25, training=m.training))

    assert "PRE-hooks" in failed(EX1.check(add))[ON_RELUS]


def test_ex1_hook_that_rebinds_output_and_returns_none():
    def hook(module, args, output):
        output = F.dropout(output, p=0.25, training=module.training)  # noqa: F841 (the mistake)

    msgs = failed(EX1.check(on_relus(hook)))
    assert list(msgs) == [RETURNS]
    assert "your hook returns None, so the output is unchanged" in msgs[RETURNS]
    assert "rebinds a local name" in msgs[RETURNS]


def test_ex1_in_place_change_returning_none_is_named():
    def hook(module, args, output):
        F.dropout(output, p=0.25, training=module.training, inplace=True)

    msgs = failed(EX1.check(on_relus(hook)))
    assert "changes the output in place" in msgs[RETURNS]


def test_ex1_ignoring_training_is_named():
    msgs = failed(EX1.check(on_relus(lambda m, a, out: F.dropout(out, p=0.25))))
    assert list(msgs) == [TRAINING]
    assert "ignore module.training" in msgs[TRAINING]


def test_ex1_wrong_probability_is_named():
    msgs = failed(EX1.check(on_relus(lambda m, a, out: F.dropout(out, p=0.75, training=m.training))))
    assert "p=0.25" in msgs[RETURNS]


def test_ex1_mask_without_rescaling_is_named():
    def hook(module, args, output):
        if not module.training:
            return output
        return output * (torch.rand_like(output) > 0.25)

    msgs = failed(EX1.check(on_relus(hook)))
    assert "1/(1-p)" in msgs[RETURNS]


def test_ex1_detached_output_is_named():
    msgs = failed(EX1.check(on_relus(lambda m, a, out: F.dropout(out.detach(), 0.25, training=m.training))))
    assert list(msgs) == [GRADIENT]


def test_ex1_stub():
    def stub(module):
        raise NotImplementedError

    verdict = EX1.check(stub)
    assert not verdict.passed and len(verdict.mistakes) == 1, "an unwritten exercise is named once, not per check"
    assert "not written yet" in verdict.mistakes[0] and str(verdict).splitlines()[0].endswith("not written yet")


# ====================================================================== exercise 2: backward hook
def test_ex2_solution_passes():
    verdict = ex.halve_input_grad.check(solved.halve_input_grad)
    assert verdict.passed, str(verdict)
    assert ex.halve_input_grad.check(lambda m, gi, go: (gi[0] * 0.5,)).passed


def test_ex2_stub_says_not_written_yet():
    def stub(module, grad_input, grad_output):
        raise NotImplementedError

    verdict = ex.halve_input_grad.check(stub)
    assert len(verdict.mistakes) == 1 and "not written yet" in verdict.mistakes[0]


def test_ex2_returning_none_is_named():
    msgs = failed(ex.halve_input_grad.check(lambda m, gi, go: None))
    assert "your hook returns None, so the gradient is unchanged" in msgs["returns a new grad_input tuple"]
    assert "halves the input's gradient" in msgs


def test_ex2_returning_a_tensor_is_named():
    msgs = failed(ex.halve_input_grad.check(lambda m, gi, go: gi[0] * 0.5))
    assert "returns a tensor" in msgs["returns a new grad_input tuple"]
    assert "PyTorch rejected" in msgs["halves the input's gradient"]


def test_ex2_scaling_grad_output_is_named():
    msgs = failed(ex.halve_input_grad.check(lambda m, gi, go: (go[0] * 0.5,)))
    assert "shape of grad_output" in msgs["returns a new grad_input tuple"]


def test_ex2_in_place_change_is_named():
    def hook(module, grad_input, grad_output):
        grad_input[0].mul_(0.5)

    msgs = failed(ex.halve_input_grad.check(hook))
    assert list(msgs) == ["returns a new grad_input tuple"]
    assert "in place" in msgs["returns a new grad_input tuple"]


def test_ex2_wrong_factor_is_named():
    msgs = failed(ex.halve_input_grad.check(lambda m, gi, go: (gi[0] * 2,)))
    assert list(msgs) == ["halves the input's gradient"]
    assert "x.grad" in msgs["halves the input's gradient"]


# ====================================================================== exercise 3: capture
def test_ex3_solution_passes():
    assert ex.capture.check(solved.Capture).passed
    assert ex.capture.check(solved.Capture()).passed  # an instance works too


class Leaky:
    def __init__(self):
        self.outputs = []

    def hook(self, module, args, output):
        self.outputs.append(output)

    def clear(self):
        self.outputs.clear()


def test_ex3_keeping_the_graph_is_named():
    msgs = failed(ex.capture.check(Leaky))
    assert list(msgs) == ["stores it detached (no graph kept alive)"]
    assert "output.detach()" in msgs["stores it detached (no graph kept alive)"]


def test_ex3_clear_that_does_not_clear_is_named():
    class NoClear(solved.Capture):
        def clear(self):
            pass

    msgs = failed(ex.capture.check(NoClear))
    assert list(msgs) == ["clear() empties the store between runs"]


def test_ex3_nothing_stored_and_missing_parts():
    class Nothing(solved.Capture):
        def hook(self, module, args, output):
            pass

    msgs = failed(ex.capture.check(Nothing))
    assert "self.outputs is empty" in msgs["stores the layer's output"]

    class NoClearMethod:
        def __init__(self):
            self.outputs = []

        def hook(self, module, args, output):
            self.outputs.append(output.detach())

    assert "no `clear`" in failed(ex.capture.check(NoClearMethod))["stores the layer's output"]

    class BadSignature(solved.Capture):
        def hook(self, module, output):
            pass

    assert "hook(module, args, output)" in failed(ex.capture.check(BadSignature))["stores the layer's output"]


def test_ex3_stub_says_not_written_yet():
    class Stub:
        def __init__(self):
            self.outputs = []

        def hook(self, module, args, output):
            raise NotImplementedError

        def clear(self):
            raise NotImplementedError

    verdict = ex.capture.check(Stub)
    assert "not written yet" in verdict.mistakes[0] and len(verdict.mistakes) == 1


def test_solutions_show_their_code():
    assert "training=module.training" in ex.dropout_after_relus.solution().code
    assert "isinstance(module, nn.ReLU)" in ex.dropout_after_relus.solution().code
    assert "g * 0.5" in ex.halve_input_grad.solution().code
    assert "output.detach()" in ex.capture.solution().code


def test_checking_leaves_no_hooks_and_no_global_state(monkeypatch):
    before = hooklab.count_hooks()
    for exercise, fn in [(ex.dropout_after_relus, solved.add_dropout_after_relus),
                         (ex.halve_input_grad, solved.halve_input_grad), (ex.capture, solved.Capture)]:
        with hooks_made(monkeypatch) as hooks:
            assert exercise.check(fn).passed
        assert hooks.made, f"{exercise.title}: checking registered no hook at all?"
        assert hooks.left_behind() == [], f"{exercise.title}: checking left hooks behind"
    assert hooklab.count_hooks() == before  # the global hooks too
    assert torch.is_grad_enabled()


# ====================================================================== hooklab.course.nb03_module_hooks
def test_nb03_doctests():
    result = doctest.testmod(nb03)
    assert result.attempted > 0 and result.failed == 0
    result = doctest.testmod(ex)
    assert result.attempted > 0 and result.failed == 0


def test_models_are_seeded():
    a, b = nb03.lab_model(), nb03.lab_model()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    x = torch.ones(2, 1, 6, 6)
    assert torch.equal(nb03.small_cnn()(x), nb03.small_cnn()(x))
    assert sum(isinstance(m, nn.Conv2d) for m in nb03.small_cnn().modules()) == 2


def test_memory_held_counts_graphs_and_bytes():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.ones(5, 4)
    outs = [model(x) for _ in range(3)]
    report = nb03.memory_held(outs)
    assert (report.tensors, report.with_graph) == (3, 3)
    assert report.stored_bytes == 3 * 5 * 2 * 4
    # each graph saved the ReLU result [5, 8] (shared with the next Linear's input); x is shared by all
    assert report.graph_bytes == 3 * 5 * 8 * 4 + 5 * 4 * 4
    detached = nb03.memory_held([o.detach() for o in outs])
    assert (detached.with_graph, detached.graph_bytes) == (0, 0)
    assert detached.total_bytes == report.stored_bytes
    assert "3 stored tensors, 0 with a grad_fn" in str(detached)


def test_memory_held_after_backward_and_nested_values():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    out = model(torch.ones(5, 4))
    out.sum().backward()  # frees the saved tensors
    report = nb03.memory_held({"a": [out], "b": (out.detach(),)})
    assert report.tensors == 2 and report.with_graph == 1 and report.graph_bytes == 0
    assert nb03.memory_held([]).total_bytes == 0


def test_memory_held_ignores_parameters():
    layer = nn.Linear(100, 1)
    out = layer(torch.ones(1, 100))  # the graph saves the input and (a view of) the weight
    report = nb03.memory_held(out)
    assert report.graph_bytes == 100 * 4  # the input only, not the weight


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(pytest.main([__file__, "-q"]))
