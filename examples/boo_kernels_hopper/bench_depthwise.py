"""Tiles of the depthwise kernels, through BOO, on ConvNeXt-T's 7x7 rows.

For each of ConvNeXt-T's depthwise convolutions (bf16, NHWC, batch 32: forward with its bias,
data gradient, weight gradient), every tile of :data:`TILES` substituted into the conv op's
``depthwise`` module, verified by BOO against float64 PyTorch, and timed (device time from
the profiler, all of the module's kernels) beside cuDNN's.

    python3 examples/boo_kernels_hopper/bench_depthwise.py [--only TEXT]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from boo_kernels_hopper import depthwise, hooks  # noqa: E402
from gpu import device_us  # noqa: E402
from tile_sweep import DEVICE, build_all, print_failures, timed  # noqa: E402

from boo_core import get_launchable  # noqa: E402
from boo_ops_conv import ConvSignature  # noqa: E402

#: ConvNeXt-T's stages: (channels, size)
STAGES = ((96, 56), (192, 28), (384, 14), (768, 7))
#: (pixels, channels, warps) of a forward's or data gradient's program; of a weight gradient's
TILES = {"conv": [(8, 32, 4), (16, 32, 4), (32, 32, 4), (64, 32, 8), (16, 64, 4), (32, 64, 8), (16, 128, 4),
                  (8, 64, 2), (16, 16, 2)],
         "wrw": [(16, 32, 4), (16, 16, 4), (8, 16, 2), (16, 8, 2), (8, 32, 4), (32, 16, 4), (16, 16, 2), (8, 8, 1)]}


def signature_of(c: int, size: int, mode: str) -> ConvSignature:
    return ConvSignature((32, c, size, size), (c, 1, 7, 7), padding=3, groups=c, dtype=torch.bfloat16,
                         shared_layout="NHWC", mode=mode, bias=mode == "fwd")


def launchable(signature: ConvSignature, config: depthwise.DepthwiseConfig):
    """BOO's kernel with ``config`` substituted into the depthwise module, verified; or why not."""
    substitution = hooks.depthwise_substitution(depthwise.problem_of(signature), config, "bench_depthwise")
    try:
        kernel = get_launchable(signature, DEVICE, substitutions=substitution)
    except Exception as e:  # noqa: BLE001 - a configuration that does not build is reported, not fatal
        return f"{type(e).__name__}: {str(e)[:80]}"
    return kernel if kernel.verified and kernel.substitution is not None else "not verified"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="only rows whose name contains this text (or one of "
                                                   "several joined by |)")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True  # cuDNN's best algorithm, as benchmarks/gpu.py times it
    rows = []
    for c, size in STAGES:
        for mode in ("fwd", "bwd", "wrw"):
            name = f"depthwise {c} @{size} {mode}"
            if any(text in name for text in args.only.split("|")):
                configs = [depthwise.DepthwiseConfig(*tile) for tile in TILES["wrw" if mode == "wrw" else "conv"]]
                rows.append((name, signature_of(c, size, mode), configs))
    built = build_all(rows, launchable)  # in parallel; timed one by one
    print(f"{'row':28s} {'cuDNN us':>9s} {'chosen us':>10s} {'best us':>8s}  best tiles (pixels x channels, warps)")
    for name, signature, configs in rows:
        chosen = depthwise.choose_config(depthwise.problem_of(signature))
        inputs = signature.get_sample_args(device=DEVICE)
        kernels = {config: built[signature, config] for config in configs}
        if chosen not in kernels:
            kernels[chosen] = launchable(signature, chosen)
        results = timed(kernels, inputs)
        torch_us = device_us(signature.eager, inputs)
        chosen_us = next(us for us, config in results if config == chosen)
        best_us, best = results[0]
        print(f"{name:28s} {torch_us:9.1f} {chosen_us:10.1f} {best_us:8.1f}  {best.bq}x{best.bc} w{best.num_warps}   "
              + "  ".join(f"{c.bq}x{c.bc}w{c.num_warps} {us:.1f}" for us, c in results[1:]))
        print_failures(kernels)


if __name__ == "__main__":
    main()
