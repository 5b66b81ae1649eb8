"""Measure the library on a Hopper GPU: Triton's own launch of candidate tile configs
(``--sweep``), then the routes through BOO (get_launchable, boo_matmul, BooLinear,
torch.compile(backend="iree_boo")), each checked against float64 and timed as
benchmarks/gpu.py times (device time from the profiler, median of 5 batches of 5 calls).

    python examples/boo_kernels_hopper/bench.py [--sweep]
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from boo_kernels_hopper import gemm  # noqa: E402
from gpu import device_us, peaks  # noqa: E402

from boo_core import get_launchable  # noqa: E402
from boo_ops_matmul import BooLinear, MatmulSignature, boo_matmul  # noqa: E402

BF16 = torch.bfloat16
SHAPES = ((8192, 4096, 1024), (8192, 1024, 4096), (4096, 4096, 4096))  # (m, n, k) of benchmarks/gpu.py
SWEEP = (gemm.GemmConfig(), gemm.GemmConfig(num_stages=4), gemm.GemmConfig(bm=256, bn=128),
         gemm.GemmConfig(bm=128, bn=128, num_warps=4, num_stages=4), gemm.GemmConfig(group=16))


def error(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    ref = a.double() @ b.double()
    return float((out.double() - ref).norm() / ref.norm())


def sweep(device: str) -> None:
    import triton
    from boo_kernels_hopper._triton_gemm import boo_hopper_gemm

    for m, n, k in SHAPES:
        a, b = torch.randn(m, k, device=device, dtype=BF16), torch.randn(k, n, device=device, dtype=BF16)
        for config in SWEEP:
            c = torch.empty(m, n, device=device, dtype=BF16)
            grid = ((m // config.bm) * (n // config.bn),)
            run = functools.partial(boo_hopper_gemm[grid], a, b, None, c, m, n, k, False, False, config.bm,
                                    config.bn, config.bk, config.group, num_warps=config.num_warps,
                                    num_stages=config.num_stages)
            ms = triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median")
            print(f"sweep {m}x{k}@{k}x{n} {config}: {2 * m * n * k / ms / 1e9:.0f} TFLOP/s, "
                  f"error {error(c, a, b):.1e}", flush=True)


def routes(device: str) -> None:
    peak, _ = peaks(device)
    print(f"measured peak bf16 matmul (torch 8192^3): {peak:.0f} TFLOP/s")
    rows = []
    for m, n, k in SHAPES:
        a, b = torch.randn(m, k, device=device, dtype=BF16), torch.randn(k, n, device=device, dtype=BF16)
        launchable = get_launchable(MatmulSignature(m=m, n=n, k=k, dtype=BF16), device)
        sub = launchable.substitution
        served = f"{sub.name if sub else launchable.formulation} verified={launchable.verified} {launchable.launch}"
        linear = BooLinear(k, n, bias=False, device=device, dtype=BF16)
        with torch.no_grad():
            linear.weight.copy_(b.mT)
        compiled = torch.compile(lambda x, y: x @ y, backend="iree_boo", dynamic=False)
        routes = {"torch.matmul": torch.matmul, "get_launchable": launchable, "boo_matmul": boo_matmul,
                  "BooLinear(no bias)": lambda x, _, layer=linear: layer(x), "torch.compile iree_boo": compiled}
        for name, fn in routes.items():
            with torch.no_grad():
                out = fn(a, b)
                us = device_us(fn, (a, b))
            tflops = 2 * m * n * k / us / 1e6
            rows.append(f"{m}x{k}@{k}x{n:<6} {name:<24} {us:8.1f} us {tflops:6.0f} TFLOP/s {100 * tflops / peak:5.1f}% "
                        f"err {error(out, a, b):.1e}")
        rows.append(f"    get_launchable served by: {served}")
    print("\n".join(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--sweep", action="store_true")
    args = parser.parse_args()
    if args.sweep:
        sweep(args.device)
    routes(args.device)
