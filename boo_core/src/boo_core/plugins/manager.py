"""Plugin loading and the typed facade over pluggy.

Core code calls hooks only through :class:`BooPlugins`, never ``pm.hook.*`` directly, and
every call goes through pluggy (so ``BOO_TRACE_HOOKS=1`` sees it).

Loading policy: a plugin that fails to import, validate or register, in any way (an
exception, ``sys.exit()`` at import, an entry point that is no plugin, a value that is not
an ``OpSpec``, a hook that returns instead of registering), is *skipped and reported*
(logged once, listed by ``boo ops``), because one broken third-party package must not take
every other op down with it. ``BOO_STRICT_PLUGINS=1`` turns any such failure into an
exception, which is what CI and plugin authors want. A ``KeyboardInterrupt`` is the user's,
not the plugin's: it propagates.

Two distributions may ship entry points of the same name: both load, each known by its
distribution, and what they both claim is reported as a conflict naming both; neither
silently displaces the other. Two entry points that load the *same* module register it
once, for the distribution that owns the module's files (whatever the ``sys.path`` order),
and the other is reported.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as importlib_metadata
import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pluggy

from ..errors import PluginError, describe_error, is_plugins_failure
from ..settings import get_settings
from ..substitute.substitution import Substitution
from . import hookspecs
from .extensions import DriverBackend
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
        return f'"{self.name}" ({self.distribution} {self.version})' if self.version else \
            f'"{self.name}" ({self.distribution})'


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that was skipped: which one, at which stage, and the error."""

    plugin: PluginInfo
    stage: str  # "importing", "validating" or "registering"
    error: BaseException

    def __str__(self) -> str:
        error = " ".join(describe_error(self.error).split())  # one line
        if self.stage == "reading":
            return f"Error reading the entry points of distribution {self.plugin.distribution}: {error}"
        return f"Error {self.stage} plugin {self.plugin.label}: {error}"


