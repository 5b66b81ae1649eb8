"""Batch normalization for BOO: ``boo_batch_norm``, ``BooBatchNorm{1,2,3}d``,
``BatchNormSignature`` and MIOpenDriver ``bnorm`` commands."""

from .eager import batch_norm_signature_for, boo_batch_norm
from .modules import BooBatchNorm1d, BooBatchNorm2d, BooBatchNorm3d, convert_batch_norms
from .parser import BatchNormParser
from .signature import BatchNormSignature

__all__ = ["BatchNormParser", "BatchNormSignature", "BooBatchNorm1d", "BooBatchNorm2d", "BooBatchNorm3d",
           "batch_norm_signature_for", "boo_batch_norm", "convert_batch_norms"]
