"""CUDA graphs for ``torch.compile(..., backend="iree_boo", mode="reduce-overhead")``.

A compiled graph (forward, backward or inference, BOO kernels and the torch ops around
them) is recorded into one ``torch.cuda.CUDAGraph`` on its first call and replayed after,
so a step costs one launch on the host. BOO kernels can be recorded because they are
enqueued on torch's stream without host waits (``BOO_CUDA_LAUNCH=direct``).

What a replay reads and writes is fixed at recording: inputs are copied into the graph's
own buffers, except parameters and buffers of the model (the same tensors every step, so
their memory is recorded as is: a buffer the graph updates in place is updated where it
is); outputs are cloned out of the graph's memory, so a caller
never sees them overwritten by the next replay. A call whose tensors differ in shape,
dtype or device from the recorded ones, or that is not on a GPU, runs the graph without
recording (as does everything while the graph could not be recorded, with the reason
logged once). A replay checks only what can change between steps: each parameter's memory
(a pointer comparison), and the shape, strides, dtype and device of the other arguments; a
full check of every argument cost about 1.5 ms of host time per ResNet-50 step (320
arguments), as much as the step's kernels.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

logger = logging.getLogger(__name__)

#: Calls that run the compiled function before recording (lazy initialisation, allocator warm-up).
WARMUP_CALLS = 2


class GraphedFunction:
    """``fn`` (taking a list of arguments, AOTAutograd's boxed convention) recorded into a
    CUDA graph on its first call and replayed after (module docstring)."""

    def __init__(self, fn: Callable[[list[Any]], Any], name: str) -> None:
        self._boxed_call = True  # on the instance: torch's wrappers copy __dict__, not class attributes
        self.fn = fn
        self.name = name
        self.graph: torch.cuda.CUDAGraph | None = None
        self.replays = 0
        self._failed = ""
        self._warmups = 0
        self._inputs: list[Any] = []
        self._outputs: Any = None
        self._state: list[int] = []  # positions of parameters and buffers: their memory is recorded
        self._state_memory: list[int] = []
        self._others: list[int] = []  # every other position: its description must match
        self._others_described: tuple[Any, ...] = ()
        self._copied: list[int] = []  # tensors copied into the graph's own buffers

    def __call__(self, args: list[Any]) -> Any:
        if self._failed:
            return self.fn(args)
        if self.graph is None:
            if not _on_the_gpu(args):
                return self.fn(args)
            if self._warmups < WARMUP_CALLS:
                self._warmups += 1
                return self._run_on_side_stream(args)
            return self._record(args)
        if not self._replayable(args):
            return self.fn(args)
        for i in self._copied:
            static, given = self._inputs[i], args[i]
            if static.data_ptr() != given.data_ptr():
                static.copy_(given)
        self.graph.replay()
        self.replays += 1
        return _clone(self._outputs)

    def _run_on_side_stream(self, args: list[Any]) -> Any:
        """Warm-up calls run on a side stream, as recording will."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            result = self.fn(list(args))
        torch.cuda.current_stream().wait_stream(stream)
        return result

    def _replayable(self, args: list[Any]) -> bool:
        """Whether the recorded graph computes this call: the same parameters' memory, the
        same shapes, strides, dtypes and devices elsewhere."""
        if len(args) != len(self._inputs):
            return False
        for i, memory in zip(self._state, self._state_memory):
            given = args[i]
            if not isinstance(given, torch.Tensor) or given.data_ptr() != memory:
                return False
        return tuple(_describe(args[i]) for i in self._others) == self._others_described

    def _record(self, args: list[Any]) -> Any:
        state = {i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and _is_state(a)}
        inputs = [a if i in state or not isinstance(a, torch.Tensor) else a.clone() for i, a in enumerate(args)]
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                outputs = self.fn(list(inputs))
        except Exception as e:  # an op that cannot be recorded: run without graphs from now on
            self._failed = f"{type(e).__name__}: {e}"
            logger.warning("%s: not recorded into a CUDA graph (%s); running without one", self.name, self._failed)
            torch.cuda.synchronize()
            return self.fn(args)
        self.graph, self._inputs, self._outputs = graph, inputs, outputs
        self._state = sorted(state)
        self._state_memory = [args[i].data_ptr() for i in self._state]
        self._others = [i for i in range(len(args)) if i not in state]
        self._others_described = tuple(_describe(args[i]) for i in self._others)
        self._copied = [i for i in self._others if isinstance(args[i], torch.Tensor)]
        graph.replay()
        self.replays += 1
        return _clone(outputs)


def graphed(fn: Callable[[list[Any]], Any], name: str) -> GraphedFunction:
    """``fn`` behind a CUDA graph (module docstring)."""
    return GraphedFunction(fn, name)


def _is_state(tensor: torch.Tensor) -> bool:
    """A model's parameter or registered buffer: the same memory at every step. Dynamo marks
    both as static inputs (a buffer, such as a batch norm's running statistics, is a plain
    tensor: copying ResNet-50's 106 into the graph's memory cost a launch each per replay)."""
    return (isinstance(tensor, torch.nn.Parameter) or getattr(tensor, "_is_param", False)
            or getattr(tensor, "_dynamo_static_input_type", None) is not None)


def _describe(a: Any) -> tuple[Any, ...]:
    """A tensor's shape, strides, dtype and device, or a value itself."""
    if isinstance(a, torch.Tensor):
        return (tuple(a.shape), a.stride(), a.dtype, a.device)
    return ("value", a)


def _on_the_gpu(args: Sequence[Any]) -> bool:
    """Whether every tensor argument is on a GPU."""
    return all(a.device.type == "cuda" for a in args if isinstance(a, torch.Tensor))


def _clone(outputs: Any) -> Any:
    if isinstance(outputs, torch.Tensor):
        return outputs.clone()
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(_clone(o) for o in outputs)
    return outputs