class BooPlugins:
    """The pluggy manager of one registry, with loading policy and typed hook calls.

    ``autoload``, ``strict``, ``disabled`` and ``loaded`` default to the settings
    ``BOO_DISABLE_PLUGIN_AUTOLOAD``, ``BOO_STRICT_PLUGINS``, ``BOO_DISABLE_PLUGINS`` and
    ``BOO_LOAD_PLUGINS`` (an allow-list: None loads every installed plugin).
    """

    def __init__(self, *, autoload: bool | None = None, strict: bool | None = None,
                 disabled: frozenset[str] | None = None, loaded: frozenset[str] | None = None) -> None:
        settings = get_settings()
        self.autoload = settings.plugin_autoload if autoload is None else autoload
        self.strict = settings.strict_plugins if strict is None else strict
        self.disabled = settings.disabled_plugins if disabled is None else disabled
        self.loaded = settings.loaded_plugins if loaded is None else loaded
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
        loaded: list[_Loaded] = []
        for entry_point, info, dist in _boo_entry_points(self._fail):
            if info.name in self.disabled or info.key in self.disabled:
                logger.debug("plugin %s disabled by BOO_DISABLE_PLUGINS", info.label)
                continue
            if self.loaded is not None and info.name not in self.loaded and info.key not in self.loaded:
                logger.debug("plugin %s not in BOO_LOAD_PLUGINS", info.label)
                continue
            try:
                plugin = entry_point.load()
            except BaseException as e:
                if not is_plugins_failure(e):
                    raise
                self._fail(info, "importing", e)
                continue
            loaded.append(_Loaded(info, plugin, _owns(dist, getattr(entry_point, "module", ""))))
        for item in _owners_first(loaded):
            try:
                self._register(item.plugin, item.info)
            except BaseException as e:  # pluggy reads the plugin's attributes: its code may run
                if not is_plugins_failure(e):
                    raise
                self._fail(item.info, "validating", e)

    def register(self, plugin: object, name: str) -> PluginInfo:
        """Register a plugin object explicitly (errors raise; nothing is skipped)."""
        info = PluginInfo(name)
        try:
            self._register(plugin, info)
        except BaseException as e:
            if not is_plugins_failure(e):
                raise
            message = str(e) if isinstance(e, Exception) else describe_error(e)
            raise PluginError(f"Error validating plugin {info.label}: {message}") from e
        return info

    def _register(self, plugin: object, info: PluginInfo) -> None:
        key = info.key if info.key not in self._info else f"{info.key}#{len(self._info)}"
        if info.distribution is None and info.name in self._info:
            raise PluginError(f"plugin name {info.name!r} is already taken by {self._info[info.name].label}")
        for other, existing in self._objects.items():
            if existing is plugin:
                raise PluginError(f"it loads {_describe(plugin)}, which plugin {self._info[other].label} already "
                                  "registered (the distribution that owns the module keeps it)")
        if plugin is None or isinstance(plugin, (int, float, str, bytes, bool)):
            raise PluginError(f"the entry point loads {_describe(plugin)}, not a module or object with hooks")
        self._pm.register(plugin, name=key)
        try:
            self._pm.check_pending()  # a misspelt hook name is an error, not a silent no-op
            if not self._pm.get_hookcallers(plugin):
                raise PluginError(f"{_describe(plugin)} implements no BOO hook (a @hookimpl such as "
                                  "boo_register_ops); does the entry point name the plugin module?")
        except BaseException:
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
        """Run ``boo_register_ops`` for every plugin (or one), isolating each failure.

        A plugin's ops are taken all or nothing: a hook that raises after registering some,
        returns a value (a list of specs, a generator: the hook never ran), registers one op
        name or keyword twice, or calls ``register`` after it returned registers none.
        """
        collected: list[tuple[PluginInfo, OpSpec]] = []
        for info, caller in self._callers("boo_register_ops", plugin_key):
            registration = _Registration(info)
            try:
                returned = caller(register=registration)
                registration.close(returned)
            except BaseException as e:
                registration.open = False
                if not is_plugins_failure(e):
                    raise
                if plugin_key is not None:  # explicit registration: the caller wants the error
                    raise PluginError(f"Error registering plugin {info.label}: {describe_error(e)}") from e
                self._fail(info, "registering", e)
                continue
            collected.extend((info, spec) for spec in registration.specs)
        return collected

    def kernel_substitutions(self, signature: Any, target: Any) -> list[Any]:
        """Every plugin's ``boo_kernel_substitutions`` answers for ``signature`` on ``target``,
        in plugin name order, each marked with its plugin. A plugin that raises or answers
        with something else is skipped with a warning naming it (an error under
        ``BOO_STRICT_PLUGINS=1``): the op's own kernels still serve."""
        found: list[Any] = []
        for info, caller in sorted(self._callers("boo_kernel_substitutions"), key=lambda pair: pair[0].key):
            try:
                answers = caller(signature=signature, target=target)
                answer = answers[0] if answers else None
                items = [answer] if isinstance(answer, Substitution) or answer is None else list(answer)
                if not all(isinstance(item, Substitution) for item in items if item is not None):
                    raise TypeError(f"returned {answer!r:.80}, not a Substitution, a sequence of them or None")
            except BaseException as e:  # sys.exit() included: the plugin's; an interrupt is the user's
                if not is_plugins_failure(e):
                    raise
                self._refuse(info, f"boo_kernel_substitutions for {signature.func_name}", describe_error(e), e,
                             skipped="its substitutions are skipped")
                continue
            found.extend(item.with_origin(info.label) for item in items if item is not None)
        return found

    def driver_backends(self) -> list[tuple[PluginInfo, DriverBackend]]:
        """Every plugin's ``boo_driver_backends`` answers, in plugin name order. A plugin that
        raises or answers with something else is skipped with a warning naming it (an error
        under ``BOO_STRICT_PLUGINS=1``)."""
        found = []
        for info, answer in self._answers("boo_driver_backends"):
            items = [answer] if isinstance(answer, DriverBackend) else answer
            if not isinstance(items, (list, tuple)) or not all(isinstance(b, DriverBackend) for b in items):
                self._refuse(info, "boo_driver_backends", f"returned {answer!r:.80}, not a sequence of DriverBackend")
                continue
            found += [(info, backend) for backend in items]
        return found

    def timers(self) -> list[tuple[PluginInfo, str, Any]]:
        """Every plugin's ``boo_timers`` answers as ``(plugin, device type, timer)``, in plugin
        name order; a plugin that raises or answers with something else is skipped with a
        warning (an error under ``BOO_STRICT_PLUGINS=1``)."""
        found = []
        for info, answer in self._answers("boo_timers"):
            if not isinstance(answer, Mapping) or not all(isinstance(k, str) and callable(v)
                                                          for k, v in answer.items()):
                self._refuse(info, "boo_timers", f"returned {answer!r:.80}, not a mapping of device types to timers")
                continue
            found += [(info, device_type, timer) for device_type, timer in answer.items()]
        return found

    def _answers(self, hook: str) -> list[tuple[PluginInfo, Any]]:
        """Each plugin's non-None answer to the argument-free ``hook``, in plugin name order;
        one that raised is warned about (raised under ``BOO_STRICT_PLUGINS=1``) and left out."""
        answers = []
        for info, caller in sorted(self._callers(hook), key=lambda pair: pair[0].key):
            try:
                returned = caller()
            except BaseException as e:  # sys.exit() included: the plugin's; an interrupt is the user's
                if not is_plugins_failure(e):
                    raise
                self._refuse(info, hook, describe_error(e), e)
                continue
            if returned and returned[0] is not None:
                answers.append((info, returned[0]))
        return answers

    def _refuse(self, info: PluginInfo, hook: str, what: str, error: BaseException | None = None, *,
                skipped: str = "its answer is skipped") -> None:
        """A plugin's failure in ``hook``: raised under ``BOO_STRICT_PLUGINS=1``, else warned about."""
        message = f"plugin {info.label} failed in {hook}: {what}"
        if self.strict:
            raise PluginError(f"{message} (BOO_STRICT_PLUGINS=1)") from error
        logger.warning("%s; %s", message, skipped)


