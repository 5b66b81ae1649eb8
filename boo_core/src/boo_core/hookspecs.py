"""The plugin contract: hook specifications of the ``boo`` pluggy project.

A plugin is a module (or object) with functions named like the hooks below, decorated with
:data:`hookimpl`, and exposed through an entry point in the ``boo`` group::

    [project.entry-points.boo]
    conv = "boo_ops_conv.hooks"

An implementation may accept fewer parameters than the specification lists (pluggy passes
only the ones it names); hooks evolve only by gaining parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from .devices import Target
    from .fusion import FusionPattern
    from .opspec import OpSpec
    from .signature import Signature

PROJECT_NAME = "boo"
ENTRY_POINT_GROUP = "boo"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def boo_register_ops(register: Callable[[OpSpec], None]) -> None:
    """Register the ops this plugin provides.

    Call ``register(OpSpec(...))`` once per op. BOO calls this hook once per plugin, the
    first time the registry is used; an exception here is reported against this plugin
    only (or raised, under ``BOO_STRICT_PLUGINS=1``), and the other plugins keep working.

    :param register: Callback taking an :class:`~boo_core.OpSpec`: the op's name, the
        command keywords it owns, its signature class and its parser. Two plugins that
        claim the same keyword make that keyword unusable, with an error naming both.
    :return: Nothing; the return value is ignored.
    """


@hookspec
def boo_compile_flags(signature: Signature, target: Target) -> Sequence[str] | None:
    """Extra iree-compile flags for one signature on one target.

    Called when a kernel is about to be compiled (never on a call's hot path). Every
    plugin's result is appended, in plugin registration order, after the target's own
    flags; the flags are part of the cache key, so changing them makes a new kernel.

    :param signature: The signature being compiled. Return None for signatures this plugin
        does not know (check ``isinstance`` against your own signature class).
    :param target: The compile target (``target.backend`` is ``llvm-cpu``, ``cuda`` or
        ``rocm``; ``target.arch`` is ``host``, ``sm_80``, ``gfx942``...).
    :return: A sequence of flags such as ``["--iree-opt-level=O3"]``, or None.
    """


@hookspec
def boo_signature_mlir(signature: Signature, target: Target) -> str | None:
    """The plugin's own MLIR for a signature, instead of BOO's ``torch.export`` of
    :meth:`Signature.reference`.

    The module must define a public function named ``signature.func_name`` with BOO's
    destination-passing calling convention: the inputs of ``signature.input_specs()``,
    then one argument per output of ``signature.output_specs()`` that the function writes
    in place, and no results. Any dialect iree-compile accepts with
    ``--iree-input-type=torch`` works (torch, linalg, ...).

    At most one plugin may answer for a signature: two non-None results are an error that
    names both plugins.

    :param signature: The signature being compiled; return None for signatures this plugin
        does not handle.
    :param target: The compile target, for target-specific MLIR.
    :return: MLIR source text, or None to let BOO export the reference computation.
    """


@hookspec
def boo_fusion_patterns() -> Sequence[FusionPattern] | None:
    """Subgraphs this plugin's kernels compute, for the torch.compile backends.

    Called once per registry, the first time a torch.compile backend needs patterns. The
    backends (``iree_boo``, ``iree_boo_inductor``) walk each aten-level graph that
    AOTAutograd produces (forward and backward) and offer every node whose target is one of
    a pattern's ``anchors`` to that pattern; a match replaces the nodes with a BOO kernel.
    Patterns are tried in plugin registration order, and in the order each plugin returns
    them, so put the most specific first (conv + activation before conv alone).

    :return: A sequence of :class:`~boo_core.fusion.FusionPattern` instances (names unique
        across plugins: a duplicate name is an error naming both plugins), or None.
    """
