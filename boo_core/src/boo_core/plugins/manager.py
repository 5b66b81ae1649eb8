"""Plugin loading and the typed facade over pluggy.

Core code calls hooks only through :class:`BooPlugins`, never ``pm.hook.*`` directly, and
every call goes through pluggy (so ``BOO_TRACE_HOOKS=1`` sees it).

Loading policy: a plugin that fails to import, validate or register, in any way (an
exception, ``sys.exit()`` at import, a value that is not an ``OpSpec``), is *skipped and
reported* (logged once, listed by ``boo ops``), because one broken third-party package must
not take every other op down with it. ``BOO_STRICT_PLUGINS=1`` turns any such failure into
an exception, which is what CI and plugin authors want. Two distributions may ship entry
points of the same name: both load, each known by its distribution, and what they both
claim is reported as a conflict naming both; neither silently displaces the other.
"""

from __future__ import annotations

import importlib.metadata as importlib_metadata
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pluggy

from ..errors import PluginError
from ..settings import get_settings
from . import hookspecs
from .opspec import OpSpec

logger = logging.getLogger(__name__)
_trace_logger = logging.getLogger("boo_core.plugins")


@dataclass(frozen=True)
class PluginInfo:
    """A registered plugin: its entry-point name and the distribution that ships it."""

    name: str
    distribution: str | None = None
    version: str | None = None

    @property
    def key(self) -> str:
        """Unique among loaded plugins: ``conv`` or, for a second distribution's entry
        point of the same name, ``conv@other-dist``."""
        return self.name if self.distribution is None else f"{self.name}@{self.distribution}"

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


def _isolated(error: BaseException) -> bool:
    """Whether a plugin's error is the plugin's alone (an interrupt is the user's)."""
    return not isinstance(error, (KeyboardInterrupt, GeneratorExit))


