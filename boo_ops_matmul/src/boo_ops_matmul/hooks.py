"""Registration of the matmul op with BOO (the ``boo`` entry point ``matmul``)."""

from __future__ import annotations

from boo_core import OpSpec, hookimpl

from .compile_flags import matmul_compile_flags
from .formulations import matmul_formulations
from .fusion import PATTERNS
from .parser import GemmParser
from .signature import MatmulSignature
from .tuning import tuning_space


@hookimpl
def boo_register_ops(register):
    register(OpSpec(
        name="matmul",
        keywords=("gemm",),
        signature_class=MatmulSignature,
        parser=GemmParser(),
        description="matrix multiply (MIOpenDriver gemm, gemmfp16; gemmbfp16 is a BOO extension)",
        formulations=matmul_formulations,
        compile_flags=matmul_compile_flags,
        fusion_patterns=PATTERNS,
        tuning_space=tuning_space,
    ))
