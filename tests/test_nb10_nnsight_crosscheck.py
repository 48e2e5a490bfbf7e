"""Notebook 10's hooks against an interpretability library: nnsight (a test-only dependency, pinned in
requirements.txt), on the same model and input.

* what ``hooklab.Recorder`` records at every layer equals what nnsight saves there;
* a patched run (blocks.0's output at the digit's position taken from the clean run) gives the same
  logits with the notebook's forward hook as with nnsight's assignment inside a trace;
* what notebook 10's table says about nnsight 0.8.1: wrapping a model replaces each module's
  ``forward`` (so the test wraps a copy), and a trace registers no PyTorch hook, also while the
  forward pass is under way; a forward hook on a wrapped module still fires, after nnsight's edit;
  ``.save()`` keeps the tensor itself, not a copy; ``NNsight(model)`` refuses a second invoke; the
  replaced ``forward`` stays after a trace and does nothing outside one.

Nothing is downloaded: the model is the notebook's tiny transformer, trained here.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

import hooklab
import hooklab.course.nb10_transformer_interpretability as nb10

try:
    import nnsight
except ImportError:  # a test-only dependency: under CI it must be there
    if os.environ.get("CI"):
        raise
    pytest.skip("nnsight is missing: pip install -r requirements.txt", allow_module_level=True)

LAYERS = ["embed", "blocks.0", "blocks.1"]


@pytest.fixture(scope="module")
def models():
    """The trained model (seed 0, as in the notebook), and nnsight's wrapper around a copy of it."""
    model = nb10.trained_copy(0).model
    twin = copy.deepcopy(model)
    return model, twin, nnsight.NNsight(twin)


def test_the_pinned_release_is_the_one_the_notebook_describes():
    assert nnsight.__version__ == "0.8.1"


def test_recorder_and_nnsight_record_the_same_activations(models):
    model, _, wrapped = models
    tokens, _ = nb10.make_batch(64, seed=11)
    with hooklab.Recorder(model, *LAYERS) as rec, torch.no_grad():
        logits = model(tokens)
    with torch.no_grad(), wrapped.trace(tokens):
        embed = wrapped.embed.output.save()
        block0 = wrapped.blocks[0].output.save()
        block1 = wrapped.blocks[1].output.save()
        output = wrapped.output.save()
    for name, saved in zip(LAYERS, (embed, block0, block1)):
        assert torch.equal(rec[name].output, saved), name
    assert torch.equal(logits, output)


def test_a_patched_run_agrees(models):
    model, _, wrapped = models
    pairs = nb10.make_pairs(64, seed=12)
    position = pairs.changed
    with hooklab.Recorder(model, "blocks.0") as rec, torch.no_grad():
        model(pairs.clean)
    clean = rec["blocks.0"].output

    def patch(module, args, output):  # the notebook's patch hook
        patched = output.clone()
        patched[:, position] = clean[:, position]
        return patched

    with hooklab.Hooks() as hooks, torch.no_grad():
        hooks.forward(model.blocks[0], patch)
        ours = model(pairs.corrupted)
    with torch.no_grad(), wrapped.trace(pairs.clean):
        theirs_clean = wrapped.blocks[0].output.save()
    with torch.no_grad(), wrapped.trace(pairs.corrupted):
        wrapped.blocks[0].output[:, position] = theirs_clean[:, position]
        theirs = wrapped.output.save()
    assert torch.equal(theirs_clean, clean)
    assert torch.equal(ours, theirs)
    with torch.no_grad():
        plain = model(pairs.corrupted)
    moved = nb10.logit_diff(ours, pairs.clean_answers, pairs.corrupted_answers) - \
        nb10.logit_diff(plain, pairs.clean_answers, pairs.corrupted_answers)
    assert (moved > 0).float().mean() >= 0.9, "the patch moved the answer towards the clean one"


def test_nnsight_replaces_forward_and_registers_no_hook(models):
    model, twin, wrapped = models
    assert type(model.blocks[0].forward).__name__ == "method", "the original model is untouched"
    assert type(twin.blocks[0].forward).__name__ != "method", "the wrapped copy's forward was replaced"
    assert "forward" in vars(twin.blocks[0]) and "forward" not in vars(model.blocks[0])
    tokens, _ = nb10.make_batch(4, seed=13)
    during = []
    with torch.no_grad(), wrapped.trace(tokens):
        wrapped.blocks[0].output[:, 0] = 0.0
        during.append(hooklab.count_hooks(twin))  # the forward pass is paused after blocks.0 here
        wrapped.output.save()
    assert during == [0] and hooklab.count_hooks(twin) == 0


def test_a_hook_on_a_wrapped_module_sees_nnsights_edit(models):
    _, twin, wrapped = models
    tokens, _ = nb10.make_batch(4, seed=14)
    with hooklab.Recorder(twin, "blocks.0") as rec, torch.no_grad(), wrapped.trace(tokens):
        wrapped.blocks[0].output[:, 2] = 0.0
        wrapped.output.save()
    assert (rec["blocks.0"].output[:, 2] == 0).all() and (rec["blocks.0"].output[:, 1] != 0).any()


def test_save_keeps_the_tensor_itself_not_a_copy(models):
    """The table's 'record' row: an assignment after .save() in the same trace changes what was saved;
    .clone().save() keeps the value."""
    _, _, wrapped = models
    tokens, _ = nb10.make_batch(4, seed=15)
    with torch.no_grad(), wrapped.trace(tokens):
        saved = wrapped.blocks[0].output.save()
        copied = wrapped.blocks[0].output.clone().save()
        wrapped.blocks[0].output[:, 0] = 0.0
    assert (saved[:, 0] == 0).all() and (copied[:, 0] != 0).any()
    assert torch.equal(saved[:, 1:], copied[:, 1:])


def test_a_plain_nnsight_wrapper_refuses_a_second_invoke(models):
    """The table's 'patch' row: NNsight(model) cannot batch two invokes of one trace (only its Hugging Face
    wrappers can), so a clean value comes from an earlier trace."""
    _, _, wrapped = models
    tokens, _ = nb10.make_batch(4, seed=16)
    with pytest.raises(NotImplementedError, match="does not support batching multiple invokes"):
        with torch.no_grad(), wrapped.trace() as tracer:
            with tracer.invoke(tokens):
                wrapped.blocks[0].output.save()
            with tracer.invoke(tokens):
                wrapped.blocks[0].output.save()


def test_the_replaced_forward_stays_and_is_inactive_outside_a_trace(models):
    """The table's 'hooks removed' row: after a trace, the wrapped copy keeps nnsight's forward, and a plain
    call gives what the original model gives."""
    model, twin, wrapped = models
    tokens, _ = nb10.make_batch(4, seed=17)
    with torch.no_grad(), wrapped.trace(tokens):
        wrapped.blocks[0].output[:, 0] = 0.0
        wrapped.output.save()
    assert "forward" in vars(twin.blocks[0]) and hooklab.count_hooks(twin) == 0
    with torch.no_grad():
        assert torch.equal(twin(tokens), model(tokens))
