"""Launchables: compiled kernels called on torch tensors.

``get_launchable(signature, device)`` returns a :class:`Launchable`. Calling it checks each
argument against the signature (shape, dtype, device, contiguity), imports the inputs
through DLPack without copying, allocates the outputs with torch and lets the kernel write
them in place. The call path does no hashing, no file I/O and no compilation.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import threading
import time
import warnings
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

import torch
from iree.runtime import HalFence, VmVariantList
from torch.utils.dlpack import to_dlpack

from . import runtime
from .config import get_settings
from .devices import BooDevice, Target, resolve_device
from .errors import ArgumentError, BooFallbackWarning, DeviceError, LaunchError
from .kernels import KernelRequest
from .signature import Signature, TensorSpec

logger = logging.getLogger(__name__)

#: IREE imports external buffers only at this alignment. torch allocates aligned memory; an
#: input view at an odd offset is copied once, an ``out=`` view at one is refused.
IMPORT_ALIGNMENT = 64


class Launchable:
    """A compiled kernel bound to a device; call it like the op: ``y = launchable(x, w)``.

    Arguments must match the signature's input specs exactly: shape (the layout's shape),
    dtype, device, and contiguity. Inputs are imported without a copy, except a view that
    starts at an address IREE cannot import (not 64-byte aligned), which is copied once.
    ``out=`` takes preallocated outputs (a tensor, or a sequence when the kernel has
    several) that the kernel writes in place; they must match like inputs do.
    """

    def __init__(self, signature: Signature, device: BooDevice, request: KernelRequest, driver: str) -> None:
        self.signature = signature
        self.device = device
        self.driver = driver
        self._request = request
        self._inputs = tuple(signature.input_specs())
        self._outputs = tuple(signature.output_specs())
        self._torch_device = device.torch_device
        self._call_lock = threading.Lock()  # one VM context must not run two calls at once
        #: Op code may keep things derived from this launchable here (its backward, say);
        #: they live and die with it.
        self.derived: dict[str, Any] = {}
        self.cache_hit = False
        self.compile_seconds = 0.0
        self.load_seconds = 0.0
        self.cache_directory: Path | None = None
        self._load()

    def _load(self) -> None:
        start = time.perf_counter()
        kernel = self._request.fetch()
        device_runtime = self.runtime = runtime.get_runtime(self.device, self.driver)
        try:
            loaded = device_runtime.load(kernel.vmfb, self.signature.func_name)
        except ValueError as e:
            logger.debug("%s: cached kernel at %s unusable (%s); recompiling", self.signature.func_name,
                         kernel.directory, e)
            kernel = self._request.fetch(rebuild=True)
            loaded = device_runtime.load(kernel.vmfb, self.signature.func_name)
        self.cache_hit = kernel.hit
        self.compile_seconds = kernel.compile_seconds
        self.cache_directory = kernel.directory if get_settings().cache_enabled else None
        self.load_seconds = time.perf_counter() - start - kernel.compile_seconds
        self._generation = runtime.generation
        self._context = loaded.context
        self._function = loaded.function
        self._module = loaded.module
        self._import = device_runtime.hal_device.from_dlpack_capsule
        self._import_outputs = tuple(device_runtime.output_importer(spec) for spec in self._outputs)
        self._invoke = self._invoke_cuda if self._torch_device.type == "cuda" else self._invoke_sync
        if self._torch_device.type == "cuda":
            self._function = device_runtime.load_async_function(loaded)
            self._semaphore = device_runtime.hal_device.create_semaphore(0)
            self._timeline = 0
        self._fallback = False
        if get_settings().verify:
            self._apply_verdict()

    def _apply_verdict(self) -> None:
        """BOO_VERIFY: use the recorded verdict for this device, or check now and record it."""
        from . import verify
        from .numerics import check_launchable

        verdict = verify.read_verdict(self.cache_directory, self.device)
        if verdict is None:
            comparisons = check_launchable(self)
            failed = [c for c in comparisons if not c.passed]
            verdict = verify.PASS if not failed else "fail: " + "; ".join(str(c) for c in failed)
            verify.record_verdict(self.cache_directory, self.device, verdict)
        if verdict != verify.PASS:
            self._fallback = True
            warnings.warn(f"BOO kernel {self.signature.func_name} failed verification on "
                          f"{verify.device_identity(self.device)} ({verdict}); it is not used: calls compute "
                          "with PyTorch", BooFallbackWarning, stacklevel=3)

    def __repr__(self) -> str:
        return f"<Launchable {self.signature.func_name} on {self.device.key}>"

    def __call__(self, *args: torch.Tensor, out: torch.Tensor | Sequence[torch.Tensor] | None = None):
        if self._generation != runtime.generation:  # forked child: the parent's runtime is gone
            runtime.abandon(self._context, self._function, self._module, self._import)
            self._load()
        if len(args) != len(self._inputs):
            names = ", ".join(s.name for s in self._inputs)
            raise ArgumentError(f"{self.signature.func_name} takes {len(self._inputs)} tensors ({names}), "
                                f"got {len(args)}")
        for index, (tensor, spec) in enumerate(zip(args, self._inputs)):
            self._check(tensor, spec, f"argument {index}")
        if self._fallback:
            return self._call_reference(args, out)
        if out is None:
            outputs = tuple(torch.empty(s.shape, dtype=s.dtype, device=self._torch_device) for s in self._outputs)
        else:
            outputs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
            if len(outputs) != len(self._outputs):
                raise ArgumentError(f"{self.signature.func_name} writes {len(self._outputs)} outputs, "
                                    f"out= has {len(outputs)}")
            for index, (tensor, spec) in enumerate(zip(outputs, self._outputs)):
                self._check(tensor, spec, f"out[{index}]")
        arg_list = VmVariantList(len(args) + len(outputs))
        for tensor in args:
            if tensor.requires_grad:
                tensor = tensor.detach()
            if tensor.data_ptr() % IMPORT_ALIGNMENT:
                tensor = tensor.clone()  # IREE imports only aligned memory: the one copy BOO makes
            arg_list.push_ref(self._import(to_dlpack(tensor)))
        for import_output, tensor in zip(self._import_outputs, outputs):
            arg_list.push_ref(import_output(tensor))
        with self._call_lock:
            self._invoke(arg_list)
        return outputs[0] if len(outputs) == 1 else outputs

    def _invoke_sync(self, arg_list: VmVariantList) -> None:
        self._context.invoke(self._function, arg_list, VmVariantList(0))

    def _invoke_cuda(self, arg_list: VmVariantList) -> None:
        """Run in torch's stream order. IREE runs kernels on a stream of its own and (in 3.13)
        cannot wait on or signal CUDA events, so ordering is kept on the host: wait for the
        work queued on the current torch stream (that stream only, not the device), run the
        kernel, and return once it has finished, so later torch work sees its results."""
        torch.cuda.current_stream(self._torch_device).synchronize()
        ready, done = self._timeline, self._timeline + 1
        arg_list.push_ref(HalFence.create_at(self._semaphore, ready))
        arg_list.push_ref(HalFence.create_at(self._semaphore, done))
        with self.runtime.current():
            self._context.invoke(self._function, arg_list, VmVariantList(0))
        if not self._semaphore.wait(done):
            raise LaunchError(f"{self.signature.func_name}: the kernel did not finish on {self.device.key}")
        self._timeline = done

    def _call_reference(self, args: Sequence[torch.Tensor], out) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """PyTorch in place of a kernel that failed verification."""
        with torch.no_grad():
            results = self.signature.reference(*args)
        results = (results,) if isinstance(results, torch.Tensor) else tuple(results)
        if out is None:
            outputs = tuple(r.to(s.dtype).contiguous() for r, s in zip(results, self._outputs))
        else:
            outputs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
            for target, result in zip(outputs, results):
                target.copy_(result)
        return outputs[0] if len(outputs) == 1 else outputs

    def _check(self, tensor: object, spec: TensorSpec, where: str) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise ArgumentError(f"{self.signature.func_name}: {where} ({spec.name}) must be a torch.Tensor, "
                                f"got {type(tensor).__name__}")
        problem = None
        if tensor.shape != spec.shape:
            problem = f"has shape {tuple(tensor.shape)}"
        elif tensor.dtype != spec.dtype:
            problem = f"has dtype {tensor.dtype}"
        elif tensor.device != self._torch_device:
            problem = f"is on {tensor.device}"
        elif not tensor.is_contiguous():
            problem = f"is not contiguous (strides {tensor.stride()}); the layout is given by the shape"
        elif where.startswith("out") and tensor.data_ptr() % IMPORT_ALIGNMENT:
            problem = f"is not {IMPORT_ALIGNMENT}-byte aligned (a view at an offset); the kernel cannot write it"
        if problem:
            raise ArgumentError(f"{self.signature.func_name}: {where} ({spec.name}) {problem}; expected "
                                f"{spec.describe()} on {self._torch_device}, contiguous")


_MemoryKey = tuple[Signature, str, Target, str, tuple[str, ...]]
_launchables: dict[_MemoryKey, Launchable] = {}
_lock = threading.Lock()
_building: dict[_MemoryKey, threading.Lock] = {}


def get_launchable(signature: Signature, device: str | torch.device | BooDevice | None = "cpu", *,
                   target: str | Target | None = None) -> Launchable:
    """The launchable for ``signature`` on ``device``: from memory, the disk cache, or compiled.

    ``target`` (``"cuda:sm_89"``) overrides the compile target chosen for the device (as
    ``BOO_CUDA_TARGET`` does for every call); it must be for the device's backend.
    """
    boo_device = resolve_device(device)
    if target is not None:
        chosen = target if isinstance(target, Target) else Target.parse(target)
        if chosen.backend != boo_device.target.backend:
            raise DeviceError(f"target {chosen.name} cannot run on {boo_device.key} "
                              f"(its targets are {boo_device.target.backend})")
        boo_device = dataclasses.replace(boo_device, target=chosen)
    settings = get_settings()
    driver = boo_device.driver_for(signature.flops, settings.cpu_driver)
    memory_key = (signature, boo_device.key, boo_device.target, driver, settings.extra_compile_flags)
    launchable = _launchables.get(memory_key)
    if launchable is not None and launchable._generation == runtime.generation:
        return launchable
    with _lock:
        build_lock = _building.setdefault(memory_key, threading.Lock())
    with build_lock:  # threads asking for one new kernel build it once
        launchable = _launchables.get(memory_key)
        if launchable is None or launchable._generation != runtime.generation:
            request = KernelRequest.create(signature, boo_device.target)
            launchable = Launchable(signature, boo_device, request, driver)
            _launchables[memory_key] = launchable
    return launchable


_by_eager_key: dict[Hashable, Launchable] = {}


def launchable_for(key: Hashable, make_signature: Callable[[], Signature],
                   device: str | torch.device | BooDevice | None = "cpu") -> Launchable:
    """:func:`get_launchable` for eager entry points, memoized on a cheap ``key``.

    ``key`` must determine the signature (shapes, dtypes, attributes); ``make_signature``
    builds it only on the first call, so a repeated eager call costs one dict lookup.
    """
    full_key = (key, str(device), get_settings())
    launchable = _by_eager_key.get(full_key)
    if launchable is None or launchable._generation != runtime.generation:
        launchable = _by_eager_key[full_key] = get_launchable(make_signature(), device)
    return launchable


def clear_launchables() -> None:
    """Forget the launchables this process holds (the disk cache is untouched)."""
    with _lock:
        _launchables.clear()
        _building.clear()
        _by_eager_key.clear()


# IREE objects must be released before the interpreter tears down its bindings.
atexit.register(clear_launchables)
