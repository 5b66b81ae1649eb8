"""Signature + target -> compiled kernel: flags, cache key, export and compile."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from . import cache
from .compiler import BASE_FLAGS, compiler_available, compiler_version, reproducer, run_compile
from .config import get_settings
from .devices import Target
from .errors import CompileError
from .registry import BooOpRegistry, OpRegistry
from .signature import Signature


@dataclass(frozen=True)
class KernelRequest:
    """Everything that determines one kernel: signature, target, flags and MLIR source."""

    signature: Signature
    target: Target
    flags: tuple[str, ...]
    plugin_mlir: str | None  # MLIR a plugin provides through boo_signature_mlir, if any
    key: cache.CacheKey

    @classmethod
    def create(cls, signature: Signature, target: Target, registry: OpRegistry | None = None) -> KernelRequest:
        registry = registry if registry is not None else BooOpRegistry.default()
        plugins = registry.plugins
        flags = (*BASE_FLAGS, *target.compile_flags(), *plugins.compile_flags(signature, target),
                 *get_settings().extra_compile_flags)
        provided = plugins.signature_mlir(signature, target)
        plugin_mlir = provided[1] if provided else None
        op = registry.op_for_signature(signature)
        material = {
            "signature": signature.canonical(),
            "op": op.distribution if op else None,
            "mlir": hashlib.sha256(plugin_mlir.encode()).hexdigest() if plugin_mlir else f"torch.export {torch.__version__}",
            "compiler": compiler_version(),
            "target": {"backend": target.backend, "arch": target.arch, "fingerprint": target.fingerprint},
            "flags": list(flags),
            "format": cache.CACHE_FORMAT,
        }
        return cls(signature, target, flags, plugin_mlir, cache.CacheKey.create(signature.func_name, material))

    def build(self, entry: cache.CacheEntry, output: Path) -> str:
        """Write the entry's MLIR and compile command, compile into ``output``; the command."""
        if not compiler_available():
            raise CompileError(
                f"{self.signature.func_name} is not in the kernel cache and the IREE compiler is not "
                "installed (pip install iree-base-compiler, or pre-populate the cache where it is)")
        mlir = self.plugin_mlir
        if mlir is None:
            from .export import export_mlir

            mlir = export_mlir(self.signature)
        mlir_path = entry.write_text(cache.MLIR_FILE, mlir)
        shown = reproducer(mlir_path, entry.kernel_path, self.flags)
        entry.write_text(cache.COMMAND_FILE, shown + "\n")
        run_compile(mlir_path, output, self.flags, shown=shown)
        return shown

    def fetch(self, *, rebuild: bool = False) -> cache.CachedKernel:
        """The compiled kernel: from the disk cache when enabled, compiled on a miss."""
        settings = get_settings()
        if not settings.cache_enabled:
            return cache.build_uncached(self.key, self.build)
        if rebuild:
            return cache.rebuild(settings.cache_dir, self.key, self.build)
        return cache.fetch_or_build(settings.cache_dir, self.key, self.build)
