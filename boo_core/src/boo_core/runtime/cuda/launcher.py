"""Replaying a launch plan on torch's stream: ``cuLaunchKernel`` per dispatch, no host wait."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...errors import LaunchError
from ...kernels.launch_plan import Copy, Dispatch, Fill, LaunchPlan
from .driver_api import DEFAULT_SHARED_LIMIT, MAX_DYNAMIC_SHARED_SIZE_BYTES, WRONG_CONTEXT_CODES, driver
from .replay import GraphReplays

_thread = threading.local()

#: Transient buffers share one allocation, each at an offset aligned like IREE's allocator's.
TRANSIENT_ALIGNMENT = 256


@dataclass
class _Launch:
    head: tuple[Any, ...]  # cuLaunchKernel's arguments before the stream as ctypes objects: function, grid,
    # block, shared memory
    pointers: ctypes.Array  # the binding parameters' values (c_uint64), set per call
    sources: tuple[tuple[int, int], ...]  # per binding: (slot, byte offset in the slot)
    parameters: ctypes.Array  # void*[]: where each parameter's value is
    constants: ctypes.Array | None  # kept alive: parameters points into it


class PlanLauncher:
    """A :class:`LaunchPlan` loaded on GPU ``ordinal``: ``launcher(pointers, stream)`` enqueues
    the kernel's work on ``stream`` for the arguments at ``pointers`` and returns at once.
    A plan of several commands is relaunched as one CUDA graph where its buffers' addresses
    repeat (:mod:`.replay`), unless ``replay`` is False."""

    def __init__(self, plan: LaunchPlan, ordinal: int, argument_bytes: Sequence[int], name: str, *,
                 replay: bool = True) -> None:
        self.name = name
        self.ordinal = ordinal
        self._driver = api = driver()
        _check_plan(plan, argument_bytes, name)
        api.make_current(ordinal)
        modules = []
        for index, ptx in enumerate(plan.modules):
            module = ctypes.c_void_p()
            api.check(api.cuModuleLoadData(ctypes.byref(module), ptx.encode() + b"\0"),
                      f"{name}: loading PTX module {index}")
            modules.append(module)
        self._modules = modules  # loaded for the life of the process (the context owns them)
        functions = []
        for kernel in plan.kernels:
            function = ctypes.c_void_p()
            api.check(api.cuModuleGetFunction(ctypes.byref(function), modules[kernel.module], kernel.name.encode()),
                      f"{name}: kernel {kernel.name}")
            if kernel.shared_memory > DEFAULT_SHARED_LIMIT:
                api.check(api.cuFuncSetAttribute(function, MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel.shared_memory),
                          f"{name}: {kernel.shared_memory} bytes of shared memory for {kernel.name}")
            functions.append(function)
        self._transient_offsets, self._transient_bytes = _layout(plan.transients)
        self._slots = tuple((slot.arg, slot.transient, slot.offset) for slot in plan.slots)
        self._steps = [self._prepare(command, plan, functions) for command in plan.commands]
        # The common kernel, one dispatch on the arguments alone, takes a shorter path.
        only = self._steps[0] if len(self._steps) == 1 and isinstance(self._steps[0], _Launch) else None
        self._single = None
        if only is not None and not plan.transients:
            self._single = (only, tuple((index, self._slots[slot][0], self._slots[slot][2] + offset)
                                        for index, (slot, offset) in enumerate(only.sources)))
        self._replays = GraphReplays(api, ordinal, name) \
            if replay and len(self._steps) > 1 and api.records_graphs else None
        self._device = torch.device("cuda", ordinal)
        self._context = api.primary_context(ordinal)
        self._lock = threading.Lock()

    def _prepare(self, command: Dispatch | Fill | Copy, plan: LaunchPlan, functions: list[ctypes.c_void_p]):
        if isinstance(command, Dispatch):
            kernel = plan.kernels[command.kernel]
            count = len(command.bindings)
            pointers = (ctypes.c_uint64 * max(count, 1))()
            constants = (ctypes.c_uint32 * len(command.constants))(*command.constants) if command.constants else None
            addresses = [ctypes.addressof(pointers) + 8 * i for i in range(count)]
            if constants is not None:
                addresses += [ctypes.addressof(constants) + 4 * i for i in range(len(command.constants))]
            parameters = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
            sources = tuple((b.slot, b.offset) for b in command.bindings)
            sizes = (ctypes.c_uint(n) for n in (*command.grid, *kernel.block, kernel.shared_memory))
            return _Launch((functions[command.kernel], *sizes), pointers, sources, parameters, constants)
        return command

    @property
    def scratch_bytes(self) -> int:
        """Bytes of transient buffers one call allocates."""
        return self._transient_bytes

    def __call__(self, pointers: Sequence[int], stream: int) -> None:
        if getattr(_thread, "context", None) != self._context:  # once per thread (torch's autograd threads...)
            self._driver.make_current(self.ordinal)
            _thread.context = self._context
        try:
            self._launch(pointers, stream)
        except _WrongContext:  # something else made another context current on this thread
            self._driver.make_current(self.ordinal)
            try:
                self._launch(pointers, stream)
            except _WrongContext as e:
                raise LaunchError(f"{self.name}: launch on cuda:{self.ordinal} failed: {e}") from None

    def _launch(self, pointers: Sequence[int], stream: int) -> None:
        api = self._driver
        if self._single is not None:
            step, sources = self._single
            values = step.pointers
            with self._lock:
                for index, arg, offset in sources:
                    values[index] = pointers[arg] + offset
                code = api.cuLaunchKernel_prepared(*step.head, ctypes.c_void_p(stream), step.parameters, None)
            if code in WRONG_CONTEXT_CODES:
                raise _WrongContext(api.error(code))
            if code:
                raise LaunchError(f"{self.name}: launch on cuda:{self.ordinal} failed: {api.error(code)}")
            return
        scratch = None
        if self._transient_bytes:
            scratch = torch.empty(self._transient_bytes, dtype=torch.uint8, device=self._device)
            scratch_base = scratch.data_ptr()
        bases = tuple(pointers[arg] + offset if arg is not None else scratch_base + self._transient_offsets[t] + offset
                      for arg, t, offset in self._slots)
        with self._lock:
            if self._replays is None or not self._replays.launch(bases, stream, self._enqueue):
                self._enqueue(bases, stream)
        del scratch  # freed in stream order: the caching allocator reuses it only after the work queued

    def _enqueue(self, bases: Sequence[int], stream: int) -> None:
        """Enqueue the plan's commands for the slots at ``bases`` on ``stream`` (under the lock)."""
        api = self._driver
        for number, step in enumerate(self._steps):
            if isinstance(step, _Launch):
                values = step.pointers
                for index, (slot, offset) in enumerate(step.sources):
                    values[index] = bases[slot] + offset
                code = api.cuLaunchKernel_prepared(*step.head, ctypes.c_void_p(stream), step.parameters, None)
            elif isinstance(step, Fill):
                code = _fill(api, bases[step.slot] + step.offset, step, stream)
            else:
                code = api.cuMemcpyDtoDAsync(bases[step.target.slot] + step.target.offset,
                                             bases[step.source.slot] + step.source.offset, step.source.length, stream)
            if code in WRONG_CONTEXT_CODES and number == 0:
                raise _WrongContext(api.error(code))
            if code:
                raise LaunchError(f"{self.name}: launch on cuda:{self.ordinal} failed: {api.error(code)}")


