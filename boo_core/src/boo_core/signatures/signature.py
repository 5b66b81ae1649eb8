"""The signature contract: everything one kernel computes, as a frozen, hashable value.

An op plugin subclasses :class:`Signature` as a ``@dataclass(frozen=True)``. Core code relies
only on what is declared here; it never looks at an op's own fields.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..errors import UnsupportedError
from .dtypes import short_name
from .installed import installed_ops

#: Longest ``func_name`` BOO produces; longer readable names are cut and get a hash suffix.
MAX_FUNC_NAME_LENGTH = 96

#: Largest tensor BOO accepts, in bytes (256 TiB): beyond any device's memory, and far from
#: the int64 element and byte offsets IREE indexes with, so no size computation overflows.
MAX_TENSOR_BYTES = 2**48

_SYMBOL_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True)
class TensorSpec:
    """One argument or result of a kernel, in the shape the caller passes it.

    ``shape`` is the *physical* shape: an NHWC input has shape (N, H, W, C). ``layout`` is a
    label for messages (``"NHWC"``), not a stride rule: tensors are always contiguous.
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    layout: str | None = None

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def describe(self) -> str:
        layout = f" {self.layout}" if self.layout else ""
        return f"{self.name}: {tuple(self.shape)} {short_name(self.dtype)}{layout}"


def bounded_symbol(readable: str, limit: int = MAX_FUNC_NAME_LENGTH) -> str:
    """Turn a readable name into a valid, bounded MLIR/VM symbol.

    Unsafe characters become ``_``; a name longer than ``limit`` keeps a readable prefix and
    ends in 16 hex digits of its SHA-256, so distinct long names stay distinct.
    """
    name = _SYMBOL_UNSAFE.sub("_", readable)
    if not name or name[0].isdigit():
        name = "f_" + name
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(readable.encode()).hexdigest()[:16]
    return f"{name[: limit - 17]}_{digest}"


def number_symbol(value: float) -> str:
    """A float for a symbol name, exactly (repr round-trips): 0.5 -> 0p5, -1e-05 -> m1em05."""
    return repr(value).replace("-", "m").replace("+", "").replace(".", "p")


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        return short_name(value)
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in sorted(value.items())}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


# -- field checks for signatures' __post_init__ (frozen dataclasses) ------------------------------


def require_positive(signature: object, *names: str) -> None:
    """Each field in ``names`` must be a positive int (a bool is not): ``ValueError`` naming it."""
    for name in names:
        value = getattr(signature, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def require_finite(signature: object, *names: str) -> None:
    """Each field in ``names`` becomes a finite float (-0.0 as 0.0): ``ValueError`` naming it."""
    for name in names:
        value = float(getattr(signature, name))
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value}")
        object.__setattr__(signature, name, value + 0.0)


def representable_problem(value: float, dtype: torch.dtype) -> str | None:
    """Why ``value`` cannot be held in floating ``dtype`` (its magnitude is beyond the
    largest finite value), or None."""
    largest = torch.finfo(dtype).max
    if abs(value) > largest:
        return f"is out of {short_name(dtype)}'s range (magnitude at most {largest:.6g})"
    return None


def require_representable(signature: object, dtype: torch.dtype, *names: str) -> None:
    """Each field in ``names`` must be finite in ``dtype``, the dtype the kernel holds it in:
    ``ValueError`` naming it and the range."""
    for name in names:
        value = getattr(signature, name)
        problem = representable_problem(float(value), dtype)
        if problem:
            raise ValueError(f"{name} {value:g} {problem}, the dtype the kernel computes it in")


def require_choice(signature: object, name: str, choices: Sequence[object]) -> None:
    """Field ``name`` must be one of ``choices``: ``ValueError`` naming it."""
    value = getattr(signature, name)
    if value not in choices:
        raise ValueError(f"{name} {value!r} must be one of {', '.join(str(c) for c in choices)}")


def _count(value: int) -> str:
    """A possibly astronomical count, short: ``3.54e+24``."""
    return str(value) if value < 10**6 else (f"{float(value):.3g}" if value.bit_length() < 1000 else "over 1e300")


def tensor_size_problem(signature: Signature, *, allow_empty: bool = False) -> str | None:
    """Why ``signature``'s tensors cannot be made, or None: a size that is not a positive
    integer (0 is allowed with ``allow_empty``), or a tensor of more than
    :data:`MAX_TENSOR_BYTES` bytes (which also keeps every element count and byte offset
    far inside int64)."""
    lowest = 0 if allow_empty else 1
    for spec in (*signature.input_specs(), *signature.output_specs()):
        shape = tuple(spec.shape)
        bad = [d for d in shape if isinstance(d, bool) or not hasattr(d, "__index__") or d < lowest]
        if bad:
            what = "no elements" if all(d == 0 for d in bad) else f"a size of {bad[0]!r}"
            return f"tensor {spec.name} of shape {shape} has {what}"
        if spec.nbytes > MAX_TENSOR_BYTES:
            return (f"tensor {spec.name} of shape {shape} would take {_count(spec.nbytes)} bytes; "
                    f"BOO accepts tensors of up to 2**48 bytes (256 TiB)")
    return None


