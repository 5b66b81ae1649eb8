"""Which matmuls this library serves, with what tiles, and their PTX.

Everything here but :func:`generate_ptx` runs without Triton or a GPU; :func:`generate_ptx`
imports Triton, compiles for sm_90a and rewrites the PTX to IREE's CUDA kernel ABI
(docs/gpu.md of BOO): the entry named after the export, one 64-bit pointer per binding and
nothing else.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import threading
from dataclasses import dataclass
from typing import Any

import torch

BF16 = torch.bfloat16


@dataclass(frozen=True)
class GemmConfig:
    """A tile configuration: block sizes, ``GROUP`` rows of tiles per L2 group, Triton's
    warps per program and software-pipelining depth."""

    bm: int = 128
    bn: int = 256
    bk: int = 64
    group: int = 8
    num_warps: int = 8
    num_stages: int = 4

    def __str__(self) -> str:
        return (f"{self.bm}x{self.bn}x{self.bk} group {self.group} warps {self.num_warps} "
                f"stages {self.num_stages}")


#: The best of five configurations swept on an H100 for the three benchmark shapes (README.md).
DEFAULT = GemmConfig()


@dataclass(frozen=True)
class GemmProblem:
    """The part of a matmul signature the kernel depends on."""

    m: int
    n: int
    k: int
    trans_b: bool
    bias: bool


def problem_of(signature: Any) -> GemmProblem | None:
    """The problem for a BOO ``matmul`` signature this library serves (bf16, one batch,
    row-major, A not transposed, alpha 1, no C, no activation; a bias vector is allowed),
    else None. Duck-typed so that the library needs no op package."""
    if getattr(signature, "op_name", None) != "matmul":
        return None
    fields = ("m", "n", "k", "batch", "trans_a", "trans_b", "alpha", "beta", "col_major", "bias", "activation",
              "dtype")
    if not all(hasattr(signature, f) for f in fields):
        return None
    s = signature
    if (s.dtype != BF16 or s.batch != 1 or s.trans_a or s.col_major or s.alpha != 1.0 or s.beta != 0.0
            or s.activation is not None):
        return None
    return GemmProblem(s.m, s.n, s.k, bool(s.trans_b), bool(s.bias))


def choose_config(problem: GemmProblem) -> GemmConfig | None:
    """The tiles for ``problem``, or None where its sizes are not multiples of them (the
    kernel has no masked edges) or K is too short to fill the pipeline."""
    config = DEFAULT
    if problem.m % config.bm or problem.n % config.bn or problem.k % config.bk:
        return None
    if problem.k // config.bk < config.num_stages:
        return None
    return config


@functools.cache
def unavailable_reason() -> str | None:
    """Why no kernel can be made here (None: Triton is installed and GPU 0 is a Hopper)."""
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed (pip install boo-kernels-hopper[triton])"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible"
    capability = torch.cuda.get_device_capability()
    if capability != (9, 0):
        return f"the GPU has compute capability {capability[0]}.{capability[1]}, not 9.0 (Hopper)"
    return None


def triton_version() -> str:
    import triton

    return str(triton.__version__)


@dataclass(frozen=True)
class Kernel:
    """PTX ready for IREE, and how to launch it."""

    ptx: str
    block: int  # threads per block (x)
    grid: int  # blocks (x)
    shared_bytes: int  # dynamic shared memory


_compile_lock = threading.Lock()  # BOO sets kernels up from several threads; compile one at a time
_ENTRY = "boo_hopper_gemm"


def generate_ptx(problem: GemmProblem, config: GemmConfig, entry: str, bindings: int) -> Kernel:
    """Compile the kernel for ``problem`` to sm_90a PTX named ``entry`` taking exactly
    ``bindings`` pointers."""
    import triton
    from triton.backends.compiler import GPUTarget

    from ._triton_gemm import boo_hopper_gemm

    constants: dict[str, Any] = {"M": problem.m, "N": problem.n, "K": problem.k, "TRANS_B": problem.trans_b,
                                 "HAS_BIAS": problem.bias, "BM": config.bm, "BN": config.bn, "BK": config.bk,
                                 "GROUP": config.group}
    pointers = ["a", "b", "bias", "c"] if problem.bias else ["a", "b", "c"]
    if not problem.bias:
        constants["bias"] = None
    signature = {name: "constexpr" for name in constants}
    signature.update({name: "*bf16" for name in pointers})
    order = ["a", "b", "bias", "c", "M", "N", "K", "TRANS_B", "HAS_BIAS", "BM", "BN", "BK", "GROUP"]
    source = triton.compiler.ASTSource(
        boo_hopper_gemm, signature={name: signature[name] for name in order}, constexprs=constants,
        # BOO's tensors are 64-byte aligned: let Triton issue 16-byte loads and stores
        attrs={(order.index(name),): [["tt.divisibility", 16]] for name in pointers})
    with _compile_lock:
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": config.num_warps, "num_stages": config.num_stages})
    metadata = compiled.metadata
    if metadata.num_ctas != 1 or getattr(metadata, "global_scratch_size", 0) or \
            getattr(metadata, "profile_scratch_size", 0):
        raise RuntimeError(f"Triton's kernel needs what IREE cannot give it: {metadata}")
    ptx = to_iree_abi(compiled.asm["ptx"], metadata.name, entry, bindings)
    tiles = (problem.m // config.bm) * (problem.n // config.bn)
    return Kernel(ptx, metadata.num_warps * 32, tiles, int(metadata.shared))


def to_iree_abi(ptx: str, name: str, entry: str, bindings: int) -> str:
    """Rename kernel ``name`` to ``entry`` and drop its parameters past the first
    ``bindings`` (the scratch pointers Triton appends), which must be unused."""
    match = re.search(rf"\.entry\s+{re.escape(name)}\s*\((.*?)\)", ptx, re.S)
    if match is None:
        raise RuntimeError(f"no .entry {name} in Triton's PTX")
    params = [p.strip() for p in match.group(1).split(",") if p.strip()]
    if len(params) < bindings or not all(p.startswith(".param .u64") for p in params[:bindings]):
        raise RuntimeError(f"{name} takes {params}, not {bindings} pointers first")
    for extra in params[bindings:]:
        symbol = extra.split()[-1]
        if len(re.findall(rf"\b{re.escape(symbol)}\b", ptx)) != 1:
            raise RuntimeError(f"{name} uses its parameter {symbol}: cannot drop it")
    ptx = ptx[:match.start(1)] + "\n\t" + ",\n\t".join(params[:bindings]) + "\n" + ptx[match.end(1):]
    return re.sub(rf"\b{re.escape(name)}(_param_\d+)?\b", lambda m: entry + (m.group(1) or ""), ptx)
