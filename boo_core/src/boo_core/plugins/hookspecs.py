"""The plugin contract: hook specifications of the ``boo`` pluggy project.

A plugin is a module (or object) with functions named like the hooks below, decorated with
:data:`hookimpl`, and exposed through an entry point in the ``boo`` group::

    [project.entry-points.boo]
    conv = "boo_ops_conv.hooks"

Hooks are for concerns that cross ops. What one op does (its parser, formulations, compile
flags, fusion patterns, tuning space) travels with its registration, the
:class:`~boo_core.OpSpec` handed to ``register``, and BOO asks only that op.

An implementation may accept fewer parameters than the specification lists (pluggy passes
only the ones it names); hooks evolve only by gaining parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from ..kernels.target import Target
    from ..runtime.timing import Timer
    from ..signatures.signature import Signature
    from ..substitute.substitution import Substitution
    from .extensions import DriverBackend
    from .opspec import OpSpec

PROJECT_NAME = "boo"
ENTRY_POINT_GROUP = "boo"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def boo_register_ops(register: Callable[[OpSpec], None]) -> None:
    """Register the ops this plugin provides.

    Call ``register(OpSpec(...))`` once per op. BOO calls this hook once per plugin, the
    first time the registry is used; an exception here (or a value that is not an
    :class:`~boo_core.OpSpec`) is reported against this plugin only (or raised, under
    ``BOO_STRICT_PLUGINS=1``), and the other plugins keep working.

    :param register: Callback taking an :class:`~boo_core.OpSpec`: the op's name, the
        command keywords it owns, its signature class and parser, and its per-op behaviour.
        Two plugins that claim the same keyword make that keyword unusable, with an error
        naming both.
    :return: Nothing; the return value is ignored.
    """


@hookspec
def boo_kernel_substitutions(signature: Signature, target: Target) -> Sequence[Substitution] | Substitution | None:
    """Executables this plugin supplies in place of IREE's own for one kernel.

    Any plugin may answer for any op's signatures (a kernel library adds kernels to ops it
    does not own), so check the signature's type and fields and return None for the rest.
    BOO calls this hook each time it sets up a kernel (before the cache lookup), never on a
    call's hot path: keep it cheap, and give a :class:`~boo_core.substitute.Substitution`
    with ``build`` and ``key`` when making the files is expensive (``build`` runs only on a
    cache miss, with the kernel's executables).

    Every plugin's answers are candidates, in plugin name order and then in the order each
    returns them, tried before the op's own formulations; each is verified against PyTorch
    on first use per device model, and one that does not compile or verify is passed over
    (the op's formulations then serve). No answer displaces another's.

    :param signature: The kernel's signature.
    :param target: The compile target (``target.backend``: ``llvm-cpu``, ``cuda``, ``rocm``;
        ``target.arch``: ``host``, ``sm_80``...).
    :return: A substitution, a sequence of them, or None.
    """


@hookspec
def boo_driver_backends() -> Sequence[DriverBackend] | None:
    """Backends ``boo driver --backend NAME`` may run and time beside BOO's kernels.

    Each is a :class:`~boo_core.plugin.DriverBackend`: a name (a new one: a name BOO or an
    earlier plugin, in plugin name order, already uses is skipped with a warning naming
    both), a line for ``boo driver --help``, and a factory ``(signature, device) ->
    PreparedBackend``. BOO calls this hook when a tool lists or runs backends.

    :return: A sequence of backends, or None.
    """


@hookspec
def boo_timers() -> Mapping[str, Timer] | None:
    """Timers for torch device types BOO does not time itself (it times ``cpu`` and ``cuda``).

    A timer is called as ``timer(call, device=, iterations=, warmup=)`` and returns a
    :class:`~boo_core.plugin.TimingStats` of per-call microseconds; ``boo driver`` and
    ``boo tune`` use it for devices of that type.

    :return: ``{device_type: timer}``, or None.
    """
