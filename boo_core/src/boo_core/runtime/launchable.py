"""Launchables: compiled kernels called on torch tensors.

A :class:`Launchable` is a built kernel loaded for one device (:func:`load_launchable`
builds and loads one; :func:`boo_core.runtime.lookup.get_launchable` finds the one that
serves a signature). Calling it checks each argument against the signature
(shape, dtype, device, contiguity), allocates the outputs with torch and lets the kernel read
the inputs and write the outputs in place. On CUDA the kernel is enqueued on torch's current
stream from its launch plan (:mod:`boo_core.runtime.cuda`) and the call returns at once; a
kernel without a plan, and every CPU kernel, runs through IREE's runtime, the inputs
imported through DLPack without copying. The call path does no hashing, no file I/O and no
compilation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
from iree.runtime import HalFence, VmVariantList
from torch.utils.dlpack import to_dlpack

from ..errors import ArgumentError, KernelLoadError, LaunchError
from ..kernels.cache import CachedKernel
from ..kernels.launch_plan import LaunchPlan
from ..kernels.request import KernelRequest
from ..settings import get_settings
from ..signatures.signature import Signature, TensorSpec
from . import hal
from .cuda import PlanLauncher
from .devices import BooDevice
from .direct_call import IMPORT_ALIGNMENT, DirectCall, View, current_stream, settle

logger = logging.getLogger(__name__)


class Launchable:
    """A compiled kernel bound to a device; call it like the op: ``y = launchable(x, w)``.

    Arguments must match the signature's input specs exactly: shape (the layout's shape),
    dtype, device, and contiguity. Inputs are imported without a copy, except a view that
    starts at an address IREE cannot import (not 64-byte aligned), which is copied once.
    ``out=`` takes preallocated outputs (a tensor, or a sequence when the kernel has
    several) that the kernel writes in place; they must match like inputs do.
    """

    #: Formulations tried before this one, and why each was passed over (selection.Attempt).
    passed_over: tuple[Any, ...] = ()
    #: Whether the kernel was verified against PyTorch on this device model (now or before).
    verified = False
    #: False for a cached kernel its cache could not prove its own (no compiler to rebuild
    #: it): selection verifies it in this process, and records nothing of it.
    trusted = True

    def __init__(self, signature: Signature, device: BooDevice, kernel: CachedKernel, driver: str,
                 request: KernelRequest | None = None) -> None:
        """Load ``kernel`` (built already: :func:`load_launchable` builds and loads) on ``device``.
        No file is read and nothing is compiled; a runtime that refuses the kernel raises
        :class:`~boo_core.errors.KernelLoadError`. ``request`` is what built it, if known."""
        self.signature = signature
        self.device = device
        self.driver = driver
        self.request = request
        self._kernel = kernel
        self._inputs = tuple(signature.input_specs())
        self._outputs = tuple(signature.output_specs())
        self._torch_device = device.torch_device
        self._call_lock = threading.Lock()  # one VM context must not run two calls at once
        #: Op code may keep things derived from this launchable here (its backward, say);
        #: they live and die with it.
        self.derived: dict[str, Any] = {}
        self.trusted = kernel.trusted
        self.cache_hit, self.compile_seconds, self.cache_directory = kernel.hit, kernel.compile_seconds, \
            kernel.directory
        start = time.perf_counter()
        self._load()
        self.load_seconds = time.perf_counter() - start

    @property
    def kernel(self) -> CachedKernel:
        """The built kernel this launchable loaded."""
        return self._kernel

    @property
    def formulation(self) -> str:
        """The name of the formulation this kernel was built from ("" where not known)."""
        return self.request.formulation.name if self.request is not None else ""

    @property
    def substitution(self) -> Any:
        """The :class:`~boo_core.substitute.Substitution` whose executables this kernel
        runs instead of IREE's own, or None."""
        return self.request.substitution if self.request is not None else None

    def _load(self) -> None:
        """Load the kernel's bytes on the device (again after a fork): no I/O."""
        self._generation = hal.generation
        self._launcher = self._direct_launcher() if self._torch_device.type == "cuda" else None
        if self._launcher is not None:
            return
        device_runtime = self.runtime = hal.get_runtime(self.device, self.driver)
        try:
            loaded = device_runtime.load(self._kernel.vmfb, self.signature.func_name)
        except ValueError as e:
            raise KernelLoadError(f"{self.signature.func_name} ({self.formulation or 'kernel'}) does not load on "
                                  f"{self.device.key}: {e}") from e
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

    def _direct_launcher(self) -> Any:
        """The kernel's launch plan loaded on the GPU (BOO_CUDA_LAUNCH=direct), or None:
        then IREE's runtime runs it (the reason is logged)."""
        name, plan = self.signature.func_name, self._kernel.plan
        if plan is None:  # none asked for: launches go through IREE's runtime
            return None
        if not isinstance(plan, LaunchPlan):
            logger.info("%s: launched through IREE's runtime (host waits): %s", name, plan)
            return None
        sizes = [spec.nbytes for spec in (*self._inputs, *self._outputs)]
        try:
            return PlanLauncher(plan, self._torch_device.index or 0, sizes, name,
                                replay=get_settings().cuda_graph_replay)
        except LaunchError as e:
            logger.warning("%s: launch plan unusable, IREE's runtime runs it: %s", name, e)
            return None

    @property
    def scratch_bytes(self) -> int:
        """Device memory a call allocates (from torch's allocator, in stream order) for the
        kernel's intermediates: direct launches only; IREE's runtime allocates its own."""
        launcher = getattr(self, "_launcher", None)
        return launcher.scratch_bytes if launcher is not None else 0

    @property
    def launch(self) -> str:
        """How calls reach the GPU: ``"direct"`` (torch's stream, no host wait) or ``"iree"``."""
        return "direct" if getattr(self, "_launcher", None) is not None else "iree"

    def __repr__(self) -> str:
        return f"<Launchable {self.signature.func_name} on {self.device.key}>"

    @property
    def stale(self) -> bool:
        """Loaded before this process was forked from its parent (its runtime is gone)."""
        return self._generation != hal.generation

    def __call__(self, *args: torch.Tensor, out: torch.Tensor | Sequence[torch.Tensor] | None = None):
        if self.stale:
            if self._launcher is None:
                hal.abandon(self._context, self._function, self._module, self._import)
            self._load()
        return self._run(args, self._checked(args, out))

    def try_call(self, *args: torch.Tensor):
        """``self(*args)`` when every argument is exactly what the kernel takes (the checks in
        their cheapest form); None otherwise, with nothing launched.

        For callers that decided everything ahead (a compiled graph's node): None sends them
        to their general path, whose checks name what is wrong.
        """
        if self.stale or not self._all_as_expected(args):
            return None
        return self._run(args, self._new_outputs())

    def bind(self, examples: Sequence[torch.Tensor], views: Sequence[View | None] = (),
             output_views: Sequence[View | None] = (), constants: Sequence[torch.Tensor] = (),
             discarded: Sequence[int] = ()) -> DirectCall | None:
        """The call settled for tensors like ``examples`` (fake ones will do): a
        :class:`~boo_core.runtime.direct_call.DirectCall`, or None where calls cannot skip
        :meth:`try_call`'s work (no direct launch: a CPU kernel, or one IREE's runtime runs).

        ``views[i]`` maps the i-th tensor to the kernel's argument (``lambda x: x.permute(0,
        2, 3, 1)``, ``lambda b: b.reshape(-1)``); it must be a view that is dense in the
        kernel's order (None where the tensor is the argument; binding checks it on the
        examples, and returns None if any is not). ``output_views[i]`` maps the kernel's
        dense i-th output to what the call returns, likewise; the call allocates it with
        the resulting strides. ``constants`` are the kernel's last arguments, real tensors
        exactly as it takes them, which every call passes after the caller's tensors.
        ``discarded`` lists outputs nobody reads: the call returns None for them, the kernel
        writing them into memory the call keeps.
        """
        launcher = getattr(self, "_launcher", None)
        if launcher is None or self.stale:
            return None
        return settle(launcher, self._inputs, self._outputs, examples, views, output_views, self._torch_device,
                      self._generation, constants, discarded)

    def _run(self, args: Sequence[torch.Tensor], outputs: tuple[torch.Tensor, ...]):
        """Launch on checked arguments: directly where the kernel has a plan, else through IREE."""
        if self._launcher is not None:
            return self._launch_direct(args, outputs)
        return self._run_iree(args, outputs)

    def _new_outputs(self) -> tuple[torch.Tensor, ...]:
        """Fresh output tensors (after :meth:`_all_as_expected`, which records their layouts)."""
        device = self._torch_device
        return tuple(torch.empty(shape, dtype=dtype, device=device) for shape, dtype in self._output_layouts)

    def _run_iree(self, args: Sequence[torch.Tensor], outputs: tuple[torch.Tensor, ...]):
        """Run the kernel through IREE's runtime, the tensors imported through DLPack."""
        arg_list = VmVariantList(len(args) + len(outputs))
        for index, tensor in enumerate(args):
            if tensor.requires_grad:
                tensor = tensor.detach()
            try:
                if tensor.data_ptr() % IMPORT_ALIGNMENT:
                    tensor = tensor.clone()  # IREE imports only aligned memory: the one copy BOO makes
                capsule = to_dlpack(tensor)
            except RuntimeError as e:  # a layout without memory of its own (MKL-DNN), checked only here
                raise ArgumentError(f"{self.signature.func_name}: argument {index} ({self._inputs[index].name}) "
                                    f"has layout {tensor.layout}; the kernel reads dense (torch.strided) tensors "
                                    f"({e})") from None
            arg_list.push_ref(self._import(capsule))
        for import_output, tensor in zip(self._import_outputs, outputs):
            arg_list.push_ref(import_output(tensor))
        with self._call_lock:
            self._invoke(arg_list)
        return outputs[0] if len(outputs) == 1 else outputs

    def _launch_direct(self, args: Sequence[torch.Tensor], outputs: tuple[torch.Tensor, ...]):
        """Enqueue the kernel on the current stream and return (no host wait)."""
        pointers = [t.data_ptr() for t in args]
        if any(p % IMPORT_ALIGNMENT for p in pointers):  # IREE's kernels assume aligned buffers: copy once
            args = [t if not t.data_ptr() % IMPORT_ALIGNMENT else t.clone() for t in args]
            pointers = [t.data_ptr() for t in args]
        pointers += [t.data_ptr() for t in outputs]
        self._launcher(pointers, current_stream(self._torch_device.index or 0))
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

    def _checked(self, args: Sequence[torch.Tensor], out) -> tuple[torch.Tensor, ...]:
        """Check the arguments (and ``out=``); the output tensors to write."""
        if out is None and self._all_as_expected(args):  # the common case, in a few tenths of a microsecond each
            return self._new_outputs()
        if len(args) != len(self._inputs):
            names = ", ".join(s.name for s in self._inputs)
            raise ArgumentError(f"{self.signature.func_name} takes {len(self._inputs)} tensors ({names}), "
                                f"got {len(args)}")
        for index, (tensor, spec) in enumerate(zip(args, self._inputs)):
            self._check(tensor, spec, f"argument {index}")
        if out is None:
            return tuple(torch.empty(s.shape, dtype=s.dtype, device=self._torch_device) for s in self._outputs)
        outputs = (out,) if isinstance(out, torch.Tensor) else tuple(out) if isinstance(out, (list, tuple)) else None
        if outputs is None or len(outputs) != len(self._outputs):
            got = f"{len(outputs)} tensors" if outputs is not None else f"a {type(out).__name__}"
            raise ArgumentError(f"{self.signature.func_name} writes {len(self._outputs)} outputs, out= has {got}")
        for index, (tensor, spec) in enumerate(zip(outputs, self._outputs)):
            self._check(tensor, spec, f"out[{index}]")
        _check_no_overlap(self.signature.func_name, args, outputs)
        return outputs

    def _all_as_expected(self, args: Sequence[torch.Tensor]) -> bool:
        """Whether every argument is exactly what the kernel takes (the checks of :meth:`_check`,
        in their cheapest form; any doubt goes to the full checks and their messages)."""
        layouts = getattr(self, "_input_layouts", None)
        if layouts is None:
            device = self._torch_device
            index = -1 if device.type == "cpu" else device.index
            simple = index is not None and not any(s.dtype.is_complex for s in self._inputs)
            self._input_layouts = layouts = tuple((torch.Size(s.shape), s.dtype, index) for s in self._inputs) \
                if simple else ()
            self._output_layouts = tuple((torch.Size(s.shape), s.dtype) for s in self._outputs)
        if len(args) != len(layouts) or not layouts:
            return False
        for tensor, (shape, dtype, index) in zip(args, layouts):
            if not (isinstance(tensor, torch.Tensor) and tensor.layout is torch.strided and tensor.dtype is dtype
                    and tensor.shape == shape and (tensor.is_cpu if index < 0 else tensor.is_cuda)
                    and tensor.get_device() == index and tensor.is_contiguous() and not tensor.is_neg()):
                return False  # get_device() is -1 for meta tensors too: hence is_cpu/is_cuda
        return True

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
        elif tensor.is_neg() or (spec.dtype.is_complex and tensor.is_conj()):  # DLPack would export the memory
            problem = "is a lazily negated or conjugated view (call .resolve_neg() / .resolve_conj() first)"
        elif not _dense_contiguous(tensor) or (where.startswith("out") and tensor.layout is not torch.strided):
            problem = (f"has layout {tensor.layout}; the kernel reads dense (torch.strided) tensors"
                       if tensor.layout is not torch.strided else
                       f"is not contiguous (strides {tensor.stride()}); the layout is given by the shape")
        elif where.startswith("out") and tensor.data_ptr() % IMPORT_ALIGNMENT:
            problem = f"is not {IMPORT_ALIGNMENT}-byte aligned (a view at an offset); the kernel cannot write it"
        if problem:
            raise ArgumentError(f"{self.signature.func_name}: {where} ({spec.name}) {problem}; expected "
                                f"{spec.describe()} on {self._torch_device}, contiguous")


