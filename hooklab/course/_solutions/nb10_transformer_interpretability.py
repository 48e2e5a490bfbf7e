"""The worked solutions of notebook 10's exercises (``hooklab.course.nb10_transformer_interpretability``).

Imported only when a notebook shows a solution (``exercise.solution()``); a student build of the course
leaves this folder out. Each function has the name the notebook asks the learner to write."""

from __future__ import annotations


def make_head_patch(clean_heads, head, head_dim):
    """A forward pre-hook for `attn.out_proj` that puts one head's output from the clean run in place."""
    def patch_head(module, args):
        heads_out = args[0].clone()                    # [batch, position, heads * head_dim]; a copy
        columns = slice(head * head_dim, (head + 1) * head_dim)
        heads_out[..., columns] = clean_heads[..., columns]
        return (heads_out,)                            # a pre-hook returns the new positional arguments
    return patch_head


def make_steering_hook(vector, strength, position):
    """A forward hook that adds `strength * vector` to the output at `position`, in every example."""
    def steer(module, args, output):
        steered = output.clone()
        steered[:, position] = steered[:, position] + strength * vector  # [width] broadcasts over the batch
        return steered
    return steer


def run_with_hooks(model, tokens, fwd_hooks):
    """Run `model(tokens)` with forward hooks on named modules; remove every hook afterwards."""
    handles = []
    try:
        for name, hook in fwd_hooks:                   # in order: two hooks on one module run in this order
            handles.append(model.get_submodule(name).register_forward_hook(hook))
        return model(tokens)
    finally:                                           # also when a hook or the model raises
        for handle in handles:
            handle.remove()
