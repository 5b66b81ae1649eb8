"""Compiling a signature's formulations into the cache, without loading or running them
(what ``boo preload`` and distributed preloads do; selection at run time then finds them).

For a target whose kernels are verified on first use (GPUs by default), every formulation
is compiled: verification on the device may refuse the first, and the next must then be
ready. Elsewhere the chain stops at the first formulation that compiles, the one that will
serve.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CompileError
from ..settings import get_settings
from .request import KernelRequest
from .target import Target


@dataclass
class ChainOutcome:
    """What compiling one signature's formulations for one target did."""

    compiled: list[str] = field(default_factory=list)  # formulations compiled now
    cached: list[str] = field(default_factory=list)  # formulations already in the cache
    failed: list[tuple[str, CompileError]] = field(default_factory=list)
    serving: str = ""  # the first formulation that compiled: the one selection tries first
    directory: str = ""  # its cache entry
    seconds: float = 0.0  # compile time spent now

    @property
    def ok(self) -> bool:
        return bool(self.serving)


def target_verifies(target: Target) -> bool:
    """Whether kernels for ``target`` are verified on first use (by the device type it runs on)."""
    return get_settings().verifies("cpu" if target.backend == "llvm-cpu" else "gpu")


def chain_requests(signature: object, target: Target) -> list[tuple[str, KernelRequest]]:
    """The kernels of ``signature``'s chain for ``target`` in the order they are tried, each
    with its name in outcomes (the formulation, and its substitution if any). Cheap: keys
    only, nothing exported."""
    from ..plugins.registry import BooOpRegistry
    from ..substitute.candidates import library_substitutions, ordered, user_substitution

    user = user_substitution(signature, target)
    library = library_substitutions(signature, target) if user is None else []
    requests = []
    for formulation, substitution in ordered(BooOpRegistry.default().formulations(signature, target), user, library):
        name = formulation.name + (f" with substitution {substitution.label}" if substitution else "")
        requests.append((name, KernelRequest.create(signature, target, formulation, substitution=substitution)))
    return requests


def compile_formulations(signature: object, target: Target, *, every: bool | None = None) -> ChainOutcome:
    """Compile ``signature``'s formulations for ``target`` (all of them when ``every``, by
    default when the target's kernels are verified; else up to the first that compiles)."""
    from ..substitute.candidates import refuse_if_user

    every = target_verifies(target) if every is None else every
    outcome = ChainOutcome()
    for name, request in chain_requests(signature, target):
        try:
            kernel = request.fetch()
        except CompileError as e:
            refuse_if_user(request.substitution, signature, "it did not compile", e)
            outcome.failed.append((name, e))
            continue
        (outcome.cached if kernel.hit else outcome.compiled).append(name)
        outcome.seconds += kernel.compile_seconds
        if not outcome.serving:
            outcome.serving, outcome.directory = name, str(kernel.directory or "")
            if not every:
                break
    return outcome
