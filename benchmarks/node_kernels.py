"""The GPU kernels each step of a small compiled model launches, from the profiler: what a
BOO node costs beside its own kernel (layout copies, casts, fills), against eager.

    python3 benchmarks/node_kernels.py [--channels 64] [--size 112] [--backend iree_boo]

The model is a channels-last bf16 conv + batch norm + ReLU at batch 32 (ResNet-50's stem
block by default), in inference.
"""

from __future__ import annotations

import argparse

import torch


def kernels(fn, x: torch.Tensor, steps: int = 5) -> list[tuple[str, int, float]]:
    """(name, calls per step, device µs per step) of every kernel ``fn(x)`` launches."""
    for _ in range(3):
        fn(x)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(steps):
            fn(x)
        torch.cuda.synchronize()
    rows = [(e.key, e.count // steps, e.device_time_total / steps) for e in profile.key_averages()
            if e.device_time_total > 0]
    return sorted(rows, key=lambda r: -r[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--size", type=int, default=112)
    parser.add_argument("--backend", default="iree_boo")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(args.channels, args.channels, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(args.channels), torch.nn.ReLU())
    model = model.to("cuda", torch.bfloat16, memory_format=torch.channels_last).eval()
    x = torch.randn(32, args.channels, args.size, args.size, device="cuda", dtype=torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    compiled = torch.compile(model, backend=args.backend, dynamic=False)
    with torch.no_grad():
        for label, fn in (("eager", model), (args.backend, compiled)):
            found = kernels(fn, x)
            print(f"\n{label}: {sum(r[2] for r in found):.1f} us of kernels per step")
            for name, calls, us in found:
                print(f"  {us:8.1f} us  {calls:3d}x  {name[:110]}")


if __name__ == "__main__":
    main()
