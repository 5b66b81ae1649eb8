"""The device's ceilings, measured in the same run as what is compared with them: the
matrix rate PyTorch reaches (a large matmul in the dtype that matters: bf16 on GPUs,
float32 on the CPU) and the copy bandwidth (bytes read plus bytes written), each from its
fastest call: a ceiling, not a typical time (kernels' median times can beat a median).
``boo report`` still draws no compute peak below a rate its files measured."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..runtime.timing import timer_for


@dataclass(frozen=True)
class Peaks:
    tflops: float
    gbps: float


def measure_peaks(device: str | torch.device) -> Peaks:
    """Measure the two ceilings on ``device`` (a few seconds on a GPU, about ten on a CPU)."""
    device = torch.device(device)
    timer = timer_for(device)
    gpu = device.type != "cpu"
    size = 8192 if gpu else 2048
    dtype = torch.bfloat16 if gpu else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    matmul_us = min(timer(lambda: torch.matmul(a, b), device=device, iterations=10, warmup=3).samples_us)
    source = torch.randn((256 if gpu else 32) * 1024 * 1024, device=device)
    target = torch.empty_like(source)
    copy_us = min(timer(lambda: target.copy_(source), device=device, iterations=10, warmup=3).samples_us)
    return Peaks(2 * size**3 / matmul_us / 1e6, 2 * source.numel() * 4 / copy_us / 1e3)
