"""``boo_matmul`` and ``boo_linear``: matrix multiplies on torch tensors through BOO kernels."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from boo_core import ArgumentError, BooOpRegistry, Launchable, launchable_for
from boo_core.runtime.arguments import is_empty, require_number, require_tensor, require_tensors
from boo_core.runtime.autograd import Backward, launch

from .backward import input_gradients
from .signature import ACTIVATIONS, DTYPES, MatmulSignature, check_activation


def boo_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
) -> torch.Tensor:
    """``activation(alpha · a @ b + beta · c + bias)`` with a BOO kernel.

    ``a`` and ``b`` are both 2-D (M×K, K×N) or both 3-D with one batch size; ``c`` (optional,
    ignored when ``beta`` is 0, as in ``torch.addmm``) has the result's shape; ``bias`` has
    N values, added to every row. ``activation`` is None, ``"relu"``, ``"gelu"`` or ``"silu"``.

    An operand that is a transposed view of a contiguous tensor (``w.mT``) is passed to the
    kernel as stored, with the transpose in the kernel, without a copy; other
    non-contiguous operands are copied. Differentiable: gradients of a and b are
    matmuls, run as BOO kernels under ``BOO_USE_BACKWARD_KERNELS=1`` and by PyTorch
    otherwise. While autograd records, the kernel stops before the activation and PyTorch
    applies it, so its backward has the pre-activation values.
    """
    check_activation(activation)
    alpha, beta = require_number("boo_matmul", "alpha", alpha), require_number("boo_matmul", "beta", beta)
    if c is not None and beta == 0.0:
        c = None
    a, b, c, bias = _dense(a, b, c, bias)
    shape = _result_shape(a, b, c, bias)
    if is_empty(a, b):  # as torch does (K = 0 still has an M x N result); no kernel
        return _torch_result(a, b, c, alpha, beta, bias, activation)
    if len(shape) == 3 and shape[0] == 1:  # MIOpen's batch count 1 has no batch dimension
        c = None if c is None else c[0]
        return _matmul(a[0], b[0], c, alpha, beta, bias, activation).unsqueeze(0)
    return _matmul(a, b, c, alpha, beta, bias, activation)


def boo_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None,
               activation: str | None = None) -> torch.Tensor:
    """``activation(x @ w.T + b)``, as ``torch.nn.functional.linear`` (then the activation).

    ``x`` is (..., in_features), ``w`` is (out_features, in_features), ``b`` is
    (out_features,). Leading dimensions of ``x`` are flattened into the kernel's M.
    """
    x, w = require_tensor("boo_linear", "x", x), require_tensor("boo_linear", "w", w)
    if w.dim() != 2:
        raise ArgumentError(f"boo_linear: w must be 2-D (out_features, in_features), got shape {tuple(w.shape)}")
    if x.dim() == 0 or x.shape[-1] != w.shape[1]:
        raise ArgumentError(f"boo_linear: x of shape {tuple(x.shape)} does not end in in_features = {w.shape[1]} "
                            f"(w has shape {tuple(w.shape)})")
    if x.dim() == 2:
        return boo_matmul(x, w.mT, bias=b, activation=activation)
    rows = math.prod(x.shape[:-1])  # not reshape(-1, K): ambiguous when x is empty
    y = boo_matmul(x.reshape(rows, w.shape[1]), w.mT, bias=b, activation=activation)
    return y.reshape(*x.shape[:-1], w.shape[0])


def matmul_signature_for(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
) -> MatmulSignature:
    """The :class:`MatmulSignature` that ``boo_matmul`` runs for these arguments (outside autograd)."""
    alpha, beta = require_number("boo_matmul", "alpha", alpha), require_number("boo_matmul", "beta", beta)
    if c is not None and beta == 0.0:
        c = None
    a, b, c, bias = _dense(a, b, c, bias)
    shape = _result_shape(a, b, c, bias)
    if min(shape) == 0 or a.shape[-1] == 0:
        raise ArgumentError(f"boo_matmul: empty operands are not supported (a {tuple(a.shape)}, b {tuple(b.shape)})")
    _, trans_a = _as_stored(a)
    _, trans_b = _as_stored(b)
    return MatmulSignature(m=shape[-2], n=shape[-1], k=a.shape[-1], batch=shape[0] if len(shape) == 3 else 1,
                           trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=0.0 if c is None else beta,
                           bias=bias is not None, activation=activation, dtype=a.dtype)


def bound_matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None, *, alpha: float = 1.0,
                 beta: float = 1.0, bias: torch.Tensor | None = None, activation: str | None = None,
                 c_shape: tuple[int, ...] | None = None) -> Callable[..., torch.Tensor | None] | None:
    """``boo_matmul(a, b, c, ...)`` for tensors with exactly these tensors' metadata, settled
    now: the returned function takes ``(a, b[, c][, bias])`` and returns the product, or
    None (launching nothing) for tensors it was not bound for. None where boo_matmul would
    copy an operand or run no kernel. ``bias`` may be a ``(1, N)`` row (``aten.addmm``'s);
    ``c`` may come in another shape, viewed as ``c_shape`` (a residual added after the
    product's view). Outside autograd only (a compiled graph's node)."""
    if c is not None and beta == 0.0:
        c = None
    row = bias is not None and bias.dim() == 2 and bias.shape[0] == 1
    examples = [t for t in (a, b, c, bias) if t is not None]
    if c is not None and c_shape is not None:
        if not c.is_contiguous():
            return None
        c = c.view(c_shape)
    a, b, c, bias = _dense(a, b, c, bias.reshape(-1) if row else bias)
    shape = _result_shape(a, b, c, bias)
    if is_empty(a, b) or (len(shape) == 3 and shape[0] == 1) or (c is not None and not c.is_contiguous()):
        return None
    if not all(t.is_contiguous() or t.mT.is_contiguous() for t in (a, b)):
        return None  # an operand boo_matmul copies
    trans_a, trans_b = not a.is_contiguous(), not b.is_contiguous()
    launchable = _kernel(a, b, c, alpha, beta, bias, activation, trans_a, trans_b)

    reshaped = c is not None and c_shape is not None
    c_view = (lambda t: t.view(c_shape)) if reshaped else None  # noqa: E731

    def run(a: torch.Tensor, b: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor | None:
        if reshaped:
            if not rest[0].is_contiguous():
                return None
            rest = (c_view(rest[0]), *rest[1:])
        if row:
            rest = (*rest[:-1], rest[-1].reshape(-1))
        return launchable.try_call(a.mT if trans_a else a, b.mT if trans_b else b, *rest)

    # On a GPU, operands laid out as bound go to the kernel as they are (transposes, the
    # bias row's and a reshaped c's reshapes are views).
    views = [_transposed if trans_a else None, _transposed if trans_b else None, *[None] * (len(examples) - 2)]
    if reshaped:
        views[2] = c_view
    if row:
        views[-1] = _flattened
    direct = launchable.bind(examples, views)
    return run if direct is None else direct.or_else(run)


def _transposed(t: torch.Tensor) -> torch.Tensor:
    return t.mT


def _flattened(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1)


def _kernel(a, b, c, alpha, beta, bias, activation, trans_a: bool, trans_b: bool) -> Launchable:
    """The launchable for these operands, memoized on their metadata."""
    key = ("matmul", a.shape, b.shape, trans_a, trans_b, a.dtype, b.dtype, alpha, None if c is None else beta,
           bias is not None, activation)
    return launchable_for(key, lambda: matmul_signature_for(
        a, b, c, alpha=alpha, beta=beta, bias=bias, activation=activation), a.device)


def _matmul(a, b, c, alpha, beta, bias, activation) -> torch.Tensor:
    a_stored, trans_a = _as_stored(a)
    b_stored, trans_b = _as_stored(b)
    inputs = [a_stored, b_stored]
    if c is not None:
        inputs.append(c.contiguous())
    if bias is not None:
        inputs.append(bias.contiguous())
    record = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)
    launchable = _kernel(a, b, c, alpha, beta, bias, None if record else activation, trans_a, trans_b)
    if not record:
        return launchable(*inputs)
    y = launch(launchable, *inputs, backward=_backward(launchable.signature, inputs[0].device.type))
    return y if activation is None else ACTIVATIONS[activation](y)


def _backward(signature: MatmulSignature, device_type: str) -> Backward:
    """Gradients by BOO kernels or by PyTorch, per the setting in force at the forward call."""
    matmul = _kernel_matmul if BooOpRegistry.backward_kernels_for("matmul", device_type) else _torch_matmul
    return lambda inputs, grads, needs: input_gradients(signature, inputs, grads[0], needs, matmul)


def _kernel_matmul(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return boo_matmul(x, y, alpha=alpha)


def _torch_matmul(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    product = torch.matmul(x, y)
    return product if alpha == 1.0 else product * alpha


def _as_stored(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """The tensor to hand the kernel and whether it holds the operand transposed."""
    if t.is_contiguous():
        return t, False
    if t.mT.is_contiguous():
        return t.mT, True
    return t.contiguous(), False


def _torch_result(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, alpha: float, beta: float,
                  bias: torch.Tensor | None, activation: str | None) -> torch.Tensor:
    """What the kernel computes, with PyTorch (for empty operands)."""
    y = torch.matmul(a, b)
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        y = y + beta * c
    if bias is not None:
        y = y + bias
    return ACTIVATIONS[activation](y) if activation else y


def _dense(a: object, b: object, c: object, bias: object) -> tuple[torch.Tensor | None, ...]:
    """The operands, checked to be dense tensors of one dtype and device (and resolved)."""
    tensors = require_tensors("boo_matmul", {"a": a, "b": b, "c": c, "bias": bias}, dtypes=DTYPES,
                              optional=("c", "bias"))
    return tuple(tensors.get(name) for name in ("a", "b", "c", "bias"))


def _result_shape(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None,
                  bias: torch.Tensor | None) -> tuple[int, ...]:
    """The result's shape, after checking that the operands fit together."""
    if a.dim() != b.dim() or a.dim() not in (2, 3):
        raise ArgumentError(f"boo_matmul: a and b must both be 2-D (M×K, K×N) or both 3-D (batch×M×K, batch×K×N); "
                            f"got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[-1] != b.shape[-2] or a.shape[:-2] != b.shape[:-2]:
        raise ArgumentError(f"boo_matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not multiply "
                            "(a's columns must equal b's rows, and batch sizes must match)")
    shape = (*a.shape[:-1], b.shape[-1])
    if c is not None and tuple(c.shape) != shape:
        raise ArgumentError(f"boo_matmul: c has shape {tuple(c.shape)}; the result has shape {shape}")
    if bias is not None and tuple(bias.shape) != shape[-1:]:
        raise ArgumentError(f"boo_matmul: bias has shape {tuple(bias.shape)}; expected ({shape[-1]},)")
    return shape
