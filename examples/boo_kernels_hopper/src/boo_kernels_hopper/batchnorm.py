"""Batch-norm backwards: Triton kernels in place of the two executables of IREE's staged
module that read the whole input.

The batch-norm op's staged backward on GPUs (``staged_sums``, ``staged_sums_two_stages``)
is a first stage that reads dY and x and writes partial sums ``(parts, 2, C)`` of g and of
``g x̂`` (a part: ``group`` rows of C channels; g: dY, after a ReLU dY where the forward's
output y is positive, with a residual dY + dY2), stages that add the parts up, and an
elementwise pass that reads them again and writes dx (and with a residual, g as its
gradient). IREE's first stage gives a part to a 32-thread workgroup; its elementwise pass,
configured with 16-byte accesses, still took 1.2-2.2x the time of this library's (docs/gpu.md
of BOO). :func:`generate_sums` builds
``boo_hopper_bn_sums`` for the first: each program sums ``parts_per`` parts in float32
registers and writes their total as its first part and zeros as the others, which the
later stages, only adding, turn into the same sums. :func:`generate_dx` builds
``boo_hopper_bn_dx`` for the second. The stages between stay IREE's.

Served: a backward with the statistics saved (a ReLU and a residual or not), its rows
channels-last (or a per-activation norm's rows of activations), bf16, f16 or f32 (sums in
float32). :func:`plan` finds both executables by their tensors (bindings, offsets, sizes
and element types) and refuses a module of any other shape (ValueError); BOO verifies the
substitution before first use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .iree_subspans import Span, spans
from .layernorm import triton_power_of_two
from .ptx import Kernel, bindings_of, compile_for_iree

#: The batch-norm op's staged backward modules, those with fewer stages first where offered.
FORMULATIONS = ("staged_sums_two_stages", "staged_sums_few_parts", "staged_sums")
DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
POINTER_TYPES = {"bf16": "*bf16", "f16": "*fp16", "f32": "*fp32"}
#: Rows the first stage's program sums at least (in whole parts): 256 was within 6% of the
#: best of 1-16 parts on every ResNet-50 row on an H200 but 512 @7's (docs/gpu.md).
PROGRAM_ROWS = 256
#: The others ``boo tune`` times (the largest rows took 512; 512 @7 took 98).
OTHER_PROGRAM_ROWS = (64, 128, 512, 1024)
BLOCK_C = 64  # channels a program of either kernel covers, at most
BLOCK_ELEMENTS = 4096  # elements a program holds per step: BLOCK_R x BLOCK_C
SUMS_POINTERS = ["y", "dy", "dy2", "x", "mean", "invstd", "partials"]  # those a problem has, in binding order
SUMS_ORDER = [*SUMS_POINTERS, *(f"{p.upper()}_AT" for p in SUMS_POINTERS), "PARTS", "GROUP", "COLUMNS", "PARTS_PER",
              "BLOCK_R", "BLOCK_C", "RELU", "RESIDUAL"]
#: The elementwise pass's pointers (those a problem has, in binding order) and its tensors
#: in the order its source declares them: both sums come from the binding ``sums``.
DX_POINTERS = ["w", "invstd", "y", "dy", "dy2", "sums", "x", "mean", "dres", "dx"]
DX_TENSORS = ["w", "invstd", "y", "dy", "dy2", "sum_g", "x", "mean", "sum_g_xhat", "dres", "dx"]
DX_ORDER = [*DX_POINTERS, *(f"{t.upper()}_AT" for t in DX_TENSORS), "ROWS", "COLUMNS", "BLOCK_R", "BLOCK_C", "RELU",
            "RESIDUAL"]


@dataclass(frozen=True)
class BatchNormProblem:
    """A batch-norm backward over ``rows`` rows (the reduction) of ``columns`` contiguous
    values (channels, or a per-activation norm's activations), after a ReLU and a residual
    added before it where the forward had them."""

    rows: int
    columns: int
    dtype: str
    relu: bool = False
    residual: bool = False

    def sums_tensors(self) -> list[str]:
        """The first stage's tensors, in the order its source declares them."""
        return [t for t in SUMS_POINTERS if self.has(t)]

    def dx_tensors(self) -> list[str]:
        """The elementwise pass's tensors, in the order its source declares them."""
        return [t for t in DX_TENSORS if self.has(t)]

    def has(self, tensor: str) -> bool:
        return {"y": self.relu, "dy2": self.residual, "dres": self.residual}.get(tensor, True)


@dataclass(frozen=True)
class BatchNormPlan:
    """The two executables replaced and where their tensors are (by the names of
    :meth:`BatchNormProblem.sums_tensors` and :meth:`BatchNormProblem.dx_tensors`), and the
    first stage's parts."""

    sums: Any
    sums_tensors: dict[str, Span]
    parts: int
    dx: Any
    dx_tensors: dict[str, Span]


def problem_of(signature: Any) -> BatchNormProblem | None:
    """The problem for a batch-norm backward this library serves, else None (duck-typed:
    the library needs no op package)."""
    if getattr(signature, "op_name", None) != "bnorm" or signature.mode != "bwd" or signature.dtype not in DTYPES:
        return None
    if not signature.save or signature.activation not in (None, "relu"):
        return None
    if signature.spatial and not signature.channels_last and len(signature.input_shape) > 2:
        return None  # channels first: the sums run over each channel's plane, another module
    columns = math.prod(signature.param_shape)
    return BatchNormProblem(signature.reduction_size, columns, DTYPES[signature.dtype], signature.activation == "relu",
                            bool(signature.residual))


def parts_per(problem: BatchNormProblem, parts: int, program_rows: int = PROGRAM_ROWS) -> int:
    """Whole parts of at least ``program_rows`` rows a first-stage program (fewer where the
    parts run out)."""
    return max(1, min(parts, -(-program_rows // (problem.rows // parts))))


def _expected(names: list[str], problem: BatchNormProblem, parts: int = 0) -> list[tuple[int, str, bool]]:
    """(elements, element type, read only) of each named tensor."""
    n, c = problem.rows * problem.columns, problem.columns
    big = {"y", "dy", "dy2", "x"}
    return [(n, problem.dtype, True) if t in big else (n, problem.dtype, False) if t in ("dres", "dx")
            else (2 * c * parts, "f32", False) if t == "partials" else (c, "f32", True) for t in names]


def _bindings(names: list[str]) -> list[int]:
    """The binding of each named tensor: one each, in order, but both sums in one."""
    found: dict[str, int] = {}
    for t in names:
        found[t] = found["sum_g"] if t == "sum_g_xhat" else len(set(found.values()))
    return [found[t] for t in names]


def _matches(found: list[Span], wanted: list[tuple[int, str, bool]]) -> bool:
    """Whether ``found`` are tensors of these (elements, element type, read only), in order."""
    return len(found) == len(wanted) and all(
        (s.numel, s.dtype, s.access == "readonly") == w for s, w in zip(found, wanted, strict=True))


def plan(problem: BatchNormProblem, executables: Any) -> BatchNormPlan:
    """The module's first stage and elementwise pass (module docstring); ValueError for a
    module without exactly one of each."""
    first_names, dx_names = problem.sums_tensors(), problem.dx_tensors()
    c = problem.columns
    firsts, passes = [], []
    for executable in executables:
        if len(executable.exports) != 1 or executable.exports[0].constants:
            continue
        found = spans(executable)
        if len(found) == len(first_names) and found[-1].numel % (2 * c) == 0:
            parts = found[-1].numel // (2 * c)
            if problem.rows % parts == 0 and _matches(found, _expected(first_names, problem, parts)):
                firsts.append((executable, found, parts))
        # the weight's type is the parameters', which need not be the input's
        if len(found) == len(dx_names) and found[0].numel == c and found[0].dtype in DTYPES.values() and _matches(
                found[1:], _expected(dx_names[1:], problem)):
            passes.append((executable, found))
    if len(firsts) != 1 or len(passes) != 1:
        raise ValueError(f"expected one first stage and one elementwise pass of a batch-norm backward over "
                         f"{problem.rows}x{problem.columns} {problem.dtype}, found {bindings_of(executables)}")
    (sums, sums_found, parts), (dx, dx_found) = firsts[0], passes[0]
    for executable, found, names in ((sums, sums_found, first_names), (dx, dx_found, dx_names)):
        if [s.binding for s in found] != _bindings(names):
            raise ValueError(f"{executable.name}: tensors in bindings {[s.binding for s in found]}, expected "
                             f"{_bindings(names)} ({', '.join(names)})")
    return BatchNormPlan(sums, dict(zip(first_names, sums_found, strict=True)), parts, dx,
                         dict(zip(dx_names, dx_found, strict=True)))


def _offsets(tensors: dict[str, Span], names: list[str]) -> dict[str, int]:
    """Each named tensor's element offset constant (0 for those the problem has not)."""
    return {f"{t.upper()}_AT": tensors[t].element_offset if t in tensors else 0 for t in names}


def _pointer_types(problem: BatchNormProblem, pointers: list[str], weight: str = "") -> dict[str, str]:
    tensor = POINTER_TYPES[problem.dtype]
    return {p: tensor if p in ("y", "dy", "dy2", "x", "dres", "dx") else POINTER_TYPES[weight] if p == "w"
            else "*fp32" for p in pointers}


def generate_sums(problem: BatchNormProblem, chosen: BatchNormPlan, program_rows: int, entry: str) -> Kernel:
    """Compile ``boo_hopper_bn_sums`` for the plan's first stage to sm_90a PTX named ``entry``,
    its programs summing whole parts of at least ``program_rows`` rows."""
    from ._triton_batchnorm import boo_hopper_bn_sums

    block_c = min(BLOCK_C, triton_power_of_two(problem.columns))
    each = parts_per(problem, chosen.parts, program_rows)
    pointers = problem.sums_tensors()
    constants: dict[str, Any] = {p: None for p in SUMS_POINTERS if p not in pointers}
    constants.update(_offsets(chosen.sums_tensors, SUMS_POINTERS))
    constants.update(PARTS=chosen.parts, GROUP=problem.rows // chosen.parts, COLUMNS=problem.columns, PARTS_PER=each,
                     BLOCK_R=BLOCK_ELEMENTS // block_c, BLOCK_C=block_c, RELU=problem.relu, RESIDUAL=problem.residual)
    compiled, ptx = compile_for_iree(boo_hopper_bn_sums, pointers, constants, SUMS_ORDER, 4, 1, entry,
                                     types=_pointer_types(problem, pointers))
    grid = (-(-chosen.parts // each), -(-problem.columns // block_c), 1)
    return Kernel(ptx, compiled.metadata.num_warps * 32, grid, int(compiled.metadata.shared))


def generate_dx(problem: BatchNormProblem, chosen: BatchNormPlan, entry: str) -> Kernel:
    """Compile ``boo_hopper_bn_dx`` for the plan's elementwise pass to sm_90a PTX named ``entry``."""
    from ._triton_batchnorm import boo_hopper_bn_dx

    block_c = min(BLOCK_C, triton_power_of_two(problem.columns))
    block_r = BLOCK_ELEMENTS // block_c
    pointers = [p for p in DX_POINTERS if p == "sums" or problem.has(p)]
    constants: dict[str, Any] = {p: None for p in DX_POINTERS if p not in pointers}
    constants.update(_offsets(chosen.dx_tensors, DX_TENSORS))
    constants.update(ROWS=problem.rows, COLUMNS=problem.columns, BLOCK_R=block_r, BLOCK_C=block_c, RELU=problem.relu,
                     RESIDUAL=problem.residual)
    compiled, ptx = compile_for_iree(boo_hopper_bn_dx, pointers, constants, DX_ORDER, 4, 1, entry,
                                     types=_pointer_types(problem, pointers, chosen.dx_tensors["w"].dtype))
    grid = (-(-problem.rows // block_r), -(-problem.columns // block_c), 1)
    return Kernel(ptx, compiled.metadata.num_warps * 32, grid, int(compiled.metadata.shared))
