"""The model zoo of the conformance suite (tests/test_zoo.py): models people bring to hooklab after
the course, built small, offline (``weights=None``, small configs) and seeded.

Each :class:`Case` builds a model and the example to run it on (an ``(args, kwargs)`` pair, as
``hooklab.explore`` takes it). ``big`` marks the models whose full per-module sweep of
interventions runs only with ``-m zoo`` (``.ci/run`` does; the default test run samples them).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable

import torch
from torch import nn


@dataclasses.dataclass
class Case:
    name: str
    build: Callable[[], nn.Module]
    example: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]
    big: bool = False
    #: the model's passes must run in eval mode for two runs to agree (dropout, stochastic depth, BatchNorm)
    train_mode: bool = False


def _seeded(fn: Callable[[], Any], seed: int = 0) -> Any:
    torch.manual_seed(seed)
    return fn()


def _image(size: int, batch: int = 1, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ torchvision
def _resnet18() -> nn.Module:
    import torchvision
    return torchvision.models.resnet18(weights=None, num_classes=10).eval()


def _frozen_resnet18() -> nn.Module:
    model = _resnet18()
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("fc."))
    return model


def _mobilenet() -> nn.Module:
    import torchvision
    return torchvision.models.mobilenet_v3_small(weights=None, num_classes=10).eval()


def _efficientnet() -> nn.Module:
    import torchvision
    return torchvision.models.efficientnet_b0(weights=None, num_classes=10).train()  # stochastic depth, BN


def _convnext() -> nn.Module:
    from torchvision.models import ConvNeXt
    from torchvision.models.convnext import CNBlockConfig
    return ConvNeXt([CNBlockConfig(16, 32, 2), CNBlockConfig(32, None, 2)], stochastic_depth_prob=0.1,
                    num_classes=10).eval()


def _vit() -> nn.Module:
    from torchvision.models import VisionTransformer
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                             num_classes=10).eval()


def _swin() -> nn.Module:
    from torchvision.models import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4],
                           stochastic_depth_prob=0.2, num_classes=10).train()


def _detector(threshold: float | None = None) -> Callable[[], nn.Module]:
    """Faster R-CNN with random weights: with its 91 classes every score is about 1/91, under the
    default threshold of 0.05, so it detects nothing; ``threshold=0`` keeps 5 boxes (3 classes)."""
    def build() -> nn.Module:
        import torchvision
        extra = {} if threshold is None else {"box_score_thresh": threshold, "box_detections_per_img": 5,
                                              "num_classes": 3}
        return torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(  # few proposals: 8x faster
            weights=None, weights_backbone=None, min_size=128, max_size=128,
            rpn_pre_nms_top_n_test=100, rpn_post_nms_top_n_test=20, **extra).eval()
    return build


def _segmenter() -> nn.Module:
    import torchvision
    return torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                   num_classes=3).eval()


# ------------------------------------------------------------------ torch.nn
def _transformer() -> nn.Module:
    return nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32,
                          dropout=0.1, batch_first=True).train()  # training mode, with dropout


def _transformer_example() -> tuple[tuple[Any, ...], dict[str, Any]]:
    g = torch.Generator().manual_seed(2)
    src, tgt = torch.randn(2, 5, 16, generator=g), torch.randn(2, 4, 16, generator=g)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    return (src, tgt), {"tgt_mask": nn.Transformer.generate_square_subsequent_mask(4), "src_key_padding_mask": pad,
                        "memory_key_padding_mask": pad}


class GRUModel(nn.Module):
    """A GRU given its initial state, and a head on the last state."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(3, 8, num_layers=2, batch_first=True)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, h = self.gru(x, h0)
        return self.head(out[:, -1]), h


def _gru_example() -> tuple[tuple[Any, ...], dict[str, Any]]:
    g = torch.Generator().manual_seed(3)
    return (torch.randn(2, 6, 3, generator=g), torch.zeros(2, 2, 8)), {}


def _lstm() -> nn.Module:
    return nn.LSTM(3, 8, num_layers=2).train()  # training mode without dropout: nothing depends on the mode


def _lstm_example() -> tuple[tuple[Any, ...], dict[str, Any]]:
    g = torch.Generator().manual_seed(4)
    state = (torch.randn(2, 1, 8, generator=g), torch.randn(2, 1, 8, generator=g))
    return (torch.randn(5, 1, 3, generator=g), state), {}


def _attention() -> nn.Module:
    return nn.MultiheadAttention(8, 2, batch_first=True).eval()


