"""Dumping a kernel's executables and substituting them: IREE's executable dump and
substitution flags, per kernel, through BOO's cache and verification.

* :func:`dump_kernel` (``boo dump``): a kernel's executables as sources, configured
  sources, benchmarks and target binaries, with an index.
* :class:`Substitution`: replacement executables for one kernel, from a directory
  (``get_launchable(..., substitutions=DIR)``, ``BOO_SUBSTITUTIONS``, ``--substitutions``)
  or from a plugin (the ``boo_kernel_substitutions`` hook).
* :class:`KernelExecutables`: a kernel's executables before substitution (what a plugin
  building files on demand is handed).

docs/cli.md (``boo dump``, substitution) and docs/gpu.md (the CUDA kernel ABI) describe them.
"""

from ..errors import SubstitutionError
from .dump import KernelDump, dump_kernel
from .executables import KernelExecutables, executables_of
from .external import EXTERN_FLAGS, extern_module, external_source
from .mlir_text import Binding, Executable, Export, sanitize_symbol
from .stages import STAGES
from .substitution import Substitution

__all__ = [
    "EXTERN_FLAGS",
    "STAGES",
    "Binding",
    "Executable",
    "Export",
    "KernelDump",
    "KernelExecutables",
    "Substitution",
    "SubstitutionError",
    "dump_kernel",
    "executables_of",
    "extern_module",
    "external_source",
    "sanitize_symbol",
]
