"""Registration of the conv ops with BOO (the ``boo`` entry point ``conv``): the convolution,
and MIOpen's CBAInfer inference fusion (conv + bias + batch norm + activation)."""

from __future__ import annotations

from boo_core import OpSpec, hookimpl

from .cba_formulations import cba_formulations
from .cba_fusion import PATTERNS as CBA_PATTERNS
from .cba_parser import CBAInferParser
from .cba_signature import ConvBatchNormActivationSignature
from .formulations import conv_formulations
from .fusion import PATTERNS
from .parser import ConvParser
from .signature import ConvSignature
from .tuning import tuning_space


@hookimpl
def boo_register_ops(register):
    register(OpSpec(
        name="conv",
        keywords=("conv",),
        signature_class=ConvSignature,
        parser=ConvParser(),
        description="convolution (MIOpenDriver conv, convfp16, convbfp16)",
        formulations=conv_formulations,
        fusion_patterns=PATTERNS,
        tuning_space=tuning_space,
    ))
    register(OpSpec(
        name="cbainfer",
        keywords=("CBAInfer",),
        signature_class=ConvBatchNormActivationSignature,
        parser=CBAInferParser(),
        description="conv + bias + batch norm + activation inference, one kernel (MIOpenDriver CBAInfer, "
                    "CBAInferfp16, CBAInferbfp16)",
        formulations=cba_formulations,
        fusion_patterns=CBA_PATTERNS,
    ))
