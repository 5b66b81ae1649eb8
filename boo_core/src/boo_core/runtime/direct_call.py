"""A GPU kernel's call settled for tensors of known metadata: the cheapest launch there is.

A compiled graph calls each node with tensors of the same shapes, strides and dtypes at
every step. :meth:`Launchable.bind <boo_core.Launchable.bind>` checks once, on example (even
fake) tensors, that each one's memory *is* the kernel's argument (the caller's view of it,
a permutation or a reshape, is dense in the kernel's order) and works out the strides that
give each output the caller's view of the kernel's dense result. A :class:`DirectCall` then
compares each tensor's metadata with what was bound, allocates the outputs with those
strides and enqueues the kernel: no view, no copy, no allocation but the outputs'. Trailing
arguments the graph does not pass (a batch norm's momentum) may be bound as constants: tensors
made once, which the call keeps and passes after the caller's. Outputs nothing reads (an
inference graph's layer-norm statistics) may be bound as discarded: the kernel writes them
into memory the call made with itself, and the call returns None in their place, so it allocates
only what the graph uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

from ..signatures.signature import TensorSpec
from . import hal

try:
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # a torch without Dynamo's C++ guards
    _TensorGuards = None

#: A function from a tensor to the view of it the kernel takes (or gives).
View = Callable[[torch.Tensor], torch.Tensor]
#: Shape, strides and dtype of one tensor, as bound.
Metadata = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]

#: IREE imports external buffers only at this alignment, and its kernels assume it. torch
#: allocates aligned memory; an input view at an odd offset is copied once (a direct call
#: leaves it to the general path), an ``out=`` view at one is refused.
IMPORT_ALIGNMENT = 64

#: How many times a direct call makes its C++ metadata check again after it missed tensors
#: that the Python check then found exactly as bound. Dynamo's check compares dispatch keys
#: under the thread's dispatch state, and a node's first call may run in another: under
#: ``iree_boo_inductor`` the first calls ran with ``Fake``, ``Functionalize`` and other keys
#: excluded, and a check made there missed every later call (107 calls per ResNet-50
#: training step took the Python check). A bound keeps calls that alternate between states
#: from remaking it at every call.
GUARD_REMAKES = 4

#: The handle of torch's current stream on cuda:<index> (torch's raw accessor when it has one:
#: no Stream object made, a few microseconds less per call).
current_stream: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)


class DirectCall:
    """``launchable(*tensors)`` for tensors exactly like the bound ones, enqueued on torch's
    current stream, followed by the bound ``constants``. Returns the output (a tuple where the
    kernel has several) laid out as :attr:`outputs` says, None in place of each ``discarded``
    output (written into memory made with the call and kept), or, for any other tensors
    or in a process forked since binding, ``fallback(*tensors)`` (None, launching nothing,
    without one)."""

    __slots__ = ("_launcher", "_expected", "outputs", "_device", "_index", "_generation", "_single", "_fallback",
                 "_constants", "_constant_pointers", "discarded", "_allocated", "_sinks", "_guards", "_remakes")

    def __init__(self, launcher: Callable[[list[int], int], None], expected: Sequence[Metadata],
                 outputs: Sequence[Metadata], device: torch.device, generation: int,
                 fallback: Callable[..., Any] | None = None, constants: Sequence[torch.Tensor] = (),
                 discarded: Sequence[int] = (), sinks: tuple[torch.Tensor, ...] | None = None) -> None:
        self._launcher = launcher
        self._expected = tuple(expected)
        self._constants = tuple(constants)  # kept alive for as long as the call is
        self._constant_pointers = [t.data_ptr() for t in self._constants]
        #: Shape, strides and dtype of each output returned.
        self.outputs: tuple[Metadata, ...] = tuple(outputs)
        self._device = device
        self._index = device.index or 0
        self._generation = generation
        self._single = len(self.outputs) == 1
        self._fallback = fallback
        #: Positions of the outputs the call writes into memory of its own and returns as None.
        self.discarded: tuple[int, ...] = tuple(sorted(set(discarded)))
        if any(not 0 <= i < len(self.outputs) for i in self.discarded):
            raise ValueError(f"discarded outputs {self.discarded} out of range for {len(self.outputs)} outputs")
        self._allocated = tuple(m for i, m in enumerate(self.outputs) if i not in self.discarded)
        # The discarded outputs' memory (no reader, so every launch may overwrite it): real
        # tensors made here, when the graph compiles, even under the compiler's fake-tensor
        # mode. Made on a first launch, it would be a block of the CUDA graph pool that launch
        # ran in (Inductor's cudagraph trees warm up in their pool), kept alive by no output
        # of the graph, which the trees refuse.
        if sinks is None:
            with unset_fake_temporarily():
                sinks = tuple(torch.empty_strided(self.outputs[i][0], self.outputs[i][1], dtype=self.outputs[i][2],
                                                  device=device) for i in self.discarded)
        self._sinks = sinks
        # The metadata checks in one C++ call, made from the first tensors launched (False: none to make).
        self._guards: Any = None
        self._remakes = 0  # times the checks were made again after a miss by tensors as bound

    def or_else(self, fallback: Callable[..., Any]) -> DirectCall:
        """This call, with ``fallback(*tensors)`` run for tensors it was not bound for."""
        return DirectCall(self._launcher, self._expected, self.outputs, self._device, self._generation, fallback,
                          self._constants, self.discarded, self._sinks)

    def __call__(self, *tensors: torch.Tensor) -> Any:
        result = self.try_launch(*tensors)
        return result if result is not None or self._fallback is None else self._fallback(*tensors)

    def try_launch(self, *tensors: torch.Tensor) -> Any:
        """The outputs, or None, launching nothing, for tensors not like the bound ones."""
        if len(tensors) != len(self._expected) or hal.generation != self._generation:
            return None
        index = self._index
        guards = self._guards
        if guards is None or guards is False or not guards.check(*tensors):
            if not self._as_bound(tensors):
                return None
            if guards is None or (guards is not False and self._remakes < GUARD_REMAKES):
                # A miss by tensors as bound: the check was made under another dispatch state
                # (GUARD_REMAKES). It is made again here, where the calls run, a few times at most.
                self._remakes += guards is not None
                self._guards = _metadata_guards(tensors)
        pointers = [tensor.data_ptr() for tensor in tensors]
        for pointer in pointers:
            if pointer % IMPORT_ALIGNMENT:  # a view at an odd offset: the general path copies it
                return None
        pointers.extend(self._constant_pointers)
        device = self._device
        outputs = [torch.empty_strided(shape, stride, dtype=dtype, device=device)
                   for shape, stride, dtype in self._allocated]
        if self.discarded:
            return self._launch_discarding(pointers, outputs, index)
        pointers.extend(output.data_ptr() for output in outputs)
        self._launcher(pointers, current_stream(index))
        return outputs[0] if self._single else tuple(outputs)

    def _as_bound(self, tensors: Sequence[torch.Tensor]) -> bool:
        """Whether ``tensors`` are strided tensors on the bound GPU with the bound metadata."""
        index = self._index
        for tensor, (shape, stride, dtype) in zip(tensors, self._expected):
            if not (isinstance(tensor, torch.Tensor) and tensor.layout is torch.strided and tensor.dtype is dtype
                    and tensor.shape == shape and tensor.stride() == stride and tensor.is_cuda
                    and tensor.get_device() == index and not tensor.is_neg()):
                return False
        return True

    def _launch_discarding(self, pointers: list[int], outputs: list[torch.Tensor], index: int) -> tuple:
        """Launch with the discarded outputs in the call's own memory; None in their places."""
        kept, sinks, returned = iter(outputs), iter(self._sinks), []
        for position in range(len(self.outputs)):
            if position in self.discarded:
                pointers.append(next(sinks).data_ptr())
                returned.append(None)
            else:
                output = next(kept)
                pointers.append(output.data_ptr())
                returned.append(output)
        self._launcher(pointers, current_stream(index))
        return tuple(returned)


