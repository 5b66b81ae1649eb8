"""Trying a kernel in a child process before this process loads it.

IREE verifies a kernel module's flatbuffer when it loads it, but not the native code inside:
corrupt code can crash the process that runs it (SIGSEGV, SIGILL). BOO loads a cached
kernel as is only when its integrity tag proves the cache wrote it (:mod:`.cache`). One
that cannot be proven, where no compiler is installed to rebuild it, is first loaded and
run here, on zero-filled tensors, in a child that imports only IREE's runtime: a crash
then ends the child, not the caller. CPU kernels are run; kernels for other targets are
only loaded (their device may not be here).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import torch

from .python_child import python_command

#: torch dtype -> the name of IREE's HalElementType, for the child.
_ELEMENT_TYPES = {torch.float32: "FLOAT_32", torch.float16: "FLOAT_16", torch.bfloat16: "BFLOAT_16",
                  torch.float64: "FLOAT_64", torch.int8: "SINT_8", torch.int16: "SINT_16", torch.int32: "SINT_32",
                  torch.int64: "SINT_64", torch.uint8: "UINT_8", torch.bool: "BOOL_8"}

_CHILD = r"""
import json, sys
import numpy as np
import iree.runtime as rt

spec = json.loads(sys.argv[1])
data = sys.stdin.buffer.read()
instance = rt.VmInstance()
module = rt.VmModule.copy_buffer(instance, data)
if module.lookup_function(spec["function"]) is None:
    sys.exit(f"the kernel has no function {spec['function']!r}")
if spec["run"]:
    device = rt.get_driver("local-sync").create_default_device()
    context = rt.VmContext(instance, [rt.create_hal_module(instance, device), module])
    arguments = rt.VmVariantList(len(spec["tensors"]))
    for shape, element_type, nbytes in spec["tensors"]:
        buffer = device.allocator.allocate_buffer_copy(
            memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT, device=device,
            buffer=np.zeros(max(nbytes, 1), np.uint8))
        arguments.push_ref(rt.HalBufferView(buffer, shape, getattr(rt.HalElementType, element_type)))
    context.invoke(module.lookup_function(spec["function"]), arguments, rt.VmVariantList(0))
print("ok")
"""


def check_in_child(signature: Any, target: Any, data: bytes, timeout: float = 120) -> str | None:
    """Load (and, for the CPU, run) ``data``, ``signature``'s kernel for ``target``, in a
    child process; None if that went well, else what went wrong."""
    specs = [*signature.input_specs(), *signature.output_specs()]
    runnable = target.backend == "llvm-cpu" and all(s.dtype in _ELEMENT_TYPES for s in specs)
    spec = {"function": signature.func_name, "run": runnable,
            "tensors": [[list(s.shape), _ELEMENT_TYPES.get(s.dtype, ""), s.nbytes] for s in specs]}
    try:
        result = subprocess.run(python_command(_CHILD, json.dumps(spec)), input=data, capture_output=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"it did not finish within {timeout:g} s"
    except OSError as e:
        return f"no child process could be started ({e})"
    if result.returncode < 0:
        return f"it crashed the child process (signal {-result.returncode})"
    if result.returncode != 0 or result.stdout.strip() != b"ok":
        lines = result.stderr.decode(errors="replace").strip().splitlines()
        return f"it failed in the child process ({lines[-1] if lines else f'exit {result.returncode}'})"
    return None
