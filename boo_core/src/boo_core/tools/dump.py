"""``boo dump``: dump the executables of every kernel of some commands, for some targets."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from ..errors import BooError, is_plugins_failure
from ..kernels.target import Target
from ..signatures.commands import Command
from ..substitute.candidates import user_substitution
from ..substitute.dump import KernelDump, dump_kernel
from .driver import error_text


class DumpPathError(BooError):
    """The dump directory cannot be made or written; the message names the path and why."""


def prepare_root(root: Path) -> None:
    """Create the dump directory ``root`` (and its parents) and check it can be written:
    :class:`DumpPathError` naming the path and the reason otherwise."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DumpPathError(f"--to {root}: cannot create it: {_reason(root, e)}") from None
    if not root.is_dir():
        raise DumpPathError(f"--to {root}: not a directory")
    if not os.access(root, os.W_OK | os.X_OK):
        raise DumpPathError(f"--to {root}: not writable (permission denied)")


def _reason(root: Path, error: OSError) -> str:
    """Why ``root`` could not be created: the ancestor that is a file, or the system's reason."""
    for path in (root, *root.parents):
        if path.exists() or path.is_symlink():
            if not path.is_dir():
                return f"{path} is not a directory"
            break
    where = f" ({error.filename})" if error.filename and str(error.filename) != str(root) else ""
    return f"{error.strerror or error}{where}"


def os_error_text(error: OSError) -> str:
    """An OSError in one line: the system's reason and the path (not Python's class name)."""
    path = f": {error.filename}" if error.filename else ""
    return f"{error.strerror or error}{path}"


def _summary(dump: KernelDump) -> list[str]:
    lines = [f"  {dump.signature.func_name} for {dump.target.name}: formulation {dump.formulation} -> {dump.directory}"]
    lines += [f"    passed over formulation {name}: {why}" for name, why in dump.passed_over]
    if dump.index.get("substitution"):
        lines.append(f"    with substituted executables: {dump.index['substitution']['label']}")
    for executable in dump.executables:
        for export in executable.exports:
            size = "x".join(map(str, export.workgroup_size)) if export.workgroup_size else "?"
            count = "x".join(map(str, export.workgroup_count)) if export.workgroup_count else "?"
            lines.append(f"    {executable.name}: {len(export.bindings)} bindings, {export.constants} constants, "
                         f"workgroup size {size}, count {count}")
    return lines


def run_dump(commands: Sequence[Command], targets: Sequence[Target], root: Path, out: TextIO,
             formulation: str | None = None) -> int:
    """Dump each kernel of ``commands`` for each target under ``root``; the number of
    commands or kernels that failed (each reported in ``out``). A ``root`` that cannot be
    made or written is a :class:`DumpPathError`, before any compile."""
    prepare_root(root)
    failed = 0
    for command in commands:
        print(f"\n{command.text}", file=out)
        try:
            signatures = command.parse().signatures
        except BaseException as e:  # a command that does not parse is reported; the next one runs
            if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
                raise
            print(f"  error ({command.source}): {error_text(e)}", file=out)
            failed += 1
            continue
        for signature in signatures:
            for target in targets:
                try:
                    dump = dump_kernel(signature, target, root, formulation=formulation,
                                       substitution=user_substitution(signature, target))
                except BaseException as e:  # a compile error, a plugin's bug: reported, the run goes on
                    if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
                        raise
                    text = os_error_text(e) if isinstance(e, OSError) and not isinstance(e, BooError) else error_text(e)
                    print(f"  {signature.func_name} for {target.name}: error: "
                          + text.replace("\n", "\n    "), file=out)
                    failed += 1
                    continue
                print("\n".join(_summary(dump)), file=out)
    return failed
