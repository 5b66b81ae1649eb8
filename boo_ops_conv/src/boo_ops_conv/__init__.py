"""Convolution for BOO: ``boo_conv``, the ``BooConv*`` modules, ``ConvSignature`` and
MIOpenDriver ``conv`` commands; MIOpen's CBAInfer fusion (``ConvBatchNormActivationSignature``)."""

from .cba_parser import CBAInferParser
from .cba_signature import ConvBatchNormActivationSignature
from .eager import boo_conv, boo_conv_backward, conv_signature_for
from .modules import (
    BooConv1d,
    BooConv2d,
    BooConv3d,
    BooConvTranspose1d,
    BooConvTranspose2d,
    BooConvTranspose3d,
    convert_convs,
)
from .parser import ConvParser
from .signature import ACTIVATIONS, MODES, ConvSignature

__all__ = [
    "ACTIVATIONS",
    "MODES",
    "BooConv1d",
    "BooConv2d",
    "BooConv3d",
    "BooConvTranspose1d",
    "BooConvTranspose2d",
    "BooConvTranspose3d",
    "CBAInferParser",
    "ConvBatchNormActivationSignature",
    "ConvParser",
    "ConvSignature",
    "boo_conv",
    "boo_conv_backward",
    "conv_signature_for",
    "convert_convs",
]
