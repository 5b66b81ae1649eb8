"""A plan of several commands replayed as one CUDA graph launch where its buffers repeat.

Each driver call from Python costs several microseconds of host time, and a kernel's plan can
hold a dozen dispatches, fills and copies (a split-reduction weight gradient holds 54). Every
command's parameters are a buffer's address plus a fixed offset, so the commands are fixed
by the buffers' addresses alone; and a training or inference loop hands a kernel the same
addresses step after step (torch's caching allocator serves the same requests in the same
order). :class:`GraphReplays` records the commands for a set of addresses seen a second time
into a CUDA graph (stream capture on a stream of BOO's own, so the caller's stream is never
captured) and launches that graph, one driver call, whenever those addresses come again.
Addresses seen once cost a set lookup; a call inside the caller's own stream capture
(``torch.cuda.graph``) launches command by command, as the caller's graph records them.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import torch

from .driver_api import WRONG_CONTEXT_CODES

logger = logging.getLogger(__name__)

#: ``CU_STREAM_NON_BLOCKING``: the capture stream never waits on the legacy default stream.
_NON_BLOCKING = 1
#: ``CU_STREAM_CAPTURE_MODE_RELAXED``: other threads' CUDA calls stay legal during a capture.
_RELAXED = 2

#: Recorded graphs kept per plan, and address sets remembered while waiting for a repeat. A
#: kernel serves every node of its signature in a graph: ResNet-50's training step calls one
#: batch-norm kernel 12 times on other buffers, and with 8 graphs kept it recorded anew on
#: about one call in five (the least recently used went first, the one wanted next).
CAPACITY = 64
_SEEN_LIMIT = 4 * CAPACITY

_capture_lock = threading.Lock()  # one capture at a time on each device's capture stream
_capture_streams: dict[int, int] = {}


class GraphReplays:
    """The CUDA graphs recorded for one plan on GPU ``ordinal``, keyed by buffer addresses.

    :meth:`launch` enqueues the graph for ``key`` on ``stream`` and returns True, or returns
    False (nothing enqueued) where the caller must enqueue the commands itself. ``enqueue(
    key, stream)`` must enqueue exactly the commands the key stands for. The caller
    serializes calls (the launcher's lock). A driver failure while recording turns replays
    off for the plan, which then launches command by command as before.
    """

    def __init__(self, api, ordinal: int, name: str) -> None:
        self._api = api
        self._ordinal = ordinal
        self._name = name
        self._graphs: OrderedDict[Hashable, ctypes.c_void_p] = OrderedDict()
        self._seen: set[Hashable] = set()
        self.enabled = True
        #: Graphs recorded so far (a count that grows at every step means keys do not repeat).
        self.recordings = 0

    def launch(self, key: Hashable, stream: int, enqueue: Callable[[Hashable, int], None]) -> bool:
        """Launch the graph recorded for ``key`` (recording it at the key's second call); whether it did."""
        if not self.enabled or torch.cuda.is_current_stream_capturing():  # the caller's own graph records them
            return False
        graph = self._graphs.get(key)
        if graph is None:
            if key not in self._seen:
                if len(self._seen) >= _SEEN_LIMIT:
                    self._seen.clear()
                self._seen.add(key)
                return False
            graph = self._record(key, enqueue)
            if graph is None:
                return False
            self.recordings += 1
            self._seen.discard(key)
            self._graphs[key] = graph
            if len(self._graphs) > CAPACITY:
                self._api.cuGraphExecDestroy(self._graphs.popitem(last=False)[1])
        else:
            self._graphs.move_to_end(key)
        code = self._api.cuGraphLaunch(graph, stream)
        if code == 0:
            return True
        if code not in WRONG_CONTEXT_CODES:  # that one the caller's own launch finds and mends
            self._failed("cuGraphLaunch")
        return False

    def _record(self, key: Hashable, enqueue: Callable[[Hashable, int], None]) -> ctypes.c_void_p | None:
        api = self._api
        with _capture_lock:
            stream = _capture_streams.get(self._ordinal)
            if stream is None:
                handle = ctypes.c_void_p()
                if api.cuStreamCreate(ctypes.byref(handle), _NON_BLOCKING):
                    return self._failed("cuStreamCreate")
                stream = _capture_streams[self._ordinal] = handle.value
            if api.cuStreamBeginCapture(stream, _RELAXED):
                return self._failed("cuStreamBeginCapture")
            graph, recorded = ctypes.c_void_p(), True
            try:
                enqueue(key, stream)
            except Exception:  # the same commands launched one by one report it
                recorded = False
            ended = api.cuStreamEndCapture(stream, ctypes.byref(graph))
            if ended or not recorded or not graph.value:
                if graph.value:
                    api.cuGraphDestroy(graph)
                return self._failed("recording the plan's commands")
            executable = ctypes.c_void_p()
            code = api.cuGraphInstantiateWithFlags(ctypes.byref(executable), graph, 0)
            api.cuGraphDestroy(graph)
            if code:
                return self._failed("cuGraphInstantiateWithFlags")
            return executable

    def _failed(self, what: str) -> None:
        """Turn replays off for this plan (it launches command by command) and say why."""
        self.enabled = False
        logger.info("%s: %s failed on cuda:%d; launching the plan's commands one by one", self._name, what,
                    self._ordinal)
        return None

    @property
    def recorded(self) -> int:
        """How many graphs are kept (one per set of addresses seen twice, at most :data:`CAPACITY`)."""
        return len(self._graphs)

    def __del__(self) -> None:
        try:  # work already launched finishes first; at interpreter exit the driver may be gone
            while self._graphs:
                self._api.cuGraphExecDestroy(self._graphs.popitem()[1])
        except Exception:
            pass
