"""hooklab.course.nb04_editing_parameters: the toy task, the training loop, stale_parameters and the lab's picture.

And its exercises: Notebook 04's exercises: the solutions pass, and typical wrong answers are named.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import prune
from hooklab.course.nb04_editing_parameters import LiveWeights, stale_parameters, toy_regression, train
from hooklab.plots import figure, to_png
from hooklab.course._solutions.nb04_editing_parameters import fold_pruned, make_weight_logger, max_norm
from hooklab.course.nb04_editing_parameters import fold_exercise, logger_exercise, max_norm_exercise
from .checking import failed_checks, failures
from .nbtools import ROOT, read


def test_toy_regression_is_repeatable_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a, Xa, ya = toy_regression()
    b, Xb, yb = toy_regression()
    assert torch.equal(torch.rand(1), expected_next)  # the global generator did not move
    assert torch.equal(a.weight, b.weight) and torch.equal(Xa, Xb) and torch.equal(ya, yb)
    assert not torch.equal(toy_regression(seed=1)[1], Xa)


def test_train_lowers_the_loss_and_repeats_exactly():
    model, X, y = toy_regression()
    losses = train(model, X, y, torch.optim.SGD(model.parameters(), lr=0.1), steps=5)
    assert len(losses) == 5 and losses == sorted(losses, reverse=True)
    assert all(type(v) is float for v in losses)  # plain floats, unrounded
    model, X, y = toy_regression()
    assert train(model, X, y, torch.optim.SGD(model.parameters(), lr=0.1), steps=5) == losses  # the same run: ==


def test_stale_parameters_finds_replaced_parameters_only():
    model, X, y = toy_regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert stale_parameters(model, opt) == []
    with torch.no_grad():
        model.weight.mul_(2)  # in place: still the same object
    assert stale_parameters(model, opt) == []
    model.bias = nn.Parameter(model.bias.detach().clone())
    assert stale_parameters(model, opt) == ["bias"]


def test_pruning_keeps_the_parameter_the_optimizer_holds():
    model, X, y = toy_regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prune.l1_unstructured(model, "weight", amount=0.5)
    assert stale_parameters(model, opt) == []  # weight_orig is the same object
    prune.remove(model, "weight")
    assert stale_parameters(model, opt) == []


def test_live_weights_count_zeros_and_equal_a_full_draw():
    """Each picture is redrawn over a kept background: it must be the picture a full draw gives,
    pixel for pixel (a new output range and a kept one), and drawn without drawing the figure again
    (what that saves in time is measured by the benchmark: `python3 dev.py bench`, live pictures)."""
    import io

    import numpy as np
    from PIL import Image

    def pixels(png: bytes) -> np.ndarray:
        return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))

    torch.manual_seed(0)
    weight, reference = torch.randn(12, 12) * 0.3, torch.randn(12)
    live = LiveWeights(weight, reference, limit=float(weight.abs().max()))
    states = [(weight, reference), (weight * (weight.abs() > 0.3), reference * 0.5),
              (weight.clamp(-0.1, 0.1), reference * 3.0), (weight, reference)]
    for w, out in states:
        fast = live.png(w, out)
        assert np.array_equal(pixels(fast), pixels(to_png(live.fig))), "the redrawn picture differs"
    assert live.title.get_text() == "weight (0 of 144 are 0)"
    assert live.canvas.full_draws == 2  # the output range changed once, then came back
    figure_draws = []
    draw = live.fig.draw
    live.fig.draw = lambda renderer: figure_draws.append(renderer) or draw(renderer)  # type: ignore[method-assign]
    for i in range(10):
        live.png(weight * (weight.abs() > 0.05 * i), reference)
    assert figure_draws == [] and live.canvas.full_draws == 2  # the same output range: only the moving parts


# ---------------------------------------------------------------- exercise 1: max-norm
def test_max_norm_solution_passes():
    assert max_norm_exercise.check(max_norm).passed
    code = max_norm_exercise.solution().code
    assert "torch.renorm(module.weight_orig, p=2, dim=0, maxnorm=1.0)" in code and "no_grad" not in code


def test_other_right_max_norm_answers_pass():
    def by_hand(module, args):
        w = module.weight_orig
        module.weight = w * torch.clamp(1.0 / w.norm(dim=1, keepdim=True), max=1.0)

    def with_where(module, args):
        norms = module.weight_orig.norm(dim=1, keepdim=True)
        module.weight = torch.where(norms > 1.0, module.weight_orig / norms, module.weight_orig)

    assert max_norm_exercise.check(by_hand).passed, str(max_norm_exercise.check(by_hand))
    assert max_norm_exercise.check(with_where).passed, str(max_norm_exercise.check(with_where))


def test_the_fragile_in_place_answer_is_rejected_by_running_twice():
    def in_place(module, args):  # what this exercise asked for before: right for one call, wrong for two
        with torch.no_grad():
            module.weight_orig.renorm_(p=2, dim=0, maxnorm=1.0)
        module.weight = module.weight_orig

    verdict = max_norm_exercise.check(in_place)
    failed = failed_checks(verdict)
    assert "leaves weight_orig alone, so the layer may run twice before one backward pass" in failed, str(verdict)
    message = failed["leaves weight_orig alone, so the layer may run twice before one backward pass"]
    assert "modified by an inplace operation" in message and "each row's norm limited to 1.0" in message
    assert "torch.renorm(" not in message, "a hint names the idea, not the answer's code"
    # its single forward pass is fine: the earlier checks pass, so the message points at the real problem
    assert verdict.lines[1][0] and verdict.lines[2][0]


def test_the_old_in_place_answer_on_weight_is_named():
    def old_answer(module, args):
        with torch.no_grad():
            module.weight.renorm_(p=2, dim=0, maxnorm=1.0)

    text = failures(max_norm_exercise.check(old_answer))
    assert "has no `weight` until your hook sets it" in text and "weight_orig" in text


def test_a_silent_in_place_change_is_named():
    def via_data(module, args):  # .data skips the version counter, so backward does not fail
        module.weight_orig.data = torch.renorm(module.weight_orig.data, 2, 0, 1.0)
        module.weight = module.weight_orig * 1

    assert "changed `weight_orig` itself" in failures(max_norm_exercise.check(via_data))


def test_stub_says_not_written_yet():
    def stub(module, args):
        raise NotImplementedError  # your code here

    verdict = max_norm_exercise.check(stub)
    assert verdict.lines[0][0]  # the signature is fine
    assert "replace `raise NotImplementedError`" in verdict.mistakes[0]
    assert all("not written yet" in m for m in verdict.mistakes)


def test_cutting_the_gradient_is_named():
    def detached(module, args):
        module.weight = torch.renorm(module.weight_orig.detach(), 2, 0, 1.0)

    def under_no_grad(module, args):
        with torch.no_grad():
            module.weight = torch.renorm(module.weight_orig, 2, 0, 1.0)

    for fn in (detached, under_no_grad):
        assert "no gradient reached `weight_orig`" in failures(max_norm_exercise.check(fn))


def test_a_new_parameter_is_named():
    def replaces(module, args):
        module.weight = nn.Parameter(torch.renorm(module.weight_orig.detach(), 2, 0, 1.0))

    verdict = max_norm_exercise.check(replaces)
    assert [d for ok, d, _ in verdict.lines if not ok] == [
        "gradients reach weight_orig, and a step on it changes the weight the layer uses"]
    assert "new nn.Parameter" in verdict.mistakes[0] and "optimizer" in verdict.mistakes[0]


def test_returning_a_value_is_named():
    def returns(module, args):
        module.weight = torch.renorm(module.weight_orig, 2, 0, 1.0)
        return module.weight

    assert "new input" in failures(max_norm_exercise.check(returns))


def test_columns_clamping_and_global_scaling_are_named():
    def columns(module, args):
        module.weight = torch.renorm(module.weight_orig, p=2, dim=1, maxnorm=1.0)

    def clamps(module, args):
        module.weight = module.weight_orig.clamp(-0.4, 0.4)

    def global_norm(module, args):
        module.weight = module.weight_orig / module.weight_orig.norm(dim=1).max()

    def nothing(module, args):
        module.weight = module.weight_orig * 1

    assert "each column" in failures(max_norm_exercise.check(columns))
    assert "changed direction" in failures(max_norm_exercise.check(clamps))
    assert "within the limit, and your hook changed it" in failures(max_norm_exercise.check(global_norm))
    assert "equals `weight_orig`" in failures(max_norm_exercise.check(nothing))


def test_wrong_signature_is_named():
    verdict = max_norm_exercise.check(lambda module: None)
    assert len(verdict.lines) == 1 and "hook(module, args)" in verdict.mistakes[0]


# ---------------------------------------------------------------- exercise 2: weight logger
def test_logger_solution_passes():
    assert logger_exercise.check(make_weight_logger).passed


def test_logger_stub_says_not_written_yet():
    def stub(log):
        def log_weight(module, args):
            raise NotImplementedError  # your code here
        return log_weight

    assert all("not written yet" in m for m in logger_exercise.check(stub).mistakes)


def make(store):
    def factory(log):
        def log_weight(module, args):
            log.append(store(module.weight))
        return log_weight
    return factory


def test_logger_mistakes_are_named():
    assert "the same Parameter object" in failures(logger_exercise.check(make(lambda w: w)))
    assert "share memory" in failures(logger_exercise.check(make(lambda w: w.detach())))
    assert "share memory" in failures(logger_exercise.check(make(lambda w: w.data)))
    assert "`.clone()` alone" in failures(logger_exercise.check(make(lambda w: w.clone())))
    assert "store tensors" in failures(logger_exercise.check(make(lambda w: w.tolist())))


def test_logger_wrong_shapes_are_named():
    def calls_hook(log):
        def log_weight(module, args):
            log.append(module.weight.detach().clone())
        return log_weight(None, None)  # returns the result of calling it

    def returns_value(log):
        def log_weight(module, args):
            log.append(module.weight.detach().clone())
            return args
        return log_weight

    def wrong_signature(log):
        return lambda module: None

    # calling the hook with (None, None) raises at once, inside the learner's function: every check says so
    raised = ("your function raised AttributeError: 'NoneType' object has no attribute 'weight' "
              "(at `log.append(module.weight.detach().clone())`)")
    verdict = logger_exercise.check(calls_hook)
    assert failed_checks(verdict) == {description: raised for _, description, _ in verdict.lines}
    assert "new input" in failures(logger_exercise.check(returns_value))
    assert "hook(module, args)" in failures(logger_exercise.check(wrong_signature))


# ---------------------------------------------------------------- exercise 3: fold a pruned checkpoint
def test_fold_solution_passes():
    assert fold_exercise.check(fold_pruned).passed


def test_fold_stub_says_not_written_yet():
    def stub(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        raise NotImplementedError  # your code here

    verdict = fold_exercise.check(stub)
    assert verdict.lines[0][0]
    assert "replace `raise NotImplementedError`" in verdict.mistakes[0]
    assert all("not written yet" in m for m in verdict.mistakes)


def test_fold_mistakes_are_named():
    def keeps_old_keys(module, state_dict, prefix, *rest):
        for key in list(state_dict):
            if key.endswith("_orig"):
                name = key[:-5]
                state_dict[name] = state_dict[key] * state_dict[name + "_mask"]

    def forgets_mask(module, state_dict, prefix, *rest):
        for key in list(state_dict):
            if key.endswith("_orig"):
                name = key[:-5]
                del state_dict[name + "_mask"]
                state_dict[name] = state_dict.pop(key)

    def returns_new(module, state_dict, prefix, *rest):
        new = {}
        for key, value in state_dict.items():
            if key.endswith("_orig"):
                new[key[:-5]] = value * state_dict[key[:-5] + "_mask"]
            elif not key.endswith("_mask"):
                new[key] = value
        return new

    def wrong_signature(module, state_dict):
        pass

    assert "remove both" in failures(fold_exercise.check(keeps_old_keys))
    assert "Multiply by the mask" in failures(fold_exercise.check(forgets_mask))
    assert "ignores what a load_state_dict pre-hook returns" in failures(fold_exercise.check(returns_new))
    assert "8 arguments" in failures(fold_exercise.check(wrong_signature))


def _fold(in_place: bool):
    """A learner's fold: the right one (a new tensor), or the one that multiplies the caller's tensor in place."""
    def fold(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        for key in list(state_dict):
            if key.startswith(prefix) and key.endswith("_orig"):
                name = key[: -len("_orig")]
                weight, mask = state_dict.pop(key), state_dict.pop(name + "_mask")
                state_dict[name] = weight.mul_(mask) if in_place else weight * mask
    return fold


def test_fold_in_place_is_told_that_it_changed_the_callers_checkpoint():
    verdict = fold_exercise.check(_fold(in_place=True))
    failed = failed_checks(verdict)
    # the folded weights are right, so only the new check fails, with its own message (not "Multiply by the mask")
    assert list(failed) == ["leaves the caller's checkpoint unchanged"]
    message = failed["leaves the caller's checkpoint unchanged"]
    assert "the caller's checkpoint changed: its `0.weight_orig` holds other values" in message
    assert "in place" in message and "a new tensor (the product of the two)" in message
    assert "state_dict.pop(key) * mask" not in message, "a hint names the idea, not the answer's code"
    assert "Multiply by the mask" not in failures(verdict)


def test_fold_with_a_new_tensor_passes_every_check_the_caller_s_checkpoint_included():
    verdict = fold_exercise.check(_fold(in_place=False))
    assert verdict.passed, str(verdict)
    assert [d for ok, d, _ in verdict.lines] == [
        "has the signature PyTorch calls it with", "load_state_dict succeeds with a pruned checkpoint",
        "each weight becomes weight_orig * weight_mask", "leaves the caller's checkpoint unchanged",
        "an ordinary checkpoint still loads unchanged",
        "changes only the keys under `prefix` (a hook on one part of a bigger model)"]


# ---------------------------------------------------------------- a pasted worked solution is the one checked
def test_worked_solutions_define_the_function_the_notebook_checks():
    """Each stub cell defines the function its check cell passes; the worked solution defines the same name, so
    pasting it over the stub makes the check cell test the pasted code."""
    import re

    sources = [cell.source for cell in read(ROOT / "notebooks" / "04_editing_parameters.ipynb").cells
               if cell.cell_type == "code"]
    for exercise in (max_norm_exercise, logger_exercise, fold_exercise):
        pattern = rf"{exercise_name(exercise)}\.check\((\w+)\)"
        checked = [m.group(1) for src in sources for m in re.finditer(pattern, src)]
        assert len(checked) == 1, (exercise, checked)
        solved = re.match(r"def (\w+)\(", exercise.solution().code).group(1)
        assert solved == checked[0], f"{exercise.title}: the solution defines {solved}, the cell checks {checked[0]}"
        assert any(re.search(rf"^def {solved}\(", src, re.M) for src in sources), f"no stub cell defines {solved}"


def exercise_name(exercise) -> str:
    return {id(max_norm_exercise): "max_norm_exercise", id(logger_exercise): "logger_exercise",
            id(fold_exercise): "fold_exercise"}[id(exercise)]


# ---------------------------------------------------------------- each wrong answer gets its real cause
ROW_NORMS = "limits every row of the used weight to norm 1.0"
LONG_ROWS = "rescales only the rows that are too long, keeping their direction"


def test_limiting_columns_is_named_on_both_lines_it_fails():
    def columns(module, args):
        module.weight = torch.renorm(module.weight_orig, p=2, dim=1, maxnorm=1.0)

    failed = failed_checks(max_norm_exercise.check(columns))
    assert list(failed) == [ROW_NORMS, LONG_ROWS]
    assert "each column" in failed[ROW_NORMS]
    assert failed[LONG_ROWS] == (
        "row 0 changed direction, not just length: you limited each column (`dim=1` in renorm, or `norm(dim=0)`), "
        "and the entries of one row sit in different columns, so each was scaled by its column's factor. Divide the "
        "whole row by its norm (times 1.0) instead, as `torch.renorm(..., p=2, dim=0, maxnorm=1.0)` does.")


def test_clamping_is_named_as_a_clamp_not_as_columns():
    def clamps(module, args):
        module.weight = module.weight_orig.clamp(-0.4, 0.4)

    failed = failed_checks(max_norm_exercise.check(clamps))
    assert list(failed) == [LONG_ROWS]
    assert failed[LONG_ROWS].startswith("row 0 changed direction, not just length: you clamped each entry to ±0.4, "
                                        "which cuts the large entries of a row and keeps the small ones.")


def test_returning_the_weight_skips_the_output_comparison_and_says_why():
    def returns_weight(module, args):
        module.weight = torch.renorm(module.weight_orig, p=2, dim=0, maxnorm=1.0)
        return module.weight

    failed = failed_checks(max_norm_exercise.check(returns_weight))
    assert list(failed) == ["returns None (the layer's input stays as it is)", ROW_NORMS]
    assert failed[ROW_NORMS] == (
        "the rows are within 1.0, but the rest of this check is skipped: your hook returns a value, which PyTorch "
        "passes to the layer as its input instead of `x`, so the layer's output cannot be compared with `x` times "
        "the constrained weight. Return nothing (see the line 'returns None').")
    assert "raised" not in failures(max_norm_exercise.check(returns_weight))


def test_logger_names_data_and_detach_each_for_what_it_is():
    data = failed_checks(logger_exercise.check(make(lambda w: w.data)))
    detach = failed_checks(logger_exercise.check(make(lambda w: w.detach())))
    line = "each entry keeps the values of its own step"
    assert list(data) == list(detach) == [line]
    assert data[line] == ("your snapshots share memory with the weight (`.data` is the same memory under another "
                          "name, as `.detach()` is), so the optimizer's in-place updates changed them afterwards. "
                          "Store a copy with its own memory.")
    assert detach[line].startswith("your snapshots share memory with the weight (`.detach()` alone gives a new "
                                   "tensor on the same memory)")


LOADS = "load_state_dict succeeds with a pruned checkpoint"
PREFIX = "changes only the keys under `prefix` (a hook on one part of a bigger model)"
SKIPPED = "skipped until a pruned checkpoint loads (the line 'load_state_dict succeeds' says what stops it)."


def test_binding_a_new_dict_to_the_name_is_named_and_the_later_checks_are_skipped():
    def rebinds(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        new_dict = {}
        for key, value in state_dict.items():
            if key.endswith("_orig"):
                new_dict[key[:-5]] = value * state_dict[key[:-5] + "_mask"]
            elif not key.endswith("_mask"):
                new_dict[key] = value
        state_dict = new_dict  # noqa: F841 - the mistake under test

    failed = failed_checks(fold_exercise.check(rebinds))
    assert failed[LOADS] == (
        "your hook binds the name `state_dict` to a new dict, so the dict PyTorch handed it, the one it loads from, "
        "still has the same keys (`0.weight_orig`, `0.weight_mask`, ...). A new dict bound to the name inside the "
        "hook changes nothing outside it, and PyTorch ignores what a load_state_dict pre-hook returns. Change the "
        "dict you are given, in place: `state_dict[name] = ...`, `state_dict.pop(key)`.")
    assert {d: m for d, m in failed.items() if d != LOADS} == {
        "each weight becomes weight_orig * weight_mask": SKIPPED,
        "leaves the caller's checkpoint unchanged": SKIPPED,
        PREFIX: SKIPPED}


def test_fixed_key_names_name_the_keys_left_over():
    def first_layer_only(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                         error_msgs):
        if "0.weight_orig" in state_dict:
            state_dict["0.weight"] = state_dict.pop("0.weight_orig") * state_dict.pop("0.weight_mask")

    failed = failed_checks(fold_exercise.check(first_layer_only))
    assert failed[LOADS] == ("your hook folded `0.weight` but left `2.weight_orig`, `2.weight_mask` in the "
                             "checkpoint. Fold every key that ends in `_orig`: go through `list(state_dict)`, not "
                             "fixed names.")
    assert "remove both" not in failures(fold_exercise.check(first_layer_only))


def test_an_answer_that_ignores_prefix_fails_the_prefix_check_only():
    def names_from_the_module(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        for name in module.state_dict():  # "0.weight": right on the whole model (prefix ""), wrong on a part
            if name + "_orig" in state_dict:
                state_dict[name] = state_dict.pop(name + "_orig") * state_dict.pop(name + "_mask")

    failed = failed_checks(fold_exercise.check(names_from_the_module))
    assert list(failed) == [PREFIX]
    assert failed[PREFIX] == (
        "your hook left `folded.0.weight_orig`, `folded.0.weight_mask` as they were. Registered on `model.folded`, "
        "your hook is called with `prefix='folded.'`, and the keys it gets are `folded.0.weight_orig`, "
        "`folded.0.weight_mask`, ...: build the key names from `prefix` (`prefix + name`), or take them from the "
        "keys themselves, not from fixed names or the module's own `state_dict()`.")
    # the same answer with prefix used passes every check
    def with_prefix(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        for name in module.state_dict():
            if prefix + name + "_orig" in state_dict:
                state_dict[prefix + name] = (state_dict.pop(prefix + name + "_orig")
                                             * state_dict.pop(prefix + name + "_mask"))

    assert fold_exercise.check(with_prefix).passed, str(fold_exercise.check(with_prefix))


def test_changing_another_part_s_keys_is_named():
    def everything(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        # sees keys outside its prefix only when handed them: here it adds one, as a hook that ignores prefix would
        for key in list(state_dict):
            if key.endswith("_orig"):
                name = key[:-5]
                state_dict[name] = state_dict.pop(key) * state_dict.pop(name + "_mask")
        if prefix:
            state_dict["still_pruned.0.weight"] = torch.zeros(3, 4)

    failed = failed_checks(fold_exercise.check(everything))
    assert list(failed) == [PREFIX]
    assert failed[PREFIX].startswith("your hook also changed `still_pruned.0.weight`, keys of another part of the "
                                     "model. Registered on `model.folded`, your hook is called with "
                                     "`prefix='folded.'`")
