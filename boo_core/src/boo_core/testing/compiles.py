"""iree-compile run once per input in a test session, and torch.export once per kernel in a process.

A test suite builds the same kernel many times: in caches private to one test, in caches
damaged, filled or killed on purpose and healed by a rebuild, in every process of a test
session. Each build takes BOO's whole path (lookup, lock, export, MLIR file, compile call,
cache writes, load); within :func:`compiling_once` only two steps are replaced by what they
gave before for the same input:

* the iree-compile process: its output depends on its binary, its input and its flags alone,
  which make the key (shared by the session's processes);
* the export of a formulation (``torch.export`` and the import to MLIR, about 0.15 s, mostly
  torch's ``run_decompositions``): its text depends on the signature and the computation
  exported, which make the key, in this process only (a computation is a Python object).
  The process's ``export_count`` still counts each export asked for.

Failures are not kept: a failing compile or export runs every time, and so does a compile
under another compiler (a test's fake ``iree-compile``).

BOO's pytest plugin keeps this on for each session, the outputs in one directory that the
session's processes share (pytest-xdist workers); ``BOO_TEST_COMPILE_ONCE=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..kernels import compiler, export, formulation, request
from ..signatures.signature import Signature

#: Off with ``0``: every compile runs iree-compile.
SWITCH = "BOO_TEST_COMPILE_ONCE"
#: Bound now: tests that fail the cache's writes (a full disk) patch ``os.replace``, and the
#: kept outputs must not count among, or fail like, the cache's writes.
_replace = os.replace


def _key(mlir: Path | str, flags: Sequence[str]) -> str:
    text = mlir.read_bytes() if isinstance(mlir, Path) else str(mlir).encode()
    digest = hashlib.sha256(compiler.iree_compile_path().encode() + b"\0")
    for flag in flags:
        digest.update(flag.encode() + b"\0")
    digest.update(text)
    return digest.hexdigest()


def _keep(path: Path, output: bytes) -> None:
    """Write ``output`` to ``path`` atomically; where it cannot be written, it is not kept."""
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as scratch:
            scratch.write(output)
        _replace(scratch.name, path)
    except OSError:
        pass


@contextmanager
def compiling_once(directory: Path | None = None) -> Iterator[None]:
    """Within the block, each (compiler, flags, MLIR) is compiled once: its output is kept in
    ``directory`` (shared by processes; written atomically) or, without one, in memory."""
    real = compiler.compile_to_bytes
    kept: dict[str, bytes] = {}

    def compile_to_bytes(mlir: Path | str, flags: Sequence[str], **options: object) -> bytes:
        key = _key(mlir, flags)
        path = directory / key if directory is not None else None
        if path is not None and path.is_file():
            return path.read_bytes()
        if key in kept:
            return kept[key]
        output = real(mlir, flags, **options)
        if path is None:
            kept[key] = output
        else:
            _keep(path, output)
        return output

    saved = compiler.compile_to_bytes, request.compile_to_bytes, formulation.export_mlir
    compiler.compile_to_bytes = request.compile_to_bytes = compile_to_bytes
    formulation.export_mlir = _exporting_once(formulation.export_mlir)
    try:
        yield
    finally:
        compiler.compile_to_bytes, request.compile_to_bytes, formulation.export_mlir = saved


def _exporting_once(real: Callable[[Signature, Callable[..., Any] | None], str]
                    ) -> Callable[[Signature, Callable[..., Any] | None], str]:
    """``real`` (export_mlir), run once per (signature, computation) that can be a key."""
    exported: dict[tuple[Signature, object], str] = {}

    def export_mlir(signature: Signature, computation: Callable[..., Any] | None = None) -> str:
        key = (signature, computation)
        try:
            text = exported.get(key)
        except TypeError:  # a signature with an unhashable field: no key
            return real(signature, computation)
        if text is None:
            text = exported[key] = real(signature, computation)
        else:
            export.export_count += 1
        return text

    return export_mlir
