"""A complete, tiny op for testing the framework: ``scale -n N -f FACTOR`` computes x * FACTOR.

``-F 0`` yields two signatures (modes fwd and bwd, both a scaling), to exercise commands
that run several kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from boo_core import CommandParser, Directions, Flag, FlagKind, OpSpec, Signature, TensorSpec, hookimpl
from boo_core.signatures.dtypes import short_name
from boo_core.signatures.flags import integer, number, text


@dataclass(frozen=True)
class ScaleSignature(Signature):
    op_name: ClassVar[str] = "scale"

    size: int
    factor: float = 2.0
    dtype: torch.dtype = torch.float32
    mode: str = "fwd"

    def readable_name(self) -> str:
        factor = f"{self.factor:g}".replace(".", "p").replace("-", "m")
        return f"scale_{self.mode}_{short_name(self.dtype)}_n{self.size}_f{factor}"

    def input_specs(self):
        return [TensorSpec("x", (self.size,), self.dtype)]

    def output_specs(self):
        return [TensorSpec("y", (self.size,), self.dtype)]

    def reference(self, x):
        return x * self.factor

    @property
    def flops(self) -> int:
        return self.size


class ScaleParser(CommandParser):
    flags = (
        Flag("size", "n", 16, integer, "elements", field="size"),
        Flag("factor", "f", 2.0, number, "scale factor", field="factor"),
        Flag("forw", "F", 1, integer, "1 fwd, 2 bwd, 0 both"),
        Flag("iter", "i", 10, integer, "iterations", FlagKind.RUN),
        Flag("in_data", "d", "", text, "input file", FlagKind.REFUSED, "files are not supported"),
    )
    signature_class = ScaleSignature
    dtypes = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
    directions = Directions({"fwd": 1, "bwd": 2}, zero=("fwd", "bwd"))


PARSER = ScaleParser()
SPEC = OpSpec(name="scale", keywords=("scale",), signature_class=ScaleSignature, parser=PARSER,
              description="test op: y = x * factor")


@hookimpl
def boo_register_ops(register):
    register(SPEC)


class ScalePlugin:
    """A plugin registering the scale op with other per-op behaviour: ``ScalePlugin(
    formulations=..., compile_flags=...)`` (the OpSpec fields)."""

    def __init__(self, **behaviour) -> None:
        self.spec = replace(SPEC, **behaviour)

    @hookimpl
    def boo_register_ops(self, register):
        register(self.spec)
