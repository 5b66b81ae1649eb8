"""The kernels ``torch.compile(backend="iree_boo")`` would build for a model, found without
building them: what a benchmark of a model's kernels, or a preload of them, starts from."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.utils._pytree as pytree

from ..settings import settings_override
from ..signatures.signature import Signature
from .rewrite import collecting_signatures


def kernel_signatures(fn: Callable[..., object], *inputs: object, backward: bool = False) -> list[Signature]:
    """The distinct signatures of the BOO kernels that ``torch.compile(fn, backend="iree_boo")``
    builds for ``fn(*inputs)``, in the order its graphs meet them; with ``backward``, those of
    the gradients too (BOO's backward kernels on; the gradient taken is that of the sum of
    ``fn``'s outputs that require one). One step runs on the inputs' device, every op on
    PyTorch (no kernel is built or loaded); without ``backward`` it runs under ``no_grad``.
    Put a model in ``train()`` or ``eval()`` first: its batch norms' kernels differ. Dynamo
    is reset before and after."""
    return [signature for signature, _ in kernel_calls(fn, *inputs, backward=backward)]


def kernel_calls(fn: Callable[..., object], *inputs: object, backward: bool = False) -> list[tuple[Signature, int]]:
    """:func:`kernel_signatures`, each with how many times one step calls it (a ResNet-50's
    bottleneck blocks call the same few kernels again and again)."""
    torch._dynamo.reset()
    try:
        with collecting_signatures() as found, settings_override(use_backward_kernels=backward):
            compiled = torch.compile(fn, backend="iree_boo", dynamic=False)
            if not backward:
                with torch.no_grad():
                    compiled(*inputs)
            else:
                outputs = [t for t in pytree.tree_leaves(compiled(*inputs))
                           if isinstance(t, torch.Tensor) and t.requires_grad]
                if not outputs:
                    raise ValueError("backward=True: no output of fn requires a gradient")
                sum(t.float().sum() for t in outputs).backward()
    finally:
        torch._dynamo.reset()
    return [(signature, found.calls[name]) for name, signature in found.items()]
