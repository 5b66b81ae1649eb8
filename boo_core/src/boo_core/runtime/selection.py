"""Which kernel serves a signature on a device: the formulation chain, with verification.

The candidates are the op's formulations in its order (a tuned winner first, when the
tuning database has one for this signature, target, compiler and device model), as
:func:`~boo_core.kernels.chain.plan_kernels` orders them for every tool. For each,
BOO looks the kernel up or compiles it; where kernels are verified (``BOO_VERIFY``: GPUs by
default) it reads the verdict recorded for this device model, or checks the kernel against
PyTorch now, in a worker process (:mod:`.worker`: a kernel that crashes or hangs fails there),
and records the verdict. The first candidate that compiles and passes serves.

Substitutions (:mod:`boo_core.substitute`) add candidates: plugins' come first (after a
tuned winner that was timed against them all); a user's replaces the chain (applied to each
formulation in turn). A substituted candidate is always verified, whatever ``BOO_VERIFY``
says; a user's that fails raises :class:`~boo_core.errors.SubstitutionError` instead of
falling back.

A cached kernel its cache cannot prove its own, in a process with no compiler to rebuild it
(``Launchable.trusted`` False), is verified in this process whatever ``BOO_VERIFY`` says,
and its verdict is not recorded: it vouches for nothing beyond this process.

Recorded outcomes are read before any work: a formulation whose compile failed before
(``failed.json``) or whose kernel failed verification on this device model is skipped
without compiling or loading it. A kernel the device's runtime refuses to load (rebuilt
once first) is passed over too, in this process only. When every formulation fails to
compile, the call raises a :class:`CompileError` naming each formulation and its compiler
log; when some compiled but none loaded and passed verification, calls compute with
PyTorch, with one warning naming the signature and each outcome.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

from ..errors import BooFallbackWarning, CompileError, KernelLoadError, is_plugins_failure
from ..kernels.chain import PlannedKernel, TunedWinner, refuse_if_user
from ..kernels.tuning_records import tuned_record
from ..settings import get_settings
from ..signatures.signature import Signature
from ..substitute.candidates import signature_plan
from ..verify import verdicts
from . import worker
from .devices import BooDevice
from .launchable import Launchable, ReferenceLaunchable, load_launchable

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Attempt:
    """A formulation that did not serve, and why: ``compile`` (with the compiler log),
    ``load`` (the device's runtime refused the kernel: with its message) or
    ``verification`` (with the verdict)."""

    formulation: str
    stage: str
    detail: str

    def __str__(self) -> str:
        what = {"compile": "did not compile", "load": "did not load"}.get(self.stage, "failed verification")
        return f"{self.formulation}: {what} ({self.detail})"


def _tuned(signature: Signature, device: BooDevice) -> TunedWinner | None:
    """The tuning database's winner for ``signature`` on ``device``'s model, if launches use one."""
    return tuned_record(signature, device.target.name, verdicts.device_identity(device.torch_device))


def select(signature: Signature, device: BooDevice, driver: str, *, only: str | None = None,
           substitution: Any = None) -> Launchable:
    """The launchable that serves ``signature`` on ``device`` (module docstring).
    Substituted candidates are always verified; a user substitution that fails is an error."""
    verify_all = get_settings().verifies(device.torch_device.type)
    check = worker.checker()  # in the worker process, unless BOO_WORKER=0
    attempts: list[Attempt] = []
    for candidate in signature_plan(signature, device.target, substitution=substitution, only=only,
                                    tuned=lambda: _tuned(signature, device)):
        request = candidate.request(signature, device.target)
        checked = verify_all or candidate.always_verified
        if checked:
            recorded = verdicts.read_verdict(request.directory, device.torch_device)
            if recorded is not None and recorded != verdicts.PASS:
                refuse_if_user(candidate.substitution, signature, f"it failed verification before ({recorded})")
                attempts.append(Attempt(candidate.name, "verification", recorded))
                continue
        try:
            launchable = load_launchable(signature, device, request, driver)
        except CompileError as e:
            refuse_if_user(candidate.substitution, signature, "it did not compile", e)
            attempts.append(Attempt(candidate.name, "compile", e.log_path or str(e).splitlines()[0]))
            _log(candidate, "%s: %s did not compile; trying the next", signature.func_name, candidate.name)
            continue
        except KernelLoadError as e:  # not remembered: a device may refuse for a reason of the moment
            refuse_if_user(candidate.substitution, signature, "it did not load", e)
            attempts.append(Attempt(candidate.name, "load", _shortened(str(e.__cause__ or e))))
            _log(candidate, "%s: %s did not load on %s; trying the next", signature.func_name, candidate.name,
                 device.key)
            continue
        if not launchable.trusted:
            verdict = check(launchable)  # this process's own check: never recorded for others
            if verdict != verdicts.PASS:
                refuse_if_user(candidate.substitution, signature, f"its unproven cached kernel failed verification "
                               f"({verdict})")
                attempts.append(Attempt(candidate.name, "verification", f"unproven cached kernel: {verdict}"))
                logger.warning("%s: %s: the cached kernel, unproven and not rebuildable here, failed verification; "
                               "trying the next", signature.func_name, candidate.name)
                continue
            launchable.verified = True
        elif checked:
            verdict = verdicts.verdict_of(launchable, check)
            if verdict != verdicts.PASS:
                refuse_if_user(candidate.substitution, signature, f"it failed verification on "
                               f"{verdicts.device_identity(device.torch_device)} ({verdict})")
                attempts.append(Attempt(candidate.name, "verification", verdict))
                _log(candidate, "%s: %s failed verification; trying the next", signature.func_name, candidate.name)
                continue
            launchable.verified = True
        launchable.passed_over = tuple(attempts)
        return launchable
    return _nothing_served(signature, device, attempts)


def _log(candidate: PlannedKernel, message: str, *args: object) -> None:
    """A plugin's substitution passed over is worth a warning (the user expected its kernel)."""
    (logger.warning if candidate.substitution is not None else logger.info)(message, *args)


def _shortened(message: str, limit: int = 300) -> str:
    """A runtime's message on one line, cut to ``limit`` characters (IREE's name whole targets)."""
    line = " ".join(message.split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _nothing_served(signature: Signature, device: BooDevice, attempts: list[Attempt]) -> Launchable:
    tried = "\n".join(f"  - {attempt}" for attempt in attempts)
    if all(a.stage == "compile" for a in attempts):
        raise CompileError(f"no formulation of {signature.func_name} compiles for {device.target.name}:\n{tried}\n"
                           f"  command: {_command(signature)}")
    warnings.warn(f"BOO has no kernel for {signature.func_name} that loads and passes verification on "
                  f"{verdicts.device_identity(device.torch_device)}; it computes with PyTorch instead. Tried:\n{tried}",
                  BooFallbackWarning, stacklevel=4)
    return ReferenceLaunchable(signature, device, tuple(attempts))


def _command(signature: Signature) -> str:
    try:
        return signature.to_command()
    except BaseException as e:
        if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
            raise
        return "(no command)"
