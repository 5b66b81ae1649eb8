"""What a tune's candidates are and how each is compiled: the candidate list of a kernel
(:func:`candidates_for`: the resolution chain, then the op's tuning space), the plain-data
arguments that cross processes and clusters (:func:`compile_arguments`), a candidate's
compile (:func:`compile_candidate`), and what came of it (:class:`CandidateResult`,
:class:`KernelTune`). The tuner (:mod:`boo_core.tune.tuner`) and its Ray tasks
(:mod:`boo_core.tune.cluster`) both build on this module.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import BooError, CompileError, describe_error, is_plugins_failure
from ..kernels.request import KernelRequest
from ..kernels.target import Target
from ..plugins.manager import call_blamed
from ..plugins.registry import BooOpRegistry
from ..signatures.signature import Signature
from ..substitute.candidates import library_substitutions
from ..verify import verdicts
from .space import ResolvedCandidate, resolve

PASS = verdicts.PASS
#: The start of a candidate's compile error when the cluster, not the compiler, failed it.
CLUSTER_FAILURE = "compile error: on the Ray cluster: "
@dataclass
class CandidateResult:
    """What happened to one candidate: ``verdict`` is ``pass``, ``fail: ...`` (wrong),
    ``compile error`` or ``skipped`` (the kernel's time budget ran out)."""

    label: str
    formulation: str
    config: Mapping[str, Any] | None = None
    flags: tuple[str, ...] = ()
    compile_seconds: float = 0.0
    verdict: str = ""
    time_us: float | None = None
    error: str = ""
    substitution: str = ""  # a kernel library's substitution, by digest ("": IREE's own kernels)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "formulation": self.formulation, "config": self.config, "flags": list(self.flags),
                "compile_seconds": self.compile_seconds, "verdict": self.verdict, "time_us": self.time_us,
                "error": self.error, "substitution": self.substitution}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CandidateResult:
        return cls(str(data["label"]), str(data["formulation"]), data.get("config"),
                   tuple(data.get("flags", ())), float(data.get("compile_seconds", 0.0)), str(data["verdict"]),
                   data.get("time_us"), str(data.get("error", "")), str(data.get("substitution", "")))


@dataclass
class KernelTune:
    """One kernel's tune: every candidate's result, PyTorch's time and the winner."""

    signature: Signature
    command: str
    target: str
    device: str
    results: list[CandidateResult] = field(default_factory=list)
    torch_us: float | None = None
    winner: str = ""
    baseline: str = ""  # the candidate an untuned launch uses: the first plain one that passes
    reused: bool = False  # an existing record was kept (not tuned again)

    def result(self, label: str) -> CandidateResult | None:
        return next((r for r in self.results if r.label == label), None)


@dataclass(frozen=True)
class TuneOptions:
    device: str = "cpu"
    jobs: int = 1
    budget_seconds: float | None = None  # per kernel, compile and measurement together
    iterations: int = 20
    warmup: int = 3
    retune: bool = False
    #: A Ray cluster to tune on (:mod:`boo_core.tune.cluster`): True or ``"local"`` starts a
    #: local instance, ``"auto"`` joins the one running here, ``"HOST:PORT"`` that one, or a
    #: :class:`~boo_core.cluster.RayCluster`. ``jobs`` is then the most tasks at once (0: no
    #: limit) and a local instance's CPUs.
    ray: Any = None
    shared_cache: bool = False  # with ray: every node mounts the cache at its path; workers write into it


def candidates_for(signature: Signature, target: Target) -> list[ResolvedCandidate]:
    """Installed kernel libraries' substitutions, the op's formulations, then its tuning
    space's extra candidates."""
    registry = BooOpRegistry.default()
    formulations = registry.formulations(signature, target)
    library = library_substitutions(signature, target)
    entry = registry.op_for_signature(signature)
    extra: Sequence[Any] = ()
    if entry is not None and entry.spec.tuning_space is not None:
        where = f"op {entry.name!r} tuning_space"
        extra = call_blamed(entry.plugin, where, entry.spec.tuning_space, signature, target) or ()
        return resolve(formulations, extra, f"plugin {entry.plugin.label}: {where}", library)
    return resolve(formulations, extra, "tuning space", library)


def compile_arguments(signature: Signature, target: str, candidate: ResolvedCandidate) -> tuple[Any, ...]:
    """What :func:`compile_candidate` takes for ``candidate`` (plain data: it crosses processes)."""
    return (signature, target, candidate.formulation.name, dict(candidate.config) if candidate.config else None,
            candidate.flags, candidate.substitution_digest)


def candidate_request(signature: Signature, target: str, formulation: str, config: Mapping[str, Any] | None,
                      flags: tuple[str, ...], substitution: str = "") -> KernelRequest:
    """The kernel request of a candidate given as :func:`compile_arguments` gives it; a
    library substitution is found again by its digest."""
    parsed = Target.parse(target)
    chosen = next(f for f in BooOpRegistry.default().formulations(signature, parsed) if f.name == formulation)
    found = None
    if substitution:
        found = next((s for s in library_substitutions(signature, parsed) if s.digest == substitution), None)
        if found is None:
            raise BooError(f"no installed kernel library offers substitution {substitution} for "
                           f"{signature.func_name} here")
    return KernelRequest.create(signature, parsed, chosen, config=config, extra_flags=flags, substitution=found)


def compile_candidate(signature: Signature, target: str, formulation: str, config: Mapping[str, Any] | None,
                       flags: tuple[str, ...], substitution: str = "") -> tuple[float, str]:
    """Compile one candidate into the cache (runs in a worker); (seconds, error text)."""
    start = time.perf_counter()
    try:
        candidate_request(signature, target, formulation, config, flags, substitution).fetch()
    except CompileError as e:
        return time.perf_counter() - start, f"compile error: {str(e).splitlines()[0]}"
    except BaseException as e:  # a plugin's failure is this candidate's, not the run's
        if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
            raise
        return time.perf_counter() - start, f"compile error: {describe_error(e)}"
    return time.perf_counter() - start, ""
