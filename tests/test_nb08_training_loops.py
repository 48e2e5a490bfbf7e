"""hooklab.course.nb08_training_loops: data, recomputation tests, saved-tensor meter, the lab loop.

And its exercises: the worked solutions pass, typical mistakes are named precisely.
"""

from __future__ import annotations

import ast
import doctest
import subprocess
import sys

import pytest
import torch
from torch import nn

import hooklab
import hooklab.course._solutions.nb08_training_loops as solved
import hooklab.course.nb08_training_loops as nb08
from hooklab.claims import is_per_run

from .checking import failed_checks, mistakes


# ---------------------------------------------------------------------- helpers
def test_doctests() -> None:
    assert doctest.testmod(nb08, optionflags=doctest.ELLIPSIS).failed == 0


def test_data_and_model_are_seeded() -> None:
    x1, y1 = nb08.make_data(10)
    x2, y2 = nb08.make_data(10)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    a, b = nb08.mlp(), nb08.mlp()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(nb08.mlp(seed=1).fc1.weight, a.fc1.weight)


def _count_recomputations(flagged: bool) -> tuple[list[bool], list[bool]]:
    model = nb08.mlp()
    middle = nn.Sequential(model.fc2, model.relu2)
    flag = nb08.Recomputing()
    in_bwd, flags = [], []

    def probe(module, args, output):
        in_bwd.append(nb08.in_backward())
        flags.append(bool(flag))

    handle = model.fc2.register_forward_hook(probe)
    try:
        out = model.fc3(nb08.checkpoint(middle, model.relu1(model.fc1(torch.randn(4, 8))),
                                        flag=flag if flagged else None))
        out.sum().backward()
    finally:
        handle.remove()
    return in_bwd, flags


def test_in_backward_and_the_flag_tell_the_recomputation_apart() -> None:
    in_bwd, flags = _count_recomputations(flagged=True)
    assert in_bwd == [False, True] and flags == [False, True]
    in_bwd, flags = _count_recomputations(flagged=False)
    assert in_bwd == [False, True] and flags == [False, False]
    assert not nb08.in_backward()


def test_saved_by_layer_counts_exact_bytes() -> None:
    model = nb08.mlp()
    x = torch.randn(32, 8)
    saved = nb08.saved_by_layer(model, x)
    assert saved.nbytes == {"fc1": 1024, "relu1": 2048, "fc2": 3072, "relu2": 2048, "fc3": 2112}
    assert saved.param_bytes["fc2"] == 16 * 16 * 4 and saved.total() == 10304
    assert hooklab.count_hooks(model) == 0
    middle = nn.Sequential(model.fc2, model.relu2)
    ckpt = nb08.saved_by_layer(model, x, run=lambda: model.fc3(torch.utils.checkpoint.checkpoint(
        middle, model.relu1(model.fc1(x)), use_reentrant=False)))
    assert "fc2" not in ckpt.nbytes and ckpt.nbytes["(outside)"] == 32 * 16 * 4
    assert len(saved.rows()) == 5


# ---------------------------------------------------------------------- the lab
@pytest.mark.kernels  # trained-model results: `python3 dev.py test --other-cpu` runs it again
def test_lab_counts_and_scale() -> None:
    r = nb08.lab_train(4, scaler=True, checkpointing=True, clamp="after unscale")
    s = r.steps[0]
    assert (s.tensor_hook_calls, s.post_accumulate_calls, s.forward_real, s.forward_recomputed) == (4, 4, 8, 4)
    assert r.scale == 65536.0
    view = nb08.lab_view(r)
    assert view["loss scale"] == 65536
    assert view["every step's update used |grad| ≤ 1 (fc3.weight)"] is True
    assert is_per_run(view["loss on all examples, after training"])
    assert is_per_run(view["loss on all examples, before training"])
    assert list(view) == list(nb08.LAB_ROWS)
    assert "hooks" not in nb08.lab_lines(view) and nb08.lab_lines(view).count("\n") == len(view) - 1


