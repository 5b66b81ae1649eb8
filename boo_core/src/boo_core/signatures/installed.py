"""The installed ops, as the stages below the plugin registry see them.

Signatures, kernels and substitutions ask the registry for an op's parser, formulations,
flags and substitutions, but the registry (:mod:`boo_core.plugins.registry`) sits above
them: it holds their types. So they depend on :class:`InstalledOps`, the part of the
registry they use, and the registry provides its default here when it is imported, which
is before any of them runs: importing any ``boo_core`` module imports the ``boo_core``
package first, and the package imports the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..errors import BooError


class InstalledOps(Protocol):
    """What the lower stages ask of the op registry (:class:`boo_core.OpRegistry`)."""

    def parse(self, command: str | Sequence[str]) -> Any: ...
    def op_for_signature(self, signature: Any) -> Any: ...
    def formulations(self, signature: Any, target: Any) -> tuple[Any, ...]: ...
    def compile_flags(self, signature: Any, target: Any) -> tuple[str, ...]: ...
    def source_tag(self, signature: Any) -> str: ...
    def kernel_substitutions(self, signature: Any, target: Any) -> list[Any]: ...


_provider: Callable[[], InstalledOps] | None = None


def provide_installed_ops(provider: Callable[[], InstalledOps]) -> None:
    """Make ``provider`` (the registry's ``default``) what :func:`installed_ops` returns."""
    global _provider
    _provider = provider


def installed_ops() -> InstalledOps:
    """The process's op registry (built on first use)."""
    if _provider is None:
        raise BooError("no op registry has been provided: import boo_core before its modules' functions run")
    return _provider()
