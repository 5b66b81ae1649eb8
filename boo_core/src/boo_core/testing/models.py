"""Real networks to measure and test BOO on: torchvision's ResNets and vision transformers
(random weights: nothing is downloaded) and a GPT-style decoder block.

torchvision is the ``models`` extra (``pip install "boo-core[models]"``). Its wheels are
built against one torch build; where its C++ operators do not load beside the installed
torch (a CUDA-built torchvision beside a CPU torch), :func:`import_torchvision` still
imports it: its models need none of those operators (they serve detection: nms, roi_align).
"""

from __future__ import annotations

import math
import sys
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import BooError

INSTALL_HINT = 'pip install "boo-core[models]"'

#: The schemas torchvision's Python code registers fake kernels for at import; without its
#: C++ library they must exist for that import to succeed.
_TORCHVISION_SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
                        "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_stand_in: torch.library.Library | None = None


def with_running_statistics(model: nn.Module) -> nn.Module:
    """``model`` with non-trivial running statistics in every batch norm (means drawn from
    N(0, 1), variances from U(0.5, 2)), so that an inference batch norm is no identity."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.running_mean.normal_()
            module.running_var.uniform_(0.5, 2.0)
    return model


def import_torchvision() -> ModuleType:
    """``import torchvision``, also where its C++ operators cannot load beside this torch."""
    global _stand_in
    try:
        import torchvision
    except ModuleNotFoundError as e:
        raise BooError(f"torchvision is not installed ({INSTALL_HINT})") from e
    except RuntimeError as e:
        if "torchvision::" not in str(e) or _stand_in is not None:
            raise
        for name in [name for name in sys.modules if name == "torchvision" or name.startswith("torchvision.")]:
            del sys.modules[name]
        _stand_in = torch.library.Library("torchvision", "FRAGMENT")
        for schema in _TORCHVISION_SCHEMAS:
            _stand_in.define(schema)
        import torchvision
    return torchvision


def _head_initialised(model: nn.Module, head: nn.Linear) -> nn.Module:
    """torchvision zeroes some classifier heads; give it random weights so outputs and
    their gradients carry information to compare."""
    nn.init.normal_(head.weight, std=1 / math.sqrt(head.in_features))
    nn.init.normal_(head.bias, std=0.01)
    return model


def resnet(depth: int = 50, num_classes: int = 1000) -> nn.Module:
    """torchvision's ResNet-18/34/50/101/152 with random weights."""
    tv = import_torchvision()
    model = getattr(tv.models, f"resnet{depth}")(weights=None, num_classes=num_classes)
    return _head_initialised(model, model.fc)


def vit(image_size: int = 224, patch_size: int = 16, num_layers: int = 12, num_heads: int = 12,
        hidden_dim: int = 768, mlp_dim: int = 3072, num_classes: int = 1000) -> nn.Module:
    """torchvision's VisionTransformer (the defaults are ViT-B/16) with random weights."""
    tv = import_torchvision()
    model = tv.models.VisionTransformer(image_size=image_size, patch_size=patch_size, num_layers=num_layers,
                                        num_heads=num_heads, hidden_dim=hidden_dim, mlp_dim=mlp_dim,
                                        num_classes=num_classes)
    return _head_initialised(model, model.heads.head)


class DecoderBlock(nn.Module):
    """A GPT-style pre-norm decoder block: causal self-attention and a GELU MLP, each after
    a layer norm and added back to the residual stream. Input and output: (batch, tokens, width)."""

    def __init__(self, width: int = 1024, heads: int = 16, mlp_ratio: int = 4) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads {heads}")
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, mlp_ratio * width)
        self.down = nn.Linear(mlp_ratio * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=-1)
        q, k, v = (t.reshape(batch, tokens, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, tokens, width))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class AttentionBlock(nn.Module):
    """A pre-norm self-attention block as torchvision's ViT writes it: a batch-first
    ``nn.MultiheadAttention`` after a layer norm, added back to its input."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        y, _ = self.attention(y, y, y, need_weights=False)
        return x + y


class TinyConvNet(nn.Module):
    """Two convolutions (the second strided), ReLUs, global pooling and a linear head: the
    smallest network with every kind of BOO node a convnet has, for CPU tests."""

    def __init__(self, channels: int = 8, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1)
        self.head = nn.Linear(2 * channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        return self.head(x.mean(dim=(2, 3)))


#: The networks :func:`workload` builds.
WORKLOADS = ("resnet50", "vit_b_16", "decoder", "tiny_convnet", "resnext50_32x4d", "convnext_tiny", "resnet50_nchw")


def workload(name: str, batch: int, *, small: bool = False) -> tuple[nn.Module, tuple[int, ...], bool]:
    """A benchmark network with random weights (seeded: every call builds the same one), the
    shape of one input batch, and whether inputs are channels-last. ``small`` gives its
    CPU-sized cousin: ResNet-18 at 64 x 64, a two-layer ViT, a narrow decoder block.
    ``resnet50_nchw`` is ``resnet50`` not converted to channels-last.
    The decoder's batch is ``batch`` sequences of 1,024 tokens (64 when small)."""
    torch.manual_seed(0)
    if name in ("resnet50", "resnet50_nchw"):  # resnet50_nchw: left channels-first, as most users run it
        model, size = (resnet(18), 64) if small else (resnet(50), 224)
        if name == "resnet50_nchw":
            return model, (batch, 3, size, size), False
        return model.to(memory_format=torch.channels_last), (batch, 3, size, size), True
    if name == "vit_b_16":
        size = 64 if small else 224
        return (vit(64, 16, 2, 4, 128, 256) if small else vit()), (batch, 3, size, size), False
    if name == "decoder":
        width = 128 if small else 1024
        return DecoderBlock(width, 4 if small else 16), (batch, 64 if small else 1024, width), False
    if name == "tiny_convnet":
        return TinyConvNet(), (batch, 3, 16, 16), False
    if name in ("resnext50_32x4d", "convnext_tiny"):  # grouped convolutions; 7x7 depthwise ones
        model = getattr(import_torchvision().models, name)(weights=None)
        return model.to(memory_format=torch.channels_last), (batch, 3, 224, 224), True
    raise BooError(f"unknown network {name!r} (expected one of {', '.join(WORKLOADS)})")


def workload_on(name: str, batch: int, device: str | torch.device, dtype: torch.dtype, *, small: bool = False,
                generator: torch.Generator | None = None) -> tuple[nn.Module, torch.Tensor]:
    """:func:`workload`'s network moved to ``device`` in ``dtype``, and a random input batch
    for it there (drawn on the CPU, from ``generator`` if given), channels-last where the
    network takes it so."""
    model, shape, channels_last = workload(name, batch, small=small)
    x = torch.randn(shape, generator=generator).to(device, dtype)
    return model.to(device, dtype), x.contiguous(memory_format=torch.channels_last) if channels_last else x