def has_empty_tensor(signature: Signature) -> bool:
    """Whether any of ``signature``'s tensors has no elements."""
    return any(0 in tuple(spec.shape) for spec in (*signature.input_specs(), *signature.output_specs()))


class Signature(abc.ABC):
    """Base class of every op signature.

    Subclasses are frozen dataclasses whose fields describe the problem completely (shapes,
    dtypes, layouts, attributes, mode). Two equal signatures must mean the same kernel.

    What a subclass provides:

    * ``op_name``: the registered op name (class attribute).
    * :meth:`readable_name`: a descriptive name that encodes every field.
    * :meth:`input_specs` / :meth:`output_specs`: the tensors the kernel takes and returns,
      in call order. The launchable allocates outputs (destination passing).
    * :meth:`reference`: the PyTorch computation, dtype-agnostic. BOO exports it to build
      the kernel and runs it in float64 as the numerics reference.
    * :attr:`flops`, and optionally :attr:`bytes_moved` and :attr:`accumulation_length`.
    * nothing for commands: :meth:`to_command` asks the op's parser.
    """

    op_name: ClassVar[str]

    #: Which computation of the op (``fwd``, ``bwd``...) where an op has several; a
    #: subclass with modes declares ``mode`` as a field.
    mode: ClassVar[str] = ""

    # -- identity ---------------------------------------------------------------------------

    @abc.abstractmethod
    def readable_name(self) -> str:
        """A descriptive name that encodes every field (``conv2d_bf16_n2c8h8w8_...``)."""

    @property
    def func_name(self) -> str:
        """Stable, bounded name of the kernel's entry function (also names cache entries)."""
        return bounded_symbol(self.readable_name())

    def canonical(self) -> dict[str, Any]:
        """JSON-ready description of every field; the signature part of the cache key."""
        cls = type(self)
        fields = {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        return {"class": f"{cls.__module__}.{cls.__qualname__}", "fields": fields}

    # -- tensors ----------------------------------------------------------------------------

    @abc.abstractmethod
    def input_specs(self) -> Sequence[TensorSpec]:
        """The kernel's inputs, in call order."""

    @abc.abstractmethod
    def output_specs(self) -> Sequence[TensorSpec]:
        """The kernel's outputs, in return order; the launchable allocates them."""

    @abc.abstractmethod
    def reference(self, *args: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Compute the outputs with PyTorch from inputs laid out as :meth:`input_specs` says.

        Must work for any floating dtype (BOO calls it in float64 for numerics) and be
        exportable with ``torch.export`` (it is the source of the kernel).
        """

    def eager(self, *args: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """PyTorch's own fast implementation of this kernel, in the signature's dtypes: the
        baseline benchmarks compare with. Defaults to :meth:`reference`; override it where
        the reference trades speed for precision (accumulating in float32, say)."""
        return self.reference(*args)

    def get_sample_args(
        self,
        *,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        splat_value: float | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """Inputs for this signature: standard-normal values (small integers for integer
        dtypes), or every element equal to ``splat_value``. ``seed=None`` draws fresh ones."""
        device = torch.device(device)
        generator = torch.Generator(device=device)
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
        args = []
        for spec in self.input_specs():
            if splat_value is not None:
                args.append(torch.full(spec.shape, splat_value, dtype=spec.dtype, device=device))
            elif spec.dtype.is_floating_point:
                t = torch.randn(spec.shape, generator=generator, device=device, dtype=torch.float32)
                args.append(t.to(spec.dtype))
            else:
                args.append(torch.randint(-8, 8, spec.shape, generator=generator, device=device,
                                          dtype=spec.dtype))
        return tuple(args)

    # -- cost model -------------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def flops(self) -> int:
        """Floating-point operations of one call (a multiply-add counts as two)."""

    @property
    def bytes_moved(self) -> int:
        """Bytes read and written by one call, each tensor once (a roofline lower bound)."""
        return sum(s.nbytes for s in self.input_specs()) + sum(s.nbytes for s in self.output_specs())

    @property
    def accumulation_length(self) -> int:
        """How many products are summed into one output element (sets numeric tolerances)."""
        return 1

    def error_scales(self, args: Sequence[torch.Tensor]) -> Mapping[str, float]:
        """Per output name, the magnitude its rounding error scales with, for outputs where
        that exceeds the output itself: a sum whose terms cancel (a mean of values of both
        signs) carries the error of its terms. Numerics checks take the larger of this and
        the output's own magnitude. None by default."""
        return {}

    # -- commands ---------------------------------------------------------------------------

    def to_command(self) -> str:
        """The MIOpenDriver-style command for this signature; parsing it gives ``self`` back.

        Written by the parser of the op registered for this signature's class (so a
        signature module never imports its parser)."""
        entry = installed_ops().op_for_signature(self)
        if entry is None:
            raise UnsupportedError(f"{type(self).__name__} is not the signature class of any registered op: "
                                   "it has no command")
        return entry.spec.parser.format(self, entry.spec.keywords[0])
