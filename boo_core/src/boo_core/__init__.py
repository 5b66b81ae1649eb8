"""BOO core: launch standalone IREE-compiled kernels from PyTorch, one op per plugin.

boo_core knows no op. Op distributions (``boo-ops-conv``...) register through the ``boo``
entry-point group; :class:`BooOpRegistry` finds them lazily on first use.

The package is laid out by stage: ``plugins`` (the contract and loading), ``signatures``
(signatures, flags, parsing), ``kernels`` (formulations, compile, cache), ``verify``,
``tune``, ``runtime`` (devices, launching), ``tools`` (the ``boo`` command) and ``dynamo``
(torch.compile). What plugins and users need is re-exported here.
"""

from .errors import (
                              ArgumentError,
                              BooError,
                              BooFallbackWarning,
                              CommandError,
                              CompileError,
                              DeviceError,
                              KernelLoadError,
                              LaunchError,
                              PluginError,
                              SubstitutionError,
                              UnknownOpError,
                              UnsupportedError,
)
from .kernels.formulation import Formulation
from .kernels.target import Target
from .plugins.hookspecs import hookimpl
from .plugins.opspec import OpSpec
from .plugins.patterns import (
                              Decline,
                              FusionMatch,
                              FusionPattern,
                              GraphRewrite,
                              conversion_of,
                              insert_aten,
                              node_arguments,
                              only_user,
)
from .plugins.registry import BooOpRegistry, OpEntry, OpRegistry
from .runtime.autograd import launch
from .runtime.devices import BooDevice, resolve_device
from .runtime.launchable import Launchable
from .runtime.lookup import clear_launchables, get_launchable, launchable_for
from .settings import Settings, configure, get_settings
from .signatures.flags import Directions, Flag, FlagKind, run_flags
from .signatures.parser import CommandParser, ParsedCommand, ParsedFlags
from .signatures.signature import Signature, TensorSpec
from .tools.preload import CachePopulator

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
    "Decline",
    "DeviceError",
    "KernelLoadError",
    "Directions",
    "Flag",
    "FlagKind",
    "Formulation",
    "FusionMatch",
    "FusionPattern",
    "GraphRewrite",
    "LaunchError",
    "Launchable",
    "OpEntry",
    "OpRegistry",
    "OpSpec",
    "ParsedCommand",
    "ParsedFlags",
    "PluginError",
    "Settings",
    "Signature",
    "SubstitutionError",
    "Target",
    "TensorSpec",
    "UnknownOpError",
    "UnsupportedError",
    "clear_launchables",
    "configure",
    "conversion_of",
    "get_launchable",
    "get_settings",
    "hookimpl",
    "insert_aten",
    "launch",
    "launchable_for",
    "node_arguments",
    "only_user",
    "resolve_device",
    "run_flags",
]
