"""Inductor's generated code calls BOO's kernel calls directly, not through the dispatcher.

Inductor lowers an operator it has no lowering for, ``torch.ops.boo.fused`` included, to a
fallback node whose generated line is ``torch.ops.boo.fused.default(pattern, payload,
[tensors])``: every call then crosses the C++ dispatcher twice (into the Python kernel and
back), converting the payload string and the tensor list each way. On the H100's host that
was about 14 µs of a ResNet-50 inference node's time under cProfile, the largest share of
what a node costs under ``iree_boo_inductor`` beyond ``iree_boo`` (docs/gpu.md).

:func:`install` registers a lowering for the op that makes the same fallback node (same
layout constraint, same buffers, same size checks), named so that the generated line calls
:func:`~.custom_op.fused_call` from Inductor's ``extern_kernels`` namespace instead, where
Inductor's own extern kernels (``extern_kernels.mm``...) live. The payload is then a
constant of the generated module, so its hash is computed once. Where this torch's Inductor
lacks what that needs, nothing is registered and the dispatcher serves as before.
"""

from __future__ import annotations

import logging

import torch

from .custom_op import fused_call

logger = logging.getLogger(__name__)

#: The attribute of ``torch._inductor.select_algorithm.extern_kernels`` the generated code calls.
EXTERN_NAME = "boo_fused"

_installed: bool | None = None


def install() -> bool:
    """Register the direct-call lowering of ``torch.ops.boo.fused`` with Inductor (once per
    process); whether it is in place."""
    global _installed
    if _installed is None:
        try:
            _installed = _register()
        except Exception as e:  # another torch's Inductor internals: a speed-up, never a failure
            logger.info("Inductor will call torch.ops.boo.fused through the dispatcher (%s)", e)
            _installed = False
    return _installed


def _register() -> bool:
    from torch._inductor import ir, lowering
    from torch._inductor.select_algorithm import extern_kernels
    from torch._library.utils import get_layout_constraint_tag
    from torch.utils import _pytree as pytree

    op = torch.ops.boo.fused.default
    if not hasattr(ir.FallbackKernel, "set_python_kernel_name"):
        return False

    class DirectFusedCall(ir.FallbackKernel):
        """The fallback node of ``torch.ops.boo.fused``, called as ``extern_kernels.boo_fused``."""

        def set_python_kernel_name(self, python_kernel_name: str | None) -> None:
            self.python_kernel_name = f"extern_kernels.{EXTERN_NAME}"

    def wrapped(node: object) -> object:  # as Inductor's own fallback handler wraps its outputs
        if not isinstance(node, ir.IRNode):
            return node
        wrap = getattr(node, "wrap_for_lowering", None)  # torch 2.13; earlier: TensorBox.create
        return wrap() if wrap is not None else ir.TensorBox.create(node)

    def lower(*args, **kwargs):
        return pytree.tree_map(wrapped, DirectFusedCall.create(op, *args, **kwargs))

    setattr(extern_kernels, EXTERN_NAME, fused_call)
    # What Inductor's implicit fallback for this op would register, with the node above.
    lowering.add_needs_realized_inputs(op)
    lowering.add_layout_constraint(op, lowering.tag_to_layout_constraint(
        get_layout_constraint_tag(op, with_default=True)))
    lowering.register_lowering(op, type_promotion_kind=None)(lower)
    return True
