"""hooklab.course.nb05_resnet_traversal: tables, rounding and the photograph.

And its exercises: Notebook 05's exercises: the solutions pass, and typical wrong answers are named.
"""

from __future__ import annotations

import math
import pytest
import torch
import hooklab
import hooklab.course.data
import hooklab.claims
from hooklab.course import nb05_resnet_traversal as lab
from torch import nn
from hooklab.course._solutions.nb05_resnet_traversal import count_calls, make_grad_saver, make_saver
from hooklab.course.nb05_resnet_traversal import count_exercise, grad_exercise, saver_exercise
from .checking import failed_checks, failures, hooks_made


def test_figure_marks_every_statistic_as_per_run_but_an_exact_zero():
    assert lab.figure(0.86215299) == "≈0.862" and hooklab.claims.is_per_run(lab.figure(0.86215299))
    assert lab.figure(-2.546, ".3f") == "≈-2.546"
    assert lab.figure(0.0) == lab.figure(-0.0) == lab.figure(0.0, ".1%") == "0"
    assert lab.figure(0.5024, ".1%") == "≈50.2%"
    assert not hasattr(lab, "sig")  # rounding does not make a float portable: no helper pretends it does


def test_figures_fit_the_tables_fixed_width():
    from hooklab.table import PER_RUN_WIDTH

    for value in (-0.002275, -2.546, 7.2, 6.973, 0.0322):
        assert len(lab.figure(value)) <= PER_RUN_WIDTH
    for value in (20.89, 0.09787, 0.08322, 44.72, 2.4):
        assert len(lab.figure(value, ".3g")) <= PER_RUN_WIDTH


def test_stats_of_a_relu_output():
    s = lab.stats(torch.relu(torch.tensor([-2.0, -1.0, 1.0, 3.0])))
    assert s == {"mean": 1.0, "std": pytest.approx(math.sqrt(2)), "min": 0.0, "max": 3.0, "zeros": 0.5}
    assert lab.stats(torch.tensor([5.0]))["std"] == 0.0  # one value: no NaN


def test_table_prints_aligned_and_as_html():
    t = lab.table(["module", "shape"], [["fc", [1, 1000]]])
    assert str(t).splitlines()[0] == "module  shape"
    assert "<table" in t._repr_html_()


def test_photo_image_undoes_the_normalisation():
    img = lab.photo_image(hooklab.course.data.sample_photo(16))
    assert img.shape == (16, 16, 3) and 0 <= img.min() and img.max() <= 1


def test_the_notebook_shows_the_raw_calls_before_the_helpers_that_wrap_them():
    from .nbtools import NOTEBOOKS, code_cells, read

    sources = [cell.source for _, cell in code_cells(read(NOTEBOOKS / "05_resnet_traversal.ipynb"))]

    def first(text):
        return next(i for i, source in enumerate(sources) if text in source)

    raw = first(".register_forward_hook(")
    assert "h.remove()" in sources[raw] and raw < first("hooks.forward(")  # a plain loop keeps and removes handles
    assert first("output.register_hook(") < first('what=("grad",)')  # Fix 1 by hand before the Recorder
    assert first("hooklab.explore(model") > first('what=("grad",)')  # the lab comes after the mechanics


# ---------------------------------------------------------------- exercise 1: save outputs by name
def test_saver_solution_passes():
    assert saver_exercise.check(make_saver).passed
    assert "output.detach().clone()" in saver_exercise.solution().code


def test_saver_other_right_answers_pass():
    def with_copy(name, store):
        def hook(module, args, output):
            store[name] = output.clone().detach()
        return hook

    assert saver_exercise.check(with_copy).passed


def test_saver_stub_says_not_written_yet():
    def stub(name, store):
        def hook(module, args, output):
            raise NotImplementedError
        return hook

    assert "not written yet" in failures(saver_exercise.check(stub))


def test_saver_graph_kept_is_named():
    def keeps_graph(name, store):
        def hook(module, args, output):
            store[name] = output.clone()
        return hook

    msg = failures(saver_exercise.check(keeps_graph))
    assert "still carry a grad_fn" in msg and "detach()" in msg


def test_saver_keyed_by_module_is_named():
    def by_module(name, store):
        def hook(module, args, output):
            store[module] = output.detach().clone()
        return hook

    assert "keyed by module objects" in failures(saver_exercise.check(by_module))


def test_saver_accumulating_is_named():
    def appends(name, store):
        def hook(module, args, output):
            store.setdefault(name, []).append(output.detach().clone())
        return hook

    assert "grows with every forward pass" in failures(saver_exercise.check(appends))


def test_saver_detach_without_clone_is_named():
    def shares_memory(name, store):
        def hook(module, args, output):
            store[name] = output.detach()
        return hook

    msg = failures(saver_exercise.check(shares_memory))
    assert "in-place ReLU" in msg and "a copy with its own memory" in msg and ".clone()" not in msg


def test_saver_not_returning_a_hook_is_named():
    def no_return(name, store):
        def hook(module, args, output):
            store[name] = output.detach().clone()

    def wrong_signature(name, store):
        def hook(module, output):
            store[name] = output
        return hook

    assert "not a function" in failures(saver_exercise.check(no_return))
    assert "not a forward hook" in failures(saver_exercise.check(wrong_signature))


def test_saver_checks_leave_no_hooks_behind(monkeypatch):
    """The checker registers every hook itself (the learner's function only makes one), so it removes
    them all, also from its own models: they are kept alive here, so a hook left on one shows."""
    models = []
    build = lab._stem
    monkeypatch.setattr(lab, "_stem", lambda: models.append(build()) or models[-1])
    with hooks_made(monkeypatch) as hooks:
        assert saver_exercise.check(make_saver).passed
    assert len(models) >= 5 and len(hooks.made) > 10  # the learner's hooks and the checker's recorder
    assert hooks.left_behind() == []
    assert sum(hooklab.count_hooks(m, include_global=False) for m in models) == 0
    assert hooklab.count_hooks(None) == 0  # no global hook either


