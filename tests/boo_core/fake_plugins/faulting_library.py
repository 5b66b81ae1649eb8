"""A kernel library whose kernels for the scale op fault: one reads memory a terabyte past
its input (SIGSEGV when run), one spins forever. Both are real IREE CPU kernels, the scale
op's own executable with its body edited, so they compile, load, and fault only when run.
"""

from __future__ import annotations

from boo_core import hookimpl
from boo_core.substitute import Substitution

from .scale_op import ScaleSignature

#: The scale executable's multiply, as IREE prints it, and its factor's constant.
MULTIPLY = "          %5 = arith.mulf %in, %cst : f32"
FACTOR = "        %cst = arith.constant 2.000000e+00 : f32"

#: Each element read from index 10**12 of a 37-element tensor.
FAR_READ = """          %far = arith.constant 1.0e+12 : f32
          %far_i = arith.fptosi %far : f32 to i64
          %far_index = arith.index_cast %far_i : i64 to index
          %5 = tensor.extract %2[%far_index] : tensor<37xf32>"""

#: The factor computed after a loop whose condition never fails (an index kept in {0, 1}
#: and compared with 0); its result is used, so the loop is not removed.
ENDLESS = """        %two = arith.constant 2.000000e+00 : f32
        %spin_0 = arith.constant 0 : index
        %spin_1 = arith.constant 1 : index
        %spun = scf.while (%i = %spin_0) : (index) -> index {
          %again = arith.cmpi sge, %i, %spin_0 : index
          scf.condition(%again) %i : index
        } do {
        ^bb0(%j: index):
          %next = arith.addi %j, %spin_1 : index
          %kept = arith.andi %next, %spin_1 : index
          scf.yield %kept : index
        }
        %spun_i = arith.index_cast %spun : index to i32
        %spun_f = arith.sitofp %spun_i : i32 to f32
        %cst = arith.addf %two, %spun_f : f32"""

EDITS = {"crash": (MULTIPLY, FAR_READ), "hang": (FACTOR, ENDLESS)}


class FaultingLibrary:
    """Offers, for the scale op's CPU kernels of size 37, its executable edited to ``fault``
    (``crash`` or ``hang``)."""

    def __init__(self, fault: str) -> None:
        self.fault = fault

    @hookimpl
    def boo_kernel_substitutions(self, signature, target):
        if not isinstance(signature, ScaleSignature) or signature.size != 37 or target.backend != "llvm-cpu":
            return None
        return [Substitution(self.fault, build=self.build, key=f"faulting-library {self.fault}")]

    def build(self, kernel):
        [executable] = kernel.executables
        old, new = EDITS[self.fault]
        assert old in executable.text, "the scale kernel's source no longer reads as this library expects"
        return {f"sources/{executable.name}.mlir": executable.text.replace(old, new)}
