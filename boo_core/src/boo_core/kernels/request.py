"""Signature + target + formulation -> a compiled kernel: flags, cache key, compile.

The cache key is computed from cheap material only: the signature's fields, the op's source
tag (its distribution, version and a hash of its code), the formulation's name, the
compiler version, the target and every flag. Nothing is exported to look a kernel up; the
formulation's MLIR is made only when the kernel is not in the cache, so a warm lookup costs
microseconds and works without the compiler installed (runtime-only deployments).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CompileError, UnsupportedError
from ..settings import get_settings
from ..signatures.signature import tensor_size_problem
from . import cache
from .compiler import (
    BASE_FLAGS,
    compile_command,
    compiler_available,
    compiler_version,
    reproducer,
    run_compile,
)
from .formulation import Formulation
from .target import Target


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

    @classmethod
    def create(cls, signature: Any, target: Target, formulation: Formulation | None = None, *,
               registry: Any = None, config: Mapping[str, Any] | None = None,
               extra_flags: tuple[str, ...] = ()) -> KernelRequest:
        """The request for ``signature`` on ``target`` built by ``formulation`` (default:
        the op's first). ``config`` is a tuning candidate's configuration (see
        :mod:`boo_core.tune`), ``extra_flags`` a candidate's flags."""
        from ..plugins.registry import BooOpRegistry, core_source_tag

        problem = tensor_size_problem(signature)
        if problem:  # an empty or oversized tensor never reaches the compiler
            raise UnsupportedError(f"{signature.func_name}: {problem}; BOO compiles no kernel for it")
        registry = registry if registry is not None else BooOpRegistry.default()
        if formulation is None:
            formulation = registry.formulations(signature, target)[0]
        settings = get_settings()
        spec_flags: tuple[str, ...] = ()
        spec_digest = None
        if settings.tuning_spec is not None:
            spec_digest = _tuning_spec_digest(settings.tuning_spec)
            spec_flags = (f"--iree-codegen-tuning-spec-path={settings.tuning_spec}",)
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
        key = cache.CacheKey.create(signature.func_name, material)
        return cls(signature, target, formulation, flags, key, config)

    def source(self) -> str:
        """The MLIR to compile (the formulation's; a configuration applies later, to the
        executables IREE configures)."""
        return self.formulation.source(self.signature)

    def build(self, entry: cache.CacheEntry, output: Path) -> str:
        """Write the entry's MLIR and compile command, compile into ``output``; the command."""
        if not compiler_available():
            raise CompileError(
                f"{self.signature.func_name} is not in the kernel cache and the IREE compiler is not "
                "installed (pip install iree-base-compiler, or pre-populate the cache where it is)")
        mlir_path = entry.write_text(cache.MLIR_FILE, self.source())
        flags = self.flags
        if self.config:
            from ..tune.configs import compile_with_config

            command = compile_command(mlir_path, output, flags)[:-2]  # without "-o output"
            flags = (*flags, *compile_with_config(command, entry.directory, self.config,
                                                  get_settings().compile_timeout))
        shown = reproducer(mlir_path, entry.kernel_path, flags)
        entry.write_text(cache.COMMAND_FILE, shown + "\n")
        try:
            run_compile(mlir_path, output, flags, shown=shown)
        except CompileError as e:
            spec = get_settings().tuning_spec
            if spec is not None and "Failed to load tuning spec" in str(e):
                raise CompileError(f"BOO_TUNING_SPEC_PATH={spec}: iree-compile rejected the tuning spec:\n{e}",
                                   mlir_path=e.mlir_path, command=e.command) from None
            raise
        return shown

    def fetch(self, *, rebuild: bool = False) -> cache.CachedKernel:
        """The compiled kernel: from the disk cache when enabled, compiled on a miss."""
        settings = get_settings()
        details = {"formulation": self.formulation.name, "func_name": self.signature.func_name,
                   "config": dict(self.config) if self.config else None}
        if not settings.cache_enabled:
            return cache.build_uncached(self.key, self.build, details)
        return cache.fetch_or_build(settings.cache_dir, self.key, self.build, details, rebuild=rebuild)

    @property
    def directory(self) -> Path | None:
        """Where this kernel's cache entry is (None with the cache disabled)."""
        settings = get_settings()
        return settings.cache_dir / self.key.dirname if settings.cache_enabled else None


def _tuning_spec_digest(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CompileError(f"BOO_TUNING_SPEC_PATH={path}: cannot read the tuning spec: {e.strerror or e}") from None
    return hashlib.sha256(data).hexdigest()
