"""Helpers for the substitution tests: the scale op's executable, edited.

The scale kernel's only executable multiplies by a constant IREE prints as ``2.000000e+00``.
Replacing it by the float32 just above 2 (2 + 2**-22) changes every nonzero result by an
ulp, predictably, and stays within BOO's tolerance (rtol is 2 ulp): a substitution that
verifies. Replacing it by 3 computes wrong.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from boo_core import hookimpl
from boo_core.substitute import KernelExecutables, Substitution, executables_of

from .fake_plugins.scale_op import ScaleSignature

TWO = "2.000000e+00"
NUDGED = "2.00000024e+00"  # how IREE prints the float32 2 + 2**-22
NUDGED_VALUE = torch.nextafter(torch.tensor(2.0), torch.tensor(3.0))


def edited_source(executables: KernelExecutables, new_constant: str) -> tuple[str, str]:
    """(executable name, its source with the factor 2 replaced by ``new_constant``)."""
    [executable] = executables.executables
    assert TWO in executable.text, "the scale kernel's source no longer holds the factor as IREE prints it"
    return executable.name, executable.text.replace(TWO, new_constant)


def write_source(directory: Path, executable: str, text: str, stage: str = "sources") -> Path:
    """``directory/<stage>/<executable>.mlir`` holding ``text``; the directory."""
    path = directory / stage / f"{executable}.mlir"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return directory


def scale_substitution(directory: Path, signature: object, new_constant: str, target: str = "cpu") -> Path:
    """A substitution directory replacing ``signature``'s factor by ``new_constant``."""
    name, text = edited_source(executables_of(signature, target), new_constant)
    return write_source(directory, name, text)


class ScaleLibrary:
    """Kernels for the scale op's factor-2 signatures on the CPU: its executable with another
    constant, built only when a kernel is compiled."""

    def __init__(self, constant: str = NUDGED, *, fail: bool = False, exit_code: int | None = None) -> None:
        self.constant, self.fail, self.exit_code, self.builds = constant, fail, exit_code, []

    @hookimpl
    def boo_kernel_substitutions(self, signature, target):
        if not isinstance(signature, ScaleSignature) or signature.factor != 2.0 or target.backend != "llvm-cpu":
            return None
        return [Substitution(f"times{self.constant}", build=self.build, key=f"scale-library {self.constant}")]

    def build(self, kernel):
        if self.fail:
            raise RuntimeError("the library's generator crashed")
        if self.exit_code is not None:
            sys.exit(self.exit_code)
        self.builds.append(kernel)
        name, text = edited_source(kernel, self.constant)
        return {f"sources/{name}.mlir": text}