class _Registration:
    """The ``register`` callback handed to one plugin's ``boo_register_ops``."""

    def __init__(self, info: PluginInfo) -> None:
        self.info = info
        self.specs: list[OpSpec] = []
        self.open = True

    def __call__(self, spec: OpSpec, *extra: object, **named: object) -> None:
        if extra or named:
            raise TypeError(f"register() takes one boo_core.OpSpec, got {1 + len(extra) + len(named)} arguments")
        if not self.open:
            raise PluginError(f"plugin {self.info.label} called register() after its boo_register_ops returned")
        if not isinstance(spec, OpSpec):
            raise TypeError(f"register() takes a boo_core.OpSpec, got {type(spec).__name__}")
        for other in self.specs:
            if other.name == spec.name:
                raise PluginError(f"op {spec.name!r} registered twice")
            shared = set(other.keywords) & set(spec.keywords)
            if shared:
                raise PluginError(f"ops {other.name!r} and {spec.name!r} both claim keyword {sorted(shared)[0]!r}")
        self.specs.append(spec)

    def close(self, returned: list[Any]) -> None:
        """End the registration; ``returned`` holds the hook's non-None return values."""
        self.open = False
        if returned:
            value = returned[0]
            hint = " (a generator function: its body never ran)" if inspect.isgenerator(value) else ""
            raise PluginError(f"boo_register_ops returned a {type(value).__name__}{hint}; it must call "
                              "register(OpSpec(...)) for each op and return None")


@dataclass(frozen=True)
class _Loaded:
    """An imported entry point, not yet registered."""

    info: PluginInfo
    plugin: object
    owner: bool  # whether the entry point's distribution owns the plugin's module


def _owners_first(loaded: list[_Loaded]) -> list[_Loaded]:
    """``loaded`` in order, except that where several entry points loaded one object, the
    one whose distribution owns its module goes first (it registers; the others fail)."""
    ordered = list(loaded)
    for item in loaded:
        twins = [i for i, other in enumerate(ordered) if other.plugin is item.plugin]
        owners = [i for i in twins if ordered[i].owner]
        if len(twins) > 1 and owners and owners[0] != twins[0]:
            ordered.insert(twins[0], ordered.pop(owners[0]))
    return ordered


def _owns(dist: Any, module: str) -> bool:
    """Whether distribution ``dist`` ships the top-level package of ``module``."""
    top = module.partition(".")[0]
    if not top or dist is None:
        return False
    try:
        if top in (dist.read_text("top_level.txt") or "").split():
            return True
        return any(f.parts and f.parts[0] in (top, f"{top}.py") for f in dist.files or ())
    except Exception:
        return False


def _describe(plugin: object) -> str:
    """How messages name what an entry point loaded."""
    if inspect.ismodule(plugin):
        return f"module {plugin.__name__}"
    if isinstance(plugin, type):
        return f"class {plugin.__module__}.{plugin.__qualname__}"
    return f"{type(plugin).__name__} {plugin!r:.60}"


def call_blamed(info: PluginInfo, what: str, function: Callable[..., Any], *args: Any) -> Any:
    """Call a plugin's function; any failure (``sys.exit()`` included, not an interrupt)
    becomes a :class:`PluginError` naming the plugin."""
    try:
        return function(*args)
    except PluginError:
        raise
    except BaseException as e:
        if not is_plugins_failure(e):
            raise
        raise PluginError(f"plugin {info.label} failed in {what}: {describe_error(e)}") from e


def _boo_entry_points(fail: Callable[[PluginInfo, str, BaseException], None]
                      ) -> Iterator[tuple[Any, PluginInfo, Any]]:
    """Entry points of the ``boo`` group with their distributions, duplicates removed.

    Editable installs and overlapping ``sys.path`` entries can show one distribution twice;
    the first occurrence (the one Python imports) wins. Entry points of one name from
    different distributions are all kept. A distribution whose entry points cannot be read
    is reported through ``fail`` (stage ``reading``).
    """
    seen: set[tuple[str, str, str]] = set()
    for dist in importlib_metadata.distributions():
        try:
            entry_points = [ep for ep in dist.entry_points if ep.group == hookspecs.ENTRY_POINT_GROUP]
        except Exception as e:  # a broken dist-info must not stop the scan
            path = str(getattr(dist, "_path", "?"))
            fail(PluginInfo("?", path, ""), "reading", e)
            continue
        if not entry_points:
            continue
        name = _metadata_name(dist)
        for entry_point in entry_points:
            key = (name, entry_point.name, entry_point.value)
            if key in seen:
                continue
            seen.add(key)
            yield entry_point, PluginInfo(entry_point.name, name, _metadata_version(dist)), dist


def _metadata_name(dist: Any) -> str:
    """The distribution's name, or its dist-info folder's name when METADATA lacks one."""
    with contextlib.suppress(Exception):
        name = dist.metadata["Name"]
        if name:
            return str(name)
    return Path(str(getattr(dist, "_path", "unknown"))).name


def _metadata_version(dist: Any) -> str:
    with contextlib.suppress(Exception):
        if dist.version:
            return str(dist.version)
    return "(no version)"
