"""Layer-norm forwards: one Triton kernel in place of IREE's one executable.

On CUDA the layer-norm op's ``mean_statistics`` formulation compiles to a single executable
(bindings ``x[, w][, b], mean, rstd, y``) that IREE runs a warp per row: about 57% of the
copy bandwidth on 8192 rows of 4096 on an H100, 80–85% on rows of 768 and 1,024 (docs/gpu.md
of BOO). :func:`generate` builds ``boo_hopper_layernorm`` for the problem instead: each
program reads its rows once and writes y and both statistics, with enough warps that a row
of 4,096 or 8,192 elements is summed by a whole block, not by one warp.

Served: a forward of bf16, f16 or f32 rows (the statistics in float32) up to ``MAX_WIDTH``
elements, with or without weight and bias. :func:`plan` finds the executable and refuses a
module of any other shape (ValueError), and BOO verifies the substitution before first use.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch

from .ptx import Kernel, compile_for_iree

FORMULATION = "mean_statistics"  # the layer-norm op's single-executable forward on GPUs
DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
POINTER_TYPES = {"bf16": "*bf16", "f16": "*fp16", "f32": "*fp32"}
#: The widest row one program holds in registers (16 warps, 32 float32 values a thread).
MAX_WIDTH = 16384
#: Elements a program normalizes at least: narrow rows are taken several to a program.
PROGRAM_ELEMENTS = 4096
ORDER = ["x", "w", "b", "mean", "rstd", "y", "ROWS", "N", "EPS", "BLOCK", "ROWS_PER", "HAS_W", "HAS_B"]


@dataclass(frozen=True)
class LayerNormProblem:
    """A forward over the last dims: ``input_shape`` split into ``stats_shape`` (one mean
    and rstd each) and rows of ``width`` elements."""

    input_shape: tuple[int, ...]
    normalized_dim: int
    weight: bool
    bias: bool
    eps: float
    dtype: str

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
    if getattr(signature, "op_name", None) != "layernorm" or getattr(signature, "mode", None) != "fwd":
        return None
    if signature.dtype not in DTYPES:
        return None
    problem = LayerNormProblem(tuple(signature.input_shape), int(signature.normalized_dim), bool(signature.weight),
                               bool(signature.bias), float(signature.eps), DTYPES[signature.dtype])
    return problem if problem.width <= MAX_WIDTH else None


def choose_config(problem: LayerNormProblem) -> LayerNormConfig:
    """Rows of at least ``PROGRAM_ELEMENTS`` a program, 16-byte accesses spread over up to 16
    warps (a thread holds 8 to 32 values of a row)."""
    block = triton_power_of_two(problem.width)
    rows_per = max(1, min(16, PROGRAM_ELEMENTS // block))
    warps = max(4, min(16, block * rows_per // 512))
    return LayerNormConfig(block, rows_per, warps)


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
        described = {e.name: [b.tensor for b in e.exports[0].bindings] for e in executables if e.exports}
        raise ValueError(f"expected one executable with bindings {expected}, found {described}")
    return matching[0]


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
