"""Exercises of notebook 06: the solutions pass, typical mistakes are named."""

from __future__ import annotations

import doctest


from hooklab.exercises import training_diagnostics as ex

from .checking import mistakes


def test_solutions_pass():
    assert ex.stats_hook.check(ex.make_stats_hook).passed
    assert ex.clip_grad.check(ex.clip_grad_hook).passed
    assert "def make_stats_hook" in ex.stats_hook.solution().code
    assert "def clip_grad_hook" in ex.clip_grad.solution().code
    assert doctest.testmod(ex).failed == 0


def test_stub_says_not_written_yet():
    def make_stats_hook(store):
        def record(module, args, output):
            raise NotImplementedError
        return record
    assert "not written yet" in mistakes(ex.stats_hook, make_stats_hook)


def test_stats_hook_mistakes():
    def stores_tensors(store):
        def record(module, args, output):
            store.append({"mean": output.mean(), "std": output.std(), "dead": 0.0})
        return record
    assert "is a tensor" in mistakes(ex.stats_hook, stores_tensors)

    def zero_share(store):
        def record(module, args, output):
            store.append({"mean": output.mean().item(), "std": output.std().item(),
                          "dead": (output <= 0).float().mean().item()})
        return record
    assert "share of zero *values*" in mistakes(ex.stats_hook, zero_share)

    def returns_output(store):
        def record(module, args, output):
            store.append({"mean": output.mean().item(), "std": output.std().item(), "dead": 0.25})
            return output * 0
        return record
    assert "replaces the output" in mistakes(ex.stats_hook, returns_output)

    def returns_call(store):
        def record(module, args, output):
            pass
        return record(None, None, None)
    assert "return the hook function itself" in mistakes(ex.stats_hook, returns_call)

    def wrong_signature(store):
        def record(module, output):
            pass
        return record
    assert "hook(module, args, output)" in mistakes(ex.stats_hook, wrong_signature)

    def wrong_keys(store):
        def record(module, args, output):
            store.append({"avg": 0.0})
        return record
    assert "'mean', 'std' and 'dead'" in mistakes(ex.stats_hook, wrong_keys)


def test_clip_grad_mistakes():
    def returns_new(param):
        return param.grad / param.grad.norm()
    msg = mistakes(ex.clip_grad, returns_new)
    assert "unchanged" in msg and "must return None" in msg

    def scales_and_returns(param):
        param.grad.mul_(1 / max(1.0, param.grad.norm().item()))
        return param.grad
    assert "must return None" in mistakes(ex.clip_grad, scales_and_returns)

    def clamps(param):
        param.grad.clamp_(-1, 1)
    assert "clamped each element" in mistakes(ex.clip_grad, clamps)

    def always_scales(param):
        param.grad.mul_(1 / param.grad.norm())
    assert "only scale gradients whose norm is above 1" in mistakes(ex.clip_grad, always_scales)

    def two_args(param, extra):
        pass
    assert "post accumulate grad hook is called as hook(param)" in mistakes(ex.clip_grad, two_args)