@pytest.mark.kernels  # trained-model results: `python3 dev.py test --other-cpu` runs it again
def test_lab_true_gradient_is_measured_not_derived() -> None:
    # the true gradient comes from a watcher that never clamps: the clamp in a tensor hook, and the
    # scale, leave it as it is; the gradient the optimizer used is the clamped one
    plain = nb08.lab_train(4, steps=1).steps[0]
    clamped = nb08.lab_train(4, scaler=True, clamp="tensor hook", steps=1).steps[0]
    assert plain.true_max > 1 and abs(clamped.true_max - plain.true_max) < 1e-5 * plain.true_max
    assert clamped.applied_max < 1e-3 and clamped.seen_max > 65536
    assert abs(plain.applied_max - plain.true_max) < 1e-5 * plain.true_max


@pytest.mark.kernels  # trained-model results: `python3 dev.py test --other-cpu` runs it again
def test_lab_shows_each_failure() -> None:
    plain = nb08.lab_view(nb08.lab_train())
    assert plain["loss on all examples fell by 10% or more"] is True
    assert plain["every step's update used |grad| ≤ 1 (fc3.weight)"] is False
    accumulated = nb08.lab_view(nb08.lab_train(4, clamp="tensor hook"))
    assert accumulated["clamp calls per step"] == 12  # 3 weights × 4 micro-batches
    assert accumulated["every step's update used |grad| ≤ 1 (fc3.weight)"] is False  # clamped per micro-batch
    scaled = nb08.lab_view(nb08.lab_train(4, scaler=True, clamp="tensor hook"))
    assert scaled["loss on all examples fell by 10% or more"] is False  # clamped 65536× too hard
    clipped = nb08.lab_view(nb08.lab_train(1, clamp="after unscale"))
    assert clipped["every step's update used |grad| ≤ 1 (fc3.weight)"] is True


@pytest.mark.kernels  # trained-model results: `python3 dev.py test --other-cpu` runs it again
def test_lab_is_repeatable() -> None:
    # (how long a setting takes to train is the benchmark's floor: `python3 dev.py bench`, 08 in the browser)
    a = nb08.lab_view(nb08.lab_train(4, True, True, "tensor hook"))
    assert a == nb08.lab_view(nb08.lab_train(4, True, True, "tensor hook"))


def test_lab_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="accumulation must be"):
        nb08.lab_train(3)
    with pytest.raises(ValueError, match="clamp must be one of"):
        nb08.lab_train(clamp="sometimes")


# ---------------------------------------------------------------------- exercise 1
def test_clamp_solution_passes() -> None:
    assert nb08.clamp.check(solved.clamp_step).passed


def test_clamp_without_unscale_is_named() -> None:
    def no_unscale(optimizer, scaler, limit=1.0):
        for group in optimizer.param_groups:
            nn.utils.clip_grad_value_(group["params"], limit)

    failed = failed_checks(nb08.clamp.check(no_unscale))
    assert "65536 times too small" in failed["clamps the true gradient while GradScaler scales by 65536"]


def test_clamp_that_does_nothing_is_named() -> None:
    assert "still [2.4, -2.4]" in mistakes(nb08.clamp, lambda optimizer, scaler, limit=1.0: None)


def test_clamp_that_unscales_twice_is_named() -> None:
    def twice(optimizer, scaler, limit=1.0):
        scaler.unscale_(optimizer)
        scaler.unscale_(optimizer)

    assert "unscale_" in mistakes(nb08.clamp, twice)


def _clamp_in_scaled_units(check_finite: bool):
    def clamp_step(optimizer, scaler, limit=1.0):  # fix (b): compare with the limit times the scale
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if check_finite and not all(torch.isfinite(p.grad).all() for p in params):
            return  # an overflow: leave it for scaler.step, which then skips the step
        for p in params:
            p.grad.clamp_(-limit * scaler.get_scale(), limit * scaler.get_scale())
    return clamp_step


