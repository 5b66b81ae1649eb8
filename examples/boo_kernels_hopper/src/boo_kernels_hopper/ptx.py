"""Triton kernels as PTX IREE can launch, and whether they can be built here.

:func:`compile_for_iree` runs ``triton.compile`` for sm_90a and rewrites the PTX to IREE's
CUDA kernel ABI (docs/gpu.md of BOO): the entry named after the export, one 64-bit pointer
per binding and nothing else (a kernel that builds tensor maps on the device gets their memory
from its own module: :mod:`.descriptor_scratch`). Everything here but :func:`compile_for_iree` runs without
Triton or a GPU.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import threading
from dataclasses import dataclass
from typing import Any

import torch

from .descriptor_scratch import give_descriptor_scratch, slots_for

_compile_lock = threading.Lock()  # BOO sets kernels up from several threads; compile one at a time


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
    """Triton's version, part of every substitution's key ("none" where it is not installed:
    nothing can be built there)."""
    if importlib.util.find_spec("triton") is None:
        return "none"
    import triton

    return str(triton.__version__)


@dataclass(frozen=True)
class Kernel:
    """PTX ready for IREE, and how to launch it."""

    ptx: str
    block: int  # threads per block (x)
    grid: int | tuple[int, int, int]  # blocks: x, or (x, y, z)
    shared_bytes: int  # dynamic shared memory

    @property
    def grid_xyz(self) -> tuple[int, int, int]:
        return self.grid if isinstance(self.grid, tuple) else (self.grid, 1, 1)


def bindings_of(executables: Any) -> dict[str, list[str]]:
    """Each executable's bindings as IREE spells them: what a plan's error says it found."""
    return {e.name: [b.tensor for b in e.exports[0].bindings] for e in executables if e.exports}


def compile_for_iree(fn: Any, pointers: list[str], constants: dict[str, Any], order: list[str], num_warps: int,
                     num_stages: int, entry: str, types: dict[str, str] | None = None) -> tuple[Any, str]:
    """Triton's sm_90a build of ``fn`` (parameters ``order``: ``pointers``, then ``constants``
    as compile-time values) with IREE's ABI, and its PTX; ``types``: pointers that are not
    ``*bf16``."""
    import triton
    from triton.backends.compiler import GPUTarget

    signature: dict[str, str] = {name: "constexpr" for name in constants}
    signature.update({name: (types or {}).get(name, "*bf16") for name in pointers})
    source = triton.compiler.ASTSource(
        fn, signature={name: signature[name] for name in order}, constexprs=constants,
        # BOO's tensors are 64-byte aligned: let Triton issue 16-byte loads and stores
        attrs={(order.index(name),): [["tt.divisibility", 16]] for name in pointers})
    with _compile_lock:
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": num_warps, "num_stages": num_stages})
    metadata = compiled.metadata
    if metadata.num_ctas != 1 or getattr(metadata, "profile_scratch_size", 0):
        raise RuntimeError(f"Triton's kernel needs what IREE cannot give it: {metadata}")
    ptx = compiled.asm["ptx"]
    scratch = getattr(metadata, "global_scratch_size", 0)
    if scratch:  # tensor maps built on the device (tl.make_tensor_descriptor): memory of the module's own
        threads = metadata.num_warps * 32
        ptx = give_descriptor_scratch(ptx, metadata.name, len(pointers), scratch, metadata.num_warps,
                                      slots_for(threads, int(metadata.shared)))
    return compiled, to_iree_abi(ptx, metadata.name, entry, len(pointers))


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
