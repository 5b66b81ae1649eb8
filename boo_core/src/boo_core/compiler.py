"""Running iree-compile, and the versions that identify a compiler."""

from __future__ import annotations

import functools
import shlex
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from .errors import CompileError

if sys.version_info >= (3, 10):
    import importlib.metadata as importlib_metadata
else:  # pragma: no cover
    import importlib_metadata

#: Flags every BOO kernel is compiled with, before the target's and the plugins'.
BASE_FLAGS: tuple[str, ...] = ("--iree-input-type=torch",)


@functools.lru_cache(maxsize=None)
def compiler_version() -> str:
    """The iree-base-compiler version, read from package metadata (no import).

    Without a compiler (runtime-only deployments) this is the iree-base-runtime version:
    IREE releases the two together, and a kernel only loads in a matching runtime anyway.
    """
    for distribution in ("iree-base-compiler", "iree-base-runtime"):
        try:
            return importlib_metadata.version(distribution)
        except importlib_metadata.PackageNotFoundError:
            continue
    return "unknown"


def compiler_available() -> bool:
    """Whether the iree-compile tool can be found."""
    try:
        _iree_compile_path()
    except CompileError:
        return False
    return True


_find_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _iree_compile_path() -> str:
    with _find_lock:  # first imports from several threads at once can deadlock
        try:
            from iree.compiler.tools.binaries import find_tool
        except ImportError as e:
            raise CompileError(f"the IREE compiler is not installed (pip install iree-base-compiler): {e}") from e
        try:
            return find_tool("iree-compile")
        except ValueError as e:  # installed but unusable (not executable, say)
            raise CompileError(f"iree-compile cannot be run: {e}") from e


def compile_command(mlir_path: Path, output_path: Path, flags: Sequence[str]) -> list[str]:
    """The iree-compile command line that compiles ``mlir_path`` into ``output_path``."""
    return [_iree_compile_path(), str(mlir_path), *flags, "-o", str(output_path)]


def reproducer(mlir_path: Path, output_path: Path, flags: Sequence[str]) -> str:
    """The compile command as one shell line, for people to rerun."""
    return shlex.join(compile_command(mlir_path, output_path, flags))


def run_compile(mlir_path: Path, output_path: Path, flags: Sequence[str], *, shown: str | None = None) -> None:
    """Compile ``mlir_path`` into ``output_path``.

    A failure raises :class:`CompileError` with the MLIR path, the command (``shown``, when
    the caller compiles into a temporary file and reports the final name) and the
    compiler's message.
    """
    command = compile_command(mlir_path, output_path, flags)
    shown = shown or shlex.join(command)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip()
        if len(message) > 4000:
            message = message[:2000] + "\n...\n" + message[-2000:]
        raise CompileError(
            f"iree-compile failed (exit {result.returncode}).\n  MLIR: {mlir_path}\n  command: {shown}\n{message}",
            mlir_path=str(mlir_path), command=shown)
