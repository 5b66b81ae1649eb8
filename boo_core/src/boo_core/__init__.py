"""BOO core: launch standalone IREE-compiled kernels from PyTorch, one op per plugin.

boo_core knows no op. Op distributions (``boo-ops-conv``...) register through the ``boo``
entry-point group; :class:`BooOpRegistry` finds them lazily on first use.
"""

from .config import Settings, configure, get_settings
from .devices import BooDevice, Target, resolve_device
from .errors import (
    ArgumentError,
    BooError,
    BooFallbackWarning,
    CommandError,
    CompileError,
    DeviceError,
    PluginError,
    UnknownOpError,
    UnsupportedError,
)
from .hookspecs import hookimpl
from .launchable import Launchable, clear_launchables, get_launchable, launchable_for
from .opspec import OpSpec
from .parser import CommandParser, Flag, FlagKind, ParsedCommand, ParsedFlags
from .preload import CachePopulator
from .registry import BooOpRegistry, OpEntry, OpRegistry
from .signature import Signature, TensorSpec

__all__ = [
    "ArgumentError",
    "BooDevice",
    "BooError",
    "BooFallbackWarning",
    "BooOpRegistry",
    "CachePopulator",
    "CommandError",
    "CommandParser",
    "CompileError",
    "DeviceError",
    "Flag",
    "FlagKind",
    "Launchable",
    "OpEntry",
    "OpRegistry",
    "OpSpec",
    "ParsedCommand",
    "ParsedFlags",
    "PluginError",
    "Settings",
    "Signature",
    "Target",
    "TensorSpec",
    "UnknownOpError",
    "UnsupportedError",
    "clear_launchables",
    "configure",
    "get_launchable",
    "get_settings",
    "hookimpl",
    "launchable_for",
    "resolve_device",
]
