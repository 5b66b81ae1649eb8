"""The ways to build an RMS-norm kernel, in order of preference: ``default``, then ``staged``.

* ``default``: the export of the signature's reference, every sum at once (rstd from one
  pass over each row; dweight's column sums in one reduction).
* ``staged``: the long sums in two stages of ``CHUNK`` terms: the forward's sum of squares
  by ``CHUNK`` columns, the backward's dweight by ``CHUNK`` rows. The same values summed in
  another order, which spreads a sum over more threads: IREE gives a plain column sum one
  thread per column. Offered where ``CHUNK`` divides the summed dim into two stages or
  more, on every target (so that CPU tests check it).

``staged`` comes second: alone it was slower than ``default`` on an H100 except for a
backward of many short rows; with the tuning space's reduction configuration it is the
fastest backward in bf16 (tuning.py gives the numbers), and ``boo tune`` finds that per
shape. The forward's row sums gain nothing from it there (IREE already gives each row a
workgroup): it is kept as the forward's second formulation, computed in another order, and
costs nothing untuned.
"""

from __future__ import annotations

import functools

from boo_core.plugin import Formulation, Target

from . import compute
from .signature import RMSNormSignature

#: Terms summed per first-stage output in ``staged``.
CHUNK = 32


def staged_dim(signature: RMSNormSignature) -> int:
    """The length of the dim ``staged`` sums in stages: a row (forward) or a column (backward)."""
    return signature.size if signature.mode == "fwd" else signature.rows


def stages(signature: RMSNormSignature) -> bool:
    """Whether ``staged`` serves ``signature``: ``CHUNK`` divides its summed dim, twice over or more."""
    length = staged_dim(signature)
    return length % CHUNK == 0 and length > CHUNK


def formulations(signature: RMSNormSignature, target: Target) -> tuple[Formulation, ...]:
    default = Formulation("default")
    if not stages(signature):
        return (default,)
    if signature.mode == "fwd":
        staged = Formulation("staged", computation=functools.partial(compute.forward, eps=signature.eps, chunk=CHUNK),
                             description=f"the sum of squares by {CHUNK} columns, then the partial sums")
    else:
        staged = Formulation("staged", computation=functools.partial(compute.backward, chunk=CHUNK),
                             description=f"dweight summed by {CHUNK} rows, then the partial sums")
    return (default, staged)