class BooPlugins:
    """The pluggy manager of one registry, with loading policy and typed hook calls.

    ``autoload``, ``strict`` and ``disabled`` default to the settings
    ``BOO_DISABLE_PLUGIN_AUTOLOAD``, ``BOO_STRICT_PLUGINS`` and ``BOO_DISABLE_PLUGINS``.
    """

    def __init__(self, *, autoload: bool | None = None, strict: bool | None = None,
                 disabled: frozenset[str] | None = None) -> None:
        settings = get_settings()
        self.autoload = settings.plugin_autoload if autoload is None else autoload
        self.strict = settings.strict_plugins if strict is None else strict
        self.disabled = settings.disabled_plugins if disabled is None else disabled
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._info: dict[str, PluginInfo] = {}
        self._objects: dict[str, object] = {}
        self.failures: list[PluginFailure] = []
        if settings.trace_hooks:
            self._pm.trace.root.setwriter(lambda message: _trace_logger.debug("hook: %s", message.strip()))
            self._pm.enable_tracing()

    # -- loading ----------------------------------------------------------------------------

    def load_entry_points(self) -> None:
        """Import and register every plugin of the ``boo`` entry-point group, each isolated."""
        if not self.autoload:
            logger.debug("plugin autoload disabled (BOO_DISABLE_PLUGIN_AUTOLOAD)")
            return
        for entry_point, info in _boo_entry_points():
            if info.name in self.disabled or info.key in self.disabled:
                logger.debug("plugin %s disabled by BOO_DISABLE_PLUGINS", info.label)
                continue
            try:
                plugin = entry_point.load()
            except BaseException as e:
                if not _isolated(e):
                    raise
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
        key = info.key if info.key not in self._info else f"{info.key}#{len(self._info)}"
        if info.distribution is None and info.name in self._info:
            raise PluginError(f"plugin name {info.name!r} is already taken by {self._info[info.name].label}")
        if any(existing is plugin for existing in self._objects.values()):
            raise PluginError(f"plugin {info.label} is the same object as an already registered plugin")
        self._pm.register(plugin, name=key)
        try:
            self._pm.check_pending()  # a misspelt hook name is an error, not a silent no-op
        except Exception:
            self._pm.unregister(plugin)
            raise
        self._info[key] = info
        self._objects[key] = plugin

    def _fail(self, info: PluginInfo, stage: str, error: BaseException) -> None:
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

    def _callers(self, hook_name: str, plugin_key: str | None = None) -> Iterator[tuple[PluginInfo, Any]]:
        """One pluggy hook caller per plugin implementing ``hook_name`` (or the one plugin
        ``plugin_key``), so each plugin's result and failure stay its own."""
        implementations = getattr(self._pm.hook, hook_name).get_hookimpls()
        for impl in implementations:
            if plugin_key is not None and impl.plugin_name != plugin_key:
                continue
            others = [self._objects[i.plugin_name] for i in implementations if i.plugin_name != impl.plugin_name]
            yield self._info[impl.plugin_name], self._pm.subset_hook_caller(hook_name, others)

    def plugin_key(self, name: str) -> str:
        """The key of the explicitly registered plugin ``name``."""
        for key, info in self._info.items():
            if info.name == name and info.distribution is None:
                return key
        raise PluginError(f"no plugin registered explicitly as {name!r}")

    def collect_ops(self, plugin_key: str | None = None) -> list[tuple[PluginInfo, OpSpec]]:
        """Run ``boo_register_ops`` for every plugin (or one), isolating each failure."""
        collected: list[tuple[PluginInfo, OpSpec]] = []
        for info, caller in self._callers("boo_register_ops", plugin_key):
            specs: list[OpSpec] = []

            def register(spec: OpSpec, _specs: list[OpSpec] = specs) -> None:
                if not isinstance(spec, OpSpec):
                    raise TypeError(f"register() takes a boo_core.OpSpec, got {type(spec).__name__}")
                _specs.append(spec)

            try:
                caller(register=register)
            except BaseException as e:
                if not _isolated(e):
                    raise
                if plugin_key is not None:  # explicit registration: the caller wants the error
                    raise PluginError(f"Error registering plugin {info.label}: {type(e).__name__}: {e}") from e
                self._fail(info, "registering", e)
                continue
            collected.extend((info, spec) for spec in specs)
        return collected


    def kernel_substitutions(self, signature: Any, target: Any) -> list[Any]:
        """Every plugin's ``boo_kernel_substitutions`` answers for ``signature`` on ``target``,
        in plugin name order, each marked with its plugin. A plugin that raises or answers
        with something else is skipped with a warning naming it (an error under
        ``BOO_STRICT_PLUGINS=1``): the op's own kernels still serve."""
        from ..substitute.substitution import Substitution

        found: list[Any] = []
        for info, caller in sorted(self._callers("boo_kernel_substitutions"), key=lambda pair: pair[0].key):
            try:
                answers = caller(signature=signature, target=target)
                answer = answers[0] if answers else None
                items = [answer] if isinstance(answer, Substitution) or answer is None else list(answer)
                if not all(isinstance(item, Substitution) for item in items if item is not None):
                    raise TypeError(f"returned {answer!r:.80}, not a Substitution, a sequence of them or None")
            except Exception as e:
                message = (f"plugin {info.label} failed in boo_kernel_substitutions for {signature.func_name}: "
                           f"{type(e).__name__}: {e}")
                if self.strict:
                    raise PluginError(f"{message} (BOO_STRICT_PLUGINS=1)") from e
                logger.warning("%s; its substitutions are skipped", message)
                continue
            found.extend(item.with_origin(info.label) for item in items if item is not None)
        return found


def call_blamed(info: PluginInfo, what: str, function: Callable[..., Any], *args: Any) -> Any:
    """Call a plugin's function; any failure becomes a :class:`PluginError` naming the plugin."""
    try:
        return function(*args)
    except PluginError:
        raise
    except Exception as e:
        raise PluginError(f"plugin {info.label} failed in {what}: {type(e).__name__}: {e}") from e


def _boo_entry_points() -> Iterator[tuple[Any, PluginInfo]]:
    """Entry points of the ``boo`` group with their distributions, duplicates removed.

    Editable installs and overlapping ``sys.path`` entries can show one distribution twice;
    the first occurrence (the one Python imports) wins. Entry points of one name from
    different distributions are all kept.
    """
    seen: set[tuple[str, str, str]] = set()
    for dist in importlib_metadata.distributions():
        try:
            entry_points = [ep for ep in dist.entry_points if ep.group == hookspecs.ENTRY_POINT_GROUP]
            name = dist.metadata["Name"]
        except Exception as e:  # a broken dist-info must not stop the scan
            logger.warning("skipping an unreadable distribution at %s: %s", getattr(dist, "_path", "?"), e)
            continue
        for entry_point in entry_points:
            key = (str(name), entry_point.name, entry_point.value)
            if key in seen:
                continue
            seen.add(key)
            yield entry_point, PluginInfo(entry_point.name, str(name), dist.version)
