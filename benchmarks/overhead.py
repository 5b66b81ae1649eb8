"""BOO's fixed costs on a tiny convolution, on the CPU.

Prints, in one run: the cold compile (export + iree-compile + load, empty cache), the warm
load from the disk cache (a new process's first call), and the per-call time of the
launchable, of ``boo_conv`` (signature lookup included) and of the same torch op.

    python benchmarks/overhead.py [--calls 5000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

import boo_core
from boo_core import clear_launchables, get_launchable
from boo_ops_conv import ConvSignature, boo_conv


def per_call_us(fn, calls: int, repeats: int = 5, sync=lambda: None) -> float:
    """Median over ``repeats`` batches of the mean time of one call, in microseconds;
    ``sync`` (a device synchronize) runs after the warm-up and at each batch's end."""
    for _ in range(min(calls, 200)):
        fn()
    sync()
    batches = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        batches.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()

    torch.set_num_threads(torch.get_num_threads())
    signature = ConvSignature((1, 4, 8, 8), (4, 4, 3, 3), padding=1)
    with tempfile.TemporaryDirectory(prefix="boo-overhead-") as cache_dir:
        boo_core.configure(cache_enabled=True, cache_dir=cache_dir)
        start = time.perf_counter()
        launchable = get_launchable(signature)
        cold = time.perf_counter() - start
        compile_only = launchable.compile_seconds

        loads = []
        for _ in range(10):
            clear_launchables()
            start = time.perf_counter()
            launchable = get_launchable(signature)
            loads.append(time.perf_counter() - start)
            assert launchable.cache_hit
        warm = statistics.median(loads)

        x, w = signature.get_sample_args(seed=0)
        torch.testing.assert_close(launchable(x, w), F.conv2d(x, w, padding=1), rtol=1e-5, atol=1e-5)
        boo_call = per_call_us(lambda: launchable(x, w), args.calls)
        eager_call = per_call_us(lambda: boo_conv(x, w, padding=1), args.calls)
        torch_call = per_call_us(lambda: F.conv2d(x, w, padding=1), args.calls)

    print(f"tiny conv: {signature.func_name} (torch {torch.__version__}, {torch.get_num_threads()} threads)")
    print(f"{'measure':<44} {'value':>12}")
    print(f"{'cold: export + compile + load (ms)':<44} {cold * 1e3:>12.1f}")
    print(f"{'  of which iree-compile and export (ms)':<44} {compile_only * 1e3:>12.1f}")
    print(f"{'warm load from disk cache, median of 10 (ms)':<44} {warm * 1e3:>12.2f}")
    print(f"{'per call: launchable (us)':<44} {boo_call:>12.1f}")
    print(f"{'per call: boo_conv, eager entry (us)':<44} {eager_call:>12.1f}")
    print(f"{'per call: torch F.conv2d (us)':<44} {torch_call:>12.1f}")
    print(f"{'ratio launchable / torch':<44} {boo_call / torch_call:>12.2f}")


if __name__ == "__main__":
    main()