def _dense_contiguous(tensor: torch.Tensor) -> bool:
    """Contiguous, for the strided layout; sparse and other layouts are not (some raise when
    asked; MKL-DNN tensors say they are, and fail to import: see Launchable.__call__)."""
    try:
        return tensor.is_contiguous()
    except RuntimeError:
        return False


def load_launchable(signature: Signature, device: BooDevice, request: KernelRequest, driver: str) -> Launchable:
    """``request``'s kernel, built (or found in the cache) and loaded on ``device``: the build
    step (a ``boo.build`` range in a profiler's trace), then :class:`Launchable`. A cached
    kernel the device's runtime refuses is rebuilt once; refused again, it is a
    :class:`~boo_core.errors.KernelLoadError`."""
    name = signature.func_name
    with torch.profiler.record_function(f"boo.build {name}"):
        kernel = request.fetch()
    try:
        return Launchable(signature, device, kernel, driver, request)
    except KernelLoadError as e:
        logger.info("%s: cached kernel at %s unusable (%s); recompiling", name, kernel.directory, e.__cause__ or e)
    with torch.profiler.record_function(f"boo.build {name}"):
        kernel = request.fetch(rebuild=True)
    try:
        return Launchable(signature, device, kernel, driver, request)
    except KernelLoadError as again:
        raise KernelLoadError(f"{name} ({request.formulation.name}) does not load on {device.key}, rebuilt or not: "
                              f"{again.__cause__ or again}") from again.__cause__


