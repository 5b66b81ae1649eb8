"""A complete, tiny op for testing the framework: ``scale -n N -f FACTOR`` computes x * FACTOR.

``-F 0`` yields two signatures (modes fwd and bwd, both a scaling), to exercise commands
that run several kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from boo_core import CommandParser, Flag, FlagKind, OpSpec, ParsedFlags, Signature, TensorSpec, hookimpl
from boo_core.dtypes import DTYPE_TO_SUFFIX, short_name
from boo_core.parser import format_command, integer, number


@dataclass(frozen=True)
class ScaleSignature(Signature):
    op_name: ClassVar[str] = "scale"

    size: int
    factor: float = 2.0
    dtype: torch.dtype = torch.float32
    mode: str = "fwd"

    def readable_name(self) -> str:
        return f"scale_{self.mode}_{short_name(self.dtype)}_n{self.size}_f{self.factor:g}".replace(".", "p").replace("-", "m")

    def input_specs(self):
        return [TensorSpec("x", (self.size,), self.dtype)]

    def output_specs(self):
        return [TensorSpec("y", (self.size,), self.dtype)]

    def reference(self, x):
        return x * self.factor

    @property
    def flops(self) -> int:
        return self.size

    def to_command(self) -> str:
        flag = PARSER.flag
        return format_command("scale" + DTYPE_TO_SUFFIX[self.dtype],
                              [(flag("size"), self.size), (flag("factor"), self.factor),
                               (flag("forw"), 1 if self.mode == "fwd" else 2)])


class ScaleParser(CommandParser):
    flags = (
        Flag("size", "n", 16, integer, "elements"),
        Flag("factor", "f", 2.0, number, "scale factor"),
        Flag("forw", "F", 1, integer, "1 fwd, 2 bwd, 0 both"),
        Flag("iter", "i", 10, integer, "iterations", FlagKind.RUN),
        Flag("in_data", "d", "", str, "input file", FlagKind.REFUSED, "files are not supported"),
    )

    def build(self, flags: ParsedFlags, *, base: str, dtype: torch.dtype):
        modes = {0: ("fwd", "bwd"), 1: ("fwd",), 2: ("bwd",)}.get(flags["forw"])
        if modes is None:
            from boo_core import CommandError

            raise CommandError(f"flag {flags.label('forw')} must be 0, 1 or 2", flag=flags.label("forw"))
        return [ScaleSignature(flags["size"], flags["factor"], dtype, mode) for mode in modes]


PARSER = ScaleParser()
SPEC = OpSpec(name="scale", keywords=("scale",), signature_class=ScaleSignature, parser=PARSER,
              description="test op: y = x * factor")


@hookimpl
def boo_register_ops(register):
    register(SPEC)
