"""Tiles of the strided data gradient computed phase by phase, through BOO, on ResNet-50's rows.

For each strided ResNet-50 data gradient of benchmarks/gpu.py (bf16, NHWC, batch 32), every
tile of :data:`TILES` substituted into the conv op's ``phase_axes`` module, verified by BOO
against float64 PyTorch, and timed (device time from the profiler, all of the module's
kernels); then, for the tiles ``dgrad.choose_config`` picks, each kernel's share.

    python3 examples/boo_kernels_hopper/bench_dgrad.py [--only TEXT]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from boo_kernels_hopper import conv, dgrad  # noqa: E402
from gpu import RESNET50, resnet50_conv  # noqa: E402  (the rows of benchmarks/gpu.py)
from tile_sweep import DEVICE, build_all, print_failures, substituted, timed  # noqa: E402

from boo_ops_conv import ConvSignature  # noqa: E402

#: (bm, bn, warps, stages)
TILES = [(128, 128, 8, 4), (128, 128, 8, 3), (128, 64, 4, 4), (64, 128, 4, 4), (128, 256, 8, 3), (256, 128, 8, 3)]


def candidates(problem: dgrad.PhaseProblem) -> list[conv.ConvConfig]:
    found = [conv.ConvConfig(bm, bn, 64, 8, warps, stages) for bm, bn, warps, stages in TILES if problem.c % bn == 0]
    chosen = dgrad.choose_config(problem)
    return found if chosen in found else [chosen, *found]


def launchable(signature: ConvSignature, config: conv.ConvConfig):
    """BOO's kernel with ``config`` substituted into the phase_axes module, verified; or why not."""
    problem = dgrad.problem_of(signature)
    return substituted(signature, "bench_dgrad", (problem, config),
                       lambda executables: dgrad.plan(problem, executables, config), dgrad.generate, "hopper_dgrad",
                       dgrad.FORMULATION)


def kernel_shares(fn, args, calls: int = 20) -> list[tuple[str, float]]:
    """Device µs per call of each kernel ``fn`` launches."""
    fn(*args)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    return [(e.key[-40:], e.device_time_total / calls) for e in profile.key_averages() if e.device_time_total]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="only rows whose name contains this text")
    args = parser.parse_args()
    rows = []
    for row in RESNET50:
        name, signature = resnet50_conv(row, "bwd")
        problem = dgrad.problem_of(signature)
        if problem is not None and args.only in name:
            rows.append((name, signature, candidates(problem)))
    built = build_all(rows, launchable)  # in parallel; timed one by one
    for name, signature, configs in rows:
        chosen = dgrad.choose_config(dgrad.problem_of(signature))
        inputs = signature.get_sample_args(device=DEVICE)
        kernels = {config: built[signature, config] for config in configs}
        print(f"{name}: chosen [{chosen}]")
        for us, config in timed(kernels, inputs):
            print(f"  {us:7.1f} us  {config}{'  (chosen)' if config == chosen else ''}")
        if not isinstance(kernels[chosen], str):
            print("  chosen, by kernel: " + ", ".join(f"{key} {us:.1f}" for key, us in
                                                      kernel_shares(kernels[chosen], inputs)))
        print_failures(kernels)


if __name__ == "__main__":
    main()
