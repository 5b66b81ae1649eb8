"""Formulations: the ways one signature can become a kernel.

A signature says *what* a kernel computes; a :class:`Formulation` says *how* it is handed
to the compiler: the export of the signature's reference (``default``), the export of
another PyTorch computation of the same function (a convolution on a cropped input, as a
matmul over unfolded windows, in float32...), or MLIR the plugin writes itself; plus
compile flags of its own. Every formulation of a signature computes the same function with
the same calling convention, so any of them may serve a call.

An op offers its formulations in order of preference (``OpSpec.formulations``); BOO takes
the first that compiles and, where kernels are verified, verifies. The tuner times them all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import PluginExit, describe_error, is_plugins_failure
from .export import export_mlir

if TYPE_CHECKING:
    from ..signatures.signature import Signature

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

#: The formulation every signature has: the export of ``signature.reference``.
DEFAULT = "default"


@dataclass(frozen=True)
class Formulation:
    """One way to build a signature's kernel.

    ``name`` identifies it among the signature's formulations (lowercase, digits, ``_``);
    it is part of the kernel's cache key, with the op's source tag, so a formulation's code
    changing makes new kernels. Give at most one of:

    * ``computation``: a PyTorch function taking the signature's inputs and returning its
      outputs, exported like :meth:`~boo_core.Signature.reference` (it must compute the
      same values, and be exportable with ``torch.export``);
    * ``mlir``: a function returning MLIR text in BOO's calling convention (a public
      function named ``signature.func_name`` taking the inputs, then the outputs, which it
      writes; see docs/plugins.md).

    With neither, the reference is exported. Both callables run only when the kernel is
    not in the cache. ``flags`` are iree-compile flags for this formulation alone;
    ``config`` a per-dispatch configuration (:mod:`boo_core.kernels.configs`) its kernel is
    built with, untuned (a tuning candidate's configuration replaces it; a kernel
    library's substitution builds without it).
    """

    name: str
    computation: Callable[..., Any] | None = None
    mlir: Callable[[], str] | None = None
    flags: tuple[str, ...] = ()
    description: str = ""
    config: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"formulation name {self.name!r} must be lowercase letters, digits and _")
        if self.computation is not None and self.mlir is not None:
            raise ValueError(f"formulation {self.name!r}: give computation or mlir, not both")
        if isinstance(self.flags, str) or not all(isinstance(f, str) for f in self.flags):
            raise TypeError(f"formulation {self.name!r}: flags must be a sequence of str")
        object.__setattr__(self, "flags", tuple(self.flags))
        if self.config is not None:
            if not isinstance(self.config, Mapping):
                raise TypeError(f"formulation {self.name!r}: config must be a mapping (boo_core.kernels.configs)")
            json.dumps(dict(self.config))  # recorded in the kernel's cache key

    def source(self, signature: Signature) -> str:
        """The MLIR to compile (exports on every call: use only on a cache miss). The op's
        code runs here: what it raises that is not an ``Exception`` (``sys.exit()``) comes
        out as :class:`~boo_core.errors.PluginExit`, a failure of this formulation."""
        try:
            if self.mlir is not None:
                text = self.mlir()
                if not isinstance(text, str):
                    raise TypeError(f"formulation {self.name!r} of {signature.func_name}: mlir() returned "
                                    f"{type(text).__name__}, not str")
                return text
            return export_mlir(signature, self.computation)
        except Exception:
            raise
        except BaseException as e:
            if not is_plugins_failure(e):
                raise
            raise PluginExit(describe_error(e)) from e


def default_formulations(signature: Signature, target: object) -> Sequence[Formulation]:
    """What an op without formulations of its own offers: the export of its reference."""
    return (Formulation(DEFAULT),)


def check_formulations(formulations: object, where: str) -> tuple[Formulation, ...]:
    """Validate what an op's ``formulations`` returned: a non-empty sequence of
    :class:`Formulation` with distinct names."""
    if isinstance(formulations, (str, bytes)) or not isinstance(formulations, Sequence) or not formulations:
        raise TypeError(f"{where} must return a non-empty sequence of Formulation, got {formulations!r:.80}")
    names: set[str] = set()
    for formulation in formulations:
        if not isinstance(formulation, Formulation):
            raise TypeError(f"{where} returned {type(formulation).__name__}, not Formulation")
        if formulation.name in names:
            raise ValueError(f"{where} returned two formulations named {formulation.name!r}")
        names.add(formulation.name)
    return tuple(formulations)
