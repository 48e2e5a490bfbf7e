"""The worked solutions of notebook 06's exercises (``hooklab.course.nb06_training_diagnostics``).

Imported only when a notebook shows a solution (``exercise.solution()``); a student build of the course
leaves this folder out. Each function has the name the notebook asks the learner to write."""

from __future__ import annotations


def make_stats_hook(store):
    def record(module, args, output):
        a = output.detach()
        per_channel_max = a.amax(dim=(0, 2, 3))  # the largest value of each channel
        store.append({
            "mean": a.mean().item(),
            "std": a.std().item(),
            "dead": (per_channel_max <= 0).float().mean().item(),
        })
    return record


def clip_grad_hook(param):
    norm = param.grad.norm()
    if norm > 1.0:
        param.grad.mul_(1.0 / norm)
