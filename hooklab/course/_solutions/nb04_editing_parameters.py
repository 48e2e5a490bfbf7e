"""The worked solutions of notebook 04's exercises (``hooklab.course.nb04_editing_parameters``).

Imported only when a notebook shows a solution (``exercise.solution()``); a student build of the course
leaves this folder out. Each function has the name the notebook asks the learner to write."""

from __future__ import annotations

import torch


def max_norm(module, args):
    """A forward pre-hook for a layer that keeps its trained weight as ``module.weight_orig`` (section 3b):
    the weight the forward pass uses is ``weight_orig`` with every row limited to an L2 norm of 1.0."""
    # torch.renorm (no underscore) builds a new tensor, recorded by autograd: weight_orig is never
    # changed in place, and the gradient flows back to it through renorm
    module.weight = torch.renorm(module.weight_orig, p=2, dim=0, maxnorm=1.0)


def make_weight_logger(log):
    """Return a forward pre-hook that appends a snapshot of ``module.weight`` to ``log``."""
    def log_weight(module, args):
        # detach(): no autograd history kept alive; clone(): our own memory, so later
        # in-place updates by the optimizer cannot change what we stored
        log.append(module.weight.detach().clone())
    return log_weight


def fold_pruned(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    """A load_state_dict pre-hook: turn ``*_orig`` and ``*_mask`` pairs into the pruned tensor."""
    for key in list(state_dict):  # a list: we change the dict while going through it
        if key.startswith(prefix) and key.endswith("_orig"):
            name = key[: -len("_orig")]
            mask = state_dict.pop(name + "_mask")
            state_dict[name] = state_dict.pop(key) * mask
