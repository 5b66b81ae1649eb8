"""Helpers for testing BOO plugins (BOO's own tests use them too).

* :func:`isolated_registry`: a fresh registry with only the plugins you name.
* :func:`write_fake_distribution`: a ``*.dist-info`` folder with ``boo`` entry points, to
  test discovery without installing anything.
* :func:`assert_numerics`: a launchable against its float64 reference, outputs poisoned.
* :func:`assert_round_trip`: ``parse_command(signature.to_command()) == signature``.

Submodules, imported by name (``from boo_core.testing import fuzz, front_door``):
:mod:`~boo_core.testing.fuzz` (a ready fuzz test of an op's commands; needs hypothesis),
:mod:`~boo_core.testing.front_door` (checks that a package imports only ``boo_core.plugin``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

from ..plugins.hookspecs import ENTRY_POINT_GROUP
from ..plugins.manager import BooPlugins
from ..plugins.registry import BooOpRegistry, OpRegistry
from ..runtime.launchable import Launchable
from ..runtime.lookup import get_launchable
from ..signatures.signature import Signature
from ..verify.numerics import Comparison, check_launchable


@contextmanager
def isolated_registry(plugins: Mapping[str, object] | None = None, *, autoload: bool = False,
                      strict: bool = False) -> Iterator[OpRegistry]:
    """Make a fresh registry the process default for the duration of the block.

    ``plugins`` maps plugin names to plugin objects (modules or instances with hook
    implementations), registered explicitly. With ``autoload=True`` installed entry points
    are loaded too.
    """
    registry = OpRegistry.load(BooPlugins(autoload=autoload, strict=strict, disabled=frozenset()))
    for name, plugin in (plugins or {}).items():
        registry.register_plugin(plugin, name)
    previous = BooOpRegistry.reset(registry)
    try:
        yield registry
    finally:
        BooOpRegistry.reset(previous)


def write_fake_distribution(site_dir: Path, name: str, version: str, entry_points: Mapping[str, str],
                            group: str = ENTRY_POINT_GROUP) -> Path:
    """Write ``<name>-<version>.dist-info`` with ``entry_points`` into ``site_dir``.

    Put ``site_dir`` on ``sys.path`` (pytest's ``monkeypatch.syspath_prepend``) and
    ``importlib.metadata`` finds the distribution exactly as it finds an installed one.
    """
    dist_info = Path(site_dir) / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (dist_info / "entry_points.txt").write_text(f"[{group}]\n{lines}")
    return dist_info


def assert_numerics(target: Launchable | Signature, *, device: str | torch.device = "cpu",
                    args: Sequence[torch.Tensor] | None = None, seed: int | None = None) -> list[Comparison]:
    """Check a launchable (or the launchable of a signature) against its reference."""
    launchable = target if isinstance(target, Launchable) else get_launchable(target, device)
    comparisons = check_launchable(launchable, args, seed=seed)
    failed = [c for c in comparisons if not c.passed]
    if failed:
        details = "\n  ".join(str(c) for c in comparisons)
        raise AssertionError(f"{launchable.signature.func_name} ({launchable.signature.to_command()}):\n  {details}")
    return comparisons


def assert_round_trip(signature: Signature, registry: OpRegistry | None = None) -> None:
    """``to_command()`` parses back to the same signature."""
    registry = registry or BooOpRegistry.default()
    command = signature.to_command()
    parsed = registry.parse_command(command)
    if parsed != signature:
        raise AssertionError(f"round trip changed the signature:\n  {signature}\n  -> {command}\n  -> {parsed}")
