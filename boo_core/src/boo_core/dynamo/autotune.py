"""``mode="max-autotune"``: each BOO node of a graph timed against torch's own kernel.

When a graph compiles under max-autotune, every node BOO could take is run both ways on
random tensors with the node's shapes, strides and dtypes, each timed with the device's
timer (device time of the kernels on a GPU, wall time on the CPU). A node where torch's
kernel (cuDNN, cuBLAS, ATen: what the pattern's ``reference`` runs) is faster stays with
the nested backend, and the offload summary says so with both times. Decisions are kept for
the process, so a graph compiled again does not time its nodes again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import torch

from ..errors import describe_error
from ..runtime.lookup import real_tensors
from ..runtime.timing import timer_for
from .kernel_call import KernelCall

#: Timed calls per side, after as many untimed ones.
ITERATIONS = 5

logger = logging.getLogger(__name__)

_decisions: dict[tuple[str, str, str], str] = {}
_lock = threading.Lock()


def torch_is_faster(call: KernelCall, payload: str, examples: Sequence[torch.Tensor]) -> str:
    """Why torch's kernel should compute this node ("" when BOO's is at least as fast).

    ``examples`` are the node's inputs as the graph knows them (fake tensors will do: only
    their metadata is read). A node whose inputs are not all floating-point is not timed.
    """
    device = examples[0].device
    key = (call.pattern.name, payload, str(device))
    with _lock:
        decided = _decisions.get(key)
    if decided is not None:
        return decided
    if not all(isinstance(t, torch.Tensor) and t.dtype.is_floating_point for t in examples):
        return ""
    try:
        with real_tensors(), torch.no_grad():
            tensors = [torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device=device).normal_()
                       for t in examples]
            timer = timer_for(device)
            boo = timer(lambda: call(*tensors), device=device, iterations=ITERATIONS, warmup=ITERATIONS).median
            ours = timer(lambda: call.pattern.reference(call.spec, tensors), device=device, iterations=ITERATIONS,
                         warmup=ITERATIONS).median
    except Exception as e:  # a device without a timer, or torch's kernel failing: BOO keeps the node
        logger.warning("%s: not timed against torch's kernel (%s); BOO computes it", call.pattern.name,
                       describe_error(e))
        return ""
    why = f"torch's kernel is faster here ({ours:.1f} us against BOO's {boo:.1f} us)" if ours < boo else ""
    with _lock:
        _decisions[key] = why
    return why
