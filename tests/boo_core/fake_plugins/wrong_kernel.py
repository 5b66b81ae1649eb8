"""The scale op with a deliberately wrong kernel for float32 signatures.

Its first formulation, hand-written MLIR, computes ``x * 3`` while the signature's reference
computes ``x * factor``: numerics checks and verification must catch it.
"""

from __future__ import annotations

import torch

from boo_core import Formulation, hookimpl

from .scale_op import SPEC, ScaleSignature

TRIPLE = """
func.func @{name}(%x: !torch.vtensor<[{n}],f32>, %out: !torch.tensor<[{n}],f32>) {{
  %three = torch.constant.float 3.0
  %y = torch.aten.mul.Scalar %x, %three : !torch.vtensor<[{n}],f32>, !torch.float -> !torch.vtensor<[{n}],f32>
  torch.overwrite.tensor.contents %y overwrites %out : !torch.vtensor<[{n}],f32>, !torch.tensor<[{n}],f32>
  return
}}
"""


def triple(signature: ScaleSignature) -> Formulation:
    """A formulation computing x * 3 (wrong unless the factor is 3)."""
    return Formulation("triple", mlir=lambda: TRIPLE.format(name=signature.func_name, n=signature.size))


def only_triple(signature, target):
    """The wrong kernel alone for float32 signatures (no correct formulation to fall back to)."""
    return (triple(signature),) if signature.dtype == torch.float32 else (Formulation("default"),)


@hookimpl
def boo_register_ops(register):
    from dataclasses import replace

    register(replace(SPEC, formulations=only_triple))