# ---------------------------------------------------------------- exercise 2: count the calls
def test_count_solution_passes_and_matches_resnet_facts():
    import torchvision

    assert count_exercise.check(count_calls).passed
    model = torchvision.models.resnet18(weights=None).eval()
    with torch.no_grad():
        counts = count_calls(model, torch.randn(1, 3, 32, 32))
    assert len(counts) == 67 and sum(counts.values()) == 75
    assert {n for n, c in counts.items() if c == 2} == {f"layer{i}.{j}.relu" for i in range(1, 5) for j in (0, 1)}
    assert hooklab.count_hooks(model) == 0


def test_count_stub_says_not_written_yet():
    def stub(model, x):
        raise NotImplementedError

    assert "not written yet" in failures(count_exercise.check(stub))


def _counter(walk, *, increment=True, remove=True, by_module=False, shared=None):
    def count(model, x):
        names = {m: n for n, m in model.named_modules()}
        counts = shared if shared is not None else {}

        def hook(module, args, output):
            key = module if by_module else names[module]
            counts[key] = counts.get(key, 0) + 1 if increment else 1

        handles = [m.register_forward_hook(hook) for m in walk(model)]
        model(x)
        if remove:
            for h in handles:
                h.remove()
        return counts
    return count


def _every(model):
    return [m for n, m in model.named_modules() if n]


def _sequential_only(model):
    found = []
    for child in model.children():
        if isinstance(child, nn.Sequential):
            found += _sequential_only(child)
        else:
            found.append(child)
    return found


def test_count_keyed_by_module_is_named():
    assert "module objects" in failures(count_exercise.check(_counter(_every, by_module=True)))


def test_count_sequential_only_recursion_is_named():
    msg = failures(count_exercise.check(_counter(_sequential_only)))
    assert "not nn.Sequential" in msg and "named_modules()" in msg


def test_count_children_only_is_named():
    msg = failures(count_exercise.check(_counter(lambda m: list(m.children()))))
    assert "no count for" in msg


def test_count_setting_instead_of_adding_is_named():
    msg = failures(count_exercise.check(_counter(_every, increment=False)))
    assert "calls its one ReLU twice" in msg


def test_count_hooks_left_behind_are_named():
    msg = failures(count_exercise.check(_counter(_every, remove=False)))
    assert "still on the model" in msg


def test_count_shared_dict_is_named():
    msg = failures(count_exercise.check(_counter(_every, shared={})))
    assert "gave different counts" in msg


# ---------------------------------------------------------------- exercise 3: save gradients by name
def test_grad_solution_passes():
    assert grad_exercise.check(make_grad_saver).passed
    assert "output.register_hook(save)" in grad_exercise.solution().code


def test_grad_stub_says_not_written_yet():
    def stub(name, grads):
        def hook(module, args, output):
            raise NotImplementedError
        return hook

    verdict = grad_exercise.check(stub)
    assert all("not written yet" in m for m in verdict.mistakes), str(verdict)


def _grad_saver(*, returns_handle=False, on_input=False, changes_grad=False, guard=True, appends=False):
    def make(name, grads):
        def hook(module, args, output):
            target = args[0] if on_input else output
            if guard and not target.requires_grad:
                return None

            def save(grad):
                if appends:
                    grads.setdefault(name, []).append(grad)
                else:
                    grads[name] = grad
                return grad * 2 if changes_grad else None

            handle = target.register_hook(save)
            return handle if returns_handle else None
        return hook
    return make


def test_grad_other_right_answer_passes():
    assert grad_exercise.check(_grad_saver()).passed


def test_grad_returning_the_handle_is_named():
    assert "do not return it" in failures(grad_exercise.check(_grad_saver(returns_handle=True)))


def test_grad_hook_on_the_input_is_named():
    msg = failures(grad_exercise.check(_grad_saver(on_input=True)))
    assert "not on `args[0]`" in msg


def test_grad_changed_gradient_is_named():
    assert "returned a new gradient" in failures(grad_exercise.check(_grad_saver(changes_grad=True)))


def test_grad_changed_in_place_is_named():
    def make(name, grads):
        def hook(module, args, output):
            if output.requires_grad:
                def save(g):
                    grads[name] = g.clone()
                    g.mul_(2)  # returns nothing, yet changes the gradient that flows on
                output.register_hook(save)
        return hook

    msg = failures(grad_exercise.check(make))
    assert "changed `grad` in place" in msg and "return nothing" in msg
    assert "returns something" not in msg


def test_grad_no_guard_under_no_grad_is_named():
    message = failures(grad_exercise.check(_grad_saver(guard=False)))
    assert "only on an output that requires grad" in message and "if output.requires_grad" not in message


def test_grad_appending_is_named():
    assert "keep only the latest gradient" in failures(grad_exercise.check(_grad_saver(appends=True)))


def test_grad_with_full_backward_hook_instead_is_named():
    def make(name, grads):
        def hook(module, args, output):
            module.register_full_backward_hook(lambda m, gi, go: grads.__setitem__(name, go[0]))
        return hook

    # only the check it breaks fails, and says why (a checker that crashed would fail them all, or say another thing)
    failed = failed_checks(grad_exercise.check(make))
    assert list(failed) == ["stores each module's output gradient under its name"]
    assert failed["stores each module's output gradient under its name"].startswith(
        "no gradient was stored: inside the forward hook, register a tensor hook on the output")
