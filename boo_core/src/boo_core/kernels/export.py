"""Signature (or another computation of it) -> torch-dialect MLIR, with BOO's
destination-passing calling convention.

The exported function takes the signature's inputs, then one argument per output, and
writes each result into its output argument (no results). The launchable allocates the
outputs with torch, so the kernel writes straight into torch-owned memory; on CUDA this is
required, since IREE cannot export its own device buffers through DLPack.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from ..errors import CompileError
from ..signatures.signature import Signature
from .decompositions import run_no_decompositions


class _DestinationPassing(torch.nn.Module):
    """Runs ``computation`` on the inputs and copies each result into its output."""

    def __init__(self, signature: Signature, computation: Callable[..., Any]) -> None:
        super().__init__()
        self.signature = signature
        self.computation = computation
        self.num_inputs = len(signature.input_specs())

    def forward(self, *args: torch.Tensor) -> None:
        inputs, outputs = args[: self.num_inputs], args[self.num_inputs :]
        results = self.computation(*inputs)
        if isinstance(results, torch.Tensor):
            results = (results,)
        if len(results) != len(outputs):
            raise ValueError(f"{self.signature.func_name}: the computation returned {len(results)} tensors, "
                             f"output_specs() lists {len(outputs)}")
        for out, result in zip(outputs, results):
            out.copy_(result)


#: How many exports this process ran (tests check that warm-cache lookups run none).
export_count = 0

_exporter: tuple[int, ThreadPoolExecutor] | None = None
_exporter_lock = threading.Lock()


def export_mlir(signature: Signature, computation: Callable[..., Any] | None = None) -> str:
    """Export ``computation`` (default: ``signature.reference``) to torch-dialect MLIR with
    entry ``signature.func_name``, taking the signature's inputs then its outputs.

    Exports run one at a time (torch.export is not thread-safe), on a thread of their own:
    its thread-local state is torch's defaults whatever the caller's is. Exported inside a
    compiled graph's run (a BOO node meeting new tensors), torch.export silently dropped the
    writes into the outputs, and the kernel wrote nothing. An export that still writes fewer
    outputs than the signature has is a :class:`~boo_core.errors.CompileError`. Compiles do
    not wait on this.
    """
    global export_count
    export_count += 1
    text = _exporter_thread().submit(_export, signature, computation).result()
    writes = text.count("torch.overwrite.tensor.contents")
    expected = len(signature.output_specs())
    if writes < expected:
        raise CompileError(f"{signature.func_name}: the exported computation writes {writes} of its {expected} "
                           "outputs (torch.export dropped the writes); no kernel is built from it")
    return text


def _exporter_thread() -> ThreadPoolExecutor:
    """This process's export thread (a forked child makes its own: the parent's is gone)."""
    global _exporter
    with _exporter_lock:
        if _exporter is None or _exporter[0] != os.getpid():
            _exporter = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="boo-export"))
        return _exporter[1]


def _export(signature: Signature, computation: Callable[..., Any] | None) -> str:
    computation = computation if computation is not None else signature.reference
    specs = [*signature.input_specs(), *signature.output_specs()]
    # Meta tensors: export traces shapes only, so even huge problems cost no memory.
    args = tuple(torch.empty(s.shape, dtype=s.dtype, device="meta") for s in specs)
    with warnings.catch_warnings():
        # Imported on the one export thread: first imports of these packages from several
        # threads at once trip Python's import deadlock detection.
        from iree.compiler import ir
        from iree.compiler.dialects import func as func_dialect
        from iree.compiler.extras.fx_importer import FxImporter

        warnings.simplefilter("ignore")  # torch.export's deprecation chatter is not ours to show
        program = run_no_decompositions(torch.export.export(_DestinationPassing(signature, computation), args))
        importer = FxImporter()
        importer.import_program(program, func_name=signature.func_name)
    module = importer.module
    with module.context, ir.Location.unknown():
        # The importer returns the (None) Python result as !torch.none, which iree-compile
        # rejects; the function's only effects are the writes into its output arguments.
        function = _find_function(module, signature.func_name)
        function_type = ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value)
        function.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(function_type.inputs, []))
        block = function.regions[0].blocks[0]
        old_return = block.operations[len(block.operations) - 1]
        with ir.InsertionPoint(old_return):
            func_dialect.ReturnOp([])
        old_return.erase()
    return str(module)


def _find_function(module: object, name: str) -> object:
    for op in module.body.operations:  # type: ignore[attr-defined]
        if op.operation.name == "func.func" and op.attributes["sym_name"].value == name:
            return op
    raise RuntimeError(f"exported module has no function {name!r}")
