"""Random valid MIOpenDriver commands, run on BOO and checked against float64 PyTorch.

Draws valid commands (a drawn command the parser refuses is counted and redrawn): conv in
every mode (-F bitmasks, bias gradients), 1-D/2-D/3-D, groups, layouts, strides and
dilations above 1, transposed, every dtype, at small sizes; layer norm (old dialect, any
rank and normalized dim, weight/bias), gemm (transposes, batches, column-major, alpha,
beta, bias, activations) and bnorm (every direction, 2-D and 3-D, both layouts, spatial and
per-activation, saved and running statistics, ReLU, residual sums). Each kernel is compiled
(in parallel, as ``boo preload`` does), then launched as a user would (``get_launchable``:
the op's formulation chain) on random inputs into poisoned outputs and compared with the
float64 reference. Prints, per op, how many ran right, and the formulation that served them.

    python benchmarks/random_commands.py [--conv 1000] [--layernorm 200] [--gemm 200] [--bnorm 200] [--seed 0] [-j N]
                                         [--device cuda:0]

On a GPU (``--device cuda:0``) kernels are verified on first use, as with default settings,
and every kernel is checked twice more here.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import time

from boo_core import BooError, BooOpRegistry, CachePopulator, get_launchable, resolve_device
from boo_core.verify.numerics import check_launchable

CONV_LAYOUTS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC", "CHWN"), 3: ("NCDHW", "NDHWC")}
AXIS_FLAGS = {  # per spatial axis: size, filter, padding, stride, dilation, output padding
    "d": ("--in_d", "--fil_d", "--pad_d", "--conv_stride_d", "--dilation_d", "--trans_output_pad_d"),
    "h": ("-H", "-y", "-p", "-u", "-l", "-Y"),
    "w": ("-W", "-x", "-q", "-v", "-j", "-X"),
}


def conv_command(rng: random.Random) -> str:
    rank = rng.choice((1, 2, 2, 2, 3))
    groups = rng.choice((1, 1, 1, 2, 3, 4))
    transposed = rng.random() < 0.15
    parts = [rng.choice(("conv", "convfp16", "convbfp16")), "-n", rng.randint(1, 3),
             "-c", groups * rng.randint(1, 4), "-k", groups * rng.randint(1, 4), "-g", groups,
             "-m", "trans" if transposed else "conv", "--spatial_dim", rank]
    for axis in {1: "w", 2: "hw", 3: "dhw"}[rank]:
        size, window, pad, stride, dilation, out_pad = AXIS_FLAGS[axis]
        s, d = rng.randint(1, 3), rng.randint(1, 3)
        parts += [size, rng.randint(1, 12), window, rng.randint(1, 5), pad, rng.randint(0, 2), stride, s,
                  dilation, d]
        if transposed:
            parts += [out_pad, rng.randint(0, max(s, d) - 1)]
    layout = rng.choice(CONV_LAYOUTS[rank])
    parts += ["--in_layout", layout, "--out_layout", rng.choice((layout, *CONV_LAYOUTS[rank])),
              "--fil_layout", rng.choice(CONV_LAYOUTS[rank])]
    forward_only = rng.random() < 0.2
    forw = 1 if forward_only else rng.choice((0, 1, 2, 4, 3, 5, 6, 7))
    parts += ["-F", forw, "-b", rng.choice((0, 1))]
    if forward_only and rng.random() < 0.5:
        parts += ["--activation", rng.choice(("relu", "gelu", "silu", "sigmoid", "tanh"))]
    return " ".join(map(str, parts))


def layernorm_command(rng: random.Random) -> str:
    shape = [rng.randint(1, 9) for _ in range(rng.randint(2, 4))]
    shape[-1] = rng.randint(1, 70)
    return " ".join(map(str, [
        rng.choice(("layernorm", "layernormfp16", "layernormbfp16")), "--input", "x".join(map(str, shape)),
        "-o", rng.randint(1, len(shape) - 1), "-m", rng.choice((0, 1)), "--bias", rng.choice((0, 1)),
        "-e", rng.choice(("1e-5", "1e-3", "0.1")), "-F", rng.choice((1, 2))]))


def gemm_command(rng: random.Random) -> str:
    parts = [rng.choice(("gemm", "gemmfp16", "gemmbfp16")), "-m", rng.randint(1, 40), "-n", rng.randint(1, 40),
             "-k", rng.randint(1, 40), "-u", rng.choice((0, 1)), "-v", rng.choice((0, 1)),
             "-b", rng.choice((1, 1, 2, 3)), "-C", rng.choice((0, 0, 1)),
             "-A", rng.choice((1.0, 1.0, 0.5, -2.0)), "-B", rng.choice((0.0, 0.0, 1.0, 0.25)),
             "--bias", rng.choice((0, 1))]
    if rng.random() < 0.4:
        parts += ["--activation", rng.choice(("relu", "gelu", "silu"))]
    return " ".join(map(str, parts))


def bnorm_command(rng: random.Random) -> str:
    depth = rng.choice((0, 0, 0, rng.randint(1, 5)))
    layout = rng.choice(("NCDHW", "NDHWC") if depth else ("NCHW", "NHWC"))
    direction = rng.choice((("-F", 1), ("-F", 2), ("-F", 0, "-b", 1)))
    parts = [rng.choice(("bnorm", "bnormfp16", "bnormbfp16")), "-n", rng.randint(2, 9), "-c", rng.randint(1, 40),
             "-D", depth, "-H", rng.randint(1, 12), "-W", rng.randint(1, 12), "-L", layout,
             "-m", rng.choice((0, 1, 1)), "-s", rng.choice((0, 1)), "-r", rng.choice((0, 1)), *direction,
             "--epsilon", rng.choice(("1e-5", "1e-3"))]
    if rng.random() < 0.3:  # a backward's: the ReLU's gradient first
        parts += ["--activation", "relu"]
    if rng.random() < 0.2:  # a residual added before the activation; a backward's: y's gradient in two parts
        parts += ["--residual", 1]
    return " ".join(map(str, parts))


GENERATORS = {"conv": conv_command, "layernorm": layernorm_command, "gemm": gemm_command, "bnorm": bnorm_command}


def draw(op: str, count: int, rng: random.Random) -> tuple[list[str], int]:
    """``count`` commands the parser accepts, and how many drawn ones it refused."""
    commands, refused = [], 0
    while len(commands) < count:
        command = GENERATORS[op](rng)
        try:
            BooOpRegistry.parse_signatures(command)
        except BooError:
            refused += 1
            continue
        commands.append(command)
    return commands, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for op, default in (("conv", 1000), ("layernorm", 200), ("gemm", 200), ("bnorm", 200)):
        parser.add_argument(f"--{op}", type=int, default=default, help=f"{op} commands (default {default})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    target = resolve_device(args.device).target.name
    rng = random.Random(args.seed)
    report = []
    for op in GENERATORS:
        if not getattr(args, op):
            continue
        commands, refused = draw(op, getattr(args, op), rng)
        start = time.perf_counter()
        CachePopulator(commands=commands, jobs=args.jobs, targets=[target]).run()
        compiled = time.perf_counter() - start
        served: collections.Counter[str] = collections.Counter()
        outcomes: collections.Counter[str] = collections.Counter()
        problems = []
        kernels = 0
        for command in commands:
            for signature in BooOpRegistry.parse_signatures(command):
                kernels += 1
                try:
                    launchable = get_launchable(signature, args.device)
                    failed = [str(c) for _ in range(1 if args.device == "cpu" else 2)
                              for c in check_launchable(launchable) if not c.passed]
                except Exception as e:  # reported, not fatal: the point is to count them
                    outcomes["error"] += 1
                    problems.append(f"ERROR {command}: {type(e).__name__}: {str(e).splitlines()[0]}")
                    continue
                served[launchable.formulation] += 1
                outcomes["wrong" if failed else "right"] += 1
                if failed:
                    problems.append(f"WRONG {command} ({launchable.formulation}): {failed[0]}")
        report.append((op, len(commands), refused, kernels, outcomes, served, compiled))
        for line in problems[:20]:
            print(line)
    print(f"\n{'op':<10} {'commands':>8} {'redrawn':>8} {'kernels':>8} {'right':>6} {'wrong':>6} {'error':>6} "
          f"{'compile s':>9}  served by")
    for op, count, refused, kernels, outcomes, served, compiled in report:
        by = ", ".join(f"{name} {n}" for name, n in served.most_common())
        print(f"{op:<10} {count:>8} {refused:>8} {kernels:>8} {outcomes['right']:>6} {outcomes['wrong']:>6} "
              f"{outcomes['error']:>6} {compiled:>9.0f}  {by}")


if __name__ == "__main__":
    main()
