"""``ExportedProgram.run_decompositions({})`` without its fixed cost.

Asked to decompose nothing, torch still visits every functional CompositeImplicitAutograd
("CIA") operator it knows (525 in torch 2.13): it lists them (a query of the C++ dispatcher
per operator namespace, about 65 ms) and installs Python kernels that keep each one intact
for the retrace, whatever the program calls; a kernel's program calls a dozen operators.
Only a CIA operator the program calls can be met in the retrace, so keeping just those gives
the same program at less than half the cost: the 127 exports of
``examples/sample_commands.txt``'s kernels (every formulation, CPU and H100) gave the same
MLIR both ways, in 18.9 s instead of 42.3 s; ``tests/boo_core/test_export.py`` compares
both ways for each first-party op.

torch has no public switch for this: the module-level ``_collect_all_valid_cia_ops`` of
``torch.export.exported_program`` is wrapped once, and answers with the narrowed set only on
a thread inside :func:`run_no_decompositions`; every other caller (another thread's own
export) gets torch's answer. Where a torch release lacks either private function, exports
take torch's own path unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

_local = threading.local()
_install_lock = threading.Lock()
_preservable: Callable[[Any], bool] | None = None
_installed = False


def run_no_decompositions(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``program.run_decompositions({})``: the program in ATen ops, nothing decomposed."""
    if not _install():
        return program.run_decompositions({})
    called = {node.target for node in program.graph.nodes if node.op == "call_function"}
    _local.preserve = {op for op in called if isinstance(op, torch._ops.OpOverload) and _preservable(op)}
    try:
        return program.run_decompositions({})
    finally:
        _local.preserve = None


def _install() -> bool:
    """Wrap torch's list of preservable CIA operators once; False where torch has none to wrap."""
    global _installed, _preservable
    with _install_lock:
        if _installed:
            return _preservable is not None
        _installed = True
        try:
            from torch._export.utils import _is_preservable_cia_op
            from torch.export import exported_program
            every_cia_op = exported_program._collect_all_valid_cia_ops
        except (ImportError, AttributeError):
            return False

        def preservable_cia_ops() -> set:
            narrowed = getattr(_local, "preserve", None)
            return set(narrowed) if narrowed is not None else every_cia_op()

        exported_program._collect_all_valid_cia_ops = preservable_cia_ops
        _preservable = _is_preservable_cia_op
        return True
