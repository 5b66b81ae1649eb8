"""CUDA graphs for ``torch.compile(..., backend="iree_boo", mode="reduce-overhead")``.

A compiled graph (forward, backward or inference, BOO kernels and the torch ops around
them) is recorded into one ``torch.cuda.CUDAGraph`` on its first call and replayed after,
so a step costs one launch on the host. BOO kernels can be recorded because they are
enqueued on torch's stream without host waits (``BOO_CUDA_LAUNCH=direct``).

What a replay reads and writes is fixed at recording: inputs are copied into the graph's
own buffers, except parameters and buffers of the model (the same tensors every step, so
their memory is recorded as is: a buffer the graph updates in place is updated where it
is); outputs are cloned out of the graph's memory, so a caller
never sees them overwritten by the next replay.

In training, a forward graph's outputs also hold every activation saved for the backward
(about 400 a ResNet-50 step), which only the backward graph reads. Those are *lent*, not
cloned: the caller gets the graph's own output tensors, and the backward graph records
reading that memory in place instead of copying it into buffers of its own. A forward replay
would overwrite what it lent, so it replays only once a backward has read what it lent last
(or nothing holds it any more); otherwise (two forwards before one backward, as in gradient
accumulation), or where a backward meets saved tensors in other memory than it recorded (a
forward that ran without its graph), the call runs without its graph. AOTAutograd saves a
forward's activations together and hands them to one backward together, so one of them
stands for all: at each replay it is lent as a fresh view (the *ticket*) carrying the replay
that made it, which says whether something still holds the lent memory (its storage's use
count) and lets a backward handed activations that a later replay overwrote (a second
backward through an earlier step, ``retain_graph=True``) raise instead of reading them. A
view of every lent output, tagged, cost about 1.4 us each on the host: 0.6 ms a ResNet-50
step.

A backward graph's outputs (the parameters' gradients, which autograd makes the parameters'
``.grad`` without copying) are lent too: each a fresh view of the graph's memory, where a
clone cost an allocation each and a copy (about 0.4 ms of host time a ResNet-50 step). A
replay would overwrite gradients still held (accumulated over several backwards, kept for
later), so before it the backward checks that the caller let go of the last ones (their
storages' use counts), as zeroing the gradients with ``set_to_none`` does; if not, that
call runs without its graph, and its outputs are cloned from then on (the caller keeps what
it is given): gradient accumulation costs graphless backwards until the first
``zero_grad()``, then replays as before.

A call whose tensors differ in shape,
dtype or device from the recorded ones, or that is not on a GPU, runs the graph without
recording (as does everything while the graph could not be recorded, with the reason
logged once). A replay checks only what can change between steps: the memory of each
parameter, buffer and borrowed activation (one pointer comparison each, in C++ where torch
has it), and the shape, strides, dtype and device of the other arguments; a full check of
every argument cost about 1.5 ms of host time per ResNet-50 step (320 arguments), as much as
the step's kernels.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch

from ..errors import BooError

logger = logging.getLogger(__name__)

#: Calls that run the compiled function before recording (lazy initialisation, allocator warm-up).
WARMUP_CALLS = 2


class GraphedFunction:
    """``fn`` (taking a list of arguments, AOTAutograd's boxed convention) recorded into a
    CUDA graph on its first call and replayed after (module docstring)."""

    def __init__(self, fn: Callable[[list[Any]], Any], name: str, lent: Collection[int] = (),
                 borrows: bool = False) -> None:
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
        self._pinned: list[int] = []  # those and the borrowed positions: the same memory at every replay
        self._pinned_memory: list[int | None] = []  # by position (None where not pinned)
        self._others: list[int] = []  # every other position: its description must match
        self._others_described: tuple[Any, ...] = ()
        self._copied: list[int] = []  # tensors copied into the graph's own buffers
        self._lent = frozenset(lent)  # output positions handed out as views, not copies (module docstring)
        self._borrows = borrows  # a backward graph: reads what forward graphs lent in place
        self._ticket: int | None = None  # the lent output handed out as a fresh, tagged view (module docstring)
        self._ticket_use_count = 0  # its storage's use count while nothing outside the graph holds it
        self.unlent_runs = 0  # calls run without the graph because what it lent was still held
        self.unreplayable_runs = 0  # calls run without the graph because their tensors differ from the recorded
        self._read_back = True  # whether a backward read what this graph lent at its last replay
        self._read_on: Any = None  # the stream that backward ran on
        self._lends_outputs = borrows  # a backward's gradients: lent while the caller lets go of them in time
        self._output_use_counts: list[tuple[int, int]] = []  # (storage, use count) of each output when recorded
        self._outputs_out = False  # whether the last replay lent its outputs

    def __call__(self, args: list[Any]) -> Any:
        if self._borrows:
            _read_lent(args)
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
            self.unreplayable_runs += 1
            return self.fn(args)
        if not (self._read_back or self._lent_released()):
            self.unlent_runs += 1
            return self.fn(args)
        if self._outputs_out:
            if not all(_storage_use_count(storage) <= baseline for storage, baseline in self._output_use_counts):
                self.unlent_runs += 1
                if self._lends_outputs:
                    logger.info("%s: the gradients it lent are still held at the next backward; it runs without "
                                "its graph until they are let go, and clones its gradients from then on", self.name)
                self._lends_outputs = False  # what is still held is the graph's memory: no replay until let go
                return self.fn(args)
            self._outputs_out = False
        if self._read_on is not None:  # overwrite the lent memory only after the backward's reads
            stream = torch.cuda.current_stream()
            if self._read_on != stream:
                stream.wait_stream(self._read_on)
        for i in self._copied:
            static, given = self._inputs[i], args[i]
            if static.data_ptr() != given.data_ptr():
                static.copy_(given)
        self.graph.replay()
        self.replays += 1
        return self._handed_out()

    def _run_on_side_stream(self, args: list[Any]) -> Any:
        """Warm-up calls run on a side stream, as recording will."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            result = self.fn(list(args))
        torch.cuda.current_stream().wait_stream(stream)
        return result

    def _replayable(self, args: list[Any]) -> bool:
        """Whether the recorded graph computes this call: the same memory where a parameter,
        buffer or borrowed activation was, the same shapes, strides, dtypes and devices elsewhere."""
        if len(args) != len(self._inputs) or not _same_memory(args, self._pinned_memory, self._pinned):
            return False
        return tuple(_describe(args[i]) for i in self._others) == self._others_described

    @property
    def _borrowed(self) -> list[tuple[int, int]]:
        """(position, memory) of each argument that is another graph's lent output, read in place."""
        state = set(self._state)
        return [(i, self._pinned_memory[i]) for i in self._pinned if i not in state]  # type: ignore[misc]

    def _lent_released(self) -> bool:
        """Whether nothing outside the graph holds the memory it lent last time (the ticket's
        storage: what holds one saved activation holds them all)."""
        return self._ticket is None or _use_count(self._outputs[self._ticket]) <= self._ticket_use_count

    def _handed_out(self) -> Any:
        """The outputs for the caller: lent ones the graph's own tensors (the ticket a fresh
        view of its own, tagged with this replay), a backward's gradients fresh views while
        it lends them, others cloned."""
        if self._lends_outputs and isinstance(self._outputs, (list, tuple)):
            self._outputs_out = True
            return type(self._outputs)(o.detach() if isinstance(o, torch.Tensor) else o for o in self._outputs)
        if not self._lent or not isinstance(self._outputs, (list, tuple)):
            return _clone(self._outputs)
        self._read_back = False
        outputs = [o if i in self._lent else _clone(o) for i, o in enumerate(self._outputs)]
        if self._ticket is not None:
            ticket = outputs[self._ticket] = self._outputs[self._ticket].detach()
            ticket._boo_lent = (self, self.replays)  # type: ignore[attr-defined]  (read by _read_lent)
        return type(self._outputs)(outputs)

    def _record(self, args: list[Any]) -> Any:
        state = {i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and _is_state(a)}
        borrowed = {i for i, a in enumerate(args) if self._borrows and isinstance(a, torch.Tensor)
                    and a.data_ptr() in _lent_memory}
        inputs = [a if i in state | borrowed or not isinstance(a, torch.Tensor) else a.clone()
                  for i, a in enumerate(args)]
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
        # A borrowed position always holds the same output of its lender (AOTAutograd passes
        # saved tensors in one order), so its memory alone identifies it; a forward that ran
        # without its graph hands over other memory.
        pinned = state | borrowed
        self._pinned = sorted(pinned)
        self._pinned_memory = [args[i].data_ptr() if i in pinned else None for i in range(len(args))]
        self._others = [i for i in range(len(args)) if i not in pinned]
        self._others_described = tuple(_describe(args[i]) for i in self._others)
        self._copied = [i for i in self._others if isinstance(args[i], torch.Tensor)]
        self._lend(state)
        if self._lends_outputs and isinstance(outputs, (list, tuple)):
            self._output_use_counts = [(o.untyped_storage()._cdata, _use_count(o)) for o in outputs
                                       if isinstance(o, torch.Tensor)]
        graph.replay()
        self.replays += 1
        return self._handed_out()

    def _lend(self, state: set[int]) -> None:
        """Choose the ticket: the first lent output in the graph's own memory (not a
        parameter's or buffer's, which a replay does not overwrite; none if every lent output
        is theirs), and note its storage's use count now."""
        if not isinstance(self._outputs, (list, tuple)):
            self._lent = frozenset()
            return
        external = {self._inputs[i].untyped_storage().data_ptr() for i in state}
        lent = {i: o for i, o in enumerate(self._outputs) if i in self._lent and isinstance(o, torch.Tensor)}
        self._lent = frozenset(lent)
        self._ticket = next((i for i, o in lent.items() if o.untyped_storage().data_ptr() not in external), None)
        if self._ticket is not None:
            self._ticket_use_count = _use_count(self._outputs[self._ticket])
        addresses = {o.data_ptr() for o in lent.values()}  # a parameter's view too: the backward reads it in place
        _lent_memory.update(addresses)
        weakref.finalize(self, _lent_memory.difference_update, addresses)


def graphed(fn: Callable[[list[Any]], Any], name: str, lent: Collection[int] = (),
            borrows: bool = False) -> GraphedFunction:
    """``fn`` behind a CUDA graph (module docstring). ``lent``: the positions of outputs only a
    backward graph reads (a forward graph's saved activations); ``borrows``: whether this is
    such a backward graph."""
    function = GraphedFunction(fn, name, lent, borrows)
    _graphed.add(function)
    return function


def graphed_functions() -> list[GraphedFunction]:
    """Every graphed function alive in this process (their counters say how often they replayed)."""
    return list(_graphed)


_graphed: weakref.WeakSet[GraphedFunction] = weakref.WeakSet()


#: Addresses of outputs some graph lends: a graph recording with one as an input reads it in place.
_lent_memory: set[int] = set()


def _read_lent(args: Sequence[Any]) -> None:
    """A backward graph's call: each ticket among ``args`` must be of its lender's last
    replay (else a later replay overwrote what it stands for); its lender may then replay
    again, after the work of this call's stream."""
    stream = None
    for a in args:
        lent = getattr(a, "_boo_lent", None) if isinstance(a, torch.Tensor) else None
        if lent is not None:
            lender, replay = lent
            if replay != lender.replays:
                raise BooError(f"{lender.name}: a backward read activations that a later replay of its CUDA graph "
                               "overwrote (a second backward through an earlier step?); compile without "
                               "mode='reduce-overhead' to keep every step's activations")
            if stream is None and a.device.type == "cuda":
                stream = torch.cuda.current_stream(a.device)
            lender._read_back = True
            lender._read_on = stream


#: How many tensors (and views) hold a storage, given its address as a C++ object (one of a
#: graph's outputs', held by the graph as long as it lives).
_storage_use_count = torch._C._storage_Use_Count


def _use_count(tensor: torch.Tensor) -> int:
    """How many tensors (and views) hold ``tensor``'s storage."""
    return _storage_use_count(tensor.untyped_storage()._cdata)


def _is_state(tensor: torch.Tensor) -> bool:
    """A model's parameter or registered buffer: the same memory at every step. Dynamo marks
    both as static inputs (a buffer, such as a batch norm's running statistics, is a plain
    tensor: copying ResNet-50's 106 into the graph's memory cost a launch each per replay)."""
    return (isinstance(tensor, torch.nn.Parameter) or getattr(tensor, "_is_param", False)
            or getattr(tensor, "_dynamo_static_input_type", None) is not None)


def _same_memory_in_python(tensors: Sequence[Any], memory: Sequence[int | None], positions: Sequence[int]) -> bool:
    return all(isinstance(tensors[i], torch.Tensor) and tensors[i].data_ptr() == memory[i] for i in positions)


#: Whether the tensors at ``positions`` start at ``memory[position]``: torch's C++ check where
#: its build has it (CUDA builds; what Inductor's cudagraph trees use), else the same in Python.
_same_memory = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", _same_memory_in_python)


def _describe(a: Any) -> tuple[Any, ...]:
    """A tensor's shape, strides, dtype and device, or a value itself."""
    if isinstance(a, torch.Tensor):
        return (tuple(a.shape), a.stride(), a.dtype, a.device)
    return ("value", a)


def _on_the_gpu(args: Sequence[Any]) -> bool:
    """Whether every tensor argument is on a GPU."""
    return all(a.device.type == "cuda" for a in args if isinstance(a, torch.Tensor))


def _clone(outputs: Any) -> Any:
    """``outputs`` (a tensor, or a list or tuple of tensors and values) with each tensor
    copied: allocated one by one, copied by a few multi-tensor kernels (a backward's ~160
    gradients cost ~160 launches as ``clone``s)."""
    if isinstance(outputs, torch.Tensor):
        return outputs.clone()
    if not isinstance(outputs, (list, tuple)):
        return outputs
    sources = [o for o in outputs if isinstance(o, torch.Tensor)]
    copies = iter(_copies_of(sources))
    return type(outputs)(next(copies) if isinstance(o, torch.Tensor) else _clone(o) for o in outputs)


def _copies_of(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    copies = [torch.empty_like(t) for t in tensors]  # the layout kept, as clone keeps it
    if copies:
        torch._foreach_copy_(copies, tensors)
    return copies
