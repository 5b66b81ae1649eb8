"""Finding the launchable that serves a signature: ``get_launchable(signature, device)``
returns the kernel of the first of the op's kernels that compiles and, where kernels are
verified, passes (:mod:`boo_core.runtime.selection`), memoized in this process by
everything that decides it (the registry's revision, the device, the kernel-changing
settings, a substitution).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import threading
from collections.abc import Callable, Hashable
from typing import Any

import torch

from ..errors import ArgumentError, DeviceError
from ..kernels.target import Target
from ..plugins.registry import BooOpRegistry
from ..settings import get_settings
from ..signatures.signature import Signature, has_empty_tensor, tensor_size_problem
from ..substitute.substitution import Substitution
from .devices import BooDevice, resolve_device
from .launchable import EmptyLaunchable, Launchable
from .selection import select


def real_tensors() -> Any:
    """A context in which new tensors are real even if torch.compile's fake-tensor mode is
    active on this thread (a backend compiling kernels ahead of time)."""
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
    except ImportError:  # pragma: no cover - torch without fake tensors
        return contextlib.nullcontext()
    return unset_fake_temporarily()


def _as_signature(signature: object) -> Signature:
    """A signature, from a signature or a command that runs one kernel."""
    if isinstance(signature, Signature):
        return signature
    if isinstance(signature, str):
        return BooOpRegistry.parse_command(signature)
    raise ArgumentError(f"get_launchable takes a Signature or a command string, got {type(signature).__name__}")


_launchables: dict[Hashable, Launchable] = {}
_lock = threading.Lock()
_building: dict[Hashable, threading.Lock] = {}


def get_launchable(signature: Signature | str, device: str | torch.device | BooDevice | None = "cpu", *,
                   target: str | Target | None = None, formulation: str | None = None,
                   substitutions: Any = None) -> Launchable:
    """The launchable for ``signature`` on ``device``: from memory, the disk cache, or compiled.

    ``signature`` may also be a command that runs one kernel (``"conv -n 1 ... -F 1"``).
    A signature with an empty tensor gets an :class:`EmptyLaunchable` (no kernel); one
    whose tensors have negative sizes or could not fit in memory is an :class:`ArgumentError`.
    ``target`` (``"cuda:sm_89"``) overrides the compile target chosen for the device (as
    ``BOO_CUDA_TARGET`` does for every call); it must be for the device's backend.
    ``formulation`` pins one of the op's formulations by name (no fallback to the others:
    for scans, the tuner and tests). ``substitutions`` replaces the kernel's executables:
    a :class:`~boo_core.substitute.Substitution` or its directory (``sources/``,
    ``configurations/``, ``binaries/``; see docs/cli.md); the kernel is then verified
    against PyTorch on first use, and refused with its verdict if it fails.
    """
    signature = _as_signature(signature)
    problem = tensor_size_problem(signature, allow_empty=True)
    if problem:
        raise ArgumentError(f"get_launchable: {signature.func_name}: {problem}")
    boo_device = resolve_device(device)
    if target is not None:
        chosen = target if isinstance(target, Target) else Target.parse(target)
        if chosen.backend != boo_device.target.backend:
            raise DeviceError(f"target {chosen.name} cannot run on {boo_device.key} "
                              f"(its targets are {boo_device.target.backend})")
        boo_device = dataclasses.replace(boo_device, target=chosen)
    settings = get_settings()
    driver = boo_device.driver_for(signature.flops, settings.cpu_driver)
    if substitutions is not None and not hasattr(substitutions, "digest"):
        substitutions = Substitution.from_directory(substitutions)
    memory_key = (_registry_revision(), signature, boo_device.key, boo_device.target, driver, formulation,
                  settings.kernel_key(), substitutions.digest if substitutions is not None else None)
    launchable = _launchables.get(memory_key)
    if launchable is not None and not launchable.stale:
        return launchable
    with _lock:
        build_lock = _building.setdefault(memory_key, threading.Lock())
    with build_lock:  # threads asking for one new kernel build it once
        launchable = _launchables.get(memory_key)
        if launchable is None or launchable.stale:
            if has_empty_tensor(signature):
                launchable = EmptyLaunchable(signature, boo_device)
            else:
                with real_tensors():  # verification runs the kernel, even when called while torch.compile traces
                    launchable = select(signature, boo_device, driver, only=formulation, substitution=substitutions)
            _launchables[memory_key] = launchable
    return launchable


_by_eager_key: dict[Hashable, Launchable] = {}


def _registry_revision() -> int:
    """The default registry's revision: kernels memoized under other plugins are not reused."""
    return BooOpRegistry.default().revision


def launchable_for(key: Hashable, make_signature: Callable[[], Signature],
                   device: str | torch.device | BooDevice | None = "cpu") -> Launchable:
    """:func:`get_launchable` for eager entry points, memoized on a cheap ``key``.

    ``key`` must determine the signature (shapes, dtypes, attributes); ``make_signature``
    builds it only on the first call, so a repeated eager call costs one dict lookup.
    """
    full_key = (key, str(device), get_settings(), _registry_revision())
    launchable = _by_eager_key.get(full_key)
    if launchable is None or launchable.stale:
        launchable = _by_eager_key[full_key] = get_launchable(make_signature(), device)
    return launchable


def clear_launchables() -> None:
    """Forget the launchables this process holds (the disk cache is untouched)."""
    with _lock:
        _launchables.clear()
        _building.clear()
        _by_eager_key.clear()


# IREE objects must be released before the interpreter tears down its bindings.
atexit.register(clear_launchables)
