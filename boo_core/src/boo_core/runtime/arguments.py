"""Checks for the arguments of eager entry points (``boo_conv(x, w)``...), shared by ops.

Each raises :class:`~boo_core.errors.ArgumentError` naming the function and the argument,
before any signature is built or kernel compiled, so that a wrong tensor is never a
``TypeError`` or ``AttributeError`` from deep inside, nor a kernel compiled in vain.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Collection, Mapping, Sequence

import torch

from ..errors import ArgumentError, UnsupportedError
from ..signatures.dtypes import short_name
from ..signatures.signature import MAX_TENSOR_BYTES


def require_tensor(where: str, name: str, value: object, *, dims: Sequence[int] | None = None) -> torch.Tensor:
    """``value`` if it is a dense torch tensor (with one of ``dims`` dimensions, if given)
    whose elements would fit in :data:`~boo_core.signatures.signature.MAX_TENSOR_BYTES`
    (an expanded view may claim more than any memory: copying it must not be tried).
    A lazily negated or conjugated view is returned resolved (kernels read memory as it is)."""
    if not isinstance(value, torch.Tensor):
        raise ArgumentError(f"{where}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if value.layout is not torch.strided:
        raise ArgumentError(f"{where}: {name} has layout {value.layout}; BOO kernels read dense tensors "
                            "(call .to_dense() first)")
    if dims is not None and value.dim() not in dims:
        expected = " or ".join(str(d) for d in dims)
        raise ArgumentError(f"{where}: {name} has {value.dim()} dims (shape {tuple(value.shape)}); expected {expected}")
    if value.numel() * value.dtype.itemsize > MAX_TENSOR_BYTES:
        raise ArgumentError(f"{where}: {name} of shape {tuple(value.shape)} has more than 2**48 bytes of elements; "
                            "BOO accepts tensors of up to 256 TiB")
    if value.is_neg() or (value.dtype.is_complex and value.is_conj()):
        value = value.resolve_conj().resolve_neg()
    return value


def require_same_device(where: str, tensors: Mapping[str, object], *,
                        optional: Collection[str] = ()) -> dict[str, torch.Tensor]:
    """Check ``tensors`` (name -> value; those named in ``optional`` may be None): each a
    dense tensor (:func:`require_tensor`), all on the device of the first. Returns those
    that are not None."""
    present = {name: require_tensor(where, name, t) for name, t in tensors.items()
               if t is not None or name not in optional}
    first_name, first = next(iter(present.items()))
    for name, tensor in present.items():
        if tensor.device != first.device:
            raise ArgumentError(f"{where}: {name} is on {tensor.device}, {first_name} on {first.device}; "
                                "they must be on one device")
    return present


def require_tensors(where: str, tensors: Mapping[str, object], *, dtypes: Sequence[torch.dtype],
                    optional: Collection[str] = ()) -> dict[str, torch.Tensor]:
    """Check ``tensors`` (name -> value, the first being the reference; those named in
    ``optional`` may be None): dense tensors on one device (:func:`require_same_device`) of
    one dtype, among ``dtypes`` (else :class:`~boo_core.errors.UnsupportedError`). Returns
    them (resolved), None left out."""
    present = require_same_device(where, tensors, optional=optional)
    first_name, first = next(iter(present.items()))
    for name, tensor in present.items():
        if tensor.dtype != first.dtype:
            raise ArgumentError(f"{where}: {name} has dtype {tensor.dtype}, {first_name} {first.dtype}; "
                                "they must match")
    if first.dtype not in dtypes:
        allowed = ", ".join(short_name(d) for d in dtypes)
        raise UnsupportedError(f"{where}: {first_name} has dtype {first.dtype}; supported: {allowed}")
    return present


def require_int(where: str, name: str, value: object, *, minimum: int | None = None) -> int:
    """``value`` as an int (anything with ``__index__`` but a bool; a float is refused), at
    least ``minimum``."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ArgumentError(f"{where}: {name} must be an int, got {value!r}") from None
    if minimum is not None and value < minimum:
        raise ArgumentError(f"{where}: {name} must be at least {minimum}, got {value}")
    return value


def require_ints(where: str, name: str, value: object, count: int, *, minimum: int | None = None) -> tuple[int, ...]:
    """An int or a sequence of ``count`` ints (one per spatial dim), as a tuple of ``count``."""
    if type(value) is int and (minimum is None or value >= minimum):  # the common cases, fast
        return (value,) * count
    if type(value) is tuple and len(value) == count and all(type(v) is int and (minimum is None or v >= minimum)
                                                            for v in value):
        return value
    items = (value,) * count if hasattr(value, "__index__") and not isinstance(value, bool) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence) or len(items) != count:
        raise ArgumentError(f"{where}: {name} must be an int or a sequence of {count} ints, got {value!r}")
    return tuple(require_int(where, name, v, minimum=minimum) for v in items)


def require_number(where: str, name: str, value: object) -> float:
    """``value`` as a finite float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentError(f"{where}: {name} must be a number, got {value!r}")
    try:
        result = float(value)
    except OverflowError:
        result = math.inf
    if not math.isfinite(result):
        raise ArgumentError(f"{where}: {name} must be finite, got {value!r}")
    return result


def is_empty(*tensors: torch.Tensor | None) -> bool:
    """Whether any of ``tensors`` (None skipped) has no elements."""
    return any(t is not None and t.numel() == 0 for t in tensors)
