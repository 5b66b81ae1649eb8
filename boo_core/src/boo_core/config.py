"""Process-wide settings: read from the environment on first use, settable from Python.

============================  ===============================================================
``BOO_CACHE_ON``              ``1`` (default) keeps compiled kernels on disk; ``0`` keeps them
                              in memory only, for this process.
``BOO_CACHE_DIR``             Where the disk cache lives (default ``$XDG_CACHE_HOME/boo`` or
                              ``~/.cache/boo``).
``BOO_EXTRA_COMPILE_FLAGS``   Extra iree-compile flags for every kernel (shell-quoted); they
                              are part of the cache key.
``BOO_CPU_DRIVER``            IREE runtime driver for CPU kernels: ``auto`` (default: small
                              kernels on ``local-sync``, inline; the rest on ``local-task``,
                              multithreaded), ``local-sync`` or ``local-task``.
``BOO_USE_BACKWARD_KERNELS``  ``1``: differentiable BOO calls compute gradients with BOO
                              kernels where the op has them; ``0`` (default): with PyTorch.
``BOO_CUDA_TARGET``           IREE CUDA target (``sm_80``, ``sm_89``...) instead of the one
                              chosen from the GPU's compute capability.
``BOO_VERIFY``                ``1``: check each kernel once, the first time a process loads it,
                              against PyTorch; the verdict is kept in the cache entry, and a
                              kernel that failed is never used: calls fall back to PyTorch.
``BOO_COMPILE_STRICT``        ``1``: in the torch.compile backends, a kernel that cannot be
                              compiled or launched is an error; ``0`` (default): that part
                              runs on the nested backend, with a warning.
============================  ===============================================================
"""

from __future__ import annotations

import os
import shlex
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "boo"


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={raw!r}: expected 0 or 1")


@dataclass(frozen=True)
class Settings:
    """A snapshot of BOO's settings."""

    cache_enabled: bool
    cache_dir: Path
    extra_compile_flags: tuple[str, ...]
    cpu_driver: str = "auto"
    use_backward_kernels: bool = False
    compile_strict: bool = False
    cuda_target: str | None = None
    verify: bool = False

    @classmethod
    def from_environment(cls) -> Settings:
        return cls(
            cache_enabled=_env_bool("BOO_CACHE_ON", True),
            cache_dir=Path(os.environ.get("BOO_CACHE_DIR") or _default_cache_dir()).expanduser(),
            extra_compile_flags=tuple(shlex.split(os.environ.get("BOO_EXTRA_COMPILE_FLAGS", ""))),
            cpu_driver=os.environ.get("BOO_CPU_DRIVER", "").strip() or "auto",
            use_backward_kernels=_env_bool("BOO_USE_BACKWARD_KERNELS", False),
            compile_strict=_env_bool("BOO_COMPILE_STRICT", False),
            cuda_target=os.environ.get("BOO_CUDA_TARGET", "").strip() or None,
            verify=_env_bool("BOO_VERIFY", False),
        )


_lock = threading.Lock()
_current: Settings | None = None


def get_settings() -> Settings:
    """The current settings (the environment is read on the first call)."""
    global _current
    if _current is None:
        with _lock:
            if _current is None:
                _current = Settings.from_environment()
    return _current


def configure(**changes: object) -> Settings:
    """Change settings from Python: keyword names are :class:`Settings` fields; the others
    keep their current value. Launchables already built keep working; new ones use the
    new settings."""
    global _current
    names = {f.name for f in fields(Settings)}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise TypeError(f"configure() got unknown settings {unknown}; known: {sorted(names)}")
    if "cache_dir" in changes:
        changes["cache_dir"] = Path(changes["cache_dir"]).expanduser()  # type: ignore[arg-type]
    if "extra_compile_flags" in changes:
        changes["extra_compile_flags"] = tuple(changes["extra_compile_flags"])  # type: ignore[arg-type]
    with _lock:
        base = _current if _current is not None else Settings.from_environment()
        _current = replace(base, **changes)
        return _current


def reload_from_environment() -> Settings:
    """Forget Python-side changes and read the environment again."""
    global _current
    with _lock:
        _current = Settings.from_environment()
        return _current


@contextmanager
def settings_override(**changes: object) -> Iterator[Settings]:
    """Temporarily :func:`configure` (restores the previous settings on exit)."""
    global _current
    previous = get_settings()
    try:
        yield configure(**changes)
    finally:
        with _lock:
            _current = previous
