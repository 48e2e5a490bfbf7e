"""The worked solutions of notebook 11's exercises (``hooklab.course.nb11_per_sample_gradients``).

Imported only when a notebook shows a solution (``exercise.solution()``); a student build of the course
leaves this folder out. Each function has the name the notebook asks the learner to write."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def per_sample_linear(a, g):
    """Per-example weight and bias gradients of an nn.Linear from its input a and grad_output g."""
    weight = torch.einsum("n...o,n...i->noi", g, a)   # sum over every dimension between batch and features
    bias = torch.einsum("n...o->no", g)
    return weight, bias


def clip_and_sum(grads, max_norm):
    """Scale each example's gradient (all parameters together) to a norm of at most max_norm, then add them up."""
    norms = torch.cat([g.flatten(1) for g in grads.values()], dim=1).norm(dim=1)    # [n]
    factor = (max_norm / (norms + 1e-6)).clamp(max=1.0)                               # never scales up
    return {name: torch.einsum("n,n...->...", factor, g) for name, g in grads.items()}


def per_sample_conv2d(conv, a, g):
    """Per-example weight gradients of conv (groups=1) from its input a and grad_output g."""
    patches = F.unfold(a, conv.kernel_size, dilation=conv.dilation, padding=conv.padding,
                       stride=conv.stride)                          # [n, in * kh * kw, positions]
    weight = torch.einsum("nop,nkp->nok", g.flatten(2), patches)   # [n, out, in * kh * kw]
    return weight.reshape(len(a), *conv.weight.shape)
