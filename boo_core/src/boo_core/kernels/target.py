"""Compile targets: what iree-compile generates code for (``cpu``, ``cuda:sm_80``, ``rocm:gfx942``)."""

from __future__ import annotations

import functools
import hashlib
import platform
from dataclasses import dataclass

from ..errors import DeviceError

_BACKEND_ALIASES = {"cpu": "llvm-cpu", "llvm-cpu": "llvm-cpu", "cuda": "cuda", "rocm": "rocm", "hip": "rocm"}


@dataclass(frozen=True)
class Target:
    """A compile target: ``backend`` (``llvm-cpu``, ``cuda``, ``rocm``) and ``arch``.

    ``arch`` is ``host`` for the CPU this process runs on (``fingerprint`` then identifies
    that CPU, so a shared cache never hands one machine's kernel to another), ``sm_80`` for
    CUDA, ``gfx942`` for ROCm.
    """

    backend: str
    arch: str
    fingerprint: str = ""

    @classmethod
    def parse(cls, text: str) -> Target:
        """Parse ``cpu``, ``cuda:sm_80`` or ``rocm:gfx942`` (the ``--target`` syntax)."""
        backend, _, arch = text.strip().partition(":")
        canonical = _BACKEND_ALIASES.get(backend.lower())
        if canonical is None:
            raise DeviceError(f"unknown target {text!r}: expected cpu, cuda:<sm_NN> or rocm:<gfxNNN>")
        if canonical == "llvm-cpu":
            if arch not in ("", "host"):
                raise DeviceError(f"target {text!r}: only the host CPU is supported ('cpu')")
            return cls("llvm-cpu", "host", host_cpu_fingerprint())
        if not arch:
            raise DeviceError(f"target {text!r} needs an architecture, e.g. cuda:sm_80 or rocm:gfx942")
        return cls(canonical, arch)

    @property
    def name(self) -> str:
        """Short name: ``cpu``, ``cuda:sm_80``, ``rocm:gfx942``."""
        return "cpu" if self.backend == "llvm-cpu" else f"{self.backend}:{self.arch}"

    def compile_flags(self) -> list[str]:
        """iree-compile flags selecting this target."""
        if self.backend == "llvm-cpu":
            return ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                    f"--iree-llvmcpu-target-cpu={self.arch}"]
        if self.backend == "cuda":
            # async-external adds a "$async" entry taking wait/signal fences, which the
            # launchable uses to know exactly when the kernel is done.
            return ["--iree-hal-target-device=cuda", f"--iree-cuda-target={self.arch}",
                    "--iree-execution-model=async-external"]
        if self.backend == "rocm":
            return ["--iree-hal-target-device=hip", f"--iree-rocm-target={self.arch}"]
        raise DeviceError(f"no compile flags for backend {self.backend!r}")



@functools.cache
def host_cpu_fingerprint() -> str:
    """A short hash of this CPU's model and feature flags (``host`` kernels depend on them)."""
    description = platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [line for line in f if line.startswith(("model name", "flags", "Features", "CPU part"))]
        # The first processor's lines describe the part; the others repeat them.
        description += "".join(dict.fromkeys(lines))
    except OSError:
        description += platform.processor()
    return hashlib.sha256(description.encode()).hexdigest()[:12]