class _WrongContext(Exception):
    pass


def _fill(api, address: int, fill: Fill, stream: int) -> int:
    if fill.width == 1:
        return api.cuMemsetD8Async(address, fill.pattern, fill.length, stream)
    if fill.width == 2:
        return api.cuMemsetD16Async(address, fill.pattern, fill.length // 2, stream)
    return api.cuMemsetD32Async(address, fill.pattern, fill.length // 4, stream)


def _layout(sizes: Sequence[int]) -> tuple[tuple[int, ...], int]:
    offsets, total = [], 0
    for size in sizes:
        offsets.append(total)
        total += -(-size // TRANSIENT_ALIGNMENT) * TRANSIENT_ALIGNMENT
    return tuple(offsets), total


def _check_plan(plan: LaunchPlan, argument_bytes: Sequence[int], name: str) -> None:
    """Refuse a plan that would touch memory outside the tensors it is given."""
    if plan.arguments != len(argument_bytes):
        raise LaunchError(f"{name}: the launch plan takes {plan.arguments} tensors, the kernel {len(argument_bytes)}")
    for slot in plan.slots:
        limit = argument_bytes[slot.arg] if slot.arg is not None else plan.transients[slot.transient]
        if slot.offset < 0 or slot.length < 0 or slot.offset + slot.length > limit:
            raise LaunchError(f"{name}: launch plan slot {slot} exceeds its buffer ({limit} bytes)")
    for command in plan.commands:
        ranges = (command.bindings if isinstance(command, Dispatch) else
                  [command] if isinstance(command, Fill) else [command.source, command.target])
        for r in ranges:
            if not 0 <= r.slot < len(plan.slots) or r.offset < 0 or r.offset + r.length > plan.slots[r.slot].length:
                raise LaunchError(f"{name}: launch plan command {command.op} exceeds slot {r.slot}")
        if isinstance(command, Fill) and (command.width not in (1, 2, 4) or command.length % command.width):
            raise LaunchError(f"{name}: launch plan fill of width {command.width} over {command.length} bytes")