def test_clamp_in_scaled_units_that_hides_an_overflow_is_named() -> None:
    failed = failed_checks(nb08.clamp.check(_clamp_in_scaled_units(check_finite=False)))
    assert list(failed) == ["leaves a float16 overflow for scaler.step to find (the step is skipped, the scale halves)"]
    message = next(iter(failed.values()))
    assert "[inf, -inf]" in message and "the scale is 65536" in message and "unscale_" in message


def test_clamp_in_scaled_units_that_checks_finiteness_first_passes() -> None:
    assert nb08.clamp.check(_clamp_in_scaled_units(check_finite=True)).passed


# ---------------------------------------------------------------------- DDP in two processes
def test_free_port_is_free_on_loopback() -> None:
    import socket

    port = nb08.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # nothing holds it


def test_ddp_in_two_processes_averages_and_leaves_nothing_behind() -> None:
    import multiprocessing
    import socket

    import torch.multiprocessing as mp

    port = nb08.free_port()
    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(nb08.ddp_process, args=(2, port, results), nprocs=2)
    rows = sorted((results.get() for _ in range(2)), key=lambda row: row["rank"])
    assert [row["rank"] for row in rows] == [0, 1]
    for rank, row in enumerate(rows):
        local = [float(rank + 1)] * 3  # each rank's input, the weight's local gradient
        for comm in ("DDP's own all-reduce", "allreduce_hook", "a hook that only sums"):
            assert row[comm]["tensor hook"] == [local], comm  # the tensor hook sees the local gradient only
        assert row["DDP's own all-reduce"]["grad"] == [1.5] * 3  # the mean of 1 and 2
        assert row["allreduce_hook"]["grad"] == [1.5] * 3
        assert row["a hook that only sums"]["grad"] == [3.0] * 3  # all-reduce sums
        assert row["a hook that only sums"]["sent"] == [local + [1.0]]  # one bucket: the weight's 3, the bias's 1
        assert row["DDP's own all-reduce"]["sent"] == []
    assert multiprocessing.active_children() == []
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # the rendezvous port is closed again


