"""What plugins add to the tools besides ops and kernels: backends that ``boo driver``
runs and times beside BOO's (the ``boo_driver_backends`` hook), and timers for device types
BOO does not time itself (``boo_timers``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ..signatures.signature import Signature

Outputs = torch.Tensor | tuple[torch.Tensor, ...]
#: A numerics check of a backend's outputs: ``(inputs, dtype) -> comparisons``
#: (:func:`boo_core.plugin.check_launchable` gives such a list).
Checker = Callable[[Sequence[torch.Tensor], torch.dtype], list[Any]]


@dataclass(frozen=True)
class PreparedBackend:
    """One signature, ready to run on one backend.

    ``call`` takes the signature's inputs and returns its outputs. Compile and load time are
    reported apart from the timed calls: a factory that compiles eagerly reports the time
    it took (``compile_seconds``, ``load_seconds``); one that compiles on its first call
    (``torch.compile``) sets ``lazy``, and the driver reports that first call as the compile
    time. ``cache`` says where a BOO kernel came from: ``miss`` (compiled now), ``hit`` (the
    disk cache), ``memory`` (already loaded by this process), or empty for backends without
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


Factory = Callable[["Signature", torch.device], PreparedBackend]


@dataclass(frozen=True)
class DriverBackend:
    """A backend of ``boo driver --backend NAME``: its name, a line saying what it runs, and
    its factory ``(signature, device) -> PreparedBackend``."""

    name: str
    description: str
    prepare: Factory
