"""hooklab.course.nb10_transformer_interpretability: the task, the model, training, the pictures, and the
three exercises (the solutions pass, the typical mistakes are named). The slow tests train the model
from several seeds and check every claim notebook 10 prints about a trained model."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import hooklab
import hooklab.course._solutions.nb10_transformer_interpretability as solved
import hooklab.course.nb10_transformer_interpretability as nb10
from hooklab.course.data import seeded
from hooklab.plots import figure, to_png

from .checking import failed_checks, mistakes, png_pixels

LAYERS = ["embed", "blocks.0", "blocks.1"]


# ---------------------------------------------------------------------- the task
def test_the_answer_is_the_digit_after_the_marker():
    tokens, answers = nb10.make_batch(500, seed=3)
    assert tokens.shape == (500, nb10.LENGTH) and (tokens[:, -1] == nb10.QUERY).all()
    markers = (tokens == nb10.MARKER).nonzero()
    assert markers[:, 0].tolist() == list(range(500)), "exactly one marker per sequence"
    assert markers[:, 1].max() <= nb10.LENGTH - 3 and markers[:, 1].min() == 0
    assert torch.equal(tokens[markers[:, 0], markers[:, 1] + 1], answers)
    assert (answers < nb10.DIGITS).all()
    fixed, _ = nb10.make_batch(10, seed=3, marker_at=4)
    assert (fixed[:, 4] == nb10.MARKER).all()
    with pytest.raises(ValueError, match="between 0 and 5"):
        nb10.make_batch(2, marker_at=6)


def test_pairs_differ_in_the_one_token_that_matters():
    pairs = nb10.make_pairs(300, seed=1)
    differs = pairs.clean != pairs.corrupted
    assert pairs.changed == 3 and differs[:, 3].all() and differs.sum() == 300
    assert torch.equal(pairs.clean[:, 3], pairs.clean_answers)
    assert torch.equal(pairs.corrupted[:, 3], pairs.corrupted_answers)
    fixed = nb10.make_pairs(5, seed=1, digits=(3, 7))
    assert (fixed.clean[:, 3] == 3).all() and (fixed.corrupted[:, 3] == 7).all()
    assert (fixed.clean_answers == 3).all() and (fixed.corrupted_answers == 7).all()
    with pytest.raises(ValueError, match="must differ"):
        nb10.make_pairs(2, digits=(4, 4))


# ---------------------------------------------------------------------- the model
def test_each_head_owns_its_columns_of_out_projs_input():
    """What notebook 10 says about out_proj's input: head h is columns h*head_dim..(h+1)*head_dim.
    Zeroing them in a pre-hook equals an attention computed without head h's values."""
    model = seeded(0, nb10.TinyTransformer).eval()
    attn = model.blocks[0].attn
    x = torch.randn(3, nb10.LENGTH, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        q, k, v = attn.qkv(x).view(3, nb10.LENGTH, 3, 2, 16).permute(2, 0, 3, 1, 4)
        mask = torch.ones(nb10.LENGTH, nb10.LENGTH, dtype=torch.bool).triu(1)
        pattern = (q @ k.transpose(-2, -1) / 4.0).masked_fill(mask, float("-inf")).softmax(-1)
        per_head = pattern @ v  # [batch, head, position, head_dim]
        per_head[:, 1] = 0.0
        want = attn.out_proj(per_head.transpose(1, 2).reshape(3, nb10.LENGTH, 32))
        with hooklab.Hooks() as hooks:
            hooks.forward_pre(attn.out_proj, solved.make_head_patch(torch.zeros(3, nb10.LENGTH, 32), 1, 16))
            got = attn(x)
    torch.testing.assert_close(got, want)
    fired = []
    with hooklab.Hooks() as hooks, torch.no_grad():
        hooks.forward_pre(attn.out_proj, lambda m, args: fired.append(list(args[0].shape)))
        model(nb10.make_batch(2)[0])
    assert fired == [[2, nb10.LENGTH, 32]], "out_proj is called (unlike nn.MultiheadAttention's)"


def test_logit_diff_accuracy_and_table():
    logits = torch.zeros(2, nb10.LENGTH, nb10.VOCAB)
    logits[0, -1, 4], logits[1, -1, 2] = 3.0, 1.0
    assert nb10.logit_diff(logits, torch.tensor([4, 2]), torch.tensor([1, 4])).tolist() == [3.0, 1.0]
    assert nb10.accuracy(logits, torch.tensor([4, 0])) == 0.5
    assert nb10.table(["a", "bb"], [[1, 2]]).splitlines() == ["a  bb", "-  --", "1  2"]


def test_pictures_draw():
    values = torch.tensor([[0.0, 1.0], [0.5, 0.2]])
    fig = figure((3, 2))
    ax = nb10.draw_map(fig.add_subplot(), values, ["a", "b"], torch.tensor([3, 10]), title="t", picked=(1, 0))
    assert [t.get_text() for t in ax.texts] == ["0%", "100%", "50%", "20%"] and len(ax.patches) == 1
    assert to_png(fig)[:4] == b"\x89PNG"
    lab = figure((8, 2.4))
    nb10.draw_lab(lab, torch.rand(3, 8), LAYERS, nb10.make_batch(1)[0][0], (2, 7),
                  {"clean run": 10.0, "corrupted run": -10.0, "with the hooks": 3.0}, "t")
    assert lab.get_layout_engine() is None and len(lab.axes) == 2 and to_png(lab)[:4] == b"\x89PNG"


def test_the_live_picture_is_draw_labs_picture():
    """LiveLab redraws only the frame and the third bar (and the axes they touch), yet every picture is
    pixel for pixel the one draw_lab draws in full for the same values; a bar past the axis widens it."""
    values, tokens = torch.rand(3, 8, generator=torch.Generator().manual_seed(0)), nb10.make_batch(1)[0][0]
    live = nb10.LiveLab(values, LAYERS, tokens, 10.0, -10.0, "t")
    for picked, hooked in [((2, 7), 3.0), ((0, 1), -2.0), ((1, 4), 15.0), ((1, 4), 3.0), ((0, 0), -10.0)]:
        full = figure((8, 2.4))
        nb10.draw_lab(full, values, LAYERS, tokens, picked,
                      {"clean run": 10.0, "corrupted run": -10.0, "with the hooks": hooked}, "t")
        got, want = png_pixels(live.png(picked, hooked)), png_pixels(to_png(full))
        assert got.shape == want.shape and (got == want).all(), (picked, hooked, int((got != want).any(-1).sum()))
    assert live.canvas.full_draws == 2  # the axis for 12 (drawn once, kept) and for 15


# ---------------------------------------------------------------------- the exercises
def test_the_solutions_pass():
    assert nb10.head_patch_exercise.check(solved.make_head_patch).passed
    assert nb10.steering_exercise.check(solved.make_steering_hook).passed
    assert nb10.run_with_hooks_exercise.check(solved.run_with_hooks).passed


def _head_patch(edit):
    def make(clean_heads, head, head_dim):
        def patch_head(module, args):
            return edit(args[0], clean_heads, head, head_dim)
        return patch_head
    return make


def _strided(x, clean, head, d):
    out = x.clone()
    heads = x.shape[-1] // d
    out[..., head::heads] = clean[..., head::heads]
    return (out,)


def _all_heads(x, clean, head, d):
    return (clean.clone(),)


def _off_by_one(x, clean, head, d):
    out = x.clone()
    out[..., (head - 1) * d:head * d] = clean[..., (head - 1) * d:head * d]
    return (out,)


def _in_place(x, clean, head, d):
    x[..., head * d:(head + 1) * d] = clean[..., head * d:(head + 1) * d]


def _into_clean(x, clean, head, d):
    cols = [c for c in range(x.shape[-1]) if not head * d <= c < (head + 1) * d]
    out = clean[:]
    out[..., cols] = x[..., cols]
    return (out,)


def test_exercise_1_names_the_typical_mistakes():
    assert "[head_dim, heads]" in mistakes(nb10.head_patch_exercise, _head_patch(_strided))
    assert "you patched every head" in mistakes(nb10.head_patch_exercise, _head_patch(_all_heads))
    assert ("you patched columns 0 to 3; head 1, of 3 heads of 4 columns each, is columns 4 to 7"
            in mistakes(nb10.head_patch_exercise, _head_patch(_off_by_one)))
    in_place = mistakes(nb10.head_patch_exercise, _head_patch(_in_place))
    assert "edits args[0] in place and returns nothing" in in_place and "edited args[0] in place" in in_place
    assert "wrote into `clean_heads`" in mistakes(nb10.head_patch_exercise, _head_patch(_into_clean))
    assert "not a function" in mistakes(nb10.head_patch_exercise, lambda clean_heads, head, head_dim: None)
    got = nb10.head_patch_exercise.check(lambda clean_heads, head, head_dim: lambda module, args, output: None)
    assert not got.passed and "forward pre hook" in " ".join(got.mistakes)


def _positions(x, clean, head, d):
    out = x.clone()
    columns = slice(head * d, (head + 1) * d)
    out[:, columns] = clean[:, columns]  # dimension 1 is the position
    return (out,)


def _as_list(x, clean, head, d):
    out = x.clone()
    out[..., head * d:(head + 1) * d] = clean[..., head * d:(head + 1) * d]
    return [out]


def _zeroed(x, clean, head, d):
    out = x.clone()
    out[..., head * d:(head + 1) * d] = 0.0
    return (out,)


def test_exercise_1_names_positions_lists_and_ablation():
    """Three mistakes learners made: indexing the positions, returning a list, zeroing the head."""
    positions = failed_checks(nb10.head_patch_exercise.check(_head_patch(_positions)))
    assert positions == {"takes exactly one head's columns from the clean run":
                         "you took positions 4 to 7 from the clean run: heads_out[:, columns] indexes dimension 1, "
                         "the positions. The heads are the last dimension."}
    as_list = failed_checks(nb10.head_patch_exercise.check(_head_patch(_as_list)))
    assert as_list == {
        "returns the new arguments": "your pre-hook returned a list: return a tuple. PyTorch puts "
                                     "anything that is not a tuple into one, so out_proj would get the list itself.",
        "takes exactly one head's columns from the clean run": "return a tuple first (see above)."}
    zeroed = failed_checks(nb10.head_patch_exercise.check(_head_patch(_zeroed)))
    assert zeroed == {"takes exactly one head's columns from the clean run":
                      "you set head 1's columns to zero: that is ablation, not a patch. Take them from the clean "
                      "run's clean_heads."}
    assert nb10.head_patch_exercise.check(solved.make_head_patch).passed


def _steer(edit):
    def make(vector, strength, position):
        def steer(module, args, output):
            return edit(output, vector, strength, position)
        return steer
    return make


def _no_strength(out, v, s, p):
    new = out.clone()
    new[:, p] = new[:, p] + v
    return new


def _everywhere(out, v, s, p):
    return out + s * v


def _batch_index(out, v, s, p):
    new = out.clone()
    new[p] = new[p] + s * v
    return new


def _only_position(out, v, s, p):
    return out[:, p] + s * v


def _adds_in_place(out, v, s, p):
    out[:, p] += s * v


def _scales_vector(out, v, s, p):
    v *= s
    new = out.clone()
    new[:, p] = new[:, p] + v
    return new


def test_exercise_2_names_the_typical_mistakes():
    assert "add strength * vector" in mistakes(nb10.steering_exercise, _steer(_no_strength))
    assert "at every position" in mistakes(nb10.steering_exercise, _steer(_everywhere))
    assert "every example of the batch" in mistakes(nb10.steering_exercise, _steer(_batch_index))
    assert "not only the steered position" in mistakes(nb10.steering_exercise, _steer(_only_position))
    assert "adds to the output in place and returns nothing" in mistakes(nb10.steering_exercise,
                                                                          _steer(_adds_in_place))
    assert "changed `vector` itself" in mistakes(nb10.steering_exercise, _steer(_scales_vector))


def _replaces(out, v, s, p):
    new = out.clone()
    new[:, p] = s * v
    return new


def _squared(out, v, s, p):
    new = out.clone()
    new[:, p] = new[:, p] + s * s * v
    return new


def _subtracts(out, v, s, p):
    new = out.clone()
    new[:, p] = new[:, p] - s * v
    return new


def test_exercise_2_says_what_went_wrong_at_the_position():
    """Hooks that index [:, position] right but compute the wrong value there fail only the first check,
    which names the mistake; scaling `vector` in place gives the right output once, and only the last
    check fails."""
    first = "adds strength × vector at the position"
    want = {
        _no_strength: "you added the vector itself: add strength * vector (here 0.5 × the vector).",
        _replaces: "you replaced output[:, position] with strength * vector: add it to what is there, "
                   "output[:, position] + strength * vector.",
        _squared: "you added strength × strength × vector: multiply the vector by strength once.",
        _subtracts: "you subtracted strength * vector: add it.",
    }
    zero = {"strength 0 changes nothing": "with strength 0 the output should stay exactly as it was."}
    for wrong, message in want.items():
        also = zero if wrong in (_no_strength, _replaces) else {}  # these change the output at strength 0 too
        assert failed_checks(nb10.steering_exercise.check(_steer(wrong))) == {first: message, **also}, wrong.__name__
    assert failed_checks(nb10.steering_exercise.check(_steer(_scales_vector))) == {
        "leaves the output and the vector as they were":
            "your hook changed `vector` itself (an in-place *= or +=): the next call would add a different "
            "vector. Compute strength * vector into a new tensor."}
    assert nb10.steering_exercise.check(solved.make_steering_hook).passed


def _no_removal(model, tokens, fwd_hooks):
    for name, hook in fwd_hooks:
        model.get_submodule(name).register_forward_hook(hook)
    return model(tokens)


def _no_finally(model, tokens, fwd_hooks):
    handles = [model.get_submodule(name).register_forward_hook(hook) for name, hook in fwd_hooks]
    out = model(tokens)
    for h in handles:
        h.remove()
    return out


def _swallows(model, tokens, fwd_hooks):
    handles = [model.get_submodule(name).register_forward_hook(hook) for name, hook in fwd_hooks]
    try:
        return model(tokens)
    except Exception:
        return None
    finally:
        for h in handles:
            h.remove()


def _reversed(model, tokens, fwd_hooks):
    return solved.run_with_hooks(model, tokens, list(reversed(fwd_hooks)))


def _ignores_hooks(model, tokens, fwd_hooks):
    return model(tokens)


def test_exercise_3_names_the_typical_mistakes():
    no_removal = mistakes(nb10.run_with_hooks_exercise, _no_removal)
    assert "still on the model after your function returned" in no_removal
    no_finally = mistakes(nb10.run_with_hooks_exercise, _no_finally)
    assert "`finally:`" in no_finally and "still on the model" not in no_finally
    assert "did not pass it on" in mistakes(nb10.run_with_hooks_exercise, _swallows)
    assert "ran in the order ['second', 'first']" in mistakes(nb10.run_with_hooks_exercise, _reversed)
    assert "the plain model's" in mistakes(nb10.run_with_hooks_exercise, _ignores_hooks)
    assert "returns None" in mistakes(nb10.run_with_hooks_exercise, lambda model, tokens, fwd_hooks: None)


def _on_the_model(model, tokens, fwd_hooks):
    handles = [model.register_forward_hook(hook) for name, hook in fwd_hooks]  # the name is not used
    try:
        return model(tokens)
    finally:
        for h in handles:
            h.remove()


def _last_handle_only(model, tokens, fwd_hooks):
    for name, hook in fwd_hooks:
        handle = model.get_submodule(name).register_forward_hook(hook)
    try:
        return model(tokens)
    finally:
        handle.remove()


def _no_return(model, tokens, fwd_hooks):
    handles = [model.get_submodule(name).register_forward_hook(hook) for name, hook in fwd_hooks]
    try:
        model(tokens)
    finally:
        for h in handles:
            h.remove()


def test_exercise_3_names_the_module_the_handle_and_the_return():
    on_model = failed_checks(nb10.run_with_hooks_exercise.check(_on_the_model))
    assert on_model == {
        "applies the hooks": "the hook given for 'blocks.1' ran on TinyTransformer, the whole model: register each "
                             "hook on the module its name gives, model.get_submodule(name).",
        "registers them in the order given": "the hook given for 'blocks.0' ran on TinyTransformer, the whole "
                                             "model: register each hook on the module its name gives, "
                                             "model.get_submodule(name)."}
    last_only = failed_checks(nb10.run_with_hooks_exercise.check(_last_handle_only))
    assert last_only == {
        "leaves no hook behind": "1 of the 2 hooks is still on the model after your function returned: keep "
                                 "every handle (in a list), not only the last, and call handle.remove() on each "
                                 "once the model has run.",
        "leaves no hook behind when a hook raises": "a hook raised, and 1 of the 2 hooks stayed on the model: "
                                                    "remove every handle in a `finally:` block, which runs also "
                                                    "when the forward pass raises."}
    no_return = failed_checks(nb10.run_with_hooks_exercise.check(_no_return))
    assert no_return == {
        "applies the hooks": "your function returns None: `return` what model(tokens) returned.",
        "registers them in the order given": "your function returns None: `return` what model(tokens) returned."}
    assert nb10.run_with_hooks_exercise.check(solved.run_with_hooks).passed


# ---------------------------------------------------------------------- what the notebook claims, per seed
def _patch_hook(clean_output, position):
    def patch(module, args, output):
        patched = output.clone()
        patched[:, position] = clean_output[:, position]
        return patched
    return patch


def patching_map(model, pairs, layers=LAYERS):
    a, b = pairs.clean_answers, pairs.corrupted_answers
    with hooklab.Recorder(model, *layers) as rec, torch.no_grad():
        ld_clean = nb10.logit_diff(model(pairs.clean), a, b).mean()
    with torch.no_grad():
        ld_corrupted = nb10.logit_diff(model(pairs.corrupted), a, b).mean()
    shares = torch.zeros(len(layers), nb10.LENGTH)
    for row, name in enumerate(layers):
        for position in range(nb10.LENGTH):
            with hooklab.Hooks() as hooks, torch.no_grad():
                hooks.forward(model.get_submodule(name), _patch_hook(rec[name].output, position))
                ld = nb10.logit_diff(model(pairs.corrupted), a, b).mean()
            shares[row, position] = (ld - ld_corrupted) / (ld_clean - ld_corrupted)
    return shares


def notebook_figures(trained: nb10.Trained) -> dict[str, object]:
    """Every trained-model figure notebook 10 makes a claim about, computed as the notebook does."""
    model = trained.model
    figures: dict[str, object] = {"accuracy": trained.test_accuracy}
    test_tokens, test_answers = nb10.make_batch(2000, seed=nb10.TEST_SEED)
    with hooklab.Recorder(model, *LAYERS) as rec, torch.no_grad():
        final = model(test_tokens)
        for name in LAYERS:
            scores = model.unembed(model.ln_f(rec[name].output[:, -1]))
            figures[f"lens {name}"] = (scores.argmax(-1) == test_answers).float().mean().item()
        figures["lens is the output"] = torch.allclose(model.unembed(model.ln_f(rec["blocks.1"].output)), final,
                                                       atol=1e-5)
    pairs = nb10.make_pairs(128, seed=7)
    with torch.no_grad():
        ld_clean = nb10.logit_diff(model(pairs.clean), pairs.clean_answers, pairs.corrupted_answers)
        ld_corrupted = nb10.logit_diff(model(pairs.corrupted), pairs.clean_answers, pairs.corrupted_answers)
    figures["signs"] = bool((ld_clean > 0).all() and (ld_corrupted < 0).all())
    figures["map"] = shares = patching_map(model, pairs)
    # ablation
    projections = [f"blocks.{i}.{part}" for i in range(2) for part in ("attn.out_proj", "mlp.fc_out")]
    with hooklab.Recorder(model, *projections, what=("input",)) as rec, torch.no_grad():
        model(test_tokens)
    means = {name: rec[name].input[0].mean(dim=0) for name in projections}  # one mean per position
    heads_in = rec["blocks.1.attn.out_proj"].input[0]
    pooled = heads_in.mean(dim=(0, 1))
    figures["heads' mean at the last position"] = ((heads_in[:, -1].mean(0) - pooled).norm(), pooled.norm())

    def ablated(name, value):
        def pre_hook(module, args):
            inputs = args[0].clone()
            inputs[...] = value
            return (inputs,)
        with hooklab.Hooks() as hooks, torch.no_grad():
            hooks.forward_pre(model.get_submodule(name), pre_hook)
            return nb10.accuracy(model(test_tokens), test_answers)

    for i in range(2):
        for part, label in (("attn.out_proj", "both heads"), ("mlp.fc_out", "MLP")):
            name = f"blocks.{i}.{part}"
            figures[f"blocks.{i} {label}"] = (ablated(name, 0.0), ablated(name, means[name]))
    # steering
    sets = nb10.make_pairs(512, seed=5, digits=(3, 7))
    with hooklab.Recorder(model, "blocks.0") as threes, torch.no_grad():
        model(sets.clean)
    with hooklab.Recorder(model, "blocks.0") as sevens, torch.no_grad():
        model(sets.corrupted)
    vector = (threes["blocks.0"].output[:, 3] - sevens["blocks.0"].output[:, 3]).mean(0)
    at_digit = torch.zeros(nb10.LENGTH, 1)
    at_digit[3] = 1.0
    other_sevens = nb10.make_pairs(256, seed=9, digits=(3, 7)).corrupted
    for strength in (0.0, 0.25, 0.5, 1.0, 2.0):
        with hooklab.Hooks() as hooks, torch.no_grad():
            hooks.forward(model.blocks[0], lambda module, args, output: output + strength * at_digit * vector)
            answer = model(other_sevens)[:, -1].argmax(-1)
        figures[f"steer {strength}"] = tuple(share.float().mean().item() for share in
                                             (answer == 3, answer == 7, (answer != 3) & (answer != 7)))
    lab = nb10.make_pairs(128, seed=21, digits=(3, 7))
    with hooklab.Hooks() as hooks, torch.no_grad():
        hooks.forward(model.blocks[0], lambda module, args, output: output + at_digit * vector)
        figures["lab steer 1"] = nb10.accuracy(model(lab.corrupted), lab.clean_answers)
    lab_map = patching_map(model, lab)
    figures["lab map"] = lab_map
    # attribution patching
    a, b = pairs.clean_answers, pairs.corrupted_answers
    with hooklab.Recorder(model, *LAYERS) as clean_rec, torch.no_grad():
        ld_clean_mean = nb10.logit_diff(model(pairs.clean), a, b).mean()
    with hooklab.Recorder(model, *LAYERS, what=("output", "grad")) as rec:
        metric = nb10.logit_diff(model(pairs.corrupted), a, b).mean()
        metric.backward()
    model.zero_grad(set_to_none=True)
    estimate = torch.stack([((clean_rec[n].output - rec[n].output) * rec[n].grad).sum(dim=(0, 2)) for n in LAYERS])
    figures["estimate"] = estimate / (ld_clean_mean - metric.detach())
    return figures


def claims(f: dict[str, object]) -> dict[str, bool]:
    """The notebook's claims about a trained model, each as the notebook states it."""
    shares, lab_map, estimate = f["map"], f["lab map"], f["estimate"]
    top3 = set(estimate.flatten().topk(3).indices.tolist())
    hot = set((shares.flatten() >= 0.9).nonzero()[:, 0].tolist())
    return {
        "accuracy ≥ 95%": f["accuracy"] >= 0.95,
        "lens: embed and blocks.0 ≤ 30%": f["lens embed"] <= 0.3 and f["lens blocks.0"] <= 0.3,
        "lens: blocks.1 ≥ 95%": f["lens blocks.1"] >= 0.95,
        "lens is the output": f["lens is the output"],
        "signs": f["signs"],
        "map: before the digit exactly 0": bool((shares[:, :3] == 0).all()),
        "map: embed exact": shares[0, 3] == 1 and shares[0].sum() == 1,
        "map: blocks.1 exact": shares[2, 7] == 1 and shares[2].sum() == 1,
        "map: blocks.0 ≥ 90% at the digit, < 10% at the end": shares[1, 3] >= 0.9 and shares[1, 7] < 0.1,
        "ablation: blocks.1 both heads ≤ 30%": max(f["blocks.1 both heads"]) <= 0.3,
        "ablation: blocks.0 both heads ≤ 50%": max(f["blocks.0 both heads"]) <= 0.5,
        "ablation: each block's MLP zero-ablated ≥ 95%": min(f["blocks.0 MLP"][0], f["blocks.1 MLP"][0]) >= 0.95,
        "steer 0: answers 7 ≥ 98%": f["steer 0.0"][1] >= 0.98,
        "steer 0.25: answers 7 ≥ 98%": f["steer 0.25"][1] >= 0.98,
        "steer 1: answers 3 ≥ 90%": f["steer 1.0"][0] >= 0.9,
        "steer up to 2: answers 3 or 7 ≥ 95%": all(f[f"steer {s}"][2] <= 0.05 for s in (0.0, 0.25, 0.5, 1.0, 2.0)),
        "ablation: the heads' last position at least half as far from their pooled mean as that mean is from 0": bool(
            f["heads' mean at the last position"][0] >= 0.5 * f["heads' mean at the last position"][1]),
        "lab: steer 1 answers 3 ≥ 90%": f["lab steer 1"] >= 0.9,
        "lab: the exact cells": lab_map[0, 3] == 1 and lab_map[2, 7] == 1 and lab_map[2, 3] == 0,
        "lab: embed at 5 below 90%": lab_map[0, 5] < 0.9,
        "attribution: the same three cells": top3 == hot and len(hot) == 3,
        "attribution: below patching there": all(estimate.flatten()[i] < shares.flatten()[i] for i in top3),
        "attribution: exactly 0 where the runs agree": bool((estimate[:, :3] == 0).all()
                                                            and (estimate[0, 4:] == 0).all()),
    }


@pytest.mark.slow
@pytest.mark.kernels
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_every_claim_holds_for_several_trained_models(seed):
    """Notebook 10 trains seed 0; its claims must not depend on that seed (nor on the CPU: this test
    runs again under `dev.py test --other-cpu`). Measured over seeds 0-9 on an Intel Xeon with three
    kernel sets (AVX-512, AVX2, the other CPU's). With AVX-512, "every answer 3 or 7 up to strength 2"
    failed for seeds 1, 5 and 8 (up to 1.2% answered neither; seed 8 with AVX2 too) and "further from the
    pooled mean than that mean is from 0" for seed 5 (0.84 times as far); with the other CPU's kernels
    none failed. So the notebook claims less."""
    trained = nb10.trained_copy(seed)
    assert len(trained.losses) == 200 and trained.losses[-1] < trained.losses[0] / 10
    failed = [text for text, holds in claims(notebook_figures(trained)).items() if not holds]
    assert not failed, f"seed {seed}: {failed}"


@pytest.mark.kernels
def test_training_is_seeded():
    a, b = nb10.train(seed=7, steps=20), nb10.train(seed=7, steps=20)
    assert a.losses == b.losses and all(torch.equal(p, q) for p, q in zip(a.model.parameters(),
                                                                          b.model.parameters()))
    assert not a.model.training and math.isfinite(a.test_accuracy)
    assert nb10.train(seed=8, steps=20).losses != a.losses


def test_recorder_cache_equals_hand_made_hooks():
    model = seeded(1, nb10.TinyTransformer).eval()
    tokens, _ = nb10.make_batch(5, seed=2)
    cache = {}
    handles = [model.get_submodule(n).register_forward_hook(
        lambda m, a, out, n=n: cache.__setitem__(n, out.detach().clone())) for n in LAYERS]
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        for h in handles:
            h.remove()
    with hooklab.Recorder(model, "embed", "blocks.?") as rec, torch.no_grad():
        model(tokens)
    assert list(rec.outputs()) == LAYERS and all(torch.equal(rec[n].output, cache[n]) for n in LAYERS)
    assert hooklab.count_hooks(model) == 0
    assert not isinstance(model.blocks[0].attn, nn.MultiheadAttention)
