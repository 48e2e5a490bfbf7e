"""Shared by the exercise-checker tests."""

from __future__ import annotations

import contextlib
import gc
from typing import Any, Iterator

import pytest
from torch.utils.hooks import RemovableHandle

from hooklab.lab.exercises import Exercise, Verdict


def failures(verdict: Verdict) -> str:
    """The messages of a verdict that must not pass, joined by `` | `` (for substring asserts)."""
    assert not verdict.passed, str(verdict)
    return " | ".join(verdict.mistakes)


def mistakes(exercise: Exercise, fn: object) -> str:
    """Check ``fn`` with ``exercise``; it must fail, and the messages come back as :func:`failures` gives them."""
    return failures(exercise.check(fn))


def failed_checks(verdict: Verdict) -> dict[str, str]:
    """``{check description: message}`` for the checks of a verdict that failed."""
    return {d: m for ok, d, m in verdict.lines if not ok}


class HooksMade:
    """Every hook registered while it watches (see :func:`hooks_made`), wherever it went."""

    def __init__(self) -> None:
        #: (a weak reference to the dict the hook went into, its id), for each hook made
        self.made: list[tuple[Any, int]] = []

    def left_behind(self) -> list[Any]:
        """The hook functions still registered on something that still exists (after a garbage
        collection): a hook on a model that was thrown away went with it, one on a model that lives
        on (a shared one, the learner's, a global hook) was left behind."""
        gc.collect()
        return [hooks[hook_id] for ref, hook_id in self.made if (hooks := ref()) is not None and hook_id in hooks]


@contextlib.contextmanager
def hooks_made(monkeypatch: pytest.MonkeyPatch) -> Iterator[HooksMade]:
    """Watch every hook registered in the block: on any module (of any model, also one built
    inside the block), tensor, or globally. PyTorch hands a ``RemovableHandle`` for each, so its
    constructor is watched. Unlike ``hooklab.count_hooks(None)``, which sees only global hooks, this
    sees a module hook left behind on a model the test never gets hold of."""
    seen = HooksMade()
    original = RemovableHandle.__init__

    def init(self: RemovableHandle, hooks_dict: Any, *args: Any, **kwargs: Any) -> None:
        original(self, hooks_dict, *args, **kwargs)
        seen.made.append((self.hooks_dict_ref, self.id))

    with monkeypatch.context() as patch:
        patch.setattr(RemovableHandle, "__init__", init)
        yield seen


def png_pixels(png: bytes) -> Any:
    """A PNG's pixels as an RGBA array (height x width x 4), to compare two pictures pixel for pixel."""
    import io

    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))


def embedding_hook_inputs(model: Any, idx: Any, y: Any) -> tuple[Any, Any]:
    """What a forward hook and a full backward hook on ``model[0]`` (an ``nn.Embedding``) see in one
    forward and backward pass of a summed cross-entropy: the token indices and the gradient of its
    output. The hooks are removed afterwards; the parameters' ``.grad`` hold the batch's gradient."""
    import torch.nn.functional as F

    saved: dict[str, Any] = {}
    handles = [model[0].register_forward_hook(lambda m, args, out: saved.update(idx=args[0])),
               model[0].register_full_backward_hook(lambda m, grad_input, grad_output: saved.update(g=grad_output[0]))]
    try:
        F.cross_entropy(model(idx), y, reduction="sum").backward()
    finally:
        for handle in handles:
            handle.remove()
    return saved["idx"], saved["g"]
