"""Registration of the conv op with BOO (the ``boo`` entry point ``conv``)."""

from __future__ import annotations

from boo_core import OpSpec, hookimpl

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