_GLOO_THREADS = """
import os, sys, tempfile
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", init_method="file://" + os.path.join(tempfile.mkdtemp(), "store"), rank=0, world_size=1)
if sys.argv[1] == "ddp":
    DDP(nn.Linear(3, 1))  # dropped at once
else:
    dist.all_reduce(torch.ones(3))
dist.destroy_process_group()
names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
print(sorted(n for n in names if "gloo" in n))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the thread names in /proc")
def test_a_ddp_model_keeps_gloo_threads_running_after_destroy_process_group() -> None:
    """Why nb08.ddp_process ends its process with os._exit: after an all-reduce, destroy_process_group stops
    gloo's threads; after a DDP model was built, they run on until the process ends (torch 2.14.1)."""
    def left(use: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", _GLOO_THREADS, use], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return ast.literal_eval(done.stdout.strip().splitlines()[-1])

    assert left("all_reduce") == []
    after_ddp = left("ddp")
    assert "gloo_tcp_loop" in after_ddp and "pt_gloo_runloop" in after_ddp, after_ddp


# ---------------------------------------------------------------------- exercise 2
def test_stats_solution_passes() -> None:
    assert nb08.stats_once.check(solved.make_stats_hook).passed


def test_stats_that_double_count_are_named() -> None:
    def naive(store):
        def record(module, args, output):
            store.append(output.mean().item())
        return record

    failed = failed_checks(nb08.stats_once.check(naive))
    assert list(failed) == ["records one mean per forward pass under checkpointing"]
    assert "recomputations" in failed["records one mean per forward pass under checkpointing"]


def test_stats_that_use_grad_mode_are_named() -> None:
    def grad_mode(store):
        def record(module, args, output):
            if torch.is_grad_enabled():
                store.append(output.mean().item())
        return record

    failed = failed_checks(nb08.stats_once.check(grad_mode))
    assert "torch.no_grad()" in failed["still records a forward pass under torch.no_grad()"]


def test_stats_that_keep_tensors_are_named() -> None:
    def tensors(store):
        def record(module, args, output):
            if not nb08.in_backward():
                store.append(output.mean())
        return record

    assert ".item()" in mistakes(nb08.stats_once, tensors)


# ---------------------------------------------------------------------- exercise 3
def test_strip_solution_passes() -> None:
    assert nb08.strip.check(solved.strip_prefixes).passed


def test_strip_with_replace_is_named() -> None:
    def replace_everywhere(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        for key in list(state_dict):
            state_dict[key.replace("module.", "").replace("_orig_mod.", "")] = state_dict.pop(key)

    failed = failed_checks(nb08.strip.check(replace_everywhere))
    assert "subweight" in failed["keeps plain keys and a layer named 'submodule' as they are"]


def test_strip_that_rebinds_is_named() -> None:
    def rebind(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        state_dict = {k.removeprefix("module."): v for k, v in state_dict.items()}  # noqa: F841

    failed = _strip_messages(rebind)
    assert all("in place" in m and "only binds the name to a new dict" in m for m in failed.values()), failed


def test_strip_that_changes_tensors_is_named() -> None:
    def scales(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        solved.strip_prefixes(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors)
        for value in state_dict.values():
            value.mul_(1.001)

    assert "must not change the values" in mistakes(nb08.strip, scales)


def test_strip_with_a_wrong_signature_is_named() -> None:
    assert "8 arguments" in mistakes(nb08.strip, lambda module, state_dict: None)


# ---------------------------------------------------------------------- the learner's wrong answers, named
def _params(optimizer):
    return [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]


def test_clamp_that_calls_scaler_step_itself_is_named() -> None:
    def steps_itself(optimizer, scaler, limit=1.0):
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_value_(_params(optimizer), limit)
        scaler.step(optimizer)

    failed = failed_checks(nb08.clamp.check(steps_itself))
    message = failed["clamps the true gradient while GradScaler scales by 65536"]
    assert "your function called scaler.step itself" in message and "Leave scaler.step" in message
    assert ".." not in message and "Call scaler.unscale_" not in message


def test_clamp_that_divides_by_the_scale_by_hand_is_named() -> None:
    def by_hand(optimizer, scaler, limit=1.0):
        for p in _params(optimizer):
            p.grad.div_(scaler.get_scale())
            p.grad.clamp_(-limit, limit)

    failed = failed_checks(nb08.clamp.check(by_hand))
    message = failed["clamps the true gradient while GradScaler scales by 65536"]
    assert "already in true units" in message and "divided by the scale again" in message
    assert "you clamped the scaled gradient" not in message and "1.53e-05" in message


def test_clamp_without_the_underscore_is_named() -> None:
    def not_in_place(optimizer, scaler, limit=1.0):
        scaler.unscale_(optimizer)
        for p in _params(optimizer):
            p.grad.clamp(-limit, limit)  # returns a new tensor; p.grad stays as it was

    failed = failed_checks(nb08.clamp.check(not_in_place))
    message = failed["clamps the true gradient while GradScaler scales by 65536"]
    assert "p.grad.clamp(...) returns a new tensor" in message and "scaler.unscale_ ran" in message
    assert "clamp p.grad after scaler.unscale_" not in message


def test_clamp_without_unscale_shows_the_tiny_values() -> None:
    def no_unscale(optimizer, scaler, limit=1.0):
        nn.utils.clip_grad_value_(_params(optimizer), limit)

    failed = failed_checks(nb08.clamp.check(no_unscale))
    message = failed["leaves small gradients alone and lets scaler.step(optimizer) run"]
    assert "[1.53e-05, -1.53e-05]" in message and "65536 times too small" in message
    assert "[0.0, -0.0]" not in message


def test_stats_that_append_a_list_are_named() -> None:
    def per_feature(store):
        def record(module, args, output):
            if not nb08.in_backward():
                store.append(output.detach().mean(0).tolist())
        return record

    failed = failed_checks(nb08.stats_once.check(per_feature))
    assert set(failed) == {"records one mean per forward pass without checkpointing",
                           "records one mean per forward pass under checkpointing"}
    for message in failed.values():
        assert message.startswith("the store holds list entries") and "output.mean().item()" in message
        assert "your function raised" not in message


def _strip_messages(hook) -> dict[str, str]:
    return failed_checks(nb08.strip.check(hook))


def test_strip_with_replace_names_the_renamed_key() -> None:
    def replace(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        for key in list(state_dict):
            state_dict[key.replace("module.", "")] = state_dict.pop(key)

    failed = _strip_messages(replace)
    assert "'module.submodule.weight' became 'subweight', expected 'submodule.weight'" in (
        failed["loads keys saved from DDP (module.fc.weight)"])
    for check in ("loads keys saved from DDP (module.fc.weight)",
                  "loads keys saved from torch.compile (_orig_mod., also _orig_mod.module.)",
                  "leaves the caller's dict and its tensors untouched"):
        assert "binding a new dict" not in failed[check] and "the 'module.' inside 'submodule.'" in failed[check]
    assert "'_orig_mod.submodule.weight' became '_orig_mod.subweight'" in (
        failed["loads keys saved from torch.compile (_orig_mod., also _orig_mod.module.)"])


def test_strip_that_strips_once_is_named() -> None:
    def once(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        for key in list(state_dict):
            for wrapper in ("module.", "_orig_mod."):
                if key.startswith(prefix + wrapper):
                    state_dict[prefix + key[len(prefix + wrapper):]] = state_dict.pop(key)
                    break

    failed = _strip_messages(once)
    assert list(failed) == ["loads keys saved from torch.compile (_orig_mod., also _orig_mod.module.)"]
    message = failed["loads keys saved from torch.compile (_orig_mod., also _orig_mod.module.)"]
    assert "'_orig_mod.module.submodule.weight' became 'module.submodule.weight'" in message
    assert "Strip again" in message and "binding a new dict" not in message


def test_strip_that_returns_a_dict_is_named() -> None:
    def returns(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        return {key.removeprefix("module."): value for key, value in state_dict.items()}

    message = mistakes(nb08.strip, returns)
    assert "PyTorch ignores what a load_state_dict pre-hook returns" in message and "binding" not in message


def test_strip_that_ignores_prefix_fails() -> None:
    def no_prefix(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        for key in list(state_dict):
            stripped = key
            while stripped.startswith(("module.", "_orig_mod.")):
                stripped = stripped.split(".", 1)[1]
            if stripped != key:
                state_dict[stripped] = state_dict.pop(key)

    failed = _strip_messages(no_prefix)
    assert list(failed) == ["loads through a hook on the submodule fc (prefix 'fc.')"]
    message = next(iter(failed.values()))
    assert "'fc._orig_mod.weight' stayed as it was, expected 'fc.weight'" in message and "key[len(prefix):]" in message


def test_worked_solutions_run_where_the_notebook_pastes_them() -> None:
    # the notebook imports torch, nn and `nb08`: each solution, pasted there, must need nothing else
    for exercise in (nb08.clamp, nb08.stats_once, nb08.strip):
        namespace = {"torch": torch, "nn": nn, "nb08": nb08}
        code = exercise.solution().code
        exec(compile(code, "<pasted>", "exec"), namespace)  # noqa: S102
        (name,) = [k for k in namespace if k not in ("torch", "nn", "nb08", "__builtins__")]
        assert exercise.check(namespace[name]).passed, exercise.title
