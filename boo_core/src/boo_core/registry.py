"""The op registry: which ops are installed, and commands turned into signatures.

:class:`OpRegistry` is built from a :class:`~boo_core.plugins.BooPlugins`;
:class:`BooOpRegistry` is the process-wide facade that builds the default registry lazily,
once, on first use.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from .dtypes import SUFFIX_TO_DTYPE
from .errors import CommandError, PluginError, UnknownOpError
from .fusion import FusionPattern
from .opspec import OpSpec
from .parser import ParsedCommand, tokenize
from .plugins import BooPlugins, PluginFailure, PluginInfo
from .signature import Signature


@dataclass(frozen=True)
class OpEntry:
    """A registered op and the plugin that registered it."""

    spec: OpSpec
    plugin: PluginInfo

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def distribution(self) -> str:
        """``boo-ops-conv 0.1.0``, or the plugin name for an explicitly registered plugin."""
        info = self.plugin
        return f"{info.distribution} {info.version}" if info.distribution else f"(plugin {info.name})"


@dataclass(frozen=True)
class BaseArg:
    """A base argument split into its op and dtype: ``convbfp16`` = conv + bfp16."""

    text: str
    op: OpEntry
    suffix: str
    dtype: torch.dtype


class OpRegistry:
    """Ops registered by a set of plugins, and command parsing over them."""

    def __init__(self, plugins: BooPlugins) -> None:
        self.plugins = plugins
        self._ops: dict[str, list[OpEntry]] = {}
        self._keywords: dict[str, list[OpEntry]] = {}
        self._by_signature_class: dict[type, OpEntry] = {}
        self._patterns: list[FusionPattern] | None = None
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
            self._patterns = None
            return self._add_ops(self.plugins.collect_ops(plugin=name))

    def _add_ops(self, collected: Sequence[tuple[PluginInfo, OpSpec]]) -> list[OpEntry]:
        added = []
        for info, spec in collected:
            entry = OpEntry(spec, info)
            self._ops.setdefault(spec.name, []).append(entry)
            for keyword in spec.keywords:
                self._keywords.setdefault(keyword, []).append(entry)
            self._by_signature_class.setdefault(spec.signature_class, entry)
            added.append(entry)
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

    def conflicts(self) -> list[str]:
        """One message per op name or command keyword claimed by more than one plugin."""
        messages = []
        for kind, table in (("op name", self._ops), ("command keyword", self._keywords)):
            for key, entries in sorted(table.items()):
                if len(entries) > 1:
                    messages.append(f"{kind} {key!r} is claimed by " + " and ".join(
                        f"plugin {e.plugin.label}" for e in entries))
        return messages

    def fusion_patterns(self) -> list[FusionPattern]:
        """The plugins' fusion patterns for the torch.compile backends (collected once)."""
        patterns = self._patterns
        if patterns is None:
            patterns = self._patterns = [pattern for _, pattern in self.plugins.fusion_patterns()]
        return patterns

    def get_op(self, name: str) -> OpEntry:
        """The op registered under ``name``."""
        entries = self._ops.get(name)
        if not entries:
            raise UnknownOpError(f"no op named {name!r}; {self._installed_summary()}")
        return _unique(entries, f"op name {name!r}")

    def op_for_signature(self, signature: Signature | type[Signature]) -> OpEntry | None:
        """The op whose signature class ``signature`` is (or None if unregistered)."""
        cls = signature if isinstance(signature, type) else type(signature)
        for klass in cls.__mro__:
            entry = self._by_signature_class.get(klass)
            if entry is not None:
                return entry
        return None

    def resolve_base(self, base: str) -> BaseArg:
        """Split a base argument into op and dtype by exact keyword + suffix match."""
        matches: dict[int, tuple[OpEntry, str]] = {}
        for suffix in SUFFIX_TO_DTYPE:
            stem = base[: len(base) - len(suffix)] if suffix else base
            if suffix and not base.endswith(suffix):
                continue
            for entry in self._keywords.get(stem, ()):
                matches[id(entry)] = (entry, suffix)
        if not matches:
            raise UnknownOpError(f"unknown op {base!r}; {self._installed_summary()}", command=base)
        entries = [entry for entry, _ in matches.values()]
        entry = _unique(entries, f"command keyword of {base!r}")
        suffix = next(s for e, s in matches.values() if e is entry)
        return BaseArg(base, entry, suffix, SUFFIX_TO_DTYPE[suffix])

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


def _unique(entries: Sequence[OpEntry], what: str) -> OpEntry:
    if len(entries) > 1:
        raise PluginError(f"{what} is claimed by " + " and ".join(f"plugin {e.plugin.label}" for e in entries)
                          + "; uninstall one, or skip one with BOO_DISABLE_PLUGINS=<plugin name>")
    return entries[0]


class BooOpRegistry:
    """Process-wide access to the installed ops.

    The default registry is built on first use: entry points are scanned once (lazily,
    never at import). :meth:`reset` forgets it, for tests and embedders that change the
    environment or the installed plugins.
    """

    _default: ClassVar[OpRegistry | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def default(cls) -> OpRegistry:
        registry = cls._default
        if registry is None:
            with cls._lock:
                if cls._default is None:
                    cls._default = OpRegistry.load()
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
