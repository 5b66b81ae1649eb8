"""Devices BOO launches on, and the compile target that serves each.

A :class:`BooDevice` is a torch device plus the IREE runtime driver and the
:class:`~boo_core.kernels.target.Target` that serve it. ``cpu`` (the default) uses
IREE's ``llvm-cpu`` backend for the host CPU and the ``local-sync``/``local-task`` runtime
drivers; ``cuda:N`` uses IREE's ``cuda`` backend and driver.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ..errors import DeviceError
from ..kernels.target import Target
from ..settings import get_settings

#: On the CPU, kernels below this many FLOPs run on IREE's ``local-sync`` driver, inline on
#: the calling thread: handing a call to ``local-task``'s worker threads costs about 60 us,
#: more than such kernels take (see docs/architecture.md for the measurement).
INLINE_FLOPS_LIMIT = 1 << 24


@dataclass(frozen=True)
class BooDevice:
    """A torch device with the IREE runtime driver(s) and compile target that serve it.

    ``inline_driver`` (CPU only) runs small kernels on the calling thread; ``driver``
    runs the others.
    """

    torch_device: torch.device
    driver: str
    target: Target
    inline_driver: str | None = None

    @property
    def key(self) -> str:
        """Identifies the device (runtime state is per device and driver)."""
        return str(self.torch_device)

    def driver_for(self, flops: int, policy: str = "auto") -> str:
        """The runtime driver for a kernel of ``flops``: ``policy`` is ``auto`` or a driver name."""
        if self.inline_driver is None:
            return self.driver
        if policy == "auto":
            return self.inline_driver if flops < INLINE_FLOPS_LIMIT else self.driver
        if policy not in (self.driver, self.inline_driver):
            raise DeviceError(f"driver {policy!r} cannot run on {self.key}: use auto, {self.driver} "
                              f"or {self.inline_driver}")
        return policy


#: Compute capabilities IREE 3.13 compiles CUDA code for. It has no sm_90 (Hopper) or sm_100
#: target; PTX for an older one runs on newer GPUs through the driver's JIT.
IREE_CUDA_CAPABILITIES = ((6, 0), (7, 0), (7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (12, 0))

#: Where the rule "the newest target not newer than the GPU" is not the best choice, by
#: measurement (benchmarks/gpu.py compares them): Hopper runs sm_80 PTX at least as fast.
PREFERRED_CUDA_TARGETS = {(9, 0): "sm_80"}


def cuda_target_for(capability: tuple[int, int]) -> str:
    """The IREE CUDA target for a GPU of ``capability``."""
    preferred = PREFERRED_CUDA_TARGETS.get(tuple(capability))
    if preferred:
        return preferred
    usable = [c for c in IREE_CUDA_CAPABILITIES if c <= tuple(capability)]
    if not usable:
        raise DeviceError(f"a GPU of compute capability {capability[0]}.{capability[1]} cannot be targeted: IREE "
                          f"compiles for sm_{IREE_CUDA_CAPABILITIES[0][0]}{IREE_CUDA_CAPABILITIES[0][1]} and newer")
    major, minor = max(usable)
    return f"sm_{major}{minor}"


@functools.cache
def _resolve(text: str, cuda_target: str | None) -> BooDevice:
    try:
        torch_device = torch.device(text)
    except (RuntimeError, TypeError):
        raise DeviceError(f"unknown device {text!r}: expected 'cpu' or 'cuda:N'") from None
    if torch_device.type == "cpu":
        if torch_device.index not in (None, 0):
            raise DeviceError(f"device {text!r}: the CPU has no index other than 0")
        return BooDevice(torch.device("cpu"), "local-task", Target.parse("cpu"), inline_driver="local-sync")
    if torch_device.type == "cuda":
        index = torch_device.index if torch_device.index is not None else 0
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
            raise DeviceError(f"device {text!r}: torch sees {seen} CUDA devices")
        capability = torch.cuda.get_device_capability(index)
        target = Target("cuda", cuda_target or cuda_target_for(capability))
        return BooDevice(torch.device("cuda", index), "cuda", target)
    raise DeviceError(f"device {text!r}: BOO launches on 'cpu' and 'cuda:N' ({torch_device.type} is not supported)")


def resolve_device(device: str | torch.device | BooDevice | None = None) -> BooDevice:
    """The :class:`BooDevice` for ``device`` (``"cpu"`` when None).

    A CUDA device's target comes from its compute capability (:func:`cuda_target_for`);
    ``BOO_CUDA_TARGET`` (e.g. ``sm_89``) overrides it.
    """
    if isinstance(device, BooDevice):
        return device
    return _resolve(str(device) if device is not None else "cpu", get_settings().cuda_target)
