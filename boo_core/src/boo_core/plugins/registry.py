"""The op registry: which ops are installed, commands turned into signatures, and each
signature's per-op behaviour (formulations, compile flags, patterns) asked of its op.

:class:`OpRegistry` is built from a :class:`~boo_core.plugins.manager.BooPlugins`;
:class:`BooOpRegistry` is the process-wide facade that builds the default registry lazily,
once, on first use.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import torch

from ..errors import BooError, CommandError, PluginError, UnknownOpError, describe_error, is_plugins_failure
from ..kernels.formulation import Formulation, check_formulations, default_formulations
from ..kernels.source_tags import package_source_hash
from ..settings import SettingError, get_settings
from ..signatures.dtypes import SUFFIX_TO_DTYPE
from ..signatures.installed import provide_installed_ops
from ..signatures.parser import ParsedCommand, tokenize
from ..signatures.signature import Signature
from .manager import BooPlugins, PluginFailure, PluginInfo, call_blamed
from .opspec import OpSpec

if TYPE_CHECKING:
    from ..kernels.target import Target
    from .patterns import FusionPattern, GraphRewrite


@dataclass(frozen=True)
class OpEntry:
    """A registered op and the plugin that registered it."""

    spec: OpSpec
    plugin: PluginInfo
    _source: list[str] = field(default_factory=list, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def distribution(self) -> str:
        """``boo-ops-conv 0.1.0``, or the plugin name for an explicitly registered plugin."""
        info = self.plugin
        return f"{info.distribution} {info.version}" if info.distribution else f"(plugin {info.name})"

    @property
    def source_tag(self) -> str:
        """What identifies the op's code in cache keys: its distribution and version, and a
        hash of the Python sources of the package its signature class lives in (so editing
        an op's formulations makes new kernels, even in an editable install)."""
        if not self._source:
            self._source.append(f"{self.distribution} {package_source_hash(self.spec.signature_class)}")
        return self._source[0]

    def formulations(self, signature: Signature, target: Target) -> tuple[Formulation, ...]:
        """The op's formulations for ``signature`` on ``target``, validated (a generator of
        them is taken in full)."""
        where = f"op {self.name!r} formulations"
        result = call_blamed(self.plugin, where, lambda: _materialized(self.spec.formulations(signature, target)))
        try:
            return check_formulations(result, where)
        except (TypeError, ValueError) as e:
            raise PluginError(f"plugin {self.plugin.label}: {e}") from None

    def compile_flags(self, signature: Signature, target: Target) -> tuple[str, ...]:
        """The op's iree-compile flags for ``signature`` on ``target``, validated: None, or
        an ordered collection (list, tuple, generator) of strings that each start with ``-``.
        A set is refused: its order, and so the cache key, would change from run to run."""
        if self.spec.compile_flags is None:
            return ()
        where = f"op {self.name!r} compile_flags"
        flags = call_blamed(self.plugin, where, lambda: _materialized(self.spec.compile_flags(signature, target)))
        if flags is None:
            return ()
        if not isinstance(flags, tuple) or not all(isinstance(f, str) and f.startswith("-") and "\0" not in f
                                                   and "\n" not in f for f in flags):
            raise PluginError(f"plugin {self.plugin.label}: {where} must return a list, tuple or generator of "
                              f"iree-compile flags ('--name=value' strings), got {flags!r:.80}")
        return flags


def _materialized(value: object) -> object:
    """A list, tuple or iterator (a generator) as a tuple; anything else unchanged."""
    if isinstance(value, (list, tuple)) or isinstance(value, Iterator):
        return tuple(value)
    return value


@dataclass(frozen=True)
class BaseArg:
    """A base argument split into its op and dtype: ``convbfp16`` = conv + bfp16."""

    text: str
    op: OpEntry
    suffix: str
    dtype: torch.dtype


_revisions = itertools.count(1)


class OpRegistry:
    """Ops registered by a set of plugins, and command parsing over them.

    ``revision`` is unique to this registry and its set of plugins: it changes whenever a
    plugin is added, so memoized kernels chosen under another set are not served.
    """

    def __init__(self, plugins: BooPlugins) -> None:
        self.plugins = plugins
        self.revision = next(_revisions)
        self._ops: dict[str, list[OpEntry]] = {}
        self._keywords: dict[str, list[OpEntry]] = {}
        self._by_signature_class: dict[type, list[OpEntry]] = {}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, plugins: BooPlugins | None = None) -> OpRegistry:
        """A registry over installed plugins (entry points) plus nothing else."""
        plugins = plugins if plugins is not None else BooPlugins()
        registry = cls(plugins)
        plugins.load_entry_points()
        registry._add_ops(plugins.collect_ops())
        return registry

    def register_plugin(self, plugin: object, name: str) -> list[OpEntry]:
        """Register a plugin object explicitly and add its ops; errors raise."""
        with self._lock:
            self.plugins.register(plugin, name)
            return self._add_ops(self.plugins.collect_ops(self.plugins.plugin_key(name)))

    def _add_ops(self, collected: Sequence[tuple[PluginInfo, OpSpec]]) -> list[OpEntry]:
        added = []
        for info, spec in collected:
            entry = OpEntry(spec, info)
            self._ops.setdefault(spec.name, []).append(entry)
            for keyword in spec.keywords:
                self._keywords.setdefault(keyword, []).append(entry)
            self._by_signature_class.setdefault(spec.signature_class, []).append(entry)
            added.append(entry)
        self.revision = next(_revisions)
        if self.plugins.strict:
            conflicts = self.conflicts()
            if conflicts:
                raise PluginError("; ".join(conflicts) + " (BOO_STRICT_PLUGINS=1)")
        return added

    # -- queries ----------------------------------------------------------------------------

    def list_ops(self) -> list[OpEntry]:
        """Every registered op, sorted by name (conflicting duplicates included)."""
        return sorted((e for entries in self._ops.values() for e in entries), key=lambda e: (e.name, e.plugin.name))

    @property
    def failures(self) -> list[PluginFailure]:
        """Plugins that failed to import, validate or register."""
        return list(self.plugins.failures)

    def backward_kernels_for(self, op_name: str, device_type: str | None = None) -> bool:
        """Whether gradients of op ``op_name`` on ``device_type`` run on BOO kernels
        (``BOO_USE_BACKWARD_KERNELS``: 0, 1, auto or op names); SettingError where the setting
        names an op not registered here."""
        settings = get_settings()
        choice = settings.use_backward_kernels
        if isinstance(choice, frozenset):
            ops = sorted({op.name for op in self.list_ops()})
            unknown = sorted(choice - set(ops))
            if unknown:
                raise SettingError(f"BOO_USE_BACKWARD_KERNELS names no op {', '.join(unknown)}; the ops are "
                                   f"{', '.join(ops)}")
        return settings.backward_kernels_for(op_name, device_type)

    def conflicts(self) -> list[str]:
        """One message per op name or command keyword claimed by more than one plugin."""
        messages = []
        for kind, table in (("op name", self._ops), ("command keyword", self._keywords)):
            for key, entries in sorted(table.items()):
                if len(entries) > 1:
                    messages.append(f"{kind} {key!r} is claimed by " + " and ".join(
                        f"plugin {e.plugin.label}" for e in _by_plugin(entries)))
        messages.extend(self._ambiguous_bases())
        owners: dict[str, OpEntry] = {}
        for entry in self.list_ops():
            for pattern in entry.spec.fusion_patterns:
                if pattern.name in owners and owners[pattern.name] is not entry:
                    messages.append(f"fusion pattern {pattern.name!r} is provided by plugin "
                                    f"{owners[pattern.name].plugin.label} and plugin {entry.plugin.label}")
                owners.setdefault(pattern.name, entry)
        return messages

    def _ambiguous_bases(self) -> list[str]:
        """Base arguments two different keywords both produce (``convb`` + ``fp16`` and
        ``conv`` + ``bfp16``): such a command is refused, naming both plugins."""
        readings: dict[str, list[tuple[str, str, OpEntry]]] = {}
        for keyword, entries in self._keywords.items():
            for entry in entries:
                for suffix in _suffixes(entry):
                    readings.setdefault(keyword + suffix, []).append((keyword, suffix, entry))
        messages = []
        for base, found in sorted(readings.items()):
            found.sort(key=lambda reading: (reading[0], reading[2].plugin.label))
            if len({keyword for keyword, _, _ in found}) > 1:
                messages.append(f"base argument {base!r} reads as " + " and as ".join(
                    f"{keyword!r} + {suffix or 'no suffix'!r} (plugin {entry.plugin.label})"
                    for keyword, suffix, entry in found))
        return messages

    def graph_rewrites(self, graph: str = "forward") -> list[GraphRewrite]:
        """Every op's graph rewrites of ``graph`` (:attr:`GraphRewrite.graph`), ops in name
        order (as :meth:`fusion_patterns`). Ops whose name or keyword is in conflict offer none."""
        return [rewrite for entry in self.list_ops() if len(self._ops[entry.name]) == 1
                for rewrite in entry.spec.graph_rewrites if rewrite.graph == graph]

    def fusion_patterns(self) -> list[FusionPattern]:
        """Every op's fusion patterns, for the torch.compile backends: ops in name order,
        each op's patterns in its order. Ops whose name or keyword is in conflict offer none."""
        patterns: list[FusionPattern] = []
        owners: dict[str, OpEntry] = {}
        for entry in self.list_ops():
            if len(self._ops[entry.name]) > 1:
                continue
            for pattern in entry.spec.fusion_patterns:
                if pattern.name in owners:
                    continue  # reported by conflicts(); the first op keeps it
                owners[pattern.name] = entry
                patterns.append(pattern)
        return patterns

    def formulations(self, signature: Signature, target: Target) -> tuple[Formulation, ...]:
        """``signature``'s formulations on ``target`` (its op's; the reference's export for a
        signature no op registered)."""
        entry = self.op_for_signature(signature)
        return entry.formulations(signature, target) if entry else default_formulations(signature, target)

    def compile_flags(self, signature: Signature, target: Target) -> tuple[str, ...]:
        """The iree-compile flags ``signature``'s op asks for on ``target``."""
        entry = self.op_for_signature(signature)
        return entry.compile_flags(signature, target) if entry else ()

    def kernel_substitutions(self, signature: Signature, target: Target) -> list[object]:
        """What installed plugins supply in place of ``signature``'s executables on ``target``
        (the ``boo_kernel_substitutions`` hook; see :mod:`boo_core.substitute`)."""
        return self.plugins.kernel_substitutions(signature, target)

    def source_tag(self, signature: Signature) -> str:
        """What identifies the code that builds ``signature``'s kernels (cache keys)."""
        entry = self.op_for_signature(signature)
        if entry is not None:
            return entry.source_tag
        return f"unregistered {type(signature).__module__} {package_source_hash(type(signature))}"

    def get_op(self, name: str) -> OpEntry:
        """The op registered under ``name``."""
        entries = self._ops.get(name)
        if not entries:
            raise UnknownOpError(f"no op named {name!r}; {self._installed_summary()}")
        return _unique(entries, f"op name {name!r}")

    def op_for_signature(self, signature: Signature | type[Signature]) -> OpEntry | None:
        """The op whose signature class ``signature`` is (or None if unregistered). Two ops
        registering one class (hence one op name) make it unusable, never one picked silently."""
        cls = signature if isinstance(signature, type) else type(signature)
        for klass in cls.__mro__:
            entries = self._by_signature_class.get(klass)
            if entries:
                return _unique(entries, f"signature class {klass.__name__}")
        return None

    def resolve_base(self, base: str) -> BaseArg:
        """Split a base argument into op and dtype by exact keyword + suffix match."""
        matches: dict[int, tuple[OpEntry, str, torch.dtype]] = {}
        for keyword, entries in self._keywords.items():
            if not base.startswith(keyword):
                continue
            suffix = base[len(keyword):]
            for entry in entries:
                dtype = _suffixes(entry).get(suffix)
                if dtype is not None:
                    matches[id(entry)] = (entry, suffix, dtype)
        if not matches:
            raise UnknownOpError(f"unknown op {base!r}; {self._installed_summary()}", command=base)
        entry = _unique([entry for entry, _, _ in matches.values()], f"command keyword of {base!r}")
        _, suffix, dtype = matches[id(entry)]
        return BaseArg(base, entry, suffix, dtype)

    # -- parsing ----------------------------------------------------------------------------

    def parse(self, command: str | Sequence[str]) -> ParsedCommand:
        """Parse a command into its op, signatures (one per mode) and run options."""
        tokens = tokenize(command)
        if not tokens:
            raise CommandError("empty command: expected a base argument such as 'conv'")
        base = self.resolve_base(tokens[0])
        text = command if isinstance(command, str) else " ".join(tokens)
        try:
            return base.op.spec.parser.parse(tokens[1:], op=base.op.name, base=base.text, dtype=base.dtype)
        except CommandError as e:
            e.command = e.command or text
            raise
        except (BooError, ValueError):
            raise
        except BaseException as e:  # the op's parser has a bug (or calls sys.exit()): say whose
            if not is_plugins_failure(e):
                raise
            raise PluginError(f"plugin {base.op.plugin.label} failed parsing {text!r:.200}: "
                              f"{describe_error(e)}") from e

    def parse_signatures(self, command: str | Sequence[str]) -> list[Signature]:
        """Every signature a command runs (one per mode: ``-F 0`` may give several)."""
        return list(self.parse(command).signatures)

    def parse_command(self, command: str | Sequence[str]) -> Signature:
        """The signature of a command that runs one kernel."""
        parsed = self.parse(command)
        if len(parsed.signatures) != 1:
            names = ", ".join(s.func_name for s in parsed.signatures)
            raise CommandError(f"command runs {len(parsed.signatures)} kernels ({names}); "
                               "use parse_signatures() to get all of them, or select one mode with -F")
        return parsed.signatures[0]

    def _installed_summary(self) -> str:
        if not self._ops:
            text = "no BOO ops are installed (install an op package such as boo-ops-conv)"
        else:
            text = "installed ops: " + ", ".join(
                f"{e.name} ({'/'.join(e.spec.keywords)}, from {e.distribution})" for e in self.list_ops())
        if self.failures:
            text += "; plugins that failed to load: " + ", ".join(f.plugin.label for f in self.failures)
        return text


