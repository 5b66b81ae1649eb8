"""A signature's chain: the kernels that may serve it on a target, in the order they are
tried, and compiling them ahead of time.

:func:`plan_kernels` is the one place that order is decided. Selection at run time tries
its kernels in turn; ``boo preload`` (locally and as Ray tasks) compiles them; ``boo tune``
times them before its tuning space's extra candidates; ``boo dump`` dumps the first that
compiles. The callers gather its inputs, so this stage imports none of theirs: the op's
formulations (the registry), the substitutions (:func:`boo_core.substitute.candidates.signature_plan`
gathers both) and the tuned winner (a record of :mod:`boo_core.kernels.tuning_records`).

:func:`compile_plan` compiles a chain into the cache without loading or running anything.
For a target whose kernels are verified on first use (GPUs by default), every kernel is
compiled: verification on the device may refuse the first, and the next must then be
ready. Elsewhere it stops at the first kernel that compiles, the one that will serve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import CompileError, SubstitutionError
from ..settings import get_settings
from .formulation import Formulation
from .request import KernelRequest
from .target import Target


class TunedWinner(Protocol):
    """What a chain takes of a tuning record (:class:`boo_core.kernels.tuning_records.TuningRecord`)."""

    @property
    def formulation(self) -> str: ...
    @property
    def config(self) -> Mapping[str, Any] | None: ...
    @property
    def flags(self) -> tuple[str, ...]: ...
    @property
    def label(self) -> str: ...
    @property
    def substitution(self) -> str: ...  # the winner's library substitution, by digest ("": none)
    @property
    def library(self) -> tuple[str, ...]: ...  # the library substitutions its tune timed, by digest


@dataclass(frozen=True)
class PlannedKernel:
    """One kernel of a chain: a formulation, maybe with a substitution's executables (a
    kernel library's or the user's) or a tuned configuration and flags."""

    formulation: Formulation
    substitution: Any = None  # boo_core.substitute.Substitution
    config: Mapping[str, Any] | None = None
    flags: tuple[str, ...] = ()
    tuned: str = ""  # the tuned winner's label ("": not a tuned kernel)

    @property
    def name(self) -> str:
        """How outcomes name it: ``default``, ``default with substitution S``, ``tuned default/wg...``."""
        if self.substitution is not None:
            return f"{self.formulation.name} with substitution {self.substitution.label}"
        return f"tuned {self.tuned}" if self.tuned else self.formulation.name

    @property
    def always_verified(self) -> bool:
        """Verified on first use per device model whatever ``BOO_VERIFY`` says (tuned and substituted kernels)."""
        return bool(self.tuned) or self.substitution is not None

    def request(self, signature: Any, target: Target) -> KernelRequest:
        """The kernel's request for ``signature`` on ``target`` (keys only: nothing exported)."""
        return KernelRequest.create(signature, target, self.formulation, config=self.config, extra_flags=self.flags,
                                    substitution=self.substitution)


def plan_kernels(formulations: Sequence[Formulation], *, user: Any = None, library: Sequence[Any] = (),
                 tuned: TunedWinner | None = None) -> list[PlannedKernel]:
    """The kernels that may serve a signature whose op offers ``formulations``, in the order
    they are tried.

    The ``user``'s substitution replaces the chain: it applies to each formulation in turn.
    Otherwise installed kernel libraries' substitutions (``library``) come first, each on the
    formulation it names (or the first, or the one it brings), then the formulations as they
    are; the ``tuned`` winner goes before them all, or after the library substitutions its
    tune did not time.
    A winner whose formulation or library substitution is no longer offered is left out.
    """
    if user is not None:
        return [PlannedKernel(f, substitution=user) for f in formulations]
    by_name = {f.name: f for f in formulations}
    chain = [PlannedKernel(s.own_formulation or by_name.get(s.formulation_name or "", formulations[0]),
                           substitution=s) for s in library]
    chain += [PlannedKernel(f) for f in formulations]
    found = _winner(tuned, by_name, library) if tuned is not None else None
    if found is None:
        return chain
    winner, timed_against_all = found
    if winner.substitution is not None:  # the library's own kernel, now first
        chain = [k for k in chain if k.substitution is not winner.substitution]
    chain.insert(0 if timed_against_all else len(library), winner)
    return chain


def _winner(record: TunedWinner, by_name: Mapping[str, Formulation],
            library: Sequence[Any]) -> tuple[PlannedKernel, bool] | None:
    """``record``'s winner as a kernel of the chain, and whether its tune timed every one of
    the ``library`` substitutions; None if it cannot be built any more."""
    substitution = None
    if record.substitution:
        substitution = next((s for s in library if s.digest == record.substitution), None)
        if substitution is None:  # the library, or its kernel, changed since the tune
            return None
    own = substitution.own_formulation if substitution is not None else None
    formulation = own if own is not None and own.name == record.formulation else by_name.get(record.formulation)
    if formulation is None:
        return None
    winner = PlannedKernel(formulation, substitution, record.config, tuple(record.flags),
                           tuned=record.label or record.formulation)
    return winner, {s.digest for s in library} <= set(record.library)


@dataclass
class ChainOutcome:
    """What compiling one signature's chain for one target did."""

    compiled: list[str] = field(default_factory=list)  # kernels compiled now, by name
    cached: list[str] = field(default_factory=list)  # kernels already in the cache
    failed: list[tuple[str, CompileError]] = field(default_factory=list)
    serving: str = ""  # the first kernel that compiled: the one selection tries first
    directory: str = ""  # its cache entry
    seconds: float = 0.0  # compile time spent now

    @property
    def ok(self) -> bool:
        return bool(self.serving)


def target_verifies(target: Target) -> bool:
    """Whether kernels for ``target`` are verified on first use (by the device type it runs on)."""
    return get_settings().verifies("cpu" if target.backend == "llvm-cpu" else "gpu")


def compile_plan(signature: Any, target: Target, chain: Sequence[PlannedKernel], *,
                 every: bool | None = None) -> ChainOutcome:
    """Compile ``chain``'s kernels of ``signature`` for ``target`` (all of them when
    ``every``, by default when the target's kernels are verified; else up to the first that
    compiles). A user's substitution that does not compile is an error."""
    every = target_verifies(target) if every is None else every
    outcome = ChainOutcome()
    for planned in chain:
        try:
            kernel = planned.request(signature, target).fetch()
        except CompileError as e:
            refuse_if_user(planned.substitution, signature, "it did not compile", e)
            outcome.failed.append((planned.name, e))
            continue
        (outcome.cached if kernel.hit else outcome.compiled).append(planned.name)
        outcome.seconds += kernel.compile_seconds
        if not outcome.serving:
            outcome.serving, outcome.directory = planned.name, str(kernel.directory or "")
            if not every:
                break
    return outcome


def refuse_if_user(substitution: Any, signature: Any, what: str,
                   error: BaseException | None = None) -> None:
    """Raise for a user substitution that did not compile or verify (a plugin's is passed over)."""
    if substitution is None or not substitution.from_user:
        return
    if isinstance(error, SubstitutionError):
        raise error
    raise SubstitutionError(f"substitution {substitution.label} of {signature.func_name} is refused: {what}. "
                            "Fix or remove it (a substituted kernel is always verified against PyTorch, "
                            "whatever BOO_VERIFY says).") from error
