"""The few CUDA driver API calls a launch plan needs, through ctypes on ``libcuda``.

torch has already loaded the driver and made its primary contexts; BOO loads its PTX into
the same primary context, so kernels see torch's memory and run on torch's streams. No
extra dependency: the library is the one every CUDA program uses.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from ...errors import LaunchError

#: ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``: opt a kernel into more than 48 KB.
MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
DEFAULT_SHARED_LIMIT = 48 * 1024
#: What a call returns when no context, or another one, is current on this thread.
WRONG_CONTEXT_CODES = (201, 400)  # CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_HANDLE

_c_void_p, _c_uint, _c_size_t = ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t


class Driver:
    """``libcuda`` with argument types declared for the calls BOO makes."""

    def __init__(self) -> None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise LaunchError(f"the CUDA driver library (libcuda.so.1) cannot be loaded: {e}") from e
        self.lib = lib

        def declare(names: tuple[str, ...], *argtypes: Any) -> Any:
            for name in names:
                function = getattr(lib, name, None)
                if function is not None:
                    function.argtypes, function.restype = argtypes, ctypes.c_int
                    return function
            raise LaunchError(f"the CUDA driver has none of {names}")

        p = ctypes.POINTER
        self.cuGetErrorString = declare(("cuGetErrorString",), ctypes.c_int, p(ctypes.c_char_p))
        self.cuInit = declare(("cuInit",), _c_uint)
        self.cuDeviceGet = declare(("cuDeviceGet",), p(ctypes.c_int), ctypes.c_int)
        self.cuDevicePrimaryCtxRetain = declare(("cuDevicePrimaryCtxRetain",), p(_c_void_p), ctypes.c_int)
        self.cuCtxGetCurrent = declare(("cuCtxGetCurrent",), p(_c_void_p))
        self.cuCtxSetCurrent = declare(("cuCtxSetCurrent",), _c_void_p)
        self.cuModuleLoadData = declare(("cuModuleLoadData",), p(_c_void_p), ctypes.c_char_p)
        self.cuModuleGetFunction = declare(("cuModuleGetFunction",), p(_c_void_p), _c_void_p, ctypes.c_char_p)
        self.cuFuncSetAttribute = declare(("cuFuncSetAttribute",), _c_void_p, ctypes.c_int, ctypes.c_int)
        self.cuLaunchKernel = declare(("cuLaunchKernel",), _c_void_p, _c_uint, _c_uint, _c_uint, _c_uint, _c_uint,
                                      _c_uint, _c_uint, _c_void_p, _c_void_p, _c_void_p)
        # The same entry point without declared argument types, for launches whose arguments are
        # ctypes objects made once (``_Launch.head``): ctypes then converts nothing per call, about
        # half of what the declared call costs from Python.
        self.cuLaunchKernel_prepared = lib["cuLaunchKernel"]
        self.cuLaunchKernel_prepared.restype = ctypes.c_int
        self.cuMemsetD8Async = declare(("cuMemsetD8Async",), ctypes.c_uint64, ctypes.c_ubyte, _c_size_t, _c_void_p)
        self.cuMemsetD16Async = declare(("cuMemsetD16Async",), ctypes.c_uint64, ctypes.c_ushort, _c_size_t,
                                        _c_void_p)
        self.cuMemsetD32Async = declare(("cuMemsetD32Async",), ctypes.c_uint64, _c_uint, _c_size_t, _c_void_p)
        self.cuMemcpyDtoDAsync = declare(("cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync"), ctypes.c_uint64,
                                         ctypes.c_uint64, _c_size_t, _c_void_p)
        # Recording a plan into a CUDA graph (.replay): optional, a driver without them launches command by command.
        def optional(name: str, *argtypes: Any) -> Any:
            return declare((name,), *argtypes) if hasattr(lib, name) else None

        self.cuStreamCreate = optional("cuStreamCreate", p(_c_void_p), _c_uint)
        self.cuStreamBeginCapture = optional("cuStreamBeginCapture_v2", _c_void_p, ctypes.c_int)
        self.cuStreamEndCapture = optional("cuStreamEndCapture", _c_void_p, p(_c_void_p))
        self.cuGraphInstantiateWithFlags = optional("cuGraphInstantiateWithFlags", p(_c_void_p), _c_void_p,
                                                    ctypes.c_ulonglong)
        self.cuGraphDestroy = optional("cuGraphDestroy", _c_void_p)
        self.cuGraphLaunch = optional("cuGraphLaunch", _c_void_p, _c_void_p)
        self.cuGraphExecDestroy = optional("cuGraphExecDestroy", _c_void_p)
        self._contexts: dict[int, int] = {}
        self.check(self.cuInit(0), "cuInit")

    @property
    def records_graphs(self) -> bool:
        """Whether the driver has the calls that record and launch CUDA graphs (11.4 and later)."""
        return None not in (self.cuStreamCreate, self.cuStreamBeginCapture, self.cuStreamEndCapture,
                            self.cuGraphInstantiateWithFlags, self.cuGraphDestroy, self.cuGraphLaunch,
                            self.cuGraphExecDestroy)

    def error(self, code: int) -> str:
        text = ctypes.c_char_p()
        self.cuGetErrorString(code, ctypes.byref(text))
        return f"{text.value.decode() if text.value else 'unknown error'} ({code})"

    def check(self, code: int, what: str) -> None:
        if code:
            raise LaunchError(f"{what} failed: {self.error(code)}")

    def primary_context(self, ordinal: int) -> int:
        """The primary context of GPU ``ordinal`` (torch's), retained once per process."""
        context = self._contexts.get(ordinal)
        if context is None:
            device, handle = ctypes.c_int(), _c_void_p()
            self.check(self.cuDeviceGet(ctypes.byref(device), ordinal), f"cuDeviceGet({ordinal})")
            self.check(self.cuDevicePrimaryCtxRetain(ctypes.byref(handle), device), "cuDevicePrimaryCtxRetain")
            context = self._contexts[ordinal] = handle.value or 0
        return context

    def make_current(self, ordinal: int) -> None:
        """Make GPU ``ordinal``'s primary context current on this thread (cheap when it is:
        torch's autograd threads and threads that never touched the GPU may have none)."""
        context = self.primary_context(ordinal)
        current = _c_void_p()
        self.cuCtxGetCurrent(ctypes.byref(current))
        if current.value != context:
            self.check(self.cuCtxSetCurrent(context), "cuCtxSetCurrent")

@functools.cache
def driver() -> Driver:
    """The process's driver binding (loaded on first use)."""
    return Driver()