def _by_plugin(entries: Sequence[OpEntry]) -> list[OpEntry]:
    """``entries`` in a stable order (by plugin label), whatever the ``sys.path`` order."""
    return sorted(entries, key=lambda e: e.plugin.label)


def _unique(entries: Sequence[OpEntry], what: str) -> OpEntry:
    if len(entries) > 1:
        entries = _by_plugin(entries)
        names = [e.plugin.name for e in entries]
        # A plugin name two distributions share would disable both: name one by its key.
        keys = [e.plugin.key if names.count(e.plugin.name) > 1 else e.plugin.name for e in entries]
        raise PluginError(f"{what} is claimed by " + " and ".join(f"plugin {e.plugin.label}" for e in entries)
                          + "; uninstall one, or skip one with BOO_DISABLE_PLUGINS=" + " or ".join(keys))
    return entries[0]


class BooOpRegistry:
    """Process-wide access to the installed ops.

    The default registry is built on first use: entry points are scanned once (lazily,
    never at import). :meth:`reset` forgets it, for tests and embedders that change the
    environment or the installed plugins.
    """

    _default: ClassVar[OpRegistry | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()
    _building: ClassVar[threading.local] = threading.local()

    @classmethod
    def default(cls) -> OpRegistry:
        registry = cls._default
        if registry is None:
            if getattr(cls._building, "active", False):
                # A plugin using the registry while it is imported or registers its ops would
                # otherwise wait on this thread's own lock forever.
                raise PluginError("the op registry is being built: a plugin must not use it while it is "
                                  "imported or registers its ops")
            with cls._lock:
                if cls._default is None:
                    cls._building.active = True
                    try:
                        cls._default = OpRegistry.load()
                    finally:
                        cls._building.active = False
                registry = cls._default
        return registry

    @classmethod
    def reset(cls, registry: OpRegistry | None = None) -> OpRegistry | None:
        """Forget the default registry (or install ``registry`` as the default); return the old one."""
        with cls._lock:
            previous, cls._default = cls._default, registry
        return previous

    @classmethod
    def register_plugin(cls, plugin: object, name: str) -> list[OpEntry]:
        """Register a plugin explicitly (with ``BOO_DISABLE_PLUGIN_AUTOLOAD=1``, the only way)."""
        return cls.default().register_plugin(plugin, name)

    @classmethod
    def parse(cls, command: str | Sequence[str]) -> ParsedCommand:
        """See :meth:`OpRegistry.parse`."""
        return cls.default().parse(command)

    @classmethod
    def parse_command(cls, command: str | Sequence[str]) -> Signature:
        """See :meth:`OpRegistry.parse_command`."""
        return cls.default().parse_command(command)

    @classmethod
    def parse_signatures(cls, command: str | Sequence[str]) -> list[Signature]:
        """See :meth:`OpRegistry.parse_signatures`."""
        return cls.default().parse_signatures(command)

    @classmethod
    def list_ops(cls) -> list[OpEntry]:
        """See :meth:`OpRegistry.list_ops`."""
        return cls.default().list_ops()

    @classmethod
    def get_op(cls, name: str) -> OpEntry:
        """See :meth:`OpRegistry.get_op`."""
        return cls.default().get_op(name)

    @classmethod
    def failures(cls) -> list[PluginFailure]:
        """Plugins that failed to load; see :attr:`OpRegistry.failures`."""
        return cls.default().failures

    @classmethod
    def backward_kernels_for(cls, op_name: str, device_type: str | None = None) -> bool:
        """See :meth:`OpRegistry.backward_kernels_for`."""
        return cls.default().backward_kernels_for(op_name, device_type)


def _suffixes(entry: OpEntry) -> Mapping[str, torch.dtype]:
    """The base-argument suffixes ``entry``'s keywords take: the common ones and its parser's own."""
    own = getattr(entry.spec.parser, "suffixes", None) or {}
    return {**SUFFIX_TO_DTYPE, **own} if own else SUFFIX_TO_DTYPE


provide_installed_ops(BooOpRegistry.default)
