"""Notebook 02's exercises: the solutions pass, and typical wrong answers are named."""

from __future__ import annotations

import torch

from hooklab.course._solutions.nb02_tensor_hooks import clamp_hook, log_grad_norms
from hooklab.course.nb02_tensor_hooks import clamp_exercise, log_exercise

from .checking import failures


# ---------------------------------------------------------------- clamp the gradient
def test_clamp_solution_passes():
    assert clamp_exercise.check(clamp_hook).passed
    assert "return grad.clamp(-1.0, 1.0)" in clamp_exercise.solution().code


def test_other_right_answers_pass():
    assert clamp_exercise.check(lambda grad: torch.clamp(grad, min=-1, max=1)).passed
    assert clamp_exercise.check(lambda grad: grad.clone().clamp_(-1, 1)).passed


def test_forgetting_to_return_is_named():
    def observes(grad):
        grad.clamp(-1, 1)

    assert "returns None, so the gradient is unchanged" in failures(clamp_exercise.check(observes))


def test_in_place_change_is_named():
    def in_place(grad):
        grad.clamp_(-1, 1)

    def in_place_and_returned(grad):
        return grad.clamp_(-1, 1)

    assert "changed the gradient in place and returned None" in failures(clamp_exercise.check(in_place))
    verdict = clamp_exercise.check(in_place_and_returned)
    assert [d for ok, d, _ in verdict.lines if not ok] == ["leaves the gradient it is given unchanged"]
    assert "in place" in verdict.mistakes[0]


def test_norm_clipping_is_named():
    def scales(grad):
        return grad * (1.0 / grad.norm())

    assert "scaled the whole gradient" in failures(clamp_exercise.check(scales))


def test_one_sided_and_unchanged_are_named():
    assert "expected [-1.0, -0.5, 0.25, 1.0]" in failures(clamp_exercise.check(lambda grad: grad.clamp(max=1)))
    assert "unchanged" in failures(clamp_exercise.check(lambda grad: grad.clone()))


def test_wrong_signature_and_wrong_type_are_named():
    verdict = clamp_exercise.check(lambda module, grad: grad)
    assert len(verdict.lines) == 1 and "hook(grad)" in verdict.mistakes[0]
    assert "returns a list" in failures(clamp_exercise.check(lambda grad: grad.tolist()))


# ---------------------------------------------------------------- log gradient norms by name
def test_log_solution_passes():
    assert log_exercise.check(log_grad_norms).passed


def test_late_binding_is_named():
    def late(model, log):
        handles = []
        for name, param in model.named_parameters():
            handles.append(param.register_hook(lambda grad: log.__setitem__(name, grad.norm().item())))
        return handles

    assert "late binding" in failures(log_exercise.check(late))


def test_no_handles_returned_is_named():
    def no_return(model, log):
        for name, param in model.named_parameters():
            param.register_hook(lambda grad, name=name: log.__setitem__(name, grad.norm().item()))

    msgs = failures(log_exercise.check(no_return))
    assert "returns None" in msgs and "still logged" in msgs


def test_hook_that_changes_the_gradient_is_named():
    def returns_grad(model, log):
        handles = []
        for name, param in model.named_parameters():
            def hook(grad, name=name):
                log[name] = grad.norm().item()
                return grad / grad.norm()
            handles.append(param.register_hook(hook))
        return handles

    assert "a logging hook only looks" in failures(log_exercise.check(returns_grad))


def test_reading_param_grad_instead_of_the_argument_is_reported():
    def reads_param(model, log):
        handles = []
        for name, param in model.named_parameters():
            handles.append(param.register_hook(lambda grad, name=name, p=param: log.__setitem__(name, p.grad.norm().item())))
        return handles

    assert "AttributeError" in failures(log_exercise.check(reads_param))


def test_wrong_value_and_tensor_values():
    def sums(model, log):
        return [p.register_hook(lambda g, n=n: log.__setitem__(n, g.sum().item())) for n, p in model.named_parameters()]

    def tensors(model, log):
        return [p.register_hook(lambda g, n=n: log.__setitem__(n, g.norm())) for n, p in model.named_parameters()]

    assert "that gradient's norm is" in failures(log_exercise.check(sums))
    assert log_exercise.check(tensors).passed  # a 0-d tensor holds one number: accepted


def test_filled_before_backward_is_named():
    def eager(model, log):
        for name, _ in model.named_parameters():
            log[name] = 0.0
        return [p.register_hook(lambda g: None) for p in model.parameters()]

    assert "before any backward pass" in failures(log_exercise.check(eager))


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    want = torch.rand(3)
    torch.manual_seed(0)
    log_exercise.check(log_grad_norms)
    assert torch.equal(torch.rand(3), want)
