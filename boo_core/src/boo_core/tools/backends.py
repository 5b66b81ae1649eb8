"""Driver backends: the implementations ``boo driver --backend NAME`` runs and times.

A backend is a :class:`~boo_core.plugins.extensions.DriverBackend`: a name, a line saying
what it runs, and a factory ``(signature, device) -> PreparedBackend``. BOO's own are listed
here; a plugin adds more through its ``boo_driver_backends`` hook (docs/plugins.md).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Sequence

import torch

from ..errors import UnsupportedError
from ..plugins.extensions import DriverBackend, Factory, PreparedBackend
from ..plugins.registry import BooOpRegistry
from ..runtime.launchable import Launchable
from ..runtime.lookup import get_launchable
from ..signatures.signature import Signature
from ..verify.numerics import Comparison, check_launchable

logger = logging.getLogger(__name__)


def backends() -> list[DriverBackend]:
    """BOO's backends, then the plugins' (in plugin name order). A plugin's backend whose
    name is taken is left out, with a warning naming both."""
    found = {b.name: b for b in BUILT_IN}
    owners = {b.name: "boo-core" for b in BUILT_IN}
    for info, backend in BooOpRegistry.default().plugins.driver_backends():
        if backend.name in found:
            logger.warning("plugin %s: driver backend %r is %s's already; it is skipped", info.label, backend.name,
                           owners[backend.name])
            continue
        found[backend.name], owners[backend.name] = backend, f"plugin {info.label}"
    return list(found.values())


def get_backend(name: str) -> DriverBackend:
    """The backend called ``name``."""
    available = backends()
    backend = next((b for b in available if b.name == name), None)
    if backend is None:
        raise UnsupportedError(f"unknown backend {name!r}: choose from {', '.join(b.name for b in available)}")
    return backend


# -- the built-in backends -------------------------------------------------------------------

_loaded: weakref.WeakSet[Launchable] = weakref.WeakSet()


def boo_kernel(signature: Signature, device: torch.device) -> PreparedBackend:
    """BOO's kernel: compiled, or loaded from the disk cache, or already in memory."""
    start = time.perf_counter()
    launchable = get_launchable(signature, device)
    if launchable in _loaded:
        cache, compile_seconds, load_seconds = "memory", 0.0, time.perf_counter() - start
    else:
        _loaded.add(launchable)
        cache = "hit" if launchable.cache_hit else "miss"
        compile_seconds, load_seconds = launchable.compile_seconds, launchable.load_seconds

    def check(args: Sequence[torch.Tensor], reference_dtype: torch.dtype) -> list[Comparison]:
        return check_launchable(launchable, args, reference_dtype=reference_dtype)

    return PreparedBackend(launchable, compile_seconds, load_seconds, cache, check=check,
                           formulation=launchable.formulation, passed_over=tuple(map(str, launchable.passed_over)),
                           substitution=launchable.substitution.label if launchable.substitution else "")


def torch_eager(signature: Signature, device: torch.device) -> PreparedBackend:
    """PyTorch eager: the signature's :meth:`~boo_core.Signature.eager` (PyTorch's own kernels
    in the signature's dtype, which the reference may not use: it may accumulate in float32)."""
    return PreparedBackend(signature.eager)


def torch_compiled(backend: str) -> Factory:
    """A factory compiling the signature's eager computation with ``torch.compile(backend=backend)``."""

    def prepare(signature: Signature, device: torch.device) -> PreparedBackend:
        import torch._dynamo

        # Dynamo keeps a few compiled variants per code object and silently falls back to
        # eager past its limit; every signature shares eager()'s code, so start afresh.
        torch._dynamo.reset()
        return PreparedBackend(torch.compile(signature.eager, backend=backend, dynamic=False), lazy=True)

    return prepare


#: BOO's own backends, in the order ``boo driver --help`` lists them.
BUILT_IN: tuple[DriverBackend, ...] = (
    DriverBackend("boo", "BOO's IREE kernel (compile/load time reported apart)", boo_kernel),
    DriverBackend("torch", "PyTorch eager: its own kernels (signature.eager) on the same inputs", torch_eager),
    DriverBackend("inductor", "torch.compile of signature.eager with its default backend, Inductor",
                  torch_compiled("inductor")),
    DriverBackend("boo_inductor", "torch.compile of signature.eager with BOO's backend, iree_boo_inductor",
                  torch_compiled("iree_boo_inductor")),
)
