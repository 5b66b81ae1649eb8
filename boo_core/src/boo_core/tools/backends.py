"""Driver backends: the implementations ``boo driver --backend NAME`` runs and times.

A backend is a factory ``(signature, device) -> PreparedBackend``; the prepared backend is
called with the signature's inputs and returns its outputs. Compile and load time are
reported apart from the timed calls: a factory that compiles eagerly reports the time it
took; one that compiles on its first call (``torch.compile``) sets ``lazy``, and the driver
reports that first call as the compile time.

Adding a backend is one call::

    register_backend("mine", "what it runs", lambda signature, device: PreparedBackend(...))
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..errors import UnsupportedError
from ..runtime.launchable import Launchable
from ..runtime.lookup import get_launchable
from ..signatures.signature import Signature
from ..verify.numerics import Comparison, check_launchable

Outputs = torch.Tensor | tuple[torch.Tensor, ...]
Checker = Callable[[Sequence[torch.Tensor], torch.dtype], list[Comparison]]


@dataclass(frozen=True)
class PreparedBackend:
    """One signature, ready to run on one backend.

    ``cache`` says where a BOO kernel came from: ``miss`` (compiled now), ``hit`` (the disk
    cache), ``memory`` (already loaded by this process), or empty for backends without
    one. ``check``, when set, replaces the driver's numerics check (which compares what
    ``call`` returns): BOO's poisons its outputs first.
    """

    call: Callable[..., Outputs]
    compile_seconds: float = 0.0
    load_seconds: float = 0.0
    cache: str = ""
    lazy: bool = False
    check: Checker | None = None
    formulation: str = ""  # which of the op's formulations served (BOO's backend)
    passed_over: tuple[str, ...] = ()  # formulations tried first, and why they did not serve
    substitution: str = ""  # the substitution whose executables the kernel runs (BOO's backend)


Factory = Callable[[Signature, torch.device], PreparedBackend]


@dataclass(frozen=True)
class DriverBackend:
    """A backend's name, a line saying what it runs, and its factory."""

    name: str
    description: str
    prepare: Factory


_BACKENDS: dict[str, DriverBackend] = {}


def register_backend(name: str, description: str, factory: Factory) -> None:
    """Make ``name`` a choice of ``--backend`` (replacing a backend of that name)."""
    _BACKENDS[name] = DriverBackend(name, description, factory)


def backends() -> list[DriverBackend]:
    """Every registered backend, in registration order."""
    return list(_BACKENDS.values())


def get_backend(name: str) -> DriverBackend:
    """The backend called ``name``."""
    backend = _BACKENDS.get(name)
    if backend is None:
        raise UnsupportedError(f"unknown backend {name!r}: choose from {', '.join(_BACKENDS)}")
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


register_backend("boo", "BOO's IREE kernel (compile/load time reported apart)", boo_kernel)
register_backend("torch", "PyTorch eager: its own kernels (signature.eager) on the same inputs", torch_eager)
register_backend("inductor", "torch.compile of signature.eager with its default backend, Inductor",
                 torch_compiled("inductor"))
register_backend("boo_inductor", "torch.compile of signature.eager with BOO's backend, iree_boo_inductor",
                 torch_compiled("iree_boo_inductor"))
