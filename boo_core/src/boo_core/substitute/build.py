"""Building a substituted kernel: check the files against the kernel's executables, copy
them into the cache entry, and compile with IREE's substitution flags.

The files are copied into the entry (``substitution/``) before compiling, so the entry's
``compile_command.txt`` reproduces the kernel from the entry alone, and an edit made to the
originals while compiling cannot slip into a kernel filed under the old content's key.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from ..errors import CompileError, SubstitutionError
from ..kernels import cache, owned
from ..kernels.compiler import reproducer
from .executables import KernelExecutables, kernel_executables
from .stages import SEARCH_PATH_FLAG, STAGES, stage_files

if TYPE_CHECKING:
    from .substitution import Substitution

#: The folder of a cache entry (or dump) holding the substitution's files.
SUBSTITUTION_DIR = "substitution"
_MLIR_SUFFIXES = (".mlir", ".mlirbc")
_PTX_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)")
_OBJECT_PATH = re.compile(r'#hal\.executable\.object<\{[^}]*?path = "([^"]+)"')


def check_files(substitution: Substitution, files: Mapping[str, bytes], kernel: KernelExecutables) -> None:
    """Refuse, naming the file, what IREE would ignore or mishandle: a name that matches no
    executable, one executable replaced at two stages, an MLIR stage given an object, an
    object on the CPU (IREE 3.13's llvm-cpu backend crashes on one), a PTX file without the
    kernel IREE will launch."""
    names = set(kernel.names)
    shown = substitution.shown_path
    replaced: dict[str, str] = {}
    for stage, by_executable in stage_files(files).items():
        for executable, relative in sorted(by_executable.items()):
            if executable not in names:
                raise SubstitutionError(
                    f"substitution file {shown(relative)} names no executable of {kernel.signature.func_name} "
                    f"(formulation {kernel.formulation} on {kernel.target.name}); its executables are: "
                    f"{', '.join(sorted(names))}. Name the file <executable>.<ext>.")
            if executable in replaced:
                raise SubstitutionError(f"substitution files {shown(replaced[executable])} and {shown(relative)} "
                                        f"both replace executable {executable}: keep one")
            replaced[executable] = relative
            suffix = PurePosixPath(relative).suffix
            if stage != "binaries" and suffix not in _MLIR_SUFFIXES:
                raise SubstitutionError(f"substitution file {shown(relative)}: {stage}/ takes .mlir or .mlirbc "
                                        "files; put objects (.ptx, .cubin...) in binaries/")
            if stage == "binaries":
                _check_object(substitution, relative, files[relative], kernel, executable)
            elif suffix == ".mlir":
                _check_references(substitution, relative, files)


def _check_references(substitution: Substitution, relative: str, files: Mapping[str, bytes]) -> None:
    """Objects an MLIR file refers to must be in the substitution (relative paths) or exist."""
    for path in _OBJECT_PATH.findall(files[relative].decode(errors="replace")):
        if path in files or (PurePosixPath(path).is_absolute() and Path(path).is_file()):
            continue
        where = "a file" if PurePosixPath(path).is_absolute() else "in the substitution"
        raise SubstitutionError(f"substitution file {substitution.shown_path(relative)} refers to object {path!r}, "
                                f"which is not {where} (relative object paths are resolved against the "
                                "substitution's directory)")


def _check_object(substitution: Substitution, relative: str, data: bytes, kernel: KernelExecutables,
                  executable: str) -> None:
    shown = substitution.shown_path(relative)
    if kernel.target.backend == "llvm-cpu":
        raise SubstitutionError(f"substitution file {shown}: IREE 3.13 cannot link an object in place of an "
                                "llvm-cpu executable (iree-compile crashes); substitute MLIR (sources/ or "
                                "configurations/) on the CPU")
    if PurePosixPath(relative).suffix == ".ptx":
        defined = set(_PTX_ENTRY.findall(data.decode(errors="replace")))
        wanted = [e.kernel_name for e in kernel.get(executable).exports]  # type: ignore[union-attr]
        missing = [name for name in wanted if name not in defined]
        if missing:
            raise SubstitutionError(
                f"substitution file {shown} defines no kernel {', '.join(missing)}: IREE launches each export of "
                f"{executable} by that name (its export name with every character outside [A-Za-z0-9_] made '_'); "
                f"the file defines: {', '.join(sorted(defined)) or 'no .entry'}")


def write_files(directory: Path, files: Mapping[str, bytes]) -> Path:
    """Write the files under ``directory`` (emptied first), a directory of this user's
    alone, as all of its folders are (:mod:`boo_core.kernels.owned`)."""
    owned.remove_tree(directory.parent, directory)
    owned.ensure_directory(directory.parent, directory)
    for relative, data in files.items():
        owned.write(directory.parent, directory / relative, data)
    return directory


def substitution_flags(directory: Path, files: Mapping[str, bytes]) -> tuple[str, ...]:
    """The iree-compile flags that substitute the files written under ``directory``."""
    staged = stage_files(files)
    return (*(f"{STAGES[stage]}={directory / stage}" for stage in STAGES if stage in staged),
            f"{SEARCH_PATH_FLAG}={directory}")


def prepare(request: Any, mlir_path: Path, directory: Path) -> tuple[tuple[str, ...], dict[str, bytes]]:
    """Check ``request``'s substitution against its kernel's executables and write its
    files into ``directory``; the substitution flags and the files."""
    substitution: Substitution = request.substitution
    name = substitution.formulation_name
    if name and name != request.formulation.name:
        raise SubstitutionError(f"substitution {substitution.label} replaces executables of formulation "
                                f"{name}, not {request.formulation.name}")
    kernel = kernel_executables(request, mlir_path)
    files = substitution.materialize(kernel)
    check_files(substitution, files, kernel)
    write_files(directory, files)
    return substitution_flags(directory, files), files


def blame(error: CompileError, substitution: Substitution, directory: Path) -> CompileError:
    """A compile failure whose message mentions a substitution file, as a
    :class:`SubstitutionError` naming the original file; other failures unchanged."""
    text = str(error)
    # The command and IREE's "NOTE: ... substituted with ..." lines name the files whatever failed.
    said = "\n".join(line for line in text.replace(error.command or "", "").splitlines()
                     if not line.startswith("NOTE: hal.executable"))
    if str(directory) not in said:
        return error
    command = error.command or "\0"
    text = text.replace(command, "\0")  # the command runs on the entry's copies: keep it as it ran
    for relative in sorted(_relative_files(directory), key=len, reverse=True):
        text = text.replace(str(directory / relative), substitution.shown_path(relative))
    text = text.replace(str(directory), str(substitution.location or substitution.label)).replace("\0", command)
    return SubstitutionError(f"iree-compile rejected substitution {substitution.label}:\n{text}",
                             mlir_path=error.mlir_path, command=error.command)


def _relative_files(directory: Path) -> list[str]:
    return [p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()]


def configured_flags(request: Any, entry: cache.CacheEntry, mlir_path: Path, flags: tuple[str, ...],
                     files: Mapping[str, bytes]) -> tuple[str, ...]:
    """``flags`` and those applying ``request``'s configuration (its formulation's, or a
    tuning candidate's) to the executables a substitution's ``files`` leave IREE's, if it
    fits any (it may have been for those the files replace); a substitution that brings
    configured executables of its own decides them all."""
    if "configurations" in stage_files(files):
        return flags
    return request.configured_flags(entry, mlir_path, flags, required=False)


def build(request: Any, entry: cache.CacheEntry | None) -> tuple[str, bytes]:
    """Compile ``request`` (which has a substitution): the command and the kernel. Without
    a cache entry (cache disabled or unwritable), the files go to a scratch directory."""
    if entry is None:
        with tempfile.TemporaryDirectory(prefix="boo-substitution-") as scratch:
            return "", build(request, cache.CacheEntry(Path(scratch), request.key, scratch=True))[1]
    mlir_path = entry.write_text(cache.MLIR_FILE, request.source())
    directory = entry.directory / SUBSTITUTION_DIR
    try:
        flags, files = prepare(request, mlir_path, directory)
    except OSError as e:
        raise cache.CacheUnwritable(f"cannot write in {directory}: {e.strerror or e}") from e
    flags = configured_flags(request, entry, mlir_path, (*request.flags_in(entry), *flags), files)
    shown = reproducer(mlir_path, entry.kernel_path, flags)
    entry.write_text(cache.COMMAND_FILE, shown + "\n")
    try:
        return shown, request.compile_in_entry(entry, mlir_path, flags, shown)
    except CompileError as e:
        raise blame(e, request.substitution, directory) from e
