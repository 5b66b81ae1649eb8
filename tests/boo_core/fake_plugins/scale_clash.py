"""A second plugin claiming the ``scale`` command keyword, under another op name."""

from dataclasses import dataclass, replace
from typing import ClassVar

from boo_core import hookimpl

from .scale_op import SPEC, ScaleParser, ScaleSignature


@dataclass(frozen=True)
class ScaleAgainSignature(ScaleSignature):
    op_name: ClassVar[str] = "scale_again"


class ScaleAgainParser(ScaleParser):
    signature_class = ScaleAgainSignature


@hookimpl
def boo_register_ops(register):
    register(replace(SPEC, name="scale_again", signature_class=ScaleAgainSignature, parser=ScaleAgainParser()))
