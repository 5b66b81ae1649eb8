"""torch.compile backends that run what the plugins' fusion patterns claim on BOO kernels.

``torch.compile(model, backend="iree_boo")`` (eager for the rest) or ``"iree_boo_inductor"``
(Inductor for the rest); :func:`boo_backend` makes one with another nested backend.
:func:`offload_summary` tells what was offloaded, what fell back, and why.
"""

from .backends import boo_backend, iree_boo, iree_boo_inductor
from .report import GraphReport, OffloadSummary, offload_summary, reset_offload_summary

__all__ = ["GraphReport", "OffloadSummary", "boo_backend", "iree_boo", "iree_boo_inductor", "offload_summary",
           "reset_offload_summary"]
