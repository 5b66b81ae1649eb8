"""Layer normalization for BOO: ``boo_layer_norm``, ``BooLayerNorm``, ``LayerNormSignature``
and MIOpenDriver ``layernorm`` commands in MIOpen's three dialects."""

from .eager import boo_layer_norm, layer_norm_signature_for
from .modules import BooLayerNorm
from .parser import LayerNormParser
from .signature import LayerNormSignature

__all__ = ["BooLayerNorm", "LayerNormParser", "LayerNormSignature", "boo_layer_norm", "layer_norm_signature_for"]
