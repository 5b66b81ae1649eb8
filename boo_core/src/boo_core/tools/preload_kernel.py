"""One kernel of a preload: a signature's chain compiled into the cache for one target,
and what came of it (:class:`PreloadOutcome`). Run here, in a compile pool's worker, or as
a Ray task (:mod:`boo_core.tools.preload_cluster`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from ..errors import BooCacheWarning, is_plugins_failure
from ..kernels import cache
from ..kernels.chain import compile_plan
from ..kernels.target import Target
from ..kernels.tuning_records import TuningRecord
from ..settings import get_settings
from ..signatures.commands import Command
from ..signatures.signature import Signature
from ..substitute.candidates import signature_plan
from .driver import error_text

COMPILED, CACHE_HIT, FAILED = "compiled", "cache hit", "failed"


@dataclass(frozen=True)
class PreloadOutcome:
    """What happened to one kernel for one target, or to a command that did not parse
    (``func_name`` and ``target`` then empty).

    ``reproducer`` holds, for a failed compile, the MLIR and the exact compile command
    saved in the kernel's cache entry.
    """

    command: str
    source: str
    func_name: str
    target: str
    status: str  # COMPILED, CACHE_HIT or FAILED
    seconds: float = 0.0  # compile time
    directory: str = ""  # the cache entry of the formulation that serves
    error: str = ""
    reproducer: tuple[str, ...] = ()
    formulation: str = ""  # the formulation that serves (the first that compiles, or verifies)
    verified: bool = False  # checked against PyTorch on the preload's device (and the verdict recorded)


@dataclass(frozen=True)
class PreloadJob:
    """One signature to preload for one target, and the tuned record its chain starts with."""

    command: Command
    signature: Signature
    target: str
    tuned: TuningRecord | None = None  # the record whose winner launches use on this target's device model


def compile_kernel(job: PreloadJob) -> PreloadOutcome:
    """Compile one signature's chain for one target into the cache (runs in a worker)."""
    command, signature, target = job.command, job.signature, job.target
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", BooCacheWarning)  # why a kernel was not stored, said once per kernel
            parsed = Target.parse(target)
            chain = compile_plan(signature, parsed, signature_plan(signature, parsed, tuned=lambda: job.tuned))
    except BaseException as e:  # a plugin's failure: reported against this kernel only
        if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
            raise
        return PreloadOutcome(command.text, command.source, signature.func_name, target, FAILED, error=error_text(e))
    finally:
        cache_problems = _replay(caught)
    if not chain.ok:
        errors = "\n".join(f"{name}: {error_text(error)}" for name, error in chain.failed)
        first = chain.failed[0][1] if chain.failed else None
        reproducer: tuple[str, ...] = ()
        if first is not None and first.mlir_path:
            mlir = Path(first.mlir_path)
            reproducer = tuple(str(p) for p in (mlir, mlir.with_name(cache.COMMAND_FILE)) if p.exists())
        return PreloadOutcome(command.text, command.source, signature.func_name, target, FAILED,
                              error=errors, reproducer=reproducer)
    if not chain.directory:  # compiled in memory only (the cache was not written): a preload that stored nothing
        reason = "; ".join(dict.fromkeys(cache_problems)) or \
            f"it was compiled in memory, without writing {get_settings().cache_dir}"
        return PreloadOutcome(command.text, command.source, signature.func_name, target, FAILED, chain.seconds,
                              error=f"formulation {chain.serving} compiled, but was not stored in the cache: {reason}",
                              formulation=chain.serving)
    status = COMPILED if chain.compiled else CACHE_HIT
    return PreloadOutcome(command.text, command.source, signature.func_name, target, status, chain.seconds,
                          chain.directory, formulation=chain.serving)


def _replay(caught: list[warnings.WarningMessage]) -> list[str]:
    """The messages of the :class:`BooCacheWarning` among ``caught`` (which the caller
    reports as a failure); every other warning is issued again, as if never caught."""
    problems = []
    for warning in caught:
        if issubclass(warning.category, BooCacheWarning):
            problems.append(str(warning.message))
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno,
                                   source=warning.source)
    return problems
