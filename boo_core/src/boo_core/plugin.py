"""The front door for plugin authors: everything an op or a kernel library uses, in one module.

A plugin imports from here and from nowhere else in ``boo_core``::

    from boo_core.plugin import OpSpec, Signature, TensorSpec, CommandParser, hookimpl, launch

What it holds, by stage (docs/plugins.md explains each):

* the contract: ``hookimpl``, ``OpSpec``, ``Formulation``, ``Target``, the errors;
* signatures: ``Signature``, ``TensorSpec`` and the field checks (``require_positive``...);
* command lines: ``CommandParser``, ``Flag``, ``FlagKind``, ``Directions``, ``run_flags``,
  the value types (``integer``, ``positive``, ``one_of``...), ``format_command``;
* dtypes: ``short_name``, ``dtype_from_name`` and the MIOpen suffix tables;
* eager functions: ``launch``, ``launchable_for``, ``get_launchable``, ``Launchable``,
  ``Backward``, ``reference_backward`` and the argument checks (``require_tensor``...);
* torch.compile: ``FusionPattern``, ``FusionMatch``, ``Decline``, ``GraphRewrite`` and the
  node helpers (``node_arguments``, ``only_user``, ``read_before``, ``conversion_of``, ``tensor_value``...);
* numerics and tuning: ``compare`` (its ``Comparison``), ``tolerance_for``, ``check_launchable``,
  ``TuningCandidate`` and the configuration spaces;
* kernel libraries: ``Substitution``, ``KernelExecutables``, ``external_source``, ``extern_module`` and the
  rest of ``boo_core.substitute``;
* the tools: ``DriverBackend``, ``PreparedBackend`` (the ``boo_driver_backends`` hook) and
  ``Timer``, ``TimingStats`` (the ``boo_timers`` hook);
* settings: ``get_settings``, ``configure``, ``settings_override``.

A plugin's tests may also use ``boo_core.testing`` (fixtures, fuzzing, the numerics check).
"""

from __future__ import annotations

from . import (
    ArgumentError,
    BooDevice,
    BooError,
    BooFallbackWarning,
    BooOpRegistry,
    CommandError,
    CommandParser,
    CompileError,
    Decline,
    DeviceError,
    Directions,
    Flag,
    FlagKind,
    Formulation,
    FusionMatch,
    FusionPattern,
    GraphRewrite,
    KernelLoadError,
    Launchable,
    LaunchError,
    OpSpec,
    ParsedCommand,
    ParsedFlags,
    PluginError,
    Signature,
    SubstitutionError,
    Target,
    TensorSpec,
    UnknownOpError,
    UnsupportedError,
    configure,
    conversion_of,
    get_launchable,
    get_settings,
    hookimpl,
    insert_aten,
    launch,
    launchable_for,
    node_arguments,
    only_user,
    run_flags,
)
from .dynamo import offload_summary, reset_offload_summary
from .kernels.configs import REDUCTIONS
from .kernels.export import export_mlir
from .plugins.extensions import DriverBackend, PreparedBackend
from .plugins.patterns import has_static_shape, read_before, static_ints, tensor_value
from .runtime.arguments import (
    is_empty,
    require_int,
    require_ints,
    require_number,
    require_same_device,
    require_tensor,
    require_tensors,
)
from .runtime.autograd import Backward, reference_backward
from .runtime.timing import Timer, TimingStats
from .settings import settings_override
from .signatures.dtypes import DTYPE_TO_SUFFIX, SUFFIX_TO_DTYPE, dtype_from_name, short_name
from .signatures.flags import (
    Integer,
    OutOfRange,
    indexed,
    integer,
    non_negative,
    number,
    one_of,
    optional,
    positive,
    switch,
    text,
    upper,
)
from .signatures.parser import format_command
from .signatures.signature import (
    MAX_TENSOR_BYTES,
    bounded_symbol,
    number_symbol,
    representable_problem,
    require_choice,
    require_finite,
    require_positive,
    require_representable,
    tensor_size_problem,
)
from .substitute import (
    EXTERN_FLAGS,
    Binding,
    Executable,
    Export,
    KernelExecutables,
    Substitution,
    dump_kernel,
    executables_of,
    extern_module,
    external_source,
    sanitize_symbol,
)
from .tune.space import (
    TuningCandidate,
    cpu_contraction_configs,
    cpu_flag_sets,
    elementwise_configs,
    reduction_configs,
    tile_and_fuse_configs,
)
from .verify.numerics import Comparison, check_launchable, compare, tolerance_for

__all__ = [
    "DTYPE_TO_SUFFIX", "EXTERN_FLAGS", "MAX_TENSOR_BYTES", "REDUCTIONS", "SUFFIX_TO_DTYPE",
    "ArgumentError", "Backward", "Binding", "BooDevice", "BooError", "BooFallbackWarning", "BooOpRegistry",
    "CommandError", "CommandParser", "Comparison", "CompileError", "Decline", "DeviceError", "Directions",
    "DriverBackend", "Executable", "Export",
    "Flag", "FlagKind", "Formulation", "FusionMatch", "FusionPattern", "GraphRewrite", "Integer",
    "KernelExecutables", "KernelLoadError", "LaunchError", "Launchable", "OpSpec", "OutOfRange", "ParsedCommand",
    "ParsedFlags", "PluginError", "PreparedBackend", "Signature", "Substitution", "SubstitutionError", "Target",
    "TensorSpec", "Timer", "TimingStats", "TuningCandidate", "UnknownOpError", "UnsupportedError",
    "bounded_symbol", "check_launchable", "compare", "configure", "conversion_of", "cpu_contraction_configs",
    "cpu_flag_sets", "dtype_from_name", "dump_kernel", "elementwise_configs", "executables_of", "export_mlir",
    "extern_module", "external_source", "format_command", "get_launchable", "get_settings", "has_static_shape",
    "hookimpl",
    "indexed", "insert_aten", "integer", "is_empty", "launch", "launchable_for", "node_arguments",
    "non_negative", "number", "number_symbol", "offload_summary", "one_of", "only_user", "optional", "positive",
    "read_before", "reduction_configs", "reference_backward", "representable_problem", "require_choice",
    "require_finite",
    "require_int", "require_ints",
    "require_number", "require_positive", "require_representable", "require_same_device", "require_tensor",
    "require_tensors", "reset_offload_summary", "run_flags", "sanitize_symbol", "settings_override",
    "short_name", "static_ints", "switch", "tensor_size_problem", "tensor_value", "text", "tile_and_fuse_configs",
    "tolerance_for", "upper",
]
