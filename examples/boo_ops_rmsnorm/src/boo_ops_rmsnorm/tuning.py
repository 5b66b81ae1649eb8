"""The RMS-norm tuning space: what ``boo tune`` tries beyond the formulations as they are.

The core's configuration generators are for IREE's TileAndFuse pipeline on NVIDIA GPUs, so
candidates are offered for CUDA targets only (elsewhere the formulations are the whole space):

* ``default`` with each of ``elementwise_configs`` for the ``(rows, size)`` pass that writes
  y (forward) or the backward's 2-D elementwise pass: IREE gives them one warp per workgroup
  and short accesses; these give 16-byte accesses and 128 to 1,024 threads over whole rows;
* for a backward with ``staged`` dweight sums, ``staged`` with each of ``reduction_configs``
  for the first stage's partial sums, ``(rows / CHUNK, size)`` outputs contiguous along
  ``size``, under the ``reductions`` key (it configures roots with reduction loops only),
  alone and with the first elementwise configuration.

No reduction configuration is offered for the forward: IREE collapses ``staged``'s
``(rows, size / CHUNK)`` partial sums into one parallel loop, which a configuration of two
workgroup tiles fits in no dispatch. Measured with ``boo tune`` on an H100 (bf16, one run
each), the winners were: the forward of 4096x4096 ``default`` with ``elementwise_configs``
(95.5 us untuned, 35.1 tuned, PyTorch 27.8); the backward of 4096x4096 and of 16384x1024
``staged`` with the 64-thread ``reduction_configs`` entry and the first elementwise one
(487 -> 293 us and 1163 -> 282 us). A float32 backward kept ``default`` (with an elementwise
configuration, 8% faster), and 8 rows of 8192 (decoding) gained nothing.
"""

from __future__ import annotations

from boo_core.plugin import REDUCTIONS, Target, TuningCandidate, elementwise_configs, reduction_configs

from .formulations import CHUNK, stages
from .signature import RMSNormSignature


def first_stage_outputs(signature: RMSNormSignature) -> tuple[int, int]:
    """The parallel loops of a ``staged`` backward's first stage: dweight's partial sums,
    ``(rows / CHUNK, size)``, the contiguous one last."""
    return (signature.rows // CHUNK, signature.size)


def tuning_space(signature: RMSNormSignature, target: Target) -> list[TuningCandidate]:
    if target.backend != "cuda":
        return []
    passes = elementwise_configs(signature.rows, signature.size, signature.dtype.itemsize)
    candidates = [TuningCandidate("default", config) for config in passes]
    if signature.mode == "bwd" and stages(signature):
        for sums in reduction_configs(first_stage_outputs(signature)):
            candidates.append(TuningCandidate("staged", {REDUCTIONS: sums}))
            if passes:
                candidates.append(TuningCandidate("staged", {**passes[0], REDUCTIONS: sums}))
    return candidates
