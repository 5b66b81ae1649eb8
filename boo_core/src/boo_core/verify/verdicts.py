"""Verification verdicts: each kernel is checked once per device model against PyTorch, and
the verdict is kept beside the kernel in its cache entry (``verdicts.json``: device model ->
verdict), written under the entry's lock, so the check is paid once per kernel per kind of
device, across processes and machines sharing a cache.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from ..kernels.cache import atomic_write, entry_lock, read_json_object
from ..kernels.target import host_cpu_fingerprint

logger = logging.getLogger(__name__)

VERDICTS_FILE = "verdicts.json"
PASS = "pass"
#: Checks, each on fresh random inputs, a kernel must pass: generated code with a race can
#: be right on one call and wrong on the next (docs/gpu.md), and one check may miss it.
CHECKS = 2


def check(launchable: Any, checks: int = CHECKS) -> str:
    """``pass``, or ``fail: ...`` with what was wrong: ``launchable`` run ``checks`` times on
    fresh random inputs into NaN-poisoned outputs, against float64 PyTorch."""
    from .numerics import check_launchable

    for _ in range(checks):
        try:
            comparisons = check_launchable(launchable)
        except Exception as e:  # a kernel that crashes when run is as wrong as one that computes wrong
            return f"fail: running it raised {type(e).__name__}: {e}"
        failed = [c for c in comparisons if not c.passed]
        if failed:
            return "fail: " + "; ".join(str(c) for c in failed)
    return PASS


def device_identity(torch_device: torch.device) -> str:
    """What a verdict is about: the concrete device model (kernels are shared by a target)."""
    if torch_device.type == "cuda":
        index = torch_device.index or 0
        major, minor = torch.cuda.get_device_capability(index)
        return f"cuda {torch.cuda.get_device_name(index)} sm_{major}{minor}"
    return f"cpu {host_cpu_fingerprint()}"


def read_verdict(directory: Path | None, torch_device: torch.device) -> str | None:
    """The recorded verdict for this kernel on this device model, or None."""
    if directory is None:
        return None
    verdict = (read_json_object(directory / VERDICTS_FILE) or {}).get(device_identity(torch_device))
    return verdict if isinstance(verdict, str) else None


def record_verdict(directory: Path | None, torch_device: torch.device, verdict: str) -> None:
    """Keep ``verdict`` for this kernel on this device model (under the entry's lock).
    A cache that cannot be written keeps nothing: the next process checks again."""
    if directory is None:
        return
    try:
        with entry_lock(directory.parent, directory.name):
            verdicts = read_json_object(directory / VERDICTS_FILE) or {}
            verdicts[device_identity(torch_device)] = verdict
            atomic_write(directory / VERDICTS_FILE, json.dumps(verdicts, indent=2, sort_keys=True) + "\n")
    except OSError as e:
        logger.warning("could not record the verdict of %s: %s", directory.name, e)
