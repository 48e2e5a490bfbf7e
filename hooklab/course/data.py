"""What several notebooks share: a small seeded model, the sample photo, thread pinning.

Everything offline, nothing downloaded.
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol, TypeVar

import torch
from torch import nn


__all__ = ["seeded", "tiny_mlp", "fit", "sample_photo", "IMAGENET_MEAN", "IMAGENET_STD"]

#: The per-channel mean and std that torchvision's ImageNet models expect (RGB).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

T = TypeVar("T")


def seeded(seed: int | None, build: Callable[[], T]) -> T:
    """``build()`` with PyTorch's global generator seeded by ``seed``, without changing the
    generator's state for the caller (``torch.random.fork_rng``): building a model here leaves the
    random numbers of the notebook's own cells as they were. ``seed=None``: no seeding.

    >>> a = seeded(0, lambda: torch.randn(2)); b = seeded(0, lambda: torch.randn(2))
    >>> torch.equal(a, b)
    True
    """
    if seed is None:
        return build()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def tiny_mlp(sizes: tuple[int, ...] = (4, 8, 3), *, seed: int | None = 0) -> nn.Sequential:
    """``Linear -> ReLU -> ... -> Linear`` with the given layer sizes, seeded for repeatable weights.

    >>> tiny_mlp((3, 4, 2))
    Sequential(
      (0): Linear(in_features=3, out_features=4, bias=True)
      (1): ReLU()
      (2): Linear(in_features=4, out_features=2, bias=True)
    )
    """
    if len(sizes) < 2:
        raise ValueError(f"sizes needs at least an input and an output size, got {sizes}.")

    def build() -> nn.Sequential:
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)

    return seeded(seed, build)


class Optimizer(Protocol):
    """What :func:`fit` needs of an optimizer: any ``torch.optim`` optimizer, or
    :class:`hooklab.course.shapes.Adam`."""

    def zero_grad(self) -> None: ...

    def step(self) -> object: ...


def fit(model: nn.Module, optimizer: Optimizer, loss_fn: Callable[..., torch.Tensor],
        batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> list[float]:
    """The training loop of every notebook, written out once; returns each step's loss (measured
    before that step's update)::

        for inputs, targets in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            optimizer.step()

    Hooks on the model fire inside it exactly as in a loop you write yourself.

    >>> model = nn.Linear(1, 1, bias=False); _ = nn.init.zeros_(model.weight)
    >>> x, y = torch.ones(4, 1), torch.full((4, 1), 2.0)
    >>> fit(model, torch.optim.SGD(model.parameters(), lr=0.25), nn.functional.mse_loss, [(x, y)] * 3)
    [4.0, 1.0, 0.25]
    """
    losses = []
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def sample_photo(size: int = 224) -> torch.Tensor:
    """The photograph matplotlib ships (Grace Hopper), as a normalised ``[1, 3, size, size]`` tensor.

    Normalised with the ImageNet mean and std that torchvision's models expect.
    """
    from matplotlib import cbook
    from PIL import Image

    path = cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
    img = Image.open(path).convert("RGB")
    side = min(img.size)
    left, top = (img.width - side) // 2, (img.height - side) // 2
    img = img.crop((left, top, left + side, top + side)).resize((size, size), Image.Resampling.BILINEAR)
    x = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).reshape(size, size, 3)
    x = x.permute(2, 0, 1).float().div(255)
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    return ((x - mean) / std).unsqueeze(0)
