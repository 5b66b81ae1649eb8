"""What a plugin registers for one op: its identity and everything BOO asks of that op."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..kernels.formulation import Formulation, default_formulations
from ..signatures.parser import CommandParser
from ..signatures.signature import Signature
from .patterns import REWRITTEN_GRAPHS, FusionPattern, GraphRewrite

if TYPE_CHECKING:
    from ..kernels.target import Target

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
#: A command keyword: MIOpenDriver's base arguments are case-sensitive (``CBAInfer``).
_KEYWORD = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

FormulationsFn = Callable[[Any, "Target"], Sequence[Formulation]]
FlagsFn = Callable[[Any, "Target"], Sequence[str]]


@dataclass(frozen=True)
class OpSpec:
    """One op, as a plugin hands it to ``register`` in :func:`boo_register_ops`.

    Identity: ``name``; ``keywords``, the base-argument stems the op owns (keyword ``conv``
    claims ``conv``, ``convfp16``, ``convbfp16``...: keyword + a dtype suffix, matched
    exactly, never by substring); ``signature_class``; ``parser``, which turns the flags
    after the base argument into signatures (and signatures back into commands).

    Per-op behaviour, each called only for this op's signatures:

    * ``formulations(signature, target)``: the ways to build the kernel, in order of
      preference (default: the export of ``signature.reference``). BOO uses the first that
      compiles and, where it verifies kernels, passes; ``boo tune`` times them all.
    * ``compile_flags(signature, target)``: iree-compile flags for every formulation.
    * ``fusion_patterns``: subgraphs the torch.compile backends may hand to this op.
    * ``graph_rewrites``: equivalent rewrites of aten nodes the backends apply before any
      pattern matches (this op expressed in another op's terms), or to a training step's
      joint graph before it is partitioned (what the forward saves).
    * ``tuning_space(signature, target)``: candidates ``boo tune`` sweeps (docs/plugins.md).
    """

    name: str
    keywords: tuple[str, ...]
    signature_class: type[Signature]
    parser: CommandParser
    description: str = ""
    formulations: FormulationsFn = default_formulations
    compile_flags: FlagsFn | None = None
    fusion_patterns: Sequence[FusionPattern] = ()
    graph_rewrites: Sequence[GraphRewrite] = ()
    tuning_space: Callable[[Any, Target], Sequence[Any]] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"op name {self.name!r} must be lowercase letters, digits and _")
        if isinstance(self.keywords, str) or not isinstance(self.keywords, Sequence) or not self.keywords:
            raise ValueError(f"op {self.name!r}: keywords must be a non-empty tuple of strings")
        object.__setattr__(self, "keywords", tuple(self.keywords))
        for keyword in self.keywords:
            if not isinstance(keyword, str) or not _KEYWORD.match(keyword):
                raise ValueError(f"op {self.name!r}: keyword {keyword!r} must be a letter, then letters, digits "
                                 "and _")
        if not (isinstance(self.signature_class, type) and issubclass(self.signature_class, Signature)):
            raise TypeError(f"op {self.name!r}: signature_class must subclass boo_core.Signature")
        op_name = getattr(self.signature_class, "op_name", None)
        if op_name != self.name:
            # The class names its op: two ops can then never claim one signature class.
            raise ValueError(f"op {self.name!r}: {self.signature_class.__name__}.op_name is {op_name!r}, "
                             f"not {self.name!r}")
        if not isinstance(self.parser, CommandParser):
            raise TypeError(f"op {self.name!r}: parser must be a boo_core.CommandParser instance")
        for field in ("formulations", "compile_flags", "tuning_space"):
            value = getattr(self, field)
            if value is not None and not callable(value):
                raise TypeError(f"op {self.name!r}: {field} must be callable (signature, target) -> ..., "
                                f"got {type(value).__name__}")
        object.__setattr__(self, "fusion_patterns", _checked_patterns(self.name, self.fusion_patterns))
        object.__setattr__(self, "graph_rewrites", _checked_patterns(self.name, self.graph_rewrites, rewrites=True))


def _checked_patterns(op: str, patterns: object, *, rewrites: bool = False) -> tuple[Any, ...]:
    """``patterns`` as a tuple, each a :class:`FusionPattern` (``rewrites``: a
    :class:`GraphRewrite`) named ``<op>.<what>`` (unique) with a non-empty tuple of aten
    overloads as anchors: what the backends rely on."""
    kind, field = (GraphRewrite, "graph_rewrites") if rewrites else (FusionPattern, "fusion_patterns")
    what = "graph rewrite" if rewrites else "fusion pattern"
    if isinstance(patterns, (str, bytes)) or not isinstance(patterns, Sequence):
        raise TypeError(f"op {op!r}: {field} must be a sequence of {kind.__name__}")
    names: set[str] = set()
    for pattern in patterns:
        if not isinstance(pattern, kind):
            raise TypeError(f"op {op!r}: {field} holds a {type(pattern).__name__}, not a {kind.__name__}")
        name = getattr(pattern, "name", None)
        if not isinstance(name, str) or not name.startswith(f"{op}.") or name in names:
            raise ValueError(f"op {op!r}: {what} {type(pattern).__name__} has name {name!r}; expected a "
                             f"unique '{op}.<what>'")
        names.add(name)
        anchors = getattr(pattern, "anchors", None)
        if not isinstance(anchors, tuple) or not anchors or \
                not all(isinstance(a, torch._ops.OpOverload) for a in anchors):
            raise TypeError(f"op {op!r}: {what} {name} has anchors {anchors!r:.80}; expected a non-empty "
                            "tuple of aten overloads (torch.ops.aten.convolution.default...)")
        if rewrites and getattr(pattern, "graph", None) not in REWRITTEN_GRAPHS:
            raise ValueError(f"op {op!r}: graph rewrite {name} has graph {getattr(pattern, 'graph', None)!r}; "
                             f"expected one of {', '.join(map(repr, REWRITTEN_GRAPHS))}")
    return tuple(patterns)