def _attention_example() -> tuple[tuple[Any, ...], dict[str, Any]]:
    q = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(5))
    return (q, q, q), {"need_weights": True, "key_padding_mask": torch.tensor([[False] * 4, [False] * 3 + [True]])}


class SharedLayer(nn.Module):
    """One Linear called three times per forward pass, and registered under two names."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 6)
        self.shared = nn.Linear(6, 6)
        self.alias = self.shared  # named_modules() lists it once, as "shared"
        self.out = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.inp(x))
        h = torch.tanh(self.shared(h))
        h = torch.tanh(self.alias(h)) + h
        return self.out(self.shared(h))


class InPlace(nn.Module):
    """Activations that overwrite their input: the output of the layer before them changes after
    its forward hook ran."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act1 = nn.Linear(4, 8), nn.ReLU(inplace=True)
        self.fc2, self.act2 = nn.Linear(8, 8), nn.LeakyReLU(0.1, inplace=True)
        self.fc3 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act1(self.fc1(x))
        h = self.fc2(h)
        h.add_(0.5)  # a tensor operation, in place on fc2's output
        return self.fc3(self.act2(h))


class Compilable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


#: How a part of a model gets compiled (or ``"eager"``: not at all), for :class:`WithPart`.
PART_KINDS = ("eager", "torch.compile", "jit.trace", "jit.script", "part.compile()", "model.compile()")


