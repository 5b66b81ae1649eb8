"""What the torch.compile backends offloaded to BOO and what fell back, per graph."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field

logger = logging.getLogger("boo_core.dynamo")


@dataclass
class GraphReport:
    """One graph a backend compiled.

    ``offloaded`` counts BOO kernel calls by pattern name; ``fallbacks`` counts the aten
    ops left to the nested backend, and ``reasons`` says why, per op, where a pattern
    matched but BOO could not take it (no entry: no pattern claims the op).
    ``substituted`` names the kernels that run substituted executables (func_name ->
    the substitution's label). ``boo_flops`` is the arithmetic of the nodes BOO took and
    ``nested_flops`` that of the ops left, by op (:mod:`.flops`: convolutions, matmuls,
    attention and normalizations; everything else counts zero). ``rewritten`` counts the
    plugins' graph rewrites applied before matching (``GraphRewrite``), by name;
    ``dropped_copies`` the clones removed that copied a tensor into its own layout (:mod:`.copies`),
    ``skipped_reorders`` the copies that only reordered elements and are no longer made
    (:mod:`.reorders`), ``updates_in_place`` the writes into graph inputs made in place
    instead of computed and copied, ``batched_writes`` the copies into graph inputs made as
    one ``_foreach_copy_`` (:mod:`.copies`), ``stacked_gradients`` the sums of selections'
    gradients made one stack (:mod:`.gradient_sums`), ``collapsed_copies`` the copies no
    longer made where a chain of copies became one (:mod:`.copy_chains`), ``contiguous_sums``
    the residual sums made in their contiguous operand's layout (:mod:`.sum_layouts`; a
    training step's are counted in its forward graph's report), ``column_sums`` the 16-bit
    sums over a tensor's leading dims made products with ones (:mod:`.column_sums`).
    ``saved_for_backward``: the tensors a training
    forward graph saves for its backward (each one autograd holds and hands over every step).
    """

    backend: str
    kind: str  # "forward", "backward" or "inference"
    index: int
    offloaded: Counter[str] = field(default_factory=Counter)
    fallbacks: Counter[str] = field(default_factory=Counter)
    reasons: dict[str, str] = field(default_factory=dict)
    note: str = ""
    substituted: dict[str, str] = field(default_factory=dict)
    boo_flops: int = 0
    nested_flops: Counter[str] = field(default_factory=Counter)
    rewritten: Counter[str] = field(default_factory=Counter)
    dropped_copies: int = 0
    skipped_reorders: int = 0
    updates_in_place: int = 0
    batched_writes: int = 0
    stacked_gradients: int = 0
    collapsed_copies: int = 0
    contiguous_sums: int = 0
    column_sums: int = 0
    saved_for_backward: int = 0

    @property
    def offload_share(self) -> float | None:
        """The fraction of the graph's counted arithmetic on BOO kernels (None: none counted)."""
        return _share(self.boo_flops, sum(self.nested_flops.values()))

    def line(self) -> str:
        """The one-line summary logged at INFO."""
        def listing(counter: Counter[str]) -> str:
            return ", ".join(f"{name} x{n}" for name, n in counter.most_common()) or "none"

        text = (f"{self.backend} graph {self.index} ({self.kind}): {sum(self.offloaded.values())} BOO kernels "
                f"[{listing(self.offloaded)}]; {sum(self.fallbacks.values())} ops on the nested backend "
                f"[{listing(self.fallbacks)}]")
        if self.offload_share is not None:
            text += f"; {self.offload_share:.1%} of the conv/matmul/attention/norm FLOPs on BOO"
        if self.rewritten:
            text += f"; rewritten first: {listing(self.rewritten)}"
        for count, what in _COUNTED:
            if getattr(self, count):
                text += f"; {getattr(self, count)} {what}"
        if self.substituted:
            text += "; SUBSTITUTED executables: " + ", ".join(f"{k} ({v})" for k, v in self.substituted.items())
        if self.reasons:
            text += "; not offloaded: " + "; ".join(f"{op}: {why}" for op, why in self.reasons.items())
        if self.note:
            text += f"; {self.note}"
        return text


#: The graph passes' counts a report line shows where not zero: (field, what it counts).
_COUNTED = (("dropped_copies", "copies of a tensor into its own layout dropped"),
            ("skipped_reorders", "reordering copies read as views instead"),
            ("updates_in_place", "updates of graph inputs made in place"),
            ("batched_writes", "copies into graph inputs made as one"),
            ("stacked_gradients", "sums of selections' gradients made one stack"),
            ("collapsed_copies", "copies of copy chains no longer made"),
            ("contiguous_sums", "sums kept in their contiguous operand's layout"),
            ("column_sums", "sums over leading dims made products with ones"),
            ("saved_for_backward", "tensors saved for the backward"))


@dataclass(frozen=True)
class OffloadSummary:
    """Every graph compiled since the last reset."""

    graphs: tuple[GraphReport, ...]

    @property
    def offloaded(self) -> Counter[str]:
        """BOO kernel calls by pattern name, over all graphs."""
        return sum((g.offloaded for g in self.graphs), Counter())

    @property
    def substituted(self) -> dict[str, str]:
        """Kernels running substituted executables (func_name -> substitution), over all graphs."""
        return {k: v for g in self.graphs for k, v in g.substituted.items()}

    @property
    def rewritten(self) -> Counter[str]:
        """Graph rewrites applied (``GraphRewrite``, by name), over all graphs."""
        return sum((g.rewritten for g in self.graphs), Counter())

    @property
    def fallbacks(self) -> Counter[str]:
        """Ops left to the nested backend by aten op name, over all graphs."""
        return sum((g.fallbacks for g in self.graphs), Counter())

    @property
    def reasons(self) -> dict[str, str]:
        """Why BOO did not take an op, per aten op name (the first reason given), over all graphs."""
        found: dict[str, str] = {}
        for graph in self.graphs:
            for op, why in graph.reasons.items():
                found.setdefault(op, why)
        return found

    @property
    def boo_flops(self) -> int:
        return sum(g.boo_flops for g in self.graphs)

    @property
    def nested_flops(self) -> Counter[str]:
        """Counted arithmetic left to the nested backend, by aten op name, over all graphs."""
        return sum((g.nested_flops for g in self.graphs), Counter())

    @property
    def offload_share(self) -> float | None:
        """The fraction of all graphs' counted arithmetic on BOO kernels (each graph counted
        once, however often it runs: forward and backward of one step weigh alike)."""
        return _share(self.boo_flops, sum(self.nested_flops.values()))


def _share(boo: int, nested: int) -> float | None:
    return boo / (boo + nested) if boo + nested else None


_reports: list[GraphReport] = []
_lock = threading.Lock()


def new_report(backend: str, kind: str) -> GraphReport:
    with _lock:
        report = GraphReport(backend, kind, len(_reports))
        _reports.append(report)
    return report


def offload_summary() -> OffloadSummary:
    """What the torch.compile backends offloaded and left, since the last reset."""
    with _lock:
        return OffloadSummary(tuple(_reports))


def reset_offload_summary() -> None:
    """Forget the graphs recorded so far."""
    with _lock:
        _reports.clear()
