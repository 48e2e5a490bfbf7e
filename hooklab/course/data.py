"""Small models, data and the sample photo: everything offline, nothing downloaded."""

from __future__ import annotations

import random

import torch
from torch import nn

__all__ = ["seed", "tiny_mlp", "sample_photo"]


def seed(value: int = 0) -> None:
    """Seed Python's and PyTorch's random generators (same numbers on every run)."""
    random.seed(value)
    torch.manual_seed(value)


def tiny_mlp(sizes: tuple[int, ...] = (4, 8, 3), *, seed_value: int | None = 0) -> nn.Sequential:
    """``Linear -> ReLU -> ... -> Linear`` with the given layer sizes, seeded for repeatable weights."""
    if len(sizes) < 2:
        raise ValueError(f"sizes needs at least an input and an output size, got {sizes}.")
    if seed_value is not None:
        torch.manual_seed(seed_value)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


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
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    return ((x - mean) / std).unsqueeze(0)
