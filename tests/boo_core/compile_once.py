"""iree-compile run once per input: for tests of the kernel cache that rebuild one kernel
again and again (each damaged, killed or full cache must be healed by a rebuild).

The rebuild takes BOO's whole path (lookup, lock, export, MLIR file, compile call, cache
writes, load); only the iree-compile process for an input compiled before is replaced by
the bytes it gave then (its output depends on its input and flags alone). Failures are not
kept: a failing compile runs every time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from boo_core.kernels import compiler, request


@contextmanager
def compiling_once() -> Iterator[dict[tuple[bytes, tuple[str, ...]], bytes]]:
    """Within the block, each (MLIR text, flags) is compiled once; yields the kept outputs."""
    real = compiler.compile_to_bytes
    outputs: dict[tuple[bytes, tuple[str, ...]], bytes] = {}

    def compile_to_bytes(mlir, flags, **kwargs):
        text = mlir.read_bytes() if isinstance(mlir, Path) else str(mlir).encode()
        key = (text, tuple(flags))
        if key not in outputs:
            outputs[key] = real(mlir, flags, **kwargs)
        return outputs[key]

    saved = compiler.compile_to_bytes, request.compile_to_bytes
    compiler.compile_to_bytes = request.compile_to_bytes = compile_to_bytes
    try:
        yield outputs
    finally:
        compiler.compile_to_bytes, request.compile_to_bytes = saved
