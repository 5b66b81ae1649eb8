"""IREE runtime state: one VM instance and HAL device per device (and driver) per process."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.dlpack import to_dlpack

from ..errors import DeviceError
from .devices import BooDevice

if TYPE_CHECKING:
    from ..signatures.signature import TensorSpec


@dataclass(frozen=True)
class LoadedKernel:
    """A kernel module loaded into its own VM context on a device."""

    context: Any  # iree.runtime.VmContext
    function: Any  # iree.runtime.VmFunction
    module: Any  # iree.runtime.VmModule (kept alive with the context)


class DeviceRuntime:
    """The VM instance, HAL device and HAL module shared by every launchable on one device."""

    def __init__(self, device: BooDevice, driver: str) -> None:
        import iree.runtime as rt

        self.device = device
        self.driver_name = driver
        self.instance = rt.VmInstance()
        try:
            self.driver = _new_driver(driver)
            if device.torch_device.type == "cuda":
                self.hal_device = _cuda_device(self.driver, device.torch_device.index or 0)
            else:
                self.hal_device = self.driver.create_default_device()
        except DeviceError:
            raise
        except Exception as e:
            raise DeviceError(f"IREE runtime driver {driver!r} could not open {device.key}: {e}") from e
        self.hal_module = rt.create_hal_module(self.instance, self.hal_device)
        if device.torch_device.type == "cuda":
            # IREE runs on the device's primary CUDA context but does not make it current
            # everywhere it needs it (loading a kernel from a thread that never touched the
            # GPU fails with CUDA_ERROR_INVALID_CONTEXT, and torch runs backward passes on
            # threads of its own), so BOO makes it current around its calls.
            self.current = functools.partial(_primary_context, device.torch_device.index or 0)
        else:
            self.current = contextlib.nullcontext
        self._host_import = (self.hal_device.allocator.import_host_allocation,
                             int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE),
                             int(rt.BufferUsage.DEFAULT), rt.HalBufferView)
        self._element_types = _hal_element_types(rt.HalElementType)

    def output_importer(self, spec: TensorSpec) -> Callable[[torch.Tensor], Any]:
        """A function that imports an output tensor of ``spec`` (no copy) for a kernel to write.

        A DLPack import allows READ|WRITE only, but IREE writes an output that it produces by
        a copy or a fill (not a dispatch) through a DISCARD_WRITE mapping, which the
        local-sync driver refuses (PERMISSION_DENIED). On the CPU, outputs are therefore
        imported as host allocations, which allow every access. The import holds no
        reference to the tensor: the caller keeps it alive during the call.
        """
        element_type = self._element_types.get(spec.dtype)
        if self.device.torch_device.type != "cpu" or element_type is None:
            from_dlpack = self.hal_device.from_dlpack_capsule
            return lambda tensor: from_dlpack(to_dlpack(tensor))
        import_host, memory_type, usage, buffer_view = self._host_import
        memory, shape = ctypes.c_char * spec.nbytes, list(spec.shape)

        def import_output(tensor: torch.Tensor) -> Any:
            return buffer_view(import_host(memory.from_address(tensor.data_ptr()), memory_type, usage), shape,
                               element_type)

        return import_output

    def load_async_function(self, loaded: LoadedKernel) -> Any:
        """The ``$async`` entry of a kernel compiled with the async-external execution model
        (it takes a wait fence and a signal fence after the tensors)."""
        name = loaded.function.name + "$async"
        function = loaded.module.lookup_function(name)
        if function is None:
            raise DeviceError(f"kernel has no {name!r}: CUDA kernels need --iree-execution-model=async-external")
        return function

    def load(self, vmfb: bytes, function_name: str) -> LoadedKernel:
        """Load a compiled kernel; raises ValueError if it is unusable or lacks the function."""
        import iree.runtime as rt

        try:
            module = rt.VmModule.copy_buffer(self.instance, vmfb)
            with self.current():
                context = rt.VmContext(self.instance, [self.hal_module, module])
        except Exception as e:  # the runtime raises plain RuntimeError for a bad flatbuffer
            raise ValueError(f"kernel module does not load: {e}") from e
        function = module.lookup_function(function_name)
        if function is None:
            raise ValueError(f"kernel module has no function {function_name!r}")
        return LoadedKernel(context, function, module)


def _hal_element_types(E: Any) -> dict[torch.dtype, int]:  # noqa: N803 (iree.runtime.HalElementType)
    return {torch.float32: int(E.FLOAT_32), torch.float16: int(E.FLOAT_16), torch.bfloat16: int(E.BFLOAT_16),
            torch.float64: int(E.FLOAT_64), torch.int8: int(E.SINT_8), torch.int16: int(E.SINT_16),
            torch.int32: int(E.SINT_32), torch.int64: int(E.SINT_64), torch.uint8: int(E.UINT_8),
            torch.bool: int(E.BOOL_8)}


@contextlib.contextmanager
def _primary_context(index: int) -> Iterator[None]:
    """Make cuda:index's primary context current on this thread for the block."""
    with torch.cuda.device(index):
        torch.cuda.current_stream(index).query()  # any runtime call makes the context current
        yield


