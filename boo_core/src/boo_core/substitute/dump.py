"""``boo dump``: a kernel's executables at every stage IREE goes through, with an index.

For one kernel (a signature on a target) BOO compiles the formulation that serves (the
first that compiles, as ``boo preload`` would cache it) in two runs of iree-compile, up to
the translated executables and from there to the module, asking IREE to dump what it
made on the way. The kernel's directory, ``<root>/<target>/<func_name>/``, holds::

    source.mlir              what BOO hands to IREE
    compile_commands.txt     the two iree-compile commands (the reproducer; they dump into .iree/)
    config/                  a configured kernel's executables as its configuration edits them
    kernel.vmfb              the module (executables not linked together: one binary each)
    sources/<exe>.mlir       each executable as IREE formed it        -> substitutable
    configurations/<exe>.mlir  ... with the lowering configuration IREE chose -> substitutable
    binaries/<exe>.<ext>     the target binary: PTX for CUDA, an ELF object for the CPU
    benchmarks/<exe>.mlir    a standalone module dispatching the executable (iree-benchmark-module)
    intermediates/           LLVM IR, assembly, objects, and the translated executables
    index.json, index.txt    each executable: exports, bindings, workgroup size and count

Files are named by executable (IREE's ``module_``/``configured_module_`` prefixes and
variant suffixes dropped), so an edited file copied into a substitution directory's
folder of the same name replaces that executable.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CompileError, SubstitutionError
from ..files import MAX_KERNEL_FILE_BYTES, read_text
from ..kernels import cache
from ..kernels.chain import plan_kernels
from ..kernels.compiler import compiler_version, reproducer, run_compile
from ..kernels.request import KernelRequest
from ..kernels.target import Target
from ..signatures.installed import installed_ops
from .build import SUBSTITUTION_DIR, configured_flags, prepare
from .candidates import kernel_directory, target_directory
from .mlir_text import Executable, merge, parse_executable, split_executables
from .substitution import Substitution

INDEX_FORMAT = 1
#: Where a configured kernel's edited executables go (the compile commands read them there).
CONFIG_DIR = "config"
_STAGE_DIRS = ("sources", "configurations", "benchmarks", "binaries", "intermediates")


@dataclass
class KernelDump:
    """What ``dump_kernel`` wrote: where, for which formulation, and the executables."""

    signature: Any
    target: Target
    formulation: str
    directory: Path
    executables: list[Executable]
    index: dict[str, Any]
    passed_over: list[tuple[str, str]] = field(default_factory=list)  # (formulation, why)


def dump_kernel(signature: Any, target: Target, root: str | Path, *, formulation: str | None = None,
                substitution: Substitution | None = None) -> KernelDump:
    """Dump ``signature``'s kernel for ``target`` under ``root`` (module docstring).

    ``formulation`` picks one of the op's formulations (default: the first that compiles);
    ``substitution`` dumps the kernel with those executables substituted. A formulation
    that does not compile is passed over; if none compiles, :class:`CompileError` names
    each. A substitution IREE rejects raises :class:`SubstitutionError`.
    """
    formulations = installed_ops().formulations(signature, target)
    if formulation is not None:
        formulations = tuple(f for f in formulations if f.name == formulation)
        if not formulations:
            raise CompileError(f"{signature.func_name} has no formulation {formulation!r} on {target.name}")
    directory = kernel_directory(Path(root), target, signature)
    passed_over: list[tuple[str, str]] = []
    for planned in plan_kernels(formulations, user=substitution):
        try:
            return _dump(planned.request(signature, target), directory, passed_over)
        except SubstitutionError:
            raise
        except CompileError as e:
            passed_over.append((planned.formulation.name, _first_error_line(e)))
    listing = "\n".join(f"  - {name}: {why}" for name, why in passed_over)
    raise CompileError(f"no formulation of {signature.func_name} compiles for {target.name}:\n{listing}")


def _first_error_line(error: CompileError) -> str:
    lines = [line for line in str(error).splitlines() if "error:" in line]
    return (lines[0] if lines else str(error).splitlines()[0]).strip()


def _dump(request: KernelRequest, directory: Path, passed_over: list[tuple[str, str]]) -> KernelDump:
    if directory.exists():
        shutil.rmtree(directory)
    scratch = directory / ".iree"
    scratch.mkdir(parents=True)
    mlir = directory / "source.mlir"
    mlir.write_text(request.source())
    substituted: tuple[str, ...] = ()
    files: dict[str, bytes] = {}
    if request.substitution is not None:
        substituted, files = prepare(request, mlir, directory / SUBSTITUTION_DIR)
    # the configuration the kernel is built with (its edited executables kept in CONFIG_DIR)
    config_entry = cache.CacheEntry(directory / CONFIG_DIR, request.key, scratch=True)
    flags = configured_flags(request, config_entry, mlir, (*request.flags, *substituted), files)
    dumps = {kind: scratch / kind for kind in _STAGE_DIRS}
    targets = directory / "intermediates" / "executable-targets.mlir"  # where the second command reads it
    targets.parent.mkdir()
    first = (*flags, "--compile-to=executable-targets",
             *(f"--iree-hal-dump-executable-{kind}-to={dumps[kind]}" for kind in ("sources", "configurations",
                                                                                  "benchmarks")))
    second = (*flags, "--compile-from=executable-targets", "--iree-hal-link-executables=false",
              *(f"--iree-hal-dump-executable-{kind}-to={dumps[kind]}" for kind in ("binaries", "intermediates")))
    commands = [reproducer(mlir, targets, first), reproducer(targets, directory / "kernel.vmfb", second)]
    (directory / "compile_commands.txt").write_text("\n".join(commands) + "\n")
    run_compile(mlir, targets, first, shown=commands[0])
    run_compile(targets, directory / "kernel.vmfb", second, shown=commands[1])
    executables = _read_executables(read_text(targets, MAX_KERNEL_FILE_BYTES, what="translated executables"), dumps)
    files = _place_files(executables, dumps, directory)
    shutil.rmtree(scratch)
    index = _index(request, executables, files, commands, passed_over)
    (directory / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    (directory / "index.txt").write_text(index_text(index))
    return KernelDump(request.signature, request.target, request.formulation.name, directory, executables, index,
                      list(passed_over))


def _read_executables(translated: str, dumps: dict[str, Path]) -> list[Executable]:
    """The translated executables (launch geometry), completed with the binding types of
    the sources and the pipeline and lowering configs of the configured sources."""
    earlier: dict[str, list[Executable]] = {}
    for kind in ("sources", "configurations"):
        for path in sorted(dumps[kind].glob("*.mlir")) if dumps[kind].is_dir() else ():
            executable = parse_executable(read_text(path, MAX_KERNEL_FILE_BYTES, what="dumped executable"))
            earlier.setdefault(executable.name, []).append(executable)
    result = []
    for text in split_executables(translated).values():
        executable = parse_executable(text)
        for before in earlier.get(executable.name, ()):
            executable = merge(executable, before)
        result.append(executable)
    return result


def _canonical_name(filename: str, executables: list[Executable]) -> tuple[str, str] | None:
    """(executable, new file name) for a file IREE named after an executable."""
    for executable in sorted(executables, key=lambda e: len(e.name), reverse=True):
        start = filename.find(executable.name)
        rest = filename[start + len(executable.name):] if start >= 0 else ""
        if start < 0 or not rest or rest[0] not in "._":
            continue
        if executable.variant and rest.startswith(f"_{executable.variant}"):
            rest = rest[len(executable.variant) + 1:]
        rest = rest.removeprefix("_benchmark")
        return executable.name, executable.name + rest
    return None


def _place_files(executables: list[Executable], dumps: dict[str, Path], directory: Path
                 ) -> dict[str, dict[str, list[str]]]:
    """Move IREE's dumps into the kernel's directory under canonical names; per executable
    and kind, the files' paths relative to the directory."""
    files: dict[str, dict[str, list[str]]] = {e.name: {} for e in executables}
    for kind, source in dumps.items():
        if not source.is_dir():
            continue
        target = directory / kind
        target.mkdir(exist_ok=True)
        for path in sorted(source.iterdir()):
            named = _canonical_name(path.name, executables)
            name = named[1] if named else path.name
            path.replace(target / name)
            if named:
                files[named[0]].setdefault(kind, []).append(f"{kind}/{name}")
    return files