class ReferenceLaunchable(Launchable):
    """PyTorch in place of a kernel: what a call gets when every formulation BOO has for its
    signature failed verification on this device (selection warns once, naming them)."""

    formulation = "pytorch"

    def __init__(self, signature: Signature, device: BooDevice, passed_over: tuple[Any, ...]) -> None:
        self.signature = signature
        self.device = device
        self.driver = "pytorch"
        self.request = None  # type: ignore[assignment]
        self.passed_over = passed_over
        self._inputs = tuple(signature.input_specs())
        self._outputs = tuple(signature.output_specs())
        self._torch_device = device.torch_device
        self.derived: dict[str, Any] = {}
        self.cache_hit, self.compile_seconds, self.load_seconds, self.cache_directory = True, 0.0, 0.0, None
        self._generation = hal.generation

    def __repr__(self) -> str:
        return f"<ReferenceLaunchable {self.signature.func_name} on {self.device.key} (PyTorch)>"

    def try_call(self, *args: torch.Tensor):
        return self(*args) if self._all_as_expected(args) else None

    def __call__(self, *args: torch.Tensor, out: torch.Tensor | Sequence[torch.Tensor] | None = None):
        outputs = self._checked(args, out)
        with torch.no_grad():
            results = self.signature.reference(*args)
        results = (results,) if isinstance(results, torch.Tensor) else tuple(results)
        for target, result in zip(outputs, results, strict=True):
            target.copy_(result)
        return outputs[0] if len(outputs) == 1 else outputs


