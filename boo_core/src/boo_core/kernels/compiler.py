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
from ..settings import get_settings
from .cache import atomic_write

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
        iree_compile_path()
    except CompileError:
        return False
    return True


_find_lock = threading.Lock()


@functools.cache
def iree_compile_path() -> str:
    with _find_lock:  # first imports from several threads at once can deadlock
        try:
            from iree.compiler.tools.binaries import find_tool
        except ImportError as e:
            raise CompileError(f"the IREE compiler is not installed (pip install iree-base-compiler): {e}") from e
        try:
            return find_tool("iree-compile")
        except ValueError as e:  # installed but unusable (not executable, say)
            raise CompileError(f"iree-compile cannot be run: {e}") from e


#: The option that runs iree-compile on one thread (``BOO_COMPILE_THREADING=0``).
SINGLE_THREADED = "--mlir-disable-threading"


def compile_command(mlir_path: Path, output_path: Path, flags: Sequence[str]) -> list[str]:
    """The iree-compile command line that compiles ``mlir_path`` into ``output_path``."""
    return [iree_compile_path(), str(mlir_path), *flags, "-o", str(output_path)]


def reproducer(mlir_path: Path, output_path: Path, flags: Sequence[str]) -> str:
    """The compile command as one shell line, for people to rerun."""
    return shlex.join(compile_command(mlir_path, output_path, flags))


def run_compile(mlir_path: Path, output_path: Path, flags: Sequence[str], *, shown: str | None = None,
                timeout: float | None = None) -> None:
    """Compile ``mlir_path`` into the file ``output_path`` (:func:`compile_to_bytes`, then
    an atomic write; a write that fails raises :class:`~boo_core.kernels.cache.CacheUnwritable`)."""
    atomic_write(output_path, compile_to_bytes(mlir_path, flags, shown=shown, timeout=timeout))


def compile_to_bytes(mlir: Path | str, flags: Sequence[str], *, shown: str | None = None,
                     timeout: float | None = None) -> bytes:
    """Compile MLIR (a file, or the text itself, fed through stdin) and return the kernel,
    within ``timeout`` seconds (``BOO_COMPILE_TIMEOUT`` when None).

    The compiler writes the kernel to a pipe, never a file: BOO writes it into the cache
    itself, so a cache that cannot be written (full, read-only) never fails a compile, and
    a compiler killed halfway leaves no partial file behind. A failure raises
    :class:`CompileError` with the MLIR path, the command (``shown``: the reproducer, which
    writes the kernel where the cache keeps it) and the compiler's message. Only a failure
    that is a property of the input is ``recordable``: not a timeout, a crash or signal,
    nor an I/O error (a full ``/tmp``, say).
    """
    settings = get_settings()
    timeout = settings.compile_timeout if timeout is None else timeout
    from_file = isinstance(mlir, Path)
    command = [iree_compile_path(), str(mlir) if from_file else "-", *flags, "-o", "-"]
    shown = shown or shlex.join(command)
    if not settings.compile_threading:  # the same kernel: not in the key, nor in the reproducer shown
        command.insert(-2, SINGLE_THREADED)
    mlir_path = str(mlir) if from_file else None
    where = f"  MLIR: {mlir}\n" if from_file else ""
    try:
        result = subprocess.run(command, input=None if from_file else str(mlir).encode(), capture_output=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CompileError(
            f"iree-compile did not finish within {timeout:g} s (BOO_COMPILE_TIMEOUT) and was stopped.\n"
            f"{where}  command: {shown}", mlir_path=mlir_path, command=shown) from None
    except OSError as e:
        raise CompileError(f"iree-compile could not be started: {e}", mlir_path=mlir_path, command=shown) from e
    message = result.stderr.decode(errors="replace").strip()
    if result.returncode != 0 or not result.stdout:
        if len(message) > 4000:
            message = message[:2000] + "\n...\n" + message[-2000:]
        status = f"exit {result.returncode}" if result.returncode >= 0 else f"killed by signal {-result.returncode}"
        if result.returncode == 0:
            status = "exit 0 but no kernel"
        recordable = result.returncode > 0 and not _TRANSIENT.search(message)
        raise CompileError(
            f"iree-compile failed ({status}).{_hint(message)}\n{where}  command: {shown}\n{message}",
            mlir_path=mlir_path, command=shown, recordable=recordable)
    return result.stdout


#: Compiler messages that say the machine, not the input, was at fault (never recorded).
_TRANSIENT = re.compile(r"No space left on device|Read-only file system|Permission denied|Disk quota exceeded|"
                        r"IO failure|Input/output error|Cannot allocate memory|[Oo]ut of memory|Too many open files")


_UNLOWERED = re.compile(r"failed to legalize operation '([\w.]+)'")


def _hint(message: str) -> str:
    """A line naming what the compiler could not lower, when it says so."""
    match = _UNLOWERED.search(message)
    if match is None:
        return ""
    return (f" It could not lower '{match.group(1)}': the computation uses an op IREE's torch input "
            "cannot compile (docs/plugins.md, 'What IREE can compile').")
