"""Layer norms: Triton kernels in place of IREE's executables, a forward's and a backward's dx.

On CUDA the layer-norm op's ``mean_statistics`` formulation compiles to a single executable
(bindings ``x[, w][, b], mean, rstd, y``) that IREE runs a warp per row: about 57% of the
copy bandwidth on 8192 rows of 4096 on an H100, 80–85% on rows of 768 and 1,024 (docs/gpu.md
of BOO). :func:`generate` builds ``boo_hopper_layernorm`` for the problem instead: each
program reads its rows once and writes y and both statistics, with enough warps that a row
of 4,096 or 8,192 elements is summed by a whole block, not by one warp.

A backward's dx takes IREE two executables, each reading x and dy: the first sums
``w dy x̂`` over each row into a transient, the second sums ``w dy`` and writes dx.
:func:`generate_dx` builds ``boo_hopper_layernorm_dx`` for the second, which takes both sums
itself from one read of x and dy, and :func:`nothing` an entry that returns at once for the
first, whose row sums nothing reads any more. The rest of the module (a backward's dw and db,
summed in stages) stays IREE's.

Served: bf16, f16 or f32 rows (the statistics in float32) up to ``MAX_WIDTH`` elements; a
forward with or without weight and bias, a backward's dx where the layer has a weight and
IREE's module has the two executables above (16-bit rows: for float32 rows IREE writes x̂
out first, a module of another shape, left to IREE).
:func:`plan` and :func:`plan_dx` find the executables and refuse a module of any other shape
(ValueError), and BOO verifies the substitution before first use.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch

from .ptx import Kernel, bindings_of, compile_for_iree

FORMULATION = "mean_statistics"  # the layer-norm op's single-executable forward on GPUs
#: The layer-norm op's backward modules on GPUs: dw and db summed in stages, or dx alone.
BACKWARD_FORMULATIONS = ("chunked_column_sums", "default")
DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
POINTER_TYPES = {"bf16": "*bf16", "f16": "*fp16", "f32": "*fp32"}
#: The widest row one program holds in registers (16 warps, 32 float32 values a thread).
MAX_WIDTH = 16384
#: Elements a program normalizes at least: narrow rows are taken several to a program.
PROGRAM_ELEMENTS = 4096
ORDER = ["x", "w", "b", "mean", "rstd", "y", "ROWS", "N", "EPS", "BLOCK", "ROWS_PER", "HAS_W", "HAS_B"]


@dataclass(frozen=True)
class LayerNormProblem:
    """A layer norm over the last dims (its forward, or a backward's dx): ``input_shape``
    split into ``stats_shape`` (one mean and rstd each) and rows of ``width`` elements."""

    input_shape: tuple[int, ...]
    normalized_dim: int
    weight: bool
    bias: bool
    eps: float
    dtype: str
    mode: str = "fwd"  # or "bwd": dx (and whatever else the module computes) from dy

    @property
    def stats_shape(self) -> tuple[int, ...]:
        return self.input_shape[:self.normalized_dim]

    @property
    def rows(self) -> int:
        return math.prod(self.stats_shape)

    @property
    def width(self) -> int:
        return math.prod(self.input_shape[self.normalized_dim:])

    def bindings(self) -> list[tuple[int, str]]:
        """The executable's bindings as (elements, element type): IREE collapses the dims it
        can (32x197x768 is bound as 6304x768), and the kernel reads every tensor as dense."""
        tensor = (self.rows * self.width, self.dtype)
        return [tensor, *[(self.width, self.dtype)] * (self.weight + self.bias), *[(self.rows, "f32")] * 2, tensor]

    def dx_bindings(self) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """A backward's two dx executables' bindings: ``w, x, mean, rstd, dy`` and a row sum
        written; the same five, that row sum read, and dx."""
        tensor, row = (self.rows * self.width, self.dtype), (self.rows, "f32")
        read = [(self.width, self.dtype), tensor, row, row, tensor]
        return [*read, row], [*read, row, tensor]


@dataclass(frozen=True)
class LayerNormConfig:
    block: int  # columns a program covers: the width rounded up to a power of two
    rows_per: int  # rows a program normalizes
    num_warps: int


def elements(tensor: str) -> tuple[int, str] | None:
    """(elements, element type) of a binding spelled ``tensor<AxBxT>`` (``tensor<T>``: one)."""
    match = re.fullmatch(r"tensor<((?:\d+x)*)(\w+)>", tensor)
    if match is None:
        return None
    return math.prod(int(d) for d in match.group(1).split("x") if d), match.group(2)


def problem_of(signature: Any) -> LayerNormProblem | None:
    """The problem for a BOO layer-norm forward this library serves, else None (duck-typed:
    the library needs no op package)."""
    if getattr(signature, "op_name", None) != "layernorm" or signature.dtype not in DTYPES:
        return None
    if signature.mode == "bwd" and not (signature.weight and "dx" in signature.gradients):
        return None
    problem = LayerNormProblem(tuple(signature.input_shape), int(signature.normalized_dim), bool(signature.weight),
                               bool(signature.bias), float(signature.eps), DTYPES[signature.dtype], signature.mode)
    return problem if problem.width <= MAX_WIDTH else None


def choose_config(problem: LayerNormProblem) -> LayerNormConfig:
    """Rows of at least ``PROGRAM_ELEMENTS`` a program, 16-byte accesses spread over up to 16
    warps (a thread holds 8 to 32 values of a row)."""
    block = triton_power_of_two(problem.width)
    rows_per = max(1, min(16, PROGRAM_ELEMENTS // block))
    warps = max(4, min(16, block * rows_per // 512))
    return LayerNormConfig(block, rows_per, warps)


def alternatives(problem: LayerNormProblem, chosen: LayerNormConfig) -> list[LayerNormConfig]:
    """Other configurations ``boo tune`` times beside ``chosen``: half and twice the rows a
    program, half and twice the warps (4 to 16 warps, at most 16 rows, a thread holding 4 to
    32 values of its rows: more spill registers)."""
    found = [LayerNormConfig(chosen.block, rows, warps)
             for rows, warps in ((chosen.rows_per // 2, chosen.num_warps), (chosen.rows_per * 2, chosen.num_warps),
                                 (chosen.rows_per, chosen.num_warps // 2), (chosen.rows_per, chosen.num_warps * 2))]
    return [c for c in dict.fromkeys(found) if c != chosen and 1 <= c.rows_per <= 16 and 4 <= c.num_warps <= 16
            and 4 * 32 * c.num_warps <= c.block * c.rows_per <= 32 * 32 * c.num_warps]


def config_label(config: LayerNormConfig) -> str:
    """A configuration as a substitution's name suffix: ``r4_w8`` (rows a program, warps)."""
    return f"r{config.rows_per}_w{config.num_warps}"


def triton_power_of_two(n: int) -> int:
    """The least power of two at least ``n`` (a Triton block's length)."""
    return 1 << max(0, (n - 1).bit_length())


def plan(problem: LayerNormProblem, executables: Any) -> Any:
    """The module's one executable, whose bindings are the problem's; ValueError for a module
    of any other shape."""
    expected = problem.bindings()
    matching = [e for e in executables if len(e.exports) == 1 and not e.exports[0].constants
                and [elements(b.tensor) for b in e.exports[0].bindings] == expected]
    if len(executables) != 1 or len(matching) != 1:
        raise ValueError(f"expected one executable with bindings {expected}, found {bindings_of(executables)}")
    return matching[0]


def plan_dx(problem: LayerNormProblem, executables: Any) -> tuple[Any, Any]:
    """A backward module's two dx executables (the row sum's, dx's); ValueError for a
    module without exactly one of each."""
    wanted = problem.dx_bindings()
    found: list[list[Any]] = [[], []]
    for executable in executables:
        if len(executable.exports) != 1 or executable.exports[0].constants:
            continue
        bindings = [elements(b.tensor) for b in executable.exports[0].bindings]
        for which, expected in enumerate(wanted):
            if bindings == expected:
                found[which].append(executable)
    if [len(f) for f in found] != [1, 1]:
        raise ValueError(f"expected one executable each with bindings {wanted[0]} and {wanted[1]}, "
                         f"found {bindings_of(executables)}")
    return found[0][0], found[1][0]


def generate(problem: LayerNormProblem, config: LayerNormConfig, entry: str) -> Kernel:
    """Compile ``boo_hopper_layernorm`` for ``problem`` to sm_90a PTX named ``entry``, taking
    one pointer per binding of :meth:`LayerNormProblem.bindings`."""
    from ._triton_layernorm import boo_hopper_layernorm

    pointers = ["x"] + (["w"] if problem.weight else []) + (["b"] if problem.bias else []) + ["mean", "rstd", "y"]
    constants: dict[str, Any] = {"ROWS": problem.rows, "N": problem.width, "EPS": problem.eps, "BLOCK": config.block,
                                 "ROWS_PER": config.rows_per, "HAS_W": problem.weight, "HAS_B": problem.bias}
    constants.update({name: None for name in ("w", "b") if name not in pointers})
    types = dict.fromkeys(pointers, POINTER_TYPES[problem.dtype])
    types.update(mean="*fp32", rstd="*fp32")
    compiled, ptx = compile_for_iree(boo_hopper_layernorm, pointers, constants, ORDER, config.num_warps, 1, entry,
                                     types=types)
    grid = -(-problem.rows // config.rows_per)
    return Kernel(ptx, compiled.metadata.num_warps * 32, grid, int(compiled.metadata.shared))


def generate_dx(problem: LayerNormProblem, config: LayerNormConfig, entry: str) -> Kernel:
    """Compile ``boo_hopper_layernorm_dx`` for ``problem`` to sm_90a PTX named ``entry``,
    taking the pointers of the second of :meth:`LayerNormProblem.dx_bindings`."""
    from ._triton_layernorm import boo_hopper_layernorm_dx

    pointers = ["w", "x", "mean", "rstd", "dy", "unused", "dx"]
    constants = {"ROWS": problem.rows, "N": problem.width, "BLOCK": config.block, "ROWS_PER": config.rows_per}
    types = dict.fromkeys(pointers, POINTER_TYPES[problem.dtype])
    types.update(mean="*fp32", rstd="*fp32", unused="*fp32")
    compiled, ptx = compile_for_iree(boo_hopper_layernorm_dx, pointers, constants, [*pointers, *constants],
                                     config.num_warps, 1, entry, types=types)
    grid = -(-problem.rows // config.rows_per)
    return Kernel(ptx, compiled.metadata.num_warps * 32, grid, int(compiled.metadata.shared))


def nothing(entry: str, bindings: int, like: str) -> Kernel:
    """An entry named ``entry`` taking ``bindings`` pointers that returns at once, in the PTX
    version and target of the PTX ``like`` (one warp, one block)."""
    header = "\n".join(line for line in like.splitlines() if line.startswith((".version", ".target", ".address_size")))
    params = ",\n\t".join(f".param .u64 {entry}_param_{i}" for i in range(bindings))
    return Kernel(f"{header}\n\n.visible .entry {entry}(\n\t{params}\n)\n{{\n\tret;\n}}\n", 32, 1, 0)
