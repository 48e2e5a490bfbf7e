"""The worked solutions of notebook 07's exercises (``hooklab.course.nb07_grad_cam``).

Imported only when a notebook shows a solution (``exercise.solution()``); a student build of the course
leaves this folder out. Each function has the name the notebook asks the learner to write."""

from __future__ import annotations

import torch


def my_cam(activations, gradients):
    weights = gradients.mean(dim=(2, 3), keepdim=True)   # one weight per channel: [N, C, 1, 1]
    return torch.relu((weights * activations).sum(dim=1))  # [N, h, w]


def make_cam_hook(saved):
    def save(module, args, output):
        saved["activations"] = output.detach().clone()   # clone: an in-place op may follow

        def save_grad(grad):
            saved["gradients"] = grad.detach()
        output.register_hook(save_grad)                   # fires during backward
    return save
