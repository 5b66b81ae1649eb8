"""Tiles and splits of the weight gradient read from x itself, through BOO, on ResNet-50's rows.

For each ResNet-50 weight gradient of benchmarks/gpu.py with a window (bf16, NHWC, batch 32),
every tile (128x128 with 4 and 3 stages, 128x64, 64x64, 128x256; for the 3-channel stem,
whose columns are gathered, 64x64, 64x32 and 64x16) and a few split counts up to
the parts the op's ``implicit_split`` module holds, substituted into that module, verified by
BOO against float64 PyTorch, and timed (device time from the profiler). Prints the fastest
configurations of each row beside the one ``wgrad.choose_config`` picks.

    python3 examples/boo_kernels_hopper/bench_wgrad.py [--only TEXT]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from boo_kernels_hopper import wgrad  # noqa: E402
from gpu import RESNET50, resnet50_conv  # noqa: E402  (the rows of benchmarks/gpu.py)
from tile_sweep import DEVICE, build_all, print_failures, substituted, timed  # noqa: E402

from boo_ops_conv import ConvSignature, linalg_formulations  # noqa: E402

TILES = [(128, 128, 8, 4), (128, 128, 8, 3), (128, 64, 4, 4), (64, 64, 4, 4), (128, 256, 8, 3)]  # bm, bn, warps, stages
#: The 3-channel stem's (its columns gathered one by one: any BN, a tile's columns across taps).
GATHERED_TILES = [(64, 64, 4, 4), (64, 64, 4, 3), (64, 32, 4, 4), (64, 32, 4, 3), (64, 32, 2, 4), (64, 16, 4, 4)]


def candidates(signature: ConvSignature) -> list[wgrad.WgradConfig]:
    problem = wgrad.problem_of(signature)
    parts = linalg_formulations.parts(signature)
    found = []
    for bm, bn, warps, stages in GATHERED_TILES if problem.gathered else TILES:
        if problem.k % bm or (problem.c % bn and not problem.gathered):
            continue
        tiles = problem.tiles(bm, bn)
        waves = {max(1, min(parts, w * wgrad.SMS // tiles)) for w in (1, 2)}  # one and two waves of programs
        for splits in sorted(waves if problem.gathered else {1, 2, 4, *waves}):  # the stem: 401408 pixels
            if splits <= parts:
                found.append(wgrad.WgradConfig(bm, bn, 64, warps, stages, splits))
    chosen = wgrad.choose_config(problem, parts)
    return found if chosen in found else [chosen, *found]


def launchable(signature: ConvSignature, config: wgrad.WgradConfig):
    """BOO's kernel with ``config`` substituted into the implicit_split module, verified; or why not."""
    problem = wgrad.problem_of(signature)
    return substituted(signature, "bench_wgrad", (problem, config),
                       lambda executables: wgrad.implicit_plan(problem, executables, config), wgrad.generate,
                       "hopper_wgrad", wgrad.IMPLICIT_FORMULATION)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="only rows whose name contains this text")
    args = parser.parse_args()
    rows = []
    for row in RESNET50:
        name, signature = resnet50_conv(row, "wrw")
        problem = wgrad.problem_of(signature)
        if problem is not None and problem.taps > 1 and args.only in name:
            rows.append((name, signature, candidates(signature)))
    built = build_all(rows, launchable)  # in parallel; timed one by one
    for name, signature, configs in rows:
        problem = wgrad.problem_of(signature)
        chosen = wgrad.choose_config(problem, linalg_formulations.parts(signature))
        inputs = signature.get_sample_args(device=DEVICE)
        kernels = {config: built[signature, config] for config in configs}
        found = timed(kernels, inputs)
        print(f"{name}: {linalg_formulations.parts(signature)} parts; chosen [{chosen}]")
        for us, config in found[:5]:
            print(f"  {us:7.1f} us  {config}{'  (chosen)' if config == chosen else ''}")
        print(f"  chosen: {next(us for us, config in found if config == chosen):.1f} us")
        print_failures(kernels)


if __name__ == "__main__":
    main()
