"""Matrix multiply for BOO: ``boo_matmul``, ``boo_linear``, ``BooLinear``, ``MatmulSignature``
and MIOpenDriver ``gemm`` commands."""

from .eager import boo_linear, boo_matmul, matmul_signature_for
from .modules import BooLinear
from .parser import GemmParser
from .signature import ACTIVATIONS, MatmulSignature

__all__ = ["ACTIVATIONS", "BooLinear", "GemmParser", "MatmulSignature", "boo_linear", "boo_matmul",
           "matmul_signature_for"]