def _metadata_guards(tensors: Sequence[torch.Tensor]) -> Any:
    """Dynamo's C++ check that tensors have exactly these tensors' metadata (dispatch keys,
    so device type, layout and negation too; dtype, device index, requires_grad, sizes and
    strides), or False where this torch lacks it. Passing it implies :meth:`DirectCall._as_bound`;
    failing it (a tensor that differs only in requires_grad, say) sends a call to that check."""
    if _TensorGuards is None:
        return False
    try:
        guards = _TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                               dynamic_dims_strides=[list(t.stride()) for t in tensors])
        return guards if guards.check(*tensors) else False
    except Exception:  # another torch's signature: the Python checks serve
        return False


def settle(launcher: Callable[[list[int], int], None], inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
           examples: Sequence[torch.Tensor], views: Sequence[View | None], output_views: Sequence[View | None],
           device: torch.device, generation: int, constants: Sequence[torch.Tensor] = (),
           discarded: Sequence[int] = ()) -> DirectCall | None:
    """A :class:`DirectCall` for tensors like ``examples``, or None where one of them is not
    the kernel's argument in memory (see :meth:`Launchable.bind <boo_core.Launchable.bind>`)."""
    if len(examples) + len(constants) != len(inputs) or len(views) > len(examples) or len(output_views) > len(outputs):
        return None
    for constant, spec in zip(constants, inputs[len(examples):]):
        if not (isinstance(constant, torch.Tensor) and not isinstance(constant, FakeTensor)
                and constant.layout is torch.strided and constant.device == device and constant.is_contiguous()
                and constant.shape == spec.shape and constant.dtype == spec.dtype
                and not constant.data_ptr() % IMPORT_ALIGNMENT):
            return None
    expected = []
    for position, (example, spec) in enumerate(zip(examples, inputs)):
        view = views[position] if position < len(views) else None
        if not isinstance(example, torch.Tensor) or example.layout is not torch.strided or example.device != device:
            return None
        argument = example if view is None else view(example)
        if not (_same_memory(argument, example) and argument.shape == spec.shape and argument.dtype == spec.dtype
                and argument.is_contiguous()):
            return None
        expected.append((tuple(example.shape), tuple(example.stride()), example.dtype))
    results = []
    for position, spec in enumerate(outputs):
        view = output_views[position] if position < len(output_views) else None
        dense = torch.empty(spec.shape, dtype=spec.dtype, device="meta")
        result = dense if view is None else view(dense)
        if not (_same_memory(result, dense) and result.numel() == dense.numel() and result.dtype == spec.dtype
                and _dense(result)):
            return None
        results.append((tuple(result.shape), tuple(result.stride()), spec.dtype))
    return DirectCall(launcher, expected, results, device, generation, constants=constants, discarded=discarded)


def _dense(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s elements fill its memory without gaps or overlaps, in some order."""
    expected = 1
    for stride, size in sorted((st, s) for s, st in zip(tensor.shape, tensor.stride()) if s != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _same_memory(view: torch.Tensor, base: torch.Tensor) -> bool:
    """Whether ``view`` is ``base``'s memory from ``base``'s first element (no copy made)."""
    return view is base or (torch._C._is_alias_of(view, base) and view.storage_offset() == base.storage_offset())
