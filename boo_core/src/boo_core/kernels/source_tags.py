"""What a kernel's cache key takes of the code that made it: boo-core's own kernel-building
code (:func:`core_source_tag`) and an op's package (:func:`package_source_hash`), so a fix in
either is never hidden by kernels, or recorded compile failures, of the code before it."""

from __future__ import annotations

import functools
import hashlib
import importlib
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def core_source_tag() -> str:
    """boo-core's version and a hash of the code that builds kernels (its ``kernels`` and
    ``tune`` packages): part of every cache key, so a fix there is never hidden by kernels,
    or recorded compile failures, of the code before it."""
    root = Path(__file__).resolve().parents[1]
    files = tuple(str(f) for folder in ("kernels", "tune") for f in sorted((root / folder).glob("*.py")))
    try:
        release = version("boo-core")
    except PackageNotFoundError:
        release = "unknown"
    return f"boo-core {release} {_hash_files(files)}"


def package_source_hash(cls: type) -> str:
    """16 hex digits of SHA-256 over the Python sources of the package defining ``cls``
    (its module alone when it is not in a package)."""
    module = sys.modules.get(cls.__module__) or importlib.import_module(cls.__module__)
    top = cls.__module__.partition(".")[0]
    package = sys.modules.get(top)
    root = getattr(package, "__path__", None)
    files = sorted(Path(next(iter(root))).rglob("*.py")) if root else [Path(module.__file__ or "")]
    return _hash_files(tuple(str(f) for f in files))


@functools.cache
def _hash_files(files: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for name in files:
        path = Path(name)
        try:
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        except OSError:
            digest.update(path.name.encode() + b"\0?\0")
    return digest.hexdigest()[:16]
