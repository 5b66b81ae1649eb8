"""Numerics checks: a launchable against its signature's PyTorch reference in float64.

Tolerance model (elementwise): ``|actual - ref| <= rtol * |ref| + atol`` with

* ``rtol = 2 * eps(dtype)``: the result's own rounding (half an ulp), with room for one more;
* ``atol = max|ref| * (eps(dtype) + 8 * eps(float32) * sqrt(n))``, where ``n`` is the
  signature's accumulation length: a float32 accumulator summing ``n`` terms in any order
  drifts like ``sqrt(n)`` ulps of the largest partial sums, and a low-precision result is
  only accurate to its ulp relative to the tensor's scale.

Wrong indexing, a missing term of typical size, or an element the kernel never wrote (the
outputs are poisoned with NaN before the call) all exceed it. Reported errors: the maximum
absolute error and the normwise relative error ``max|actual - ref| / max|ref|`` (defined as
0 when both are 0, infinite when only the reference is 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..signatures.signature import Signature


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


@dataclass(frozen=True)
class Comparison:
    """One output compared with its reference."""

    name: str
    max_abs_error: float
    max_rel_error: float
    tolerance: Tolerance
    bad_elements: int  # elements outside tolerance, NaN/inf where the reference is finite included

    @property
    def passed(self) -> bool:
        return self.bad_elements == 0

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else f"FAIL ({self.bad_elements} elements out of tolerance)"
        return (f"{self.name}: max abs error {self.max_abs_error:.3g}, max rel error {self.max_rel_error:.3g} "
                f"(rtol {self.tolerance.rtol:.2g}, atol {self.tolerance.atol:.3g}) {verdict}")


def tolerance_for(dtype: torch.dtype, reference: torch.Tensor, accumulation_length: int = 1,
                  scale: float | None = None) -> Tolerance:
    """The tolerance for a result of ``dtype`` whose float64 reference is ``reference``
    (``scale``: the magnitude its error scales with, when larger than the reference's)."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    scale = max(reference.abs().max().item() if reference.numel() else 0.0, scale or 0.0)
    drift = 8 * torch.finfo(torch.float32).eps * math.sqrt(max(accumulation_length, 1))
    return Tolerance(rtol=2 * eps, atol=scale * (eps + drift))


def compare(name: str, actual: torch.Tensor, reference: torch.Tensor, *, accumulation_length: int = 1,
            tolerance: Tolerance | None = None, scale: float | None = None) -> Comparison:
    """Compare ``actual`` with a float64 ``reference`` of the same shape (``scale``: see
    :func:`tolerance_for`)."""
    if tuple(actual.shape) != tuple(reference.shape):
        raise ValueError(f"{name}: shape {tuple(actual.shape)} differs from the reference's {tuple(reference.shape)}")
    tolerance = tolerance or tolerance_for(actual.dtype, reference, accumulation_length, scale)
    a = actual.detach().to(torch.float64).cpu()
    r = reference.detach().to(torch.float64).cpu()
    error = (a - r).abs()
    finite_ref = torch.isfinite(r)
    bad = ~(error <= tolerance.rtol * r.abs() + tolerance.atol) & finite_ref
    bad |= ~torch.isfinite(a) & finite_ref
    bad |= ~finite_ref & ~((a == r) | (torch.isnan(a) & torch.isnan(r)))
    max_abs = error[finite_ref].max().item() if finite_ref.any() else 0.0
    if bad.any() and not math.isfinite(max_abs):
        max_abs = math.inf
    scale = r[finite_ref].abs().max().item() if finite_ref.any() else 0.0
    max_rel = 0.0 if max_abs == 0 else (max_abs / scale if scale > 0 else math.inf)
    return Comparison(name, max_abs, max_rel, tolerance, int(bad.sum().item()))


def poisoned(spec_shape: Sequence[int], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A tensor filled with NaN (or the minimum integer), so an unwritten element shows up."""
    if dtype.is_floating_point:
        return torch.full(tuple(spec_shape), float("nan"), dtype=dtype, device=device)
    return torch.full(tuple(spec_shape), torch.iinfo(dtype).min, dtype=dtype, device=device)


def reference_outputs(signature: Signature, args: Sequence[torch.Tensor],
                      dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, ...]:
    """The signature's reference computed with floating inputs cast to ``dtype``."""
    promoted = [a.to(dtype) if a.dtype.is_floating_point else a for a in args]
    with torch.no_grad():
        result = signature.reference(*promoted)
    return (result,) if isinstance(result, torch.Tensor) else tuple(result)


def check_launchable(launchable, args: Sequence[torch.Tensor] | None = None, *, seed: int | None = None,
                     reference_dtype: torch.dtype = torch.float64) -> list[Comparison]:
    """Run ``launchable`` on ``args`` (fresh random inputs when None) into poisoned outputs
    and compare every output with the reference."""
    signature: Signature = launchable.signature
    device = launchable.device.torch_device
    if args is None:
        args = signature.get_sample_args(device=device, seed=seed)
    outputs = tuple(poisoned(s.shape, s.dtype, device) for s in signature.output_specs())
    launchable(*args, out=outputs)
    return check_outputs(signature, args, outputs, reference_dtype=reference_dtype)


def check_outputs(signature: Signature, args: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor], *,
                  reference_dtype: torch.dtype = torch.float64) -> list[Comparison]:
    """Compare ``outputs``, computed from ``args`` by any implementation of ``signature``,
    with the reference computed in ``reference_dtype``."""
    expected = reference_outputs(signature, args, reference_dtype)
    if len(outputs) != len(expected):
        raise ValueError(f"{signature.func_name}: {len(outputs)} outputs, the reference has {len(expected)}")
    scales = signature.error_scales(args)
    return [compare(spec.name, actual, ref, accumulation_length=signature.accumulation_length,
                    scale=scales.get(spec.name))
            for spec, actual, ref in zip(signature.output_specs(), outputs, expected, strict=True)]
