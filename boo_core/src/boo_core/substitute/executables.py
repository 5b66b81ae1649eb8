"""A kernel's executables as IREE forms them, before any substitution.

BOO compiles the kernel's MLIR up to IREE's ``executable-sources`` phase and reads each
``hal.executable`` IREE dumps: their names are what substitution files must be called, and
their text is what a replacement starts from. This costs a fraction of a full compile and
runs only when a substituted kernel is built.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SubstitutionError
from ..files import MAX_KERNEL_FILE_BYTES, read_text
from ..kernels.compiler import run_compile
from ..kernels.request import KernelRequest
from ..kernels.target import Target
from ..signatures.installed import installed_ops
from .mlir_text import Executable, parse_executable


@dataclass(frozen=True)
class KernelExecutables:
    """The executables of one kernel (a signature, a target, a formulation), as IREE
    formed them: ``executables[i].text`` is the ``hal.executable`` a ``sources/`` file
    replaces, with its exports, layouts and binding tensor types."""

    signature: Any
    target: Target
    formulation: str
    executables: tuple[Executable, ...]

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.executables]

    def get(self, name: str) -> Executable | None:
        return next((e for e in self.executables if e.name == name), None)


def _module_order(path: Path) -> list[Any]:
    """Sort key: numbers in a name compared as numbers (``dispatch_2`` before ``dispatch_10``),
    so that executables come in the order of the module's dispatches."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def read_dumped_sources(directory: Path) -> dict[str, Executable]:
    """The executables IREE dumped into ``directory`` (``--iree-hal-dump-executable-*-to``),
    in the module's order."""
    found = {}
    for path in sorted(directory.glob("*.mlir"), key=_module_order):
        executable = parse_executable(read_text(path, MAX_KERNEL_FILE_BYTES, what="dumped executable"))
        found[executable.name] = executable
    return found


def executables_of(signature: Any, target: Target | str, formulation: str | None = None) -> KernelExecutables:
    """``signature``'s executables on ``target`` (formulation ``formulation``, default the
    op's first): what substitution files must be named after, and what they replace."""
    target = target if isinstance(target, Target) else Target.parse(target)
    chosen = None
    if formulation is not None:
        chosen = next((f for f in installed_ops().formulations(signature, target) if f.name == formulation),
                      None)
        if chosen is None:
            raise SubstitutionError(f"{signature.func_name} has no formulation {formulation!r} on {target.name}")
    request = KernelRequest.create(signature, target, chosen)
    with tempfile.TemporaryDirectory(prefix="boo-source-") as scratch:
        mlir_path = Path(scratch) / "source.mlir"
        mlir_path.write_text(request.source())
        return kernel_executables(request, mlir_path)


def kernel_executables(request: Any, mlir_path: Path) -> KernelExecutables:
    """Compile ``request``'s MLIR (already written to ``mlir_path``) to executable sources
    and read its executables. A formulation IREE cannot take that far raises
    :class:`~boo_core.CompileError` like any compile."""
    with tempfile.TemporaryDirectory(prefix="boo-executables-") as scratch:
        sources = Path(scratch) / "sources"
        flags = (*request.flags, "--compile-to=executable-sources", f"--iree-hal-dump-executable-sources-to={sources}")
        run_compile(mlir_path, Path(scratch) / "executable-sources.mlir", flags)
        executables = read_dumped_sources(sources)
    return KernelExecutables(request.signature, request.target, request.formulation.name,
                             tuple(executables.values()))
