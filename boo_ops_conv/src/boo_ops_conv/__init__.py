"""Convolution for BOO: ``boo_conv``, ``ConvSignature`` and MIOpenDriver ``conv`` commands."""

from .eager import boo_conv, conv_signature_for
from .parser import ConvParser
from .signature import ConvSignature

__all__ = ["ConvParser", "ConvSignature", "boo_conv", "conv_signature_for"]
