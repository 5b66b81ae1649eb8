"""torch's own kernel as the alternative a BOO node must beat.

* Under ``mode="max-autotune"`` every node BOO could take is run both ways on random tensors
  with the node's shapes, strides and dtypes, each timed with the device's timer (device time
  of the kernels on a GPU, wall time on the CPU). A node where torch's kernel (cuDNN, cuBLAS,
  ATen: what the pattern's ``reference`` runs) is faster stays with the nested backend, and
  the offload summary says so with both times. Decisions are kept for the process, so a graph
  compiled again does not time its nodes again.
* In every mode, a node whose kernels ``boo tune`` has tuned on this device model, timing
  PyTorch's own kernel for each beside its candidates (``TuningRecord.torch_us``), stays with
  the nested backend where PyTorch's times add up to less than the tuned winners' (while
  launches use the records: ``BOO_USE_TUNED=1``); its kernels are not even compiled.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import torch

from ..errors import describe_error
from ..kernels.tuning_records import tuned_record
from ..runtime.devices import resolve_device
from ..runtime.lookup import real_tensors
from ..runtime.timing import timer_for
from ..signatures.signature import Signature
from ..verify.verdicts import device_identity
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


def tuned_torch_is_faster(signatures: Sequence[Signature], device: torch.device) -> str:
    """Why torch's kernel should compute a node whose kernels are ``signatures`` ("" when not):
    each has a tuning record for this device model that timed PyTorch's own kernel too, and
    PyTorch's times add up to less than the tuned winners'."""
    if not signatures:
        return ""
    boo_device = resolve_device(device)
    model = device_identity(boo_device.torch_device)
    records = [tuned_record(s, boo_device.target.name, model) for s in signatures]
    if any(r is None or r.torch_us <= 0.0 for r in records):
        return ""
    ours, boo = sum(r.torch_us for r in records), sum(r.time_us for r in records)
    if ours >= boo:
        return ""
    return f"`boo tune` timed torch's kernel faster here ({ours:.1f} us against BOO's tuned {boo:.1f} us)"
