"""Registration of the rmsnorm op with BOO (the ``boo`` entry point ``rmsnorm``)."""

from __future__ import annotations

from collections.abc import Callable

from boo_core.plugin import OpSpec, hookimpl

from .formulations import formulations
from .parser import RMSNormParser
from .signature import RMSNormSignature
from .tuning import tuning_space


@hookimpl
def boo_register_ops(register: Callable[[OpSpec], None]) -> None:
    register(OpSpec(
        name="rmsnorm",
        keywords=("rmsnorm",),
        signature_class=RMSNormSignature,
        parser=RMSNormParser(),
        description="RMS normalization over the last dim, forward (y and the saved rstd) and backward from rstd "
                    "(rmsnorm, rmsnormfp16, rmsnormbfp16)",
        formulations=formulations,
        tuning_space=tuning_space,
    ))
