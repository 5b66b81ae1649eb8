"""``boo dump``: dump the executables of every kernel of some commands, for some targets."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from ..kernels.target import Target
from ..signatures.commands import Command
from ..substitute.candidates import user_substitution
from ..substitute.dump import KernelDump, dump_kernel
from .driver import error_text


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
    commands or kernels that failed (each reported in ``out``)."""
    failed = 0
    for command in commands:
        print(f"\n{command.text}", file=out)
        try:
            signatures = command.parse().signatures
        except Exception as e:  # a command that does not parse is reported; the next one runs
            print(f"  error ({command.source}): {error_text(e)}", file=out)
            failed += 1
            continue
        for signature in signatures:
            for target in targets:
                try:
                    dump = dump_kernel(signature, target, root, formulation=formulation,
                                       substitution=user_substitution(signature, target))
                except Exception as e:  # a compile error, a plugin's bug: reported, the run goes on
                    print(f"  {signature.func_name} for {target.name}: error: "
                          + error_text(e).replace("\n", "\n    "), file=out)
                    failed += 1
                    continue
                print("\n".join(_summary(dump)), file=out)
    return failed
