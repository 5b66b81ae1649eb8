"""The scale op whose hand-written MLIR does not compile (for compile-failure tests)."""

from __future__ import annotations

from dataclasses import replace

from boo_core import Formulation, hookimpl

from .scale_op import SPEC

NONSENSE = "func.func @nonsense( {"


def broken(signature, target):
    return (Formulation("broken", mlir=lambda: NONSENSE),)


@hookimpl
def boo_register_ops(register):
    register(replace(SPEC, formulations=broken))
