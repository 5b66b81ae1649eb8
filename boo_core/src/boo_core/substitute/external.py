"""Writing a ``sources/`` substitution that runs a kernel built elsewhere (PTX, cubin...).

IREE takes a ``hal.executable`` whose variant has no code, only ``objects``, and launches
each export with what the export declares: the workgroup (block) size, the workgroup
count (grid) its count region returns, and the dynamic shared memory it asks for. The
export keeps its name, ordinal and layout (the host code dispatches it by symbol, with
those bindings), so the object must define the kernel IREE looks up by that name
(:attr:`~boo_core.substitute.Export.kernel_name`). docs/gpu.md gives the CUDA ABI.

:func:`extern_module` writes a whole module instead, for a kernel library's own formulation
(:class:`~boo_core.substitute.Substitution`): one launch of its kernel with buffers no op's
module has (counters zeroed before each launch, a scratch area of the launch's own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..signatures.dtypes import short_name
from .mlir_text import Executable


def external_source(executable: Executable, objects: Sequence[str], *, workgroup_size: Sequence[int],
                    workgroup_count: Sequence[int], workgroup_local_memory: int = 0,
                    export: str | None = None) -> str:
    """The MLIR of ``executable`` (as :func:`~boo_core.substitute.executables_of` read it)
    with its one export (or ``export``) launched from ``objects`` (paths relative to the
    substitution's root, like ``objects/gemm.ptx``) with a static block size, grid and
    dynamic shared memory in bytes."""
    exports = [e for e in executable.exports if export is None or e.name == export]
    if len(exports) != 1:
        names = ", ".join(e.name for e in executable.exports)
        raise ValueError(f"{executable.name}: choose one export of: {names}")
    if len(workgroup_size) != 3 or len(workgroup_count) != 3:
        raise ValueError("workgroup_size and workgroup_count take three values (x, y, z)")
    [chosen] = exports
    paths = ", ".join(f'#hal.executable.object<{{path = "{path}"}}>' for path in objects)
    sizes = ", ".join(f"{int(v)} : index" for v in workgroup_size)
    properties = f"workgroup_size = [{sizes}]"
    if workgroup_local_memory:
        properties += f", workgroup_local_memory = {int(workgroup_local_memory)}"
    counts = "\n".join(f"      %c{axis} = arith.constant {int(v)} : index" for axis, v in zip("xyz", workgroup_count))
    return (f"hal.executable public @{executable.name} {{\n"
            f"  hal.executable.variant public @{executable.variant} target({executable.target}) objects([{paths}]) {{\n"
            f"    hal.executable.export public @{chosen.name} ordinal({chosen.ordinal}) layout({chosen.layout}) "
            f"count({chosen.count_arguments or '%device: !hal.device'}) -> (index, index, index) {{\n"
            f"{counts}\n      hal.return %cx, %cy, %cz : index, index, index\n"
            f"    }} <{properties}>\n  }}\n}}\n")


#: Flags an :func:`extern_module` compiles with: without them IREE makes the zeroed buffers one
#: constant of the module, copied into each call's transient (a launch plan cannot replay that
#: copy), where with them each call fills its own.
EXTERN_FLAGS = ("--iree-opt-const-expr-hoisting=false",)

#: The torch dialect's element types where they are not the builtin ones (``short_name``'s):
#: integers carry their signedness there.
_TORCH_ELEMENTS = {"i8": "si8", "i32": "si32", "i64": "si64", "uint8": "ui8"}
_BUILTIN_ELEMENTS = {"uint8": "i8"}


def extern_module(signature: Any, export: str, obj: str, *, workgroup_size: Sequence[int],
                  workgroup_count: Sequence[int], workgroup_local_memory: int = 0, zeroed_words: Sequence[int] = (),
                  scratch_bytes: Sequence[int] = ()) -> str:
    """The MLIR of a module for ``signature`` (BOO's calling convention: its inputs, then its
    outputs, written in place) that is one launch of kernel ``export`` from ``obj`` (a path
    relative to the substitution's root) through ``hal.dispatch.extern``. The kernel takes one
    pointer per binding: each input, then a buffer of each of ``zeroed_words`` 32-bit words set
    to zero before every launch, then a scratch buffer of each of ``scratch_bytes`` (contents
    undefined: the launch's own, as two launches at once get two), then each output. Compile
    it with :data:`EXTERN_FLAGS`. IREE is told the extra buffers are only read (it then writes
    the outputs straight into the caller's memory): nothing after the launch reads them."""
    if len(workgroup_size) != 3 or len(workgroup_count) != 3:
        raise ValueError("workgroup_size and workgroup_count take three values (x, y, z)")
    if any(int(n) < 1 for n in (*zeroed_words, *scratch_bytes)):
        raise ValueError("every zeroed and scratch buffer needs at least one word (byte)")
    inputs, outputs = list(signature.input_specs()), list(signature.output_specs())
    lines, params, operands, operand_types = [], [], [], []
    for i, spec in enumerate(inputs):
        torch_type, builtin = _vtensor(spec.shape, spec.dtype), _tensor(spec.shape, spec.dtype)
        params.append(f"%in{i}: {torch_type}")
        lines.append(f"%b{i} = torch_c.to_builtin_tensor %in{i} : {torch_type} -> {builtin}")
        operands.append(f"%b{i}")
        operand_types.append(builtin)
    if zeroed_words:
        lines.append("%zero = arith.constant 0 : i32")
    for i, words in enumerate(zeroed_words):
        kind = f"tensor<{int(words)}xi32>"
        lines.append(f"%z{i}_e = tensor.empty() : {kind}")
        lines.append(f"%z{i} = linalg.fill ins(%zero : i32) outs(%z{i}_e : {kind}) -> {kind}")
        operands.append(f"%z{i}")
        operand_types.append(kind)
    for i, size in enumerate(scratch_bytes):
        kind = f"tensor<{int(size)}xi8>"
        lines.append(f"%s{i} = tensor.empty() : {kind}")
        operands.append(f"%s{i}")
        operand_types.append(kind)
    results = [_tensor(spec.shape, spec.dtype) for spec in outputs]
    for i, spec in enumerate(outputs):
        params.append(f"%out{i}: {_vtensor(spec.shape, spec.dtype, value=False)}")
    # Indirect bindings: IREE then records the launch once, in a command buffer each call binds
    # its buffers to (the program a launch plan reads), not one per call.
    bindings = ['#hal.pipeline.binding<storage_buffer, "ReadOnly|Indirect">'] * len(operands) + \
        ["#hal.pipeline.binding<storage_buffer, Indirect>"] * len(outputs)
    counts = "\n".join(f"  %c{axis} = arith.constant {int(v)} : index" for axis, v in zip("xyz", workgroup_count))
    properties = f"workgroup_size = [{', '.join(f'{int(v)} : index' for v in workgroup_size)}]"
    if workgroup_local_memory:
        properties += f", workgroup_local_memory = {int(workgroup_local_memory)}"
    result_list = ", ".join(results)
    lines.append(
        f"{'%r' if len(outputs) == 1 else f'%r:{len(outputs)}'} = hal.dispatch.extern \"{export}\""
        f"({', '.join(operands)}) : ({', '.join(operand_types)}) -> "
        f"{result_list if len(results) == 1 else f'({result_list})'}\n"
        f"  count(%device: !hal.device) -> (index, index, index) {{\n{counts}\n"
        "  hal.return %cx, %cy, %cz : index, index, index\n  }\n"
        f"  layout(#hal.pipeline.layout<bindings = [{', '.join(bindings)}], flags = Indirect>)\n"
        f"  objects({{#hal.executable.target<\"cuda\", \"cuda-nvptx-fb\"> ordinal(0) = "
        f"[#hal.executable.object<{{path = \"{obj}\"}}>]}})\n  <{properties}>")
    for i, spec in enumerate(outputs):
        value = "%r" if len(outputs) == 1 else f"%r#{i}"
        torch_type = _vtensor(spec.shape, spec.dtype)
        lines.append(f"%t{i} = torch_c.from_builtin_tensor {value} : {results[i]} -> {torch_type}")
        lines.append(f"torch.overwrite.tensor.contents %t{i} overwrites %out{i} : {torch_type}, "
                     f"{_vtensor(spec.shape, spec.dtype, value=False)}")
    body = "\n".join("  " + line.replace("\n", "\n  ") for line in lines)
    return f"func.func @{signature.func_name}({', '.join(params)}) {{\n{body}\n  return\n}}\n"


def _vtensor(shape: Sequence[int], dtype: torch.dtype, value: bool = True) -> str:
    element = short_name(dtype)
    kind = "vtensor" if value else "tensor"
    return f"!torch.{kind}<[{','.join(map(str, shape))}],{_TORCH_ELEMENTS.get(element, element)}>"


def _tensor(shape: Sequence[int], dtype: torch.dtype) -> str:
    element = short_name(dtype)
    return f"tensor<{''.join(f'{d}x' for d in shape)}{_BUILTIN_ELEMENTS.get(element, element)}>"
