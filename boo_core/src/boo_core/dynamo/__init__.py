"""torch.compile backends that run what the ops' fusion patterns claim on BOO kernels.

``torch.compile(model, backend="iree_boo")`` (eager for the rest) or ``"iree_boo_inductor"``
(Inductor for the rest); :func:`boo_backend` makes one with another nested backend.
:func:`offload_summary` tells what was offloaded, what fell back, and why;
:func:`kernel_signatures` which kernels a compile would build, without building them
(:func:`kernel_calls`: with how many calls a step makes of each).

The backends load on first use: importing this package (or the pattern contract in
:mod:`boo_core.plugins.patterns`) registers nothing with torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GraphReport", "OffloadSummary", "boo_backend", "iree_boo", "iree_boo_inductor", "kernel_calls",
           "kernel_signatures", "offload_summary", "reset_offload_summary"]

_HOMES = {"boo_backend": "backends", "iree_boo": "backends", "iree_boo_inductor": "backends",
          "GraphReport": "report", "OffloadSummary": "report", "offload_summary": "report",
          "reset_offload_summary": "report", "kernel_signatures": "trace", "kernel_calls": "trace"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'boo_core.dynamo' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
