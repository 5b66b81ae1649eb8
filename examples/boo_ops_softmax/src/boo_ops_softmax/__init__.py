"""Softmax for BOO, the example op plugin: ``boo_softmax``, ``SoftmaxSignature`` and
MIOpenDriver ``softmax`` commands."""

from .eager import boo_softmax, boo_softmax_backward, softmax_launchable, softmax_signature_for
from .parser import SoftmaxParser
from .signature import SoftmaxSignature

__all__ = ["SoftmaxParser", "SoftmaxSignature", "boo_softmax", "boo_softmax_backward", "softmax_launchable",
           "softmax_signature_for"]
