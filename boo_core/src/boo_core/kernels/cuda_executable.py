"""Reading the CUDA executables IREE embeds in a module: PTX and how each kernel is launched.

IREE's CUDA backend serializes each ``hal.executable`` as a FlatBuffer (file identifier
``CDA1``, behind a 16-byte header: the identifier, a version and the size) holding its PTX
modules and one record per export: the kernel's name in the PTX, its block size and its
dynamic shared memory. This module reads that FlatBuffer with the few rules of the format
it needs (tables through their vtables, vectors, strings, inline structs); the field
numbers are those of IREE 3.13's ``cuda_executable_def.fbs`` (ExecutableDef: exports,
modules; ExportDef: module ordinal, kernel name, block dims, block shared memory size;
ModuleDef: PTX image), checked by tests against the ``.maxntid`` IREE writes into the PTX.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

IDENTIFIER = b"CDA1"
_HEADER = struct.Struct("<4sII")  # identifier, version, size of what follows


def sanitize_symbol(name: str) -> str:
    """The symbol IREE's GPU backends emit for an export: every character outside
    ``[A-Za-z0-9_]`` becomes ``_`` (IREE's ``sanitizeSymbolName``), so ``f$async`` is ``f_async``."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


class ExecutableFormatError(ValueError):
    """The bytes are not an IREE CUDA executable this reader understands."""


@dataclass(frozen=True)
class CudaKernel:
    """One export of a CUDA executable: what ``cuLaunchKernel`` needs besides the grid."""

    name: str  # the ``.entry`` in the PTX
    module: int  # index into CudaExecutable.modules
    block: tuple[int, int, int]
    shared_memory: int  # dynamic shared memory, bytes


@dataclass(frozen=True)
class CudaExecutable:
    kernels: tuple[CudaKernel, ...]
    modules: tuple[str, ...]  # PTX text


class _FlatBuffer:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def u32(self, offset: int) -> int:
        if not 0 <= offset <= len(self.data) - 4:
            raise ExecutableFormatError(f"offset {offset} outside the {len(self.data)}-byte buffer")
        return struct.unpack_from("<I", self.data, offset)[0]

    def field(self, table: int, index: int) -> int | None:
        """The position of field ``index`` of the table at ``table`` (None when absent)."""
        vtable = table - struct.unpack_from("<i", self.data, table)[0]
        vtable_size = struct.unpack_from("<H", self.data, vtable)[0]
        if 4 + 2 * index >= vtable_size:
            return None
        offset = struct.unpack_from("<H", self.data, vtable + 4 + 2 * index)[0]
        return table + offset if offset else None

    def deref(self, position: int) -> int:
        return position + self.u32(position)

    def vector(self, position: int | None) -> list[int]:
        """Positions of the elements of the vector of offsets at ``position``."""
        if position is None:
            return []
        start = self.deref(position)
        return [start + 4 + 4 * i for i in range(self.u32(start))]

    def string(self, position: int | None) -> str:
        if position is None:
            return ""
        start = self.deref(position)
        length = self.u32(start)
        return self.data[start + 4:start + 4 + length].decode("utf-8")

    def scalar(self, table: int, index: int, default: int = 0) -> int:
        position = self.field(table, index)
        return default if position is None else self.u32(position)


def read_cuda_executable(data: bytes) -> CudaExecutable:
    """Decode an executable IREE's CUDA backend wrote (``hal.executable.binary`` data)."""
    if len(data) < _HEADER.size or data[:4] != IDENTIFIER:
        raise ExecutableFormatError("not an IREE CUDA executable (no CDA1 header)")
    body = data[_HEADER.size:]
    start = body.find(IDENTIFIER)  # the FlatBuffer: root offset, then its identifier
    if start < 4:
        raise ExecutableFormatError("no FlatBuffer after the header")
    buffer = _FlatBuffer(body[start - 4:])
    try:
        root = buffer.u32(0)
        kernels = []
        for element in buffer.vector(buffer.field(root, 0)):
            export = buffer.deref(element)
            dims = buffer.field(export, 2)
            block = struct.unpack_from("<III", buffer.data, dims) if dims is not None else (1, 1, 1)
            kernels.append(CudaKernel(name=buffer.string(buffer.field(export, 1)), module=buffer.scalar(export, 0),
                                      block=tuple(block), shared_memory=buffer.scalar(export, 3)))
        modules = tuple(buffer.string(buffer.field(buffer.deref(element), 0))
                        for element in buffer.vector(buffer.field(root, 1)))
    except (struct.error, UnicodeDecodeError) as e:
        raise ExecutableFormatError(f"malformed CUDA executable: {e}") from e
    for kernel in kernels:
        if not kernel.name or not 0 <= kernel.module < len(modules) or min(kernel.block) < 1:
            raise ExecutableFormatError(f"malformed export record {kernel}")
    return CudaExecutable(tuple(kernels), modules)