def _cuda_device(driver: Any, index: int) -> Any:
    """The IREE device that is torch's cuda:index, matched by GPU UUID (so that
    CUDA_VISIBLE_DEVICES and enumeration order cannot pair the wrong GPUs)."""
    import torch

    uuid = str(torch.cuda.get_device_properties(index).uuid)
    devices = driver.query_available_devices()
    for info in devices:
        if str(info.get("path", "")).removeprefix("GPU-") == uuid:
            return driver.create_device(info["device_id"])
    raise DeviceError(f"cuda:{index} (GPU-{uuid}) is not among the devices IREE's CUDA driver sees: "
                      f"{[info.get('path') for info in devices]}")


def _new_driver(name: str) -> Any:
    """A HAL driver of our own. ``iree.runtime.get_driver`` returns a process-wide cached one,
    whose worker threads a forked child does not have; a fresh driver starts its own."""
    import iree.runtime as rt

    try:
        from iree.runtime._binding import create_hal_driver
    except ImportError:  # pragma: no cover - older runtimes: shared driver, fork unsupported
        return rt.get_driver(name)
    return create_hal_driver(name)


_runtimes: dict[tuple[str, str], DeviceRuntime] = {}
_lock = threading.Lock()

#: Increases in a child process after fork(); launchables made before it reload themselves.
generation = 0

# IREE objects inherited from the parent of a fork(). Destroying them in the child would wait
# on worker threads that only existed in the parent, so they are kept alive, unused, forever.
_abandoned: list[object] = []


def abandon(*objects: object) -> None:
    """Keep a forked parent's IREE objects alive in the child (see ``_abandoned``)."""
    _abandoned.extend(objects)


def get_runtime(device: BooDevice, driver: str | None = None) -> DeviceRuntime:
    """The process-wide :class:`DeviceRuntime` for ``device`` and ``driver``, made on first use."""
    key = (device.key, driver or device.driver)
    runtime = _runtimes.get(key)
    if runtime is None:
        with _lock:
            runtime = _runtimes.get(key)
            if runtime is None:
                runtime = _runtimes[key] = DeviceRuntime(device, key[1])
    return runtime


def _forget_after_fork() -> None:
    # IREE's worker threads do not survive fork(); a child process starts its own runtime.
    global _lock, generation
    abandon(*_runtimes.values())
    _runtimes.clear()
    _lock = threading.Lock()
    generation += 1


def _release_at_exit() -> None:
    with _lock:
        _runtimes.clear()


atexit.register(_release_at_exit)  # runs after launchable.py's handler (LIFO), which drops the contexts

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
