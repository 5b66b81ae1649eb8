"""Running iree-compile, and the versions that identify a compiler."""

from __future__ import annotations

import functools
import importlib.metadata as importlib_metadata
import re
import shlex
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

from ..errors import CompileError

#: Flags every BOO kernel is compiled with, before the target's and the plugins'.
BASE_FLAGS: tuple[str, ...] = ("--iree-input-type=torch",)


@functools.cache
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


@functools.cache
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


def run_compile(mlir_path: Path, output_path: Path, flags: Sequence[str], *, shown: str | None = None,
                timeout: float | None = None) -> None:
    """Compile ``mlir_path`` into ``output_path``, within ``timeout`` seconds
    (``BOO_COMPILE_TIMEOUT`` when None).

    A failure raises :class:`CompileError` with the MLIR path, the command (``shown``, when
    the caller compiles into a temporary file and reports the final name) and the
    compiler's message; a compile that runs out of time is stopped and reported as such.
    """
    from ..settings import get_settings

    timeout = get_settings().compile_timeout if timeout is None else timeout
    command = compile_command(mlir_path, output_path, flags)
    shown = shown or shlex.join(command)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CompileError(
            f"iree-compile did not finish within {timeout:g} s (BOO_COMPILE_TIMEOUT) and was stopped.\n"
            f"  MLIR: {mlir_path}\n  command: {shown}", mlir_path=str(mlir_path), command=shown) from None
    except OSError as e:
        raise CompileError(f"iree-compile could not be started: {e}", mlir_path=str(mlir_path), command=shown) from e
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip()
        if len(message) > 4000:
            message = message[:2000] + "\n...\n" + message[-2000:]
        raise CompileError(
            f"iree-compile failed (exit {result.returncode}).{_hint(message)}\n  MLIR: {mlir_path}\n"
            f"  command: {shown}\n{message}", mlir_path=str(mlir_path), command=shown, recordable=True)


_UNLOWERED = re.compile(r"failed to legalize operation '([\w.]+)'")


def _hint(message: str) -> str:
    """A line naming what the compiler could not lower, when it says so."""
    match = _UNLOWERED.search(message)
    if match is None:
        return ""
    return (f" It could not lower '{match.group(1)}': the computation uses an op IREE's torch input "
            "cannot compile (docs/plugins.md, 'What IREE can compile').")
