"""The tensors an IREE executable's function reads and writes, as its printed source says:
for each ``hal.interface.binding.subspan``, its SSA value, binding, byte offset (a
constant), shape, element type and access. A kernel replacing the executable takes one
pointer per binding and adds the offsets itself (a binding may hold several tensors)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

_SUBSPAN = re.compile(r"(%\w+) = hal\.interface\.binding\.subspan [^\n]*?binding\((\d+)\)[^\n]*?offset\((%\w+)\)"
                      r"[^\n]*?: !iree_tensor_ext\.dispatch\.tensor<(\w+):tensor<([0-9x]+)x(bf16|f16|f32)>>")
_INDEX_CONSTANT = re.compile(r"(%\w+) = arith\.constant (\d+) : index")
BYTES = {"bf16": 2, "f16": 2, "f32": 4}


@dataclass(frozen=True)
class Span:
    name: str  # the subspan's SSA value
    binding: int
    offset: int  # bytes
    shape: tuple[int, ...]
    dtype: str  # bf16, f16, f32
    access: str  # readonly, writeonly, readwrite

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def element_offset(self) -> int:
        if self.offset % 16:
            raise ValueError(f"a tensor at byte {self.offset}: not 16-byte aligned")
        return self.offset // BYTES[self.dtype]


def spans(executable: Any, dtype: str | None = None) -> list[Span]:
    """Every tensor (of ``dtype`` only, if given) the executable's function reads or writes,
    in the order its source declares them; ValueError for one at a dynamic offset."""
    text = executable.text
    constants = {name: int(value) for name, value in _INDEX_CONSTANT.findall(text)}
    found = []
    for name, binding, offset, access, shape, kind in _SUBSPAN.findall(text):
        if dtype is not None and kind != dtype:
            continue
        if offset not in constants:
            raise ValueError(f"{executable.name}: binding {binding} at a dynamic offset {offset}")
        found.append(Span(name, int(binding), constants[offset], tuple(int(d) for d in shape.split("x")), kind,
                          access))
    return found