def _export_json(export: Any, backend: str) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": export.name,
        "ordinal": export.ordinal,
        "bindings": [b.to_json() for b in export.bindings],
        "constants": export.constants,
        "workgroup_size": list(export.workgroup_size) if export.workgroup_size else None,
        "subgroup_size": export.subgroup_size,
        "workgroup_local_memory": export.workgroup_local_memory,
        "workgroup_count": list(export.workgroup_count) if export.workgroup_count else None,
        "pipeline": export.pipeline or None,
        "lowering_configs": list(export.lowering_configs),
        "layout": export.layout,
    }
    if backend == "cuda":  # the symbol the CUDA runtime looks the kernel up by (docs/gpu.md)
        data["kernel_name"] = export.kernel_name
    if export.workgroup_count is None:
        data["count_region"] = export.count_region
    return data


def _notes(target: Target) -> list[str]:
    notes = ["workgroup_count is what the export's count region returns after translation (the grid); null, "
             "with count_region, where it is not constant",
             "binaries and kernel.vmfb were compiled with --iree-hal-link-executables=false (one binary per "
             "executable); BOO's cached kernels link the executables together: the same code"]
    if target.backend == "cuda":
        notes += ["kernel_name is the PTX .entry IREE launches for the export; parameters: one pointer per "
                  "binding in binding order, then one 32-bit value per constant (docs/gpu.md)",
                  "workgroup_local_memory is the dynamic shared memory the export asks for (null: none); shared "
                  "memory a kernel declares statically is inside the PTX and not reported; registers and "
                  "occupancy are not derived"]
    if target.backend == "llvm-cpu":
        notes += ["on llvm-cpu a workgroup is one call of the function on one thread (workgroup_size [1, 1, 1]); "
                  "substitute MLIR on the CPU: IREE 3.13 cannot link an object in place of an executable"]
    return notes


