"""A plugin whose MLIR for ``scale`` signatures does not compile (for compile-failure tests)."""

from __future__ import annotations

from boo_core import hookimpl

from .scale_op import ScaleSignature


@hookimpl
def boo_signature_mlir(signature):
    return "func.func @nonsense( {" if isinstance(signature, ScaleSignature) else None
