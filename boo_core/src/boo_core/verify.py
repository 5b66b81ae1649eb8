"""``BOO_VERIFY``: each kernel is checked once per device against PyTorch, and the verdict
is kept beside the kernel in its cache entry (``verdicts.json``: device -> verdict)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from .cache import _atomic_write
from .devices import BooDevice, host_cpu_fingerprint

logger = logging.getLogger(__name__)

VERDICTS_FILE = "verdicts.json"
PASS = "pass"


def device_identity(device: BooDevice) -> str:
    """What a verdict is about: the concrete device model (kernels are shared by a target)."""
    if device.torch_device.type == "cuda":
        index = device.torch_device.index or 0
        major, minor = torch.cuda.get_device_capability(index)
        return f"cuda {torch.cuda.get_device_name(index)} sm_{major}{minor}"
    return f"cpu {host_cpu_fingerprint()}"


def read_verdict(directory: Path | None, device: BooDevice) -> str | None:
    """The recorded verdict for this kernel on this device, or None."""
    if directory is None:
        return None
    try:
        return json.loads((directory / VERDICTS_FILE).read_text()).get(device_identity(device))
    except (OSError, ValueError):
        return None


def record_verdict(directory: Path | None, device: BooDevice, verdict: str) -> None:
    """Keep ``verdict`` for this kernel on this device (callers hold the entry's lock)."""
    if directory is None:
        return
    path = directory / VERDICTS_FILE
    try:
        verdicts = json.loads(path.read_text())
    except (OSError, ValueError):
        verdicts = {}
    verdicts[device_identity(device)] = verdict
    _atomic_write(path, (json.dumps(verdicts, indent=2, sort_keys=True) + "\n").encode())
