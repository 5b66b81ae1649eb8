"""Per-call time of 3x3 convolutions of growing size on IREE's two CPU drivers, and torch.

``local-sync`` runs a kernel on the calling thread; ``local-task`` hands it to worker
threads. This measurement sets BOO's default (``BOO_CPU_DRIVER=auto``): below
``boo_core.runtime.devices.INLINE_FLOPS_LIMIT`` FLOPs a kernel runs inline.

    python benchmarks/cpu_drivers.py
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from boo_core import get_launchable
from boo_core.runtime.devices import INLINE_FLOPS_LIMIT
from boo_core.settings import settings_override
from boo_ops_conv import ConvSignature

SIZES = [(4, 8), (8, 8), (16, 16), (32, 16), (32, 32), (64, 32), (64, 56)]  # (channels, H = W)


def per_call_us(fn, budget_s: float = 0.3) -> float:
    fn()
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < budget_s / 3:
        fn()
        calls += 1
    samples = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    print(f"3x3 conv, batch 1, f32; torch {torch.__version__} with {torch.get_num_threads()} threads; "
          f"inline limit {INLINE_FLOPS_LIMIT:,} FLOPs")
    print(f"{'C=K':>4} {'HxW':>6} {'MFLOP':>9} {'local-sync us':>14} {'local-task us':>14} {'torch us':>10}  "
          "auto picks")
    for channels, size in SIZES:
        signature = ConvSignature((1, channels, size, size), (channels, channels, 3, 3), padding=1)
        x, w = signature.get_sample_args(seed=0)
        times = {}
        for driver in ("local-sync", "local-task"):
            with settings_override(cpu_driver=driver):
                launchable = get_launchable(signature)
            times[driver] = per_call_us(lambda launchable=launchable, x=x, w=w: launchable(x, w))
        torch_us = per_call_us(lambda x=x, w=w: F.conv2d(x, w, padding=1))
        picked = "local-sync" if signature.flops < INLINE_FLOPS_LIMIT else "local-task"
        print(f"{channels:>4} {size:>3}x{size:<2} {signature.flops / 1e6:>9.2f} {times['local-sync']:>14.1f} "
              f"{times['local-task']:>14.1f} {torch_us:>10.1f}  {picked}")


if __name__ == "__main__":
    main()
