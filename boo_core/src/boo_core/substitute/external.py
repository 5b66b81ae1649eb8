"""Writing a ``sources/`` substitution that runs a kernel built elsewhere (PTX, cubin...).

IREE takes a ``hal.executable`` whose variant has no code, only ``objects``, and launches
each export with what the export declares: the workgroup (block) size, the workgroup
count (grid) its count region returns, and the dynamic shared memory it asks for. The
export keeps its name, ordinal and layout (the host code dispatches it by symbol, with
those bindings), so the object must define the kernel IREE looks up by that name
(:attr:`~boo_core.substitute.Export.kernel_name`). docs/gpu.md gives the CUDA ABI.
"""

from __future__ import annotations

from collections.abc import Sequence

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
