"""RMS normalization for BOO, the second example op plugin: ``boo_rms_norm``, ``BooRMSNorm``,
``RMSNormSignature`` and ``rmsnorm`` commands."""

from .eager import boo_rms_norm, rms_norm_launchable, rms_norm_signature_for
from .modules import BooRMSNorm
from .parser import RMSNormParser
from .signature import RMSNormSignature

__all__ = ["BooRMSNorm", "RMSNormParser", "RMSNormSignature", "boo_rms_norm", "rms_norm_launchable",
           "rms_norm_signature_for"]