def _index(request: KernelRequest, executables: list[Executable], files: dict[str, dict[str, list[str]]],
           commands: list[str], passed_over: list[tuple[str, str]]) -> dict[str, Any]:
    signature, target = request.signature, request.target
    try:
        command = signature.to_command()
    except Exception:
        command = ""
    substitution = request.substitution
    return {
        "format": INDEX_FORMAT,
        "func_name": signature.func_name,
        "op": getattr(signature, "op_name", ""),
        "mode": getattr(signature, "mode", ""),
        "command": command,
        "target": target.name,
        "formulation": request.formulation.name,
        "passed_over": [{"formulation": name, "error": why} for name, why in passed_over],
        "compiler": compiler_version(),
        "substitution": {"label": substitution.label, **substitution.key_material()} if substitution else None,
        "substitute_into": f"<root>/{target_directory(target)}/{signature.func_name}/"
                           "{sources,configurations,binaries}/<executable>.<ext>",
        "commands": commands,
        "executables": [{"name": e.name, "variant": e.variant, "backend": e.backend, "format": e.format,
                         "files": files.get(e.name, {}),
                         "exports": [_export_json(x, e.backend) for x in e.exports]} for e in executables],
        "notes": _notes(target),
    }


def _size(values: list[int] | None) -> str:
    return "x".join(map(str, values)) if values else "not derived"


def index_text(index: dict[str, Any]) -> str:
    """The index, for people."""
    lines = [f"{index['func_name']} on {index['target']}: formulation {index['formulation']}, "
             f"IREE {index['compiler']}"]
    if index["command"]:
        lines.append(f"  command: {index['command']}")
    for skipped in index["passed_over"]:
        lines.append(f"  passed over formulation {skipped['formulation']}: {skipped['error']}")
    if index["substitution"]:
        lines.append(f"  substituted: {index['substitution']['label']} (digest {index['substitution']['digest'][:16]})")
    lines.append(f"  {len(index['executables'])} executable(s):")
    for executable in index["executables"]:
        lines.append(f"  {executable['name']}  ({executable['variant']})")
        for export in executable["exports"]:
            lines.append(f"    export {export['name']} (ordinal {export['ordinal']})"
                         + (f", pipeline {export['pipeline']}" if export["pipeline"] else ""))
            if "kernel_name" in export:
                lines.append(f"      kernel (entry): {export['kernel_name']}")
            for binding in export["bindings"]:
                lines.append(f"      binding {binding['binding']}: {binding['tensor'] or '?'} "
                             f"[{binding['flags'] or 'no flags'}]")
            memory = export["workgroup_local_memory"]
            lines.append(f"      constants: {export['constants']}; workgroup size {_size(export['workgroup_size'])}"
                         + (f", subgroup {export['subgroup_size']}" if export["subgroup_size"] else "")
                         + f"; workgroup count {_size(export['workgroup_count'])}"
                         + f"; dynamic shared memory {f'{memory} B' if memory else 'none'}")
        for kind, paths in executable["files"].items():
            lines.append(f"    {kind}: {', '.join(paths)}")
    lines.append(f"  to substitute: copy an edited file to {index['substitute_into']}")
    lines += [f"  note: {note}" for note in index["notes"]]
    return "\n".join(lines) + "\n"