class WithPart(nn.Module):
    """A model whose part ``body.1`` (a ReLU and a Linear) is made ``kind`` (:data:`PART_KINDS`), or, for
    ``"model.compile()"``, that is compiled in place as a whole; run once, as a training loop would have."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        part = nn.Sequential(nn.ReLU(), nn.Linear(8, 8))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script and torch.jit.trace are deprecated
            made = {"torch.compile": lambda: torch.compile(part, backend="eager"),
                    "jit.trace": lambda: torch.jit.trace(part, torch.zeros(2, 8)),
                    "jit.script": lambda: torch.jit.script(part)}.get(kind, lambda: part)()
        self.body, self.head = nn.Sequential(nn.Linear(4, 8), made), nn.Linear(8, 3)
        if kind in ("part.compile()", "model.compile()"):
            (part if kind == "part.compile()" else self).compile(backend="eager")
        self(torch.randn(2, 4, generator=torch.Generator().manual_seed(0)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def _vector(n: int = 4, batch: int = 2, seed: int = 6) -> Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]:
    return lambda: ((torch.randn(batch, n, generator=torch.Generator().manual_seed(seed)),), {})


# ------------------------------------------------------------------ Hugging Face transformers, timm
def _quiet_transformers() -> None:
    import transformers
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", module="transformers")


def _gpt2() -> nn.Module:
    _quiet_transformers()
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=16, bos_token_id=0,
                        eos_token_id=0)
    return GPT2LMHeadModel(config).eval()


def _bert() -> nn.Module:
    _quiet_transformers()
    from transformers import BertConfig, BertModel
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        vocab_size=50, max_position_embeddings=16)
    return BertModel(config).train()  # as built: training mode, dropout 0.1


def _tokens(**extra: Any) -> Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]:
    def example() -> tuple[tuple[Any, ...], dict[str, Any]]:
        ids = torch.randint(1, 50, (2, 7), generator=torch.Generator().manual_seed(7))
        kwargs: dict[str, Any] = {"input_ids": ids}
        if "attention_mask" in extra:
            kwargs["attention_mask"] = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
        return (), kwargs
    return example


def _timm_vit() -> nn.Module:
    import timm
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2,
                             drop_path_rate=0.1, num_classes=10).train()


def _image_example(size: int, batch: int = 1) -> Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]:
    return lambda: ((_image(size, batch),), {})


def _images(size: int) -> Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]:
    return lambda: (([torch.rand(3, size, size, generator=torch.Generator().manual_seed(8))],), {})


CASES: list[Case] = [
    Case("resnet18", lambda: _seeded(_resnet18), _image_example(64, 2)),
    Case("resnet18-frozen", lambda: _seeded(_frozen_resnet18), _image_example(64)),
    Case("mobilenet_v3_small", lambda: _seeded(_mobilenet), _image_example(64), big=True),
    Case("efficientnet_b0-train", lambda: _seeded(_efficientnet), _image_example(32, 2), big=True, train_mode=True),
    Case("convnext", lambda: _seeded(_convnext), _image_example(32)),
    Case("vit", lambda: _seeded(_vit), _image_example(32, 2)),
    Case("swin-train", lambda: _seeded(_swin), _image_example(32), train_mode=True),
    Case("fasterrcnn-empty", lambda: _seeded(_detector()), _images(128), big=True),
    Case("fasterrcnn-detections", lambda: _seeded(_detector(0.0)), _images(128), big=True),
    Case("lraspp-segmenter", lambda: _seeded(_segmenter), _image_example(64), big=True),
    Case("nn.Transformer-masks-train", lambda: _seeded(_transformer), _transformer_example, train_mode=True),
    Case("gru-state", lambda: _seeded(GRUModel).eval(), _gru_example),
    Case("lstm-state-train", lambda: _seeded(_lstm), _lstm_example),
    Case("multihead-attention", lambda: _seeded(_attention), _attention_example),
    Case("gpt2-hf", lambda: _seeded(_gpt2), _tokens()),
    Case("bert-hf-train", lambda: _seeded(_bert), _tokens(attention_mask=True), train_mode=True),
    Case("timm-vit-train", lambda: _seeded(_timm_vit), _image_example(32), train_mode=True),
    Case("shared-layer", lambda: _seeded(SharedLayer).eval(), _vector()),
    Case("inplace-activations", lambda: _seeded(InPlace).eval(), _vector()),
]

BY_NAME = {case.name: case for case in CASES}


# ------------------------------------------------------------------ hand-written references
# Written without hooklab's walker (hooklab.nested): the suite checks hooklab against these.
def walk(value: Any, path: str = "output") -> list[tuple[str, torch.Tensor]]:
    """Every tensor in ``value`` with its path, in hooklab's path notation, found independently."""
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    found: list[tuple[str, torch.Tensor]] = []
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            found += walk(getattr(value, f.name), f"{path}.{f.name}")
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        for field_name in value._fields:
            found += walk(getattr(value, field_name), f"{path}.{field_name}")
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            found += walk(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            found += walk(item, f"{path}[{key!r}]")
    return found


def snapshot(value: Any) -> dict[str, torch.Tensor]:
    """``{path: detached copy}`` of every tensor in ``value``."""
    return {p: t.detach().clone() for p, t in walk(value)}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def total(output: Any) -> torch.Tensor:
    """The sum of every floating-point tensor in the output (what hooklab.explore differentiates)."""
    parts = [t.sum() for _, t in walk(output) if t.is_floating_point()]
    return torch.stack(parts).sum()


class HandHooks:
    """``register_forward_hook`` on every named module, and ``register_hook`` on every tensor of each
    call's output that requires grad: per module, a list of calls ``{"args", "output", "grads",
    "reached"}``, exactly as a learner would write it."""

    def __init__(self, model: nn.Module) -> None:
        self.calls: dict[str, list[dict[str, Any]]] = {}
        self.handles = []
        for name, module in model.named_modules():
            self.calls[name] = []
            self.handles.append(module.register_forward_hook(self._hook(name)))

    def _hook(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            call: dict[str, Any] = {"args": snapshot(args), "output": snapshot(output), "grads": {}, "reached": False,
                                    "hooked": [p for p, t in walk(output) if t.requires_grad]}
            self.calls[name].append(call)
            for path, t in walk(output):
                if t.requires_grad:
                    def keep(grad: torch.Tensor | None, call: dict[str, Any] = call, path: str = path) -> None:
                        call["reached"] = True
                        call["grads"][path] = None if grad is None else grad.detach().clone()
                    t.register_hook(keep)
        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def grad_wrt_params(model: nn.Module, value: torch.Tensor) -> None:
    """Run backward from ``value`` without touching ``.grad`` (as hooklab.explore does)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if value.requires_grad and params:
        torch.autograd.grad(value, params, allow_unused=True)


class EvalPasses:
    """Runs the model as hooklab.explore does, by hand: every module in eval mode, the fused
    transformer fast path off, one thread; all restored afterwards."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def __enter__(self) -> "EvalPasses":
        self.modes = [(m, m.training) for m in self.model.modules()]
        self.fast = torch.backends.mha.get_fastpath_enabled()
        self.threads = torch.get_num_threads()
        self.model.eval()
        torch.backends.mha.set_fastpath_enabled(False)
        torch.set_num_threads(1)
        return self

    def __exit__(self, *exc: object) -> None:
        for m, training in self.modes:
            m.training = training
        torch.backends.mha.set_fastpath_enabled(self.fast)
        torch.set_num_threads(self.threads)
