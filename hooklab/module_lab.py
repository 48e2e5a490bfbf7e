"""Helpers for notebook 03 (module hooks): its small models and a memory report for stored tensors.

>>> import torch, hooklab.module_lab as lab
>>> model = lab.lab_model()
>>> kept = [model(torch.ones(1, 3)) for _ in range(2)]     # outputs stored with their graph
>>> lab.memory_held(kept).with_graph
2
>>> lab.memory_held([t.detach() for t in kept]).with_graph  # detached: no graph kept alive
0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import torch
from torch import nn

__all__ = ["lab_model", "small_cnn", "MemoryReport", "memory_held"]


def lab_model(sizes: tuple[int, ...] = (3, 4, 4, 2), *, seed_value: int = 19) -> nn.Sequential:
    """``Linear -> ReLU -> Linear -> ReLU -> Linear`` with seeded weights (the live lab's model).

    The default seed gives weights for which every ReLU unit is active for the lab's input
    ``[[1.0, -2.0, 0.5]]``, so gradients reach every layer.

    >>> [type(m).__name__ for m in lab_model()]
    ['Linear', 'ReLU', 'Linear', 'ReLU', 'Linear']
    """
    from .data import tiny_mlp

    return tiny_mlp(sizes, seed_value=seed_value)


def small_cnn(*, seed_value: int = 0) -> nn.Sequential:
    """A small convolutional network with two ``Conv2d`` layers, for ``[N, 1, H, W]`` images.

    ``Conv2d(1, 4) -> ReLU -> Conv2d(4, 8) -> ReLU -> AdaptiveAvgPool2d(1) -> Flatten -> Linear(8, 2)``,
    seeded so its weights (and outputs) are the same on every run.

    >>> small_cnn()(torch.ones(1, 1, 6, 6)).shape
    torch.Size([1, 2])
    """
    torch.manual_seed(seed_value)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(),
        nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2),
    )


@dataclass(frozen=True)
class MemoryReport:
    """What a collection of stored tensors keeps alive, computed from tensor sizes (repeatable).

    ``tensors``: how many tensors are stored; ``with_graph``: how many of them carry a
    ``grad_fn`` (and so keep their autograd graph alive); ``stored_bytes``: the bytes of the
    stored tensors themselves; ``graph_bytes``: the bytes of the tensors those graphs saved for
    backward (activations; parameters, which live anyway, and the stored tensors are not counted).
    """

    tensors: int
    with_graph: int
    stored_bytes: int
    graph_bytes: int

    @property
    def total_bytes(self) -> int:
        """``stored_bytes + graph_bytes``."""
        return self.stored_bytes + self.graph_bytes

    def __str__(self) -> str:
        return (f"{self.tensors} stored tensor{'' if self.tensors == 1 else 's'}, {self.with_graph} with a grad_fn, "
                f"{self.total_bytes:,} bytes kept alive ({self.stored_bytes:,} stored + "
                f"{self.graph_bytes:,} saved by their graphs)")


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple, set)) or hasattr(value, "__iter__") and not isinstance(value, (str, bytes)):
        for v in value:
            yield from _tensors(v)


def _storage(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def memory_held(stored: Any) -> MemoryReport:
    """Measure what ``stored`` (a tensor, or lists / tuples / dicts of them) keeps alive.

    Walks the autograd graph behind every stored tensor that has a ``grad_fn`` and adds up the
    tensors the graph saved for the backward pass (each storage counted once). Saved tensors
    already freed by a backward pass count as 0 bytes.

    >>> import torch
    >>> w = torch.ones(256, requires_grad=True)
    >>> y = w.exp().sum()                 # exp saves its result (256 floats) for backward
    >>> print(memory_held([y]))
    1 stored tensor, 1 with a grad_fn, 1,028 bytes kept alive (4 stored + 1,024 saved by their graphs)
    >>> print(memory_held([y.detach()]))
    1 stored tensor, 0 with a grad_fn, 4 bytes kept alive (4 stored + 0 saved by their graphs)
    """
    tensors = list(_tensors(stored))
    stored_storages: dict[int, int] = {}
    for t in tensors:
        ptr, nbytes = _storage(t)
        stored_storages[ptr] = nbytes
    saved: dict[int, int] = {}
    leaves: set[int] = set()
    seen: set[int] = set()
    stack = [t.grad_fn for t in tensors if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)  # AccumulateGrad: a leaf such as a parameter
        if isinstance(variable, torch.Tensor):
            leaves.add(_storage(variable)[0])
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                value = getattr(node, attr)
            except RuntimeError:  # already freed by a backward pass
                continue
            for t in _tensors(value) if isinstance(value, (tuple, list)) else [value]:
                if isinstance(t, torch.Tensor):
                    ptr, nbytes = _storage(t)
                    saved[ptr] = nbytes
        stack.extend(next_node for next_node, _ in node.next_functions)
    graph_bytes = sum(n for ptr, n in saved.items() if ptr not in leaves and ptr not in stored_storages)
    return MemoryReport(
        tensors=len(tensors),
        with_graph=sum(t.grad_fn is not None for t in tensors),
        stored_bytes=sum(stored_storages.values()),
        graph_bytes=graph_bytes,
    )
