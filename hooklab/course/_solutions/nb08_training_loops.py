"""The worked solutions of notebook 08's exercises (``hooklab.course.nb08_training_loops``).

Imported only when a notebook shows a solution (``exercise.solution()``); a student build of the course
leaves this folder out. Each function has the name the notebook asks the learner to write."""

from __future__ import annotations

import torch

import hooklab.course.nb08_training_loops as nb08


def clamp_step(optimizer, scaler, limit=1.0):
    scaler.unscale_(optimizer)  # true units from here on; scaler.step will not unscale again
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    torch.nn.utils.clip_grad_value_(params, limit)


def make_stats_hook(store):
    def record(module, args, output):
        if nb08.in_backward():  # a checkpoint recomputing the segment: not a new forward pass
            return
        store.append(output.detach().mean().item())
    return record


def strip_prefixes(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    for key in list(state_dict):  # a list: the loop changes the dict
        rest = key[len(prefix):] if key.startswith(prefix) else None
        if rest is None:
            continue
        stripped = rest
        while stripped.startswith(("module.", "_orig_mod.")):
            stripped = stripped.split(".", 1)[1]
        if stripped != rest:
            state_dict[prefix + stripped] = state_dict.pop(key)
