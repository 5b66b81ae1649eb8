"""IREE runtime state: one VM instance and HAL device per device (and driver) per process."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from .devices import BooDevice
from .errors import DeviceError


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
            self.hal_device = self.driver.create_default_device()
        except Exception as e:
            raise DeviceError(f"IREE runtime driver {driver!r} could not open {device.key}: {e}") from e
        self.hal_module = rt.create_hal_module(self.instance, self.hal_device)

    def load(self, vmfb: bytes, function_name: str) -> LoadedKernel:
        """Load a compiled kernel; raises ValueError if it is unusable or lacks the function."""
        import iree.runtime as rt

        try:
            module = rt.VmModule.copy_buffer(self.instance, vmfb)
            context = rt.VmContext(self.instance, [self.hal_module, module])
        except Exception as e:  # the runtime raises plain RuntimeError for a bad flatbuffer
            raise ValueError(f"kernel module does not load: {e}") from e
        function = module.lookup_function(function_name)
        if function is None:
            raise ValueError(f"kernel module has no function {function_name!r}")
        return LoadedKernel(context, function, module)


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


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
