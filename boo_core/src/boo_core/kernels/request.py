"""Signature + target + formulation -> a compiled kernel: flags, cache key, compile.

The cache key is computed from cheap material only: the signature's fields, the op's source
tag (its distribution, version and a hash of its code), the formulation's name, the
compiler version, the target and every flag. Nothing is exported to look a kernel up; the
formulation's MLIR is made only when the kernel is not in the cache, so a warm lookup costs
microseconds and works without the compiler installed (runtime-only deployments).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BooError, CompileError, UnsupportedError, describe_error, is_plugins_failure
from ..files import MAX_SPEC_BYTES, FileRefused, read_bytes
from ..settings import get_settings
from ..signatures.installed import installed_ops
from ..signatures.signature import tensor_size_problem
from . import cache, launch_plan
from .compiler import (
    BASE_FLAGS,
    compile_command,
    compile_to_bytes,
    compiler_available,
    compiler_version,
    reproducer,
)
from .configs import compile_with_config
from .formulation import Formulation
from .source_tags import core_source_tag
from .target import Target
from .validate import check_in_child

logger = logging.getLogger(__name__)

TUNING_SPEC_FLAG = "--iree-codegen-tuning-spec-path"
#: The copy of ``BOO_TUNING_SPEC_PATH`` a build compiles with, beside its MLIR.
TUNING_SPEC_FILE = "tuning_spec.mlir"


@dataclass(frozen=True)
class KernelRequest:
    """Everything that determines one kernel: signature, target, formulation, flags,
    and (for a tuned kernel) the per-dispatch configuration."""

    signature: Any  # boo_core.Signature
    target: Target
    formulation: Formulation
    flags: tuple[str, ...]
    key: cache.CacheKey
    config: Mapping[str, Any] | None = field(default=None, compare=False)
    substitution: Any = field(default=None, compare=False)  # boo_core.substitute.Substitution
    #: The plugin whose code makes the MLIR (``"conv" (boo-ops-conv 0.1.0)``), for messages.
    origin: str = field(default="", compare=False)
    #: ``BOO_TUNING_SPEC_PATH``'s content as read for the key: what the compiler reads, from a
    #: copy beside the kernel's MLIR (:meth:`flags_in`), never the user's file again.
    tuning_spec: bytes | None = field(default=None, compare=False, repr=False)

    @classmethod
    def create(cls, signature: Any, target: Target, formulation: Formulation | None = None, *,
               registry: Any = None, config: Mapping[str, Any] | None = None,
               extra_flags: tuple[str, ...] = (), substitution: Any = None) -> KernelRequest:
        """The request for ``signature`` on ``target`` built by ``formulation`` (default:
        the op's first). ``config`` is a tuning candidate's configuration (see
        :mod:`boo_core.tune`), ``extra_flags`` a candidate's flags, ``substitution``
        executables replacing the kernel's own (:mod:`boo_core.substitute`)."""
        if config and substitution is not None:
            raise ValueError("a kernel takes a tuning configuration or a substitution, not both: both replace "
                             "IREE's configured executables")
        problem = tensor_size_problem(signature)
        if problem:  # an empty or oversized tensor never reaches the compiler
            raise UnsupportedError(f"{signature.func_name}: {problem}; BOO compiles no kernel for it")
        registry = registry if registry is not None else installed_ops()
        if formulation is None:
            formulation = registry.formulations(signature, target)[0]
        if config is None:  # with a substitution, for the executables it does not replace
            config = formulation.config
        settings = get_settings()
        spec_flags: tuple[str, ...] = ()
        spec_digest = spec = None
        if settings.tuning_spec is not None:
            spec = _read_tuning_spec(settings.tuning_spec)
            spec_digest = hashlib.sha256(spec).hexdigest()
            spec_flags = (f"{TUNING_SPEC_FLAG}={settings.tuning_spec}",)
        flags = (*BASE_FLAGS, *target.compile_flags(), *registry.compile_flags(signature, target),
                 *formulation.flags, *extra_flags, *settings.extra_compile_flags, *spec_flags)
        material = {
            "signature": signature.canonical(),
            "op": registry.source_tag(signature),
            "core": core_source_tag(),
            "formulation": formulation.name,
            "config": dict(config) if config else None,
            "compiler": compiler_version(),
            "target": {"backend": target.backend, "arch": target.arch, "fingerprint": target.fingerprint},
            "flags": list(flags),
            "tuning_spec": spec_digest,
            "format": cache.CACHE_FORMAT,
        }
        if substitution is not None:  # only then, so that other kernels keep their keys
            material["substitution"] = substitution.key_material()
        key = cache.CacheKey.create(signature.func_name, material)
        entry = registry.op_for_signature(signature)
        origin = f"plugin {entry.plugin.label}" if entry else ""
        return cls(signature, target, formulation, flags, key, config, substitution, origin, spec)

    def flags_in(self, entry: cache.CacheEntry) -> tuple[str, ...]:
        """The flags to compile ``entry``'s kernel with: where a tuning spec is set, the copy
        of it written into the entry (:data:`TUNING_SPEC_FILE`) in place of the user's file,
        which may have changed since it was read for the key."""
        if self.tuning_spec is None:
            return self.flags
        copy = entry.write_text(TUNING_SPEC_FILE, self.tuning_spec)
        return tuple(f"{TUNING_SPEC_FLAG}={copy}" if flag.startswith(f"{TUNING_SPEC_FLAG}=") else flag
                     for flag in self.flags)

    def source(self) -> str:
        """The MLIR to compile (the formulation's; a configuration applies later, to the
        executables IREE configures)."""
        return self.formulation.source(self.signature)

    def build(self, entry: cache.CacheEntry | None) -> tuple[str, bytes]:
        """Compile the kernel: the command and the kernel's bytes. Given a cache entry, its
        MLIR and compile command are written there first (the reproducer); without one
        (cache disabled or unwritable) the MLIR goes to the compiler through a pipe, and is
        saved to a scratch directory only if the compile fails."""
        if not compiler_available():
            raise CompileError(
                f"{self.signature.func_name} is not in the kernel cache and the IREE compiler is not "
                "installed (pip install iree-base-compiler, or pre-populate the cache where it is)")
        if self.substitution is not None:  # its files, checked against the kernel, and IREE's flags
            return self.substitution.build_kernel(self, entry)
        try:
            mlir = self.source()
        except BooError:
            raise
        except BaseException as e:  # the op's code (its reference, a formulation) failed: say whose
            if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
                raise
            origin = f" ({self.origin})" if self.origin else ""
            raise CompileError(f"formulation {self.formulation.name!r} of {self.signature.func_name}{origin} "
                               f"could not make its MLIR: {describe_error(e)}") from e
        if entry is not None:
            return self._compile(entry, mlir)
        if self.config or self.tuning_spec is not None:  # files (a configuration, the spec's copy): a scratch folder
            with tempfile.TemporaryDirectory(prefix="boo-") as scratch:
                return "", self._compile(cache.CacheEntry(Path(scratch), self.key, scratch=True), mlir)[1]
        try:
            return "", self._run(mlir, self.flags)
        except CompileError as e:
            raise _with_scratch_reproducer(e, mlir, self.flags, self.signature.func_name) from None

    def configured_flags(self, entry: cache.CacheEntry, mlir_path: Path, flags: tuple[str, ...],
                         required: bool = True) -> tuple[str, ...]:
        """``flags`` and, where the kernel has a configuration, the flags that apply it (its
        edited executables written into ``entry``'s folder, from a compile with ``flags``);
        ``required``: whether a configuration that fits no executable is an error."""
        if not self.config:
            return flags
        command = compile_command(mlir_path, entry.kernel_path, flags)[:-2]  # without "-o output"
        try:
            return (*flags, *compile_with_config(command, entry.directory, self.config,
                                                 get_settings().compile_timeout, required))
        except OSError as e:
            raise cache.CacheUnwritable(f"cannot write in {entry.directory}: {e.strerror or e}") from e

    def _compile(self, entry: cache.CacheEntry, mlir: str) -> tuple[str, bytes]:
        mlir_path = entry.write_text(cache.MLIR_FILE, mlir)
        flags = self.configured_flags(entry, mlir_path, self.flags_in(entry))
        shown = reproducer(mlir_path, entry.kernel_path, flags)
        entry.write_text(cache.COMMAND_FILE, shown + "\n")
        return shown, self.compile_in_entry(entry, mlir_path, flags, shown, self._run)

    def compile_in_entry(self, entry: cache.CacheEntry, mlir_path: Path, flags: tuple[str, ...], shown: str,
                         run: Any = None) -> bytes:
        """Compile ``mlir_path`` with ``flags`` for the kernel of ``entry``. For CUDA, the
        hal phase's text comes out of the same compile and is read into the entry's launch
        plan (made only here, when the kernel is built: never from the entry's files)."""
        run = run or (lambda mlir, with_flags, as_shown: compile_to_bytes(mlir, with_flags, shown=as_shown))
        if self.target.backend != "cuda" or entry.scratch:
            return run(mlir_path, flags, shown)
        with tempfile.TemporaryDirectory(prefix="boo-phases-") as phases:
            data = run(mlir_path, (*flags, f"{launch_plan.HAL_PHASE_FLAG}={phases}"), shown)
            reason = launch_plan.write_plan(entry.directory, launch_plan.hal_phase_text(Path(phases)),
                                            self.signature.func_name, data)
        if reason:
            logger.info("%s: no launch plan, IREE's runtime will run it: %s", self.signature.func_name, reason)
        return data

    def _run(self, mlir: Path | str, flags: tuple[str, ...], shown: str | None = None) -> bytes:
        try:
            return compile_to_bytes(mlir, flags, shown=shown)
        except CompileError as e:
            spec = get_settings().tuning_spec
            if spec is not None and "Failed to load tuning spec" in str(e):
                raise CompileError(f"BOO_TUNING_SPEC_PATH={spec}: iree-compile rejected the tuning spec:\n{e}",
                                   mlir_path=e.mlir_path, command=e.command) from None
            raise

    def fetch(self, *, rebuild: bool = False) -> cache.CachedKernel:
        """The compiled kernel: from the disk cache when enabled, compiled on a miss. A
        cached kernel whose integrity cannot be proven is rebuilt, or, with no compiler to
        rebuild it, run once in a child process before it is trusted."""
        settings = get_settings()
        details = {"formulation": self.formulation.name, "func_name": self.signature.func_name,
                   "config": dict(self.config) if self.config else None}
        if self.substitution is not None:
            details["substitution"] = {"label": self.substitution.label, **self.substitution.key_material()}
        if not settings.cache_enabled:
            kernel = cache.build_uncached(self.key, self.build, details)
        else:
            validate = None if compiler_available() else functools.partial(check_in_child, self.signature,
                                                                           self.target)
            kernel = cache.fetch_or_build(settings.cache_dir, self.key, self.build, details, rebuild=rebuild,
                                          validate=validate)
        if self.target.backend == "cuda" and settings.cuda_launch == "direct":
            kernel = dataclasses.replace(kernel, plan=self._plan(kernel))
        return kernel

    def _plan(self, kernel: cache.CachedKernel) -> launch_plan.LaunchPlan | str:
        """``kernel``'s launch plan from its entry, or why it has none."""
        if kernel.directory is None:
            return "compiled without a cache entry to keep a launch plan in"
        return launch_plan.plan_for_entry(kernel.directory, kernel.vmfb, self.signature.func_name)

    @property
    def directory(self) -> Path | None:
        """Where this kernel's cache entry is (None with the cache disabled)."""
        settings = get_settings()
        return settings.cache_dir / self.key.dirname if settings.cache_enabled else None


def _with_scratch_reproducer(error: CompileError, mlir: str, flags: tuple[str, ...], name: str) -> CompileError:
    """``error`` of an in-memory compile, with its MLIR and command saved where a person can
    rerun them (a scratch directory), when that can be written."""
    try:
        directory = Path(tempfile.mkdtemp(prefix=f"boo-{name[:40]}-"))
        mlir_path = directory / cache.MLIR_FILE
        mlir_path.write_text(mlir)
    except OSError:
        return error
    shown = reproducer(mlir_path, directory / cache.KERNEL_FILE, flags)
    message = str(error).replace("command: " + (error.command or ""), f"MLIR: {mlir_path}\n  command: {shown}")
    return CompileError(message, mlir_path=str(mlir_path), command=shown, recordable=error.recordable)


def _read_tuning_spec(path: Path) -> bytes:
    """The tuning spec's bytes: a regular file, bounded (a FIFO or ``/dev/zero`` is refused)."""
    try:
        return read_bytes(path, MAX_SPEC_BYTES, what="tuning spec")
    except OSError as e:  # FileRefused says why itself
        reason = str(e) if isinstance(e, FileRefused) else (e.strerror or str(e))
        raise CompileError(f"BOO_TUNING_SPEC_PATH={path}: cannot read the tuning spec: {reason}") from None