class EmptyLaunchable(ReferenceLaunchable):
    """What a signature with an empty tensor gets: no kernel is compiled for it. Outputs
    with no elements are returned as they are; others (a matmul whose K is 0 still has an
    M x N result) are computed with PyTorch, as the op defines them."""

    formulation = "none (empty tensors)"

    def __init__(self, signature: Signature, device: BooDevice) -> None:
        super().__init__(signature, device, ())

    def __repr__(self) -> str:
        return f"<EmptyLaunchable {self.signature.func_name} on {self.device.key} (no kernel)>"

    def __call__(self, *args: torch.Tensor, out: torch.Tensor | Sequence[torch.Tensor] | None = None):
        if any(spec.numel for spec in self._outputs):
            return super().__call__(*args, out=out)
        outputs = self._checked(args, out)
        return outputs[0] if len(outputs) == 1 else outputs


def _check_no_overlap(func_name: str, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> None:
    """``out=`` tensors must not share memory with the inputs or with each other: the kernel
    would read what it has already overwritten."""
    spans = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), f"argument {i}")
             for i, t in enumerate(inputs) if t.numel() and t.layout is torch.strided]  # others fail to import
    for index, tensor in enumerate(outputs):
        start, end = tensor.data_ptr(), tensor.data_ptr() + tensor.numel() * tensor.element_size()
        for other_start, other_end, other in spans:
            if start < other_end and other_start < end:
                raise ArgumentError(f"{func_name}: out[{index}] shares memory with {other}; the kernel cannot "
                                    "write a tensor it reads (or writes twice)")
        if end > start:
            spans.append((start, end, f"out[{index}]"))
