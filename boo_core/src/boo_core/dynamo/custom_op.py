"""``torch.ops.boo.fused``: a BOO kernel call as a torch custom op.

Graphs handed on to a compiler (Inductor, or a custom nested backend) hold BOO calls as this
op, which has a fake implementation and so can be traced and scheduled like any other.
Arguments: the pattern's name, the call's JSON payload (spec and output metadata) and the
tensor inputs; it returns the root's tensors (the Nones of a tuple value left out).
"""

from __future__ import annotations

import functools

import torch

from ..errors import BooError
from ..plugins.registry import BooOpRegistry
from .kernel_call import KernelCall


@functools.lru_cache(maxsize=4096)
def _kernel_call(pattern_name: str, payload: str) -> KernelCall:
    for pattern in BooOpRegistry.default().fusion_patterns():
        if pattern.name == pattern_name:
            return KernelCall.from_payload(pattern, payload)
    raise BooError(f"no installed plugin provides the fusion pattern {pattern_name!r}")


@torch.library.custom_op("boo::fused", mutates_args=())
def fused(pattern: str, payload: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Run one fused BOO kernel call (see the module docstring)."""
    result = _kernel_call(pattern, payload)(*inputs)
    values = (result,) if isinstance(result, torch.Tensor) else result
    return [v for v in values if v is not None]


@fused.register_fake
def _fused_fake(pattern: str, payload: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    call = _kernel_call(pattern, payload)
    device = inputs[0].device
    return [torch.empty_strided(m.shape, m.stride, dtype=m.dtype, device=device) for m in call.outputs if m]
