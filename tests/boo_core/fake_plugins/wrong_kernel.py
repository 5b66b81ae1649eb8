"""A plugin whose kernel for float32 ``scale`` signatures is deliberately wrong.

Its hand-written MLIR (through ``boo_signature_mlir``) computes ``x * 3`` while the
signature's reference computes ``x * factor``: numerics checks must catch it.
"""

from __future__ import annotations

import torch

from boo_core import hookimpl

from .scale_op import ScaleSignature

TRIPLE = """
func.func @{name}(%x: !torch.vtensor<[{n}],f32>, %out: !torch.tensor<[{n}],f32>) {{
  %three = torch.constant.float 3.0
  %y = torch.aten.mul.Scalar %x, %three : !torch.vtensor<[{n}],f32>, !torch.float -> !torch.vtensor<[{n}],f32>
  torch.overwrite.tensor.contents %y overwrites %out : !torch.vtensor<[{n}],f32>, !torch.tensor<[{n}],f32>
  return
}}
"""


@hookimpl
def boo_signature_mlir(signature):
    if isinstance(signature, ScaleSignature) and signature.dtype == torch.float32:
        return TRIPLE.format(name=signature.func_name, n=signature.size)
    return None
