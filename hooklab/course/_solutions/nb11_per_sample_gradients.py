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


def per_sample_embedding(emb, idx, g):
    """Per-example weight gradients of an nn.Embedding from its indices idx [n, L] and grad_output g [n, L, d]."""
    n, d = len(idx), emb.embedding_dim
    rows = idx.reshape(n, -1, 1).expand(-1, -1, d)   # [n, L, d]: the vocabulary row each position reads
    weight = g.new_zeros(n, emb.num_embeddings, d).scatter_add_(1, rows, g.reshape(n, -1, d))  # repeats add up
    if emb.padding_idx is not None:
        weight[:, emb.padding_idx] = 0                # nn.Embedding gives its padding row no gradient
    return weight


def per_sample_conv2d(conv, a, g):
    """Per-example weight gradients of conv (groups=1) from its input a and grad_output g."""
    patches = F.unfold(a, conv.kernel_size, dilation=conv.dilation, padding=conv.padding,
                       stride=conv.stride)                          # [n, in * kh * kw, positions]
    weight = torch.einsum("nop,nkp->nok", g.flatten(2), patches)   # [n, out, in * kh * kw]
    return weight.reshape(len(a), *conv.weight.shape)
