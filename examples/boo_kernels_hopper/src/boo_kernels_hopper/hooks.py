"""The ``boo`` entry point ``hopper_kernels``: bf16 matmuls and convolutions for Hopper GPUs.

For a CUDA target, when Triton is installed and the GPU is a Hopper (compute capability
9.0), a matmul or conv signature this library serves (``gemm.problem_of``,
``conv.problem_of``) gets one candidate substitution: executables with no code of their own
that run Triton's sm_90a PTX, built only on a cache miss (a conv replaces every executable of
the ``default`` formulation's module: ``conv.plan``; a weight gradient replaces every
executable of an ``im2col_splitN`` formulation's module: ``wgrad.plan``). BOO verifies it
against PyTorch before first use and passes it over (IREE's kernel serves) if it fails.
Anywhere else it answers None and says why at debug level.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from boo_core import Target, hookimpl
from boo_core.substitute import KernelExecutables, Substitution, external_source

from . import __version__ as VERSION
from . import conv, gemm, wgrad

logger = logging.getLogger(__name__)
OBJECT = "objects/hopper_gemm.ptx"
CONV_FORMULATION = "default"  # the conv op's module whose executables conv.plan knows


def _build(problem: gemm.GemmProblem, config: gemm.GemmConfig):
    def build(kernel: KernelExecutables) -> dict[str, str]:
        if len(kernel.executables) != 1 or len(kernel.executables[0].exports) != 1:
            raise ValueError(f"expected one executable with one export, got {kernel.names}")
        [executable] = kernel.executables
        [export] = executable.exports
        expected = [(problem.m, problem.k), (problem.n, problem.k) if problem.trans_b else (problem.k, problem.n)]
        expected += [(problem.n,)] if problem.bias else []
        expected += [(problem.m, problem.n)]
        types = [f"tensor<{'x'.join(map(str, shape))}xbf16>" for shape in expected]
        found = [b.tensor for b in export.bindings]
        if found != types or export.constants:
            raise ValueError(f"{export.name}: bindings {found} with {export.constants} constants, expected {types}")
        made = gemm.generate_ptx(problem, config, export.kernel_name, len(types))
        source = external_source(executable, [OBJECT], workgroup_size=(made.block, 1, 1),
                                 workgroup_count=(made.grid, 1, 1), workgroup_local_memory=made.shared_bytes)
        return {f"sources/{executable.name}.mlir": source, OBJECT: made.ptx}

    return build


def _build_launches(plan: Callable[[Sequence[Any]], list[Any]], generate: Callable[[Any, str], Any], prefix: str):
    """A build replacing every executable of the module: ``plan(executables)`` gives one
    launch per executable (ValueError for a module it does not know), ``generate(launch,
    kernel_name)`` its PTX and geometry."""
    def build(kernel: KernelExecutables) -> dict[str, str]:
        files: dict[str, str] = {}
        for index, launch in enumerate(plan(kernel.executables)):
            executable = launch.executable
            made = generate(launch, executable.exports[0].kernel_name)
            obj = f"objects/{prefix}_{index}_{launch.kernel}.ptx"  # one per executable: each names its own entry
            files[f"sources/{executable.name}.mlir"] = external_source(
                executable, [obj], workgroup_size=(made.block, 1, 1), workgroup_count=(made.grid, 1, 1),
                workgroup_local_memory=made.shared_bytes)
            files[obj] = made.ptx
        return files

    return build


def _wgrad_substitution(problem: wgrad.WgradProblem) -> Substitution:
    config = wgrad.choose_config(problem)
    formulation = wgrad.formulation_of(problem)
    key = f"boo_kernels_hopper {VERSION} triton {gemm.triton_version()} sm_90a wgrad {problem} {config} {formulation}"
    build = _build_launches(lambda executables: wgrad.plan(problem, config, executables), wgrad.generate,
                            "hopper_wgrad")
    return Substitution("hopper_conv", build=build, key=key, formulation=formulation)


def _conv_substitution(signature: Any) -> Substitution | None:
    weight_gradient = getattr(signature, "mode", None) == "wrw"
    problem = wgrad.problem_of(signature) if weight_gradient else conv.problem_of(signature)
    if problem is None:
        return None
    reason = gemm.unavailable_reason()
    if reason is not None:
        logger.debug("boo_kernels_hopper supplies nothing for %s: %s", signature.func_name, reason)
        return None
    if weight_gradient:
        return _wgrad_substitution(problem)
    config = conv.choose_config(problem)
    key = f"boo_kernels_hopper {VERSION} triton {gemm.triton_version()} sm_90a conv {problem} {config}"
    build = _build_launches(lambda executables: conv.plan(problem, executables),
                            lambda launch, name: conv.generate(problem, config, launch, name), "hopper_conv")
    return Substitution("hopper_conv", build=build, key=key, formulation=CONV_FORMULATION)


@hookimpl
def boo_kernel_substitutions(signature: Any, target: Target) -> Substitution | None:
    if target.backend != "cuda":
        return None
    if getattr(signature, "op_name", None) == "conv":
        return _conv_substitution(signature)
    problem = gemm.problem_of(signature)
    if problem is None:
        return None
    config = gemm.choose_config(problem)
    if config is None:
        logger.debug("boo_kernels_hopper: %s is not a multiple of the tiles", signature.func_name)
        return None
    reason = gemm.unavailable_reason()
    if reason is not None:
        logger.debug("boo_kernels_hopper supplies nothing for %s: %s", signature.func_name, reason)
        return None
    key = f"boo_kernels_hopper {VERSION} triton {gemm.triton_version()} sm_90a {config}"
    return Substitution("hopper_gemm", build=_build(problem, config), key=key)
