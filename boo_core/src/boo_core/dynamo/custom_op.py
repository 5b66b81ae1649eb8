"""``torch.ops.boo.fused``: a BOO kernel call as a torch operator.

Graphs handed on to a compiler (Inductor, or a custom nested backend) hold BOO calls as this
op, which has a fake implementation and so can be traced and scheduled like any other.
Arguments: the pattern's name, the call's JSON payload (spec, input and output metadata) and
the tensor inputs; it returns the root's tensors (the Nones of a tuple value left out).

It is a plain library operator with one implementation for every device, not a
``torch.library.custom_op``: those add about 8 µs of dispatch per call on the host (autograd
wrapping, aliasing checks), and a compiled graph's nodes need neither.
"""

from __future__ import annotations

import threading

import torch

from ..errors import BooError
from ..plugins.registry import BooOpRegistry
from .kernel_call import KernelCall

_calls: dict[tuple[int, str, str], KernelCall] = {}
_lock = threading.Lock()


def kernel_call(pattern_name: str, payload: str) -> KernelCall:
    """The one :class:`KernelCall` of this process for a pattern and payload (the backend's
    rewrite binds it when the graph compiles; a graph from elsewhere binds on first call)."""
    registry = BooOpRegistry.default()
    key = (registry.revision, pattern_name, payload)
    call = _calls.get(key)
    if call is not None:
        return call
    for pattern in registry.fusion_patterns():
        if pattern.name == pattern_name:
            with _lock:
                return _calls.setdefault(key, KernelCall.from_payload(pattern, payload))
    raise BooError(f"no installed plugin provides the fusion pattern {pattern_name!r}")


def fused_call(pattern: str, payload: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Run one fused BOO kernel call (see the module docstring): the op's implementation, and
    what Inductor's generated code calls in its place (:mod:`.inductor_calls`). An output the
    call discarded (one the graph does not read) is returned as an unwritten tensor: the op's
    schema has it."""
    call = kernel_call(pattern, payload)
    result = call(*inputs)
    values = (result,) if isinstance(result, torch.Tensor) else result
    return [v if v is not None else torch.empty_strided(m.shape, m.stride, dtype=m.dtype, device=inputs[0].device)
            for v, m in zip(values, call.outputs) if m is not None]


def _fused_fake(pattern: str, payload: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    call = kernel_call(pattern, payload)
    device = inputs[0].device
    return [torch.empty_strided(m.shape, m.stride, dtype=m.dtype, device=device) for m in call.outputs if m]


_library = torch.library.Library("boo", "FRAGMENT")
_library.define("fused(str pattern, str payload, Tensor[] inputs) -> Tensor[]")
_library.impl("fused", fused_call, "CompositeExplicitAutograd")
torch.library.register_fake("boo::fused", _fused_fake, lib=_library)
