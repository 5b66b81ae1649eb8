"""Plugin loading and the typed facade over pluggy.

Core code calls hooks only through :class:`BooPlugins`, never ``pm.hook.*`` directly.

Loading policy: a plugin that fails to import, validate or register is *skipped and
reported* (logged once, listed by ``boo ops``), because one broken third-party package must
not take every other op down with it. ``BOO_STRICT_PLUGINS=1`` turns any such failure into
an exception, which is what CI and plugin authors want.

Environment switches (read when a :class:`BooPlugins` is built, never at import):

* ``BOO_DISABLE_PLUGIN_AUTOLOAD=1``: do not scan entry points; register plugins explicitly.
* ``BOO_DISABLE_PLUGINS=name,name``: skip the entry points with these names.
* ``BOO_STRICT_PLUGINS=1``: any plugin failure raises :class:`~boo_core.errors.PluginError`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pluggy

from . import hookspecs
from .errors import PluginError
from .opspec import OpSpec

if sys.version_info >= (3, 10):
    import importlib.metadata as importlib_metadata
else:  # pragma: no cover - the backport serves older interpreters only
    import importlib_metadata

if TYPE_CHECKING:
    from .devices import Target
    from .fusion import FusionPattern
    from .signature import Signature

logger = logging.getLogger(__name__)


def env_flag(name: str) -> bool:
    """True when environment variable ``name`` is set to 1/true/yes/on."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class PluginInfo:
    """A registered plugin: its name and the distribution that ships it (None if unknown)."""

    name: str
    distribution: str | None = None
    version: str | None = None

    @property
    def label(self) -> str:
        """``"conv" (boo-ops-conv 0.1.0)``, how messages name a plugin."""
        if self.distribution is None:
            return f'"{self.name}" (registered explicitly)'
        return f'"{self.name}" ({self.distribution} {self.version})'


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that was skipped: which one, at which stage, and the error."""

    plugin: PluginInfo
    stage: str  # "importing", "validating" or "registering"
    error: BaseException

    def __str__(self) -> str:
        return f"Error {self.stage} plugin {self.plugin.label}: {type(self.error).__name__}: {self.error}"


class BooPlugins:
    """The pluggy manager of one registry, with loading policy and typed hook calls."""

    def __init__(self, *, autoload: bool | None = None, strict: bool | None = None,
                 disabled: frozenset[str] | None = None) -> None:
        self.autoload = not env_flag("BOO_DISABLE_PLUGIN_AUTOLOAD") if autoload is None else autoload
        self.strict = env_flag("BOO_STRICT_PLUGINS") if strict is None else strict
        if disabled is None:
            disabled = frozenset(n.strip() for n in os.environ.get("BOO_DISABLE_PLUGINS", "").split(",") if n.strip())
        self.disabled = disabled
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._info: dict[str, PluginInfo] = {}
        self.failures: list[PluginFailure] = []
        if os.environ.get("BOO_TRACE_HOOKS"):
            self._pm.trace.root.setwriter(lambda message: logger.debug("hook: %s", message.rstrip()))
            self._pm.enable_tracing()

    # -- loading ----------------------------------------------------------------------------

    def load_entry_points(self) -> None:
        """Import and register every plugin of the ``boo`` entry-point group, each isolated."""
        if not self.autoload:
            logger.debug("plugin autoload disabled (BOO_DISABLE_PLUGIN_AUTOLOAD)")
            return
        for entry_point, info in _boo_entry_points():
            if info.name in self.disabled:
                logger.debug("plugin %s disabled by BOO_DISABLE_PLUGINS", info.label)
                continue
            try:
                plugin = entry_point.load()
            except Exception as e:
                self._fail(info, "importing", e)
                continue
            try:
                self._register(plugin, info)
            except Exception as e:
                self._fail(info, "validating", e)

    def register(self, plugin: object, name: str) -> PluginInfo:
        """Register a plugin object explicitly (errors raise; nothing is skipped)."""
        info = PluginInfo(name)
        try:
            self._register(plugin, info)
        except Exception as e:
            raise PluginError(f"Error validating plugin {info.label}: {e}") from e
        return info

    def _register(self, plugin: object, info: PluginInfo) -> None:
        existing = self._info.get(info.name)
        if existing is not None:
            raise PluginError(f"plugin name {info.name!r} is already taken by {existing.label}")
        self._pm.register(plugin, name=info.name)
        try:
            self._pm.check_pending()  # a misspelt hook name is an error, not a silent no-op
        except Exception:
            self._pm.unregister(plugin)
            raise
        self._info[info.name] = info

    def _fail(self, info: PluginInfo, stage: str, error: Exception) -> None:
        failure = PluginFailure(info, stage, error)
        if self.strict:
            raise PluginError(f"{failure} (BOO_STRICT_PLUGINS=1)") from error
        logger.warning("%s; the plugin is skipped, other plugins keep working", failure)
        self.failures.append(failure)

    @property
    def plugins(self) -> list[PluginInfo]:
        """Registered plugins, in registration order."""
        return list(self._info.values())

    # -- hook calls -------------------------------------------------------------------------

    def _implementations(self, hook_name: str, plugin: str | None = None) -> Iterator[tuple[PluginInfo, Callable[..., Any], tuple[str, ...]]]:
        caller = getattr(self._pm.hook, hook_name)
        for impl in caller.get_hookimpls():
            if plugin is None or impl.plugin_name == plugin:
                yield self._info[impl.plugin_name], impl.function, tuple(impl.argnames)

    def collect_ops(self, plugin: str | None = None) -> list[tuple[PluginInfo, OpSpec]]:
        """Run ``boo_register_ops`` for every plugin (or one), isolating each failure."""
        collected: list[tuple[PluginInfo, OpSpec]] = []
        for info, function, _ in self._implementations("boo_register_ops", plugin):
            specs: list[OpSpec] = []

            def register(spec: OpSpec, _specs: list[OpSpec] = specs) -> None:
                if not isinstance(spec, OpSpec):
                    raise TypeError(f"register() takes a boo_core.OpSpec, got {type(spec).__name__}")
                _specs.append(spec)

            try:
                function(register=register)
            except Exception as e:
                if plugin is not None:  # explicit registration: the caller wants the error
                    raise PluginError(f"Error registering plugin {info.label}: {e}") from e
                self._fail(info, "registering", e)
                continue
            collected.extend((info, spec) for spec in specs)
        return collected

    def compile_flags(self, signature: Signature, target: Target) -> list[str]:
        """Flags from every plugin's ``boo_compile_flags``, in registration order."""
        flags: list[str] = []
        for info, function, argnames in self._implementations("boo_compile_flags"):
            result = _call_blamed(info, "boo_compile_flags", function, argnames,
                                  signature=signature, target=target)
            if result is None:
                continue
            if isinstance(result, str) or not all(isinstance(f, str) for f in result):
                raise PluginError(f"plugin {info.label}: boo_compile_flags must return a sequence of str")
            flags.extend(result)
        return flags

    def fusion_patterns(self) -> list[tuple[PluginInfo, FusionPattern]]:
        """Every plugin's fusion patterns, in registration order; names must be unique."""
        from .fusion import FusionPattern

        patterns: list[tuple[PluginInfo, FusionPattern]] = []
        owners: dict[str, PluginInfo] = {}
        for info, function, argnames in self._implementations("boo_fusion_patterns"):
            for pattern in _call_blamed(info, "boo_fusion_patterns", function, argnames) or ():
                if not isinstance(pattern, FusionPattern):
                    raise PluginError(f"plugin {info.label}: boo_fusion_patterns must return FusionPattern "
                                      f"instances, got {type(pattern).__name__}")
                if pattern.name in owners:
                    raise PluginError(f"fusion pattern {pattern.name!r} is provided by plugin "
                                      f"{owners[pattern.name].label} and plugin {info.label}")
                owners[pattern.name] = info
                patterns.append((info, pattern))
        return patterns

    def signature_mlir(self, signature: Signature, target: Target) -> tuple[PluginInfo, str] | None:
        """The one plugin-provided MLIR for ``signature``, or None."""
        answers = []
        for info, function, argnames in self._implementations("boo_signature_mlir"):
            result = _call_blamed(info, "boo_signature_mlir", function, argnames,
                                  signature=signature, target=target)
            if result is not None:
                answers.append((info, result))
        if len(answers) > 1:
            names = " and ".join(info.label for info, _ in answers)
            raise PluginError(f"plugins {names} both provide MLIR for {signature.func_name}")
        return answers[0] if answers else None


def _call_blamed(info: PluginInfo, hook: str, function: Callable[..., Any], argnames: tuple[str, ...],
                 **kwargs: Any) -> Any:
    try:
        return function(**{name: kwargs[name] for name in argnames})
    except Exception as e:
        raise PluginError(f"plugin {info.label} failed in {hook}: {type(e).__name__}: {e}") from e


def _boo_entry_points() -> Iterator[tuple[Any, PluginInfo]]:
    """Entry points of the ``boo`` group with their distributions, duplicates removed.

    Editable installs and overlapping ``sys.path`` entries can show one distribution twice;
    the first occurrence (the one Python imports) wins.
    """
    seen: set[tuple[str, str]] = set()
    for dist in importlib_metadata.distributions():
        for entry_point in dist.entry_points:
            if entry_point.group != hookspecs.ENTRY_POINT_GROUP:
                continue
            key = (entry_point.name, entry_point.value)
            if key in seen:
                continue
            seen.add(key)
            yield entry_point, PluginInfo(entry_point.name, dist.metadata["Name"], dist.version)
