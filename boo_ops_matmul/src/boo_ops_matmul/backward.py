"""Gradients of a matmul: matmuls of the output gradient with the stored operands.

For ``Y = alpha · op(A) @ op(B) + beta · C + bias`` (row-major, no activation):
``d op(A) = alpha · dY @ op(B)ᵀ`` and ``d op(B) = alpha · op(A)ᵀ @ dY``, each computed
directly in the operand's stored orientation; ``dC = beta · dY``; ``dbias`` sums dY over
every dimension but the last.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .signature import MatmulSignature

#: ``matmul(x, y, alpha) -> alpha · x @ y``; operands may be transposed views.
MatmulFn = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]


def input_gradients(signature: MatmulSignature, inputs: Sequence[torch.Tensor], grad: torch.Tensor,
                    needs: Sequence[bool], matmul: MatmulFn) -> list[torch.Tensor | None]:
    """Gradients of the launchable's inputs ``(a, b[, c][, bias])`` (None where not needed)."""
    if signature.col_major or signature.activation is not None:
        raise ValueError(f"{signature.func_name}: gradients need a row-major signature without activation")
    a, b = inputs[0], inputs[1]
    op_a = a.mT if signature.trans_a else a
    op_b = b.mT if signature.trans_b else b
    alpha = signature.alpha
    grads: list[torch.Tensor | None] = [None, None]
    if needs[0]:
        grads[0] = matmul(op_b, grad.mT, alpha) if signature.trans_a else matmul(grad, op_b.mT, alpha)
    if needs[1]:
        grads[1] = matmul(grad.mT, op_a, alpha) if signature.trans_b else matmul(op_a.mT, grad, alpha)
    if signature.beta != 0.0:
        grads.append(grad * signature.beta if needs[len(grads)] else None)
    if signature.bias:
        grads.append(grad.sum(dim=tuple(range(grad.dim() - 1))) if needs[len(grads)] else None)
    return grads
