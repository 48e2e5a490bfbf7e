"""Notebook 01's exercises: the solutions pass, and typical wrong answers are named."""

from __future__ import annotations

import functools

import torch

from hooklab.course._solutions.nb01_callbacks import register_each, run_with_hook
from hooklab.course.nb01_callbacks import hook_for_one_call, one_per_name

from .checking import failures


# ---------------------------------------------------------------- one callback per name
def test_register_each_solution_passes():
    assert one_per_name.check(register_each).passed
    assert "def register_each(callbacks" in one_per_name.solution().code


def test_default_argument_and_factory_pass_too():
    def with_default(callbacks, names, log):
        for name in names:
            callbacks.register(lambda name=name: log.append(name))

    def with_factory(callbacks, names, log):
        def make(name):
            return lambda: log.append(name)
        for name in names:
            callbacks.register(make(name))

    assert one_per_name.check(with_default).passed
    assert one_per_name.check(with_factory).passed


def test_late_binding_is_named():
    def late(callbacks, names, log):
        for name in names:
            callbacks.register(lambda: log.append(name))

    verdict = one_per_name.check(late)
    assert [ok for ok, _, _ in verdict.lines] == [True, False, False]
    assert "late binding" in verdict.mistakes[0] and "'c'" in verdict.mistakes[0]
    assert "late binding" in verdict.mistakes[1] and "'y'" in verdict.mistakes[1]


def test_calling_while_registering_is_named():
    def eager(callbacks, names, log):
        for name in names:
            log.append(name)
            callbacks.register(lambda: None)

    assert "before anything called the callbacks" in failures(one_per_name.check(eager))


def test_one_callback_for_all_names_is_named():
    def single(callbacks, names, log):
        callbacks.register(lambda: log.extend(names))

    assert "you registered 1 callback for 3 names" in failures(one_per_name.check(single))


def test_hardcoded_names_are_caught():
    def hardcoded(callbacks, names, log):
        for name in ["a", "b", "c"]:
            callbacks.register(functools.partial(log.append, name))

    verdict = one_per_name.check(hardcoded)
    assert verdict.lines[0][0] and verdict.lines[1][0] and not verdict.lines[2][0]
    assert "['x', 'y', 'x', 'y']" in verdict.mistakes[0]


def test_stub_says_not_written_yet():
    def stub(callbacks, names, log):
        raise NotImplementedError

    assert "not written yet" in failures(one_per_name.check(stub))


# ---------------------------------------------------------------- a hook for one call only
def test_run_with_hook_solution_passes():
    assert hook_for_one_call.check(run_with_hook).passed
    assert "with handle:" in hook_for_one_call.solution().code


def test_try_finally_passes():
    def with_finally(model, x, hook):
        handle = model.register_forward_hook(hook)
        try:
            return model(x)
        finally:
            handle.remove()

    assert hook_for_one_call.check(with_finally).passed


def test_forward_instead_of_call_is_named():
    def skips(model, x, hook):
        with model.register_forward_hook(hook):
            return model.forward(x)

    assert "model.forward(x) skips every hook" in failures(hook_for_one_call.check(skips))


def test_forgetting_to_remove_is_named():
    def leaks(model, x, hook):
        model.register_forward_hook(hook)
        return model(x)

    msgs = failures(hook_for_one_call.check(leaks))
    assert "1 hook was still registered" in msgs and "stayed registered" in msgs


def test_removing_only_on_success_is_named():
    def no_finally(model, x, hook):
        handle = model.register_forward_hook(hook)
        out = model(x)
        handle.remove()
        return out

    verdict = hook_for_one_call.check(no_finally)
    assert verdict.mistakes == [verdict.mistakes[0]]
    assert "`with handle:`" in verdict.mistakes[0] and "model raised an error" in verdict.mistakes[0]


def test_swallowing_the_error_is_named():
    def swallows(model, x, hook):
        with model.register_forward_hook(hook):
            try:
                return model(x)
            except Exception:
                return None

    assert "hid it" in failures(hook_for_one_call.check(swallows))


def test_forgetting_to_return_is_named():
    def no_return(model, x, hook):
        with model.register_forward_hook(hook):
            model(x)

    assert "forget to `return`" in failures(hook_for_one_call.check(no_return))


def test_registering_twice_is_named():
    def twice(model, x, hook):
        with model.register_forward_hook(hook), model.register_forward_hook(hook):
            return model(x)

    assert "ran 2 times" in failures(hook_for_one_call.check(twice))


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    want = torch.rand(3)
    torch.manual_seed(0)
    hook_for_one_call.check(run_with_hook)
    assert torch.equal(torch.rand(3), want)
