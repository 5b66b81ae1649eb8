"""An op's formulations side by side on the CPU, against PyTorch, in one run.

For each command, each named formulation the op offers (pinned: no fallback; each
verified against float64 PyTorch first) and PyTorch's own op (``signature.eager``) are
timed in alternating rounds (median wall time per call; the machine is shared: compare
ratios within a run). A formulation the op offers only on another target can be timed on
the CPU too with ``--target cuda:sm_80`` (its MLIR compiled for the CPU).

    python benchmarks/cpu_formulations.py [--formulations default,phases] [--rounds 3]
                                          [--target TARGET] [COMMAND ...]
"""

from __future__ import annotations

import argparse
import statistics
from functools import partial

import torch
from cpu_tuned import per_call_us  # the same timing as the CPU table's

from boo_core import BooOpRegistry, Target, get_launchable, resolve_device
from boo_core.kernels.request import KernelRequest
from boo_core.runtime.launchable import load_launchable
from boo_core.verify.numerics import check_launchable

#: Strided 3x3 data gradients (batch 8, ResNet-like), NCHW and NHWC, f32 and bf16.
COMMANDS = [
    "conv -n 8 -c 128 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -F 2",
    "conv -n 8 -c 128 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -F 2 --in_layout NHWC --out_layout NHWC "
    "--fil_layout NHWC",
    "conv -n 8 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -F 2",
    "convbfp16 -n 8 -c 256 -H 14 -W 14 -k 256 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -F 2 --in_layout NHWC "
    "--out_layout NHWC --fil_layout NHWC",
]


def formulation_kernel(signature, name: str, offered_on: Target):
    """The CPU kernel of formulation ``name`` as the op offers it on ``offered_on``, verified;
    None if the op does not offer it there."""
    cpu = Target.parse("cpu")
    if offered_on == cpu:
        offered = {f.name for f in BooOpRegistry.default().formulations(signature, cpu)}
        return get_launchable(signature, formulation=name) if name in offered else None
    found = [f for f in BooOpRegistry.default().formulations(signature, offered_on) if f.name == name]
    return verified_cpu_kernel(signature, found[0]) if found else None


def verified_cpu_kernel(signature, formulation):
    """The CPU kernel ``formulation`` (a :class:`~boo_core.Formulation`, with its flags) builds
    for ``signature``, checked against float64 PyTorch; RuntimeError if it is wrong."""
    device = resolve_device("cpu")
    kernel = load_launchable(signature, device, KernelRequest.create(signature, Target.parse("cpu"), formulation),
                             device.driver_for(signature.flops))
    failed = [str(c) for c in check_launchable(kernel) if not c.passed]
    if failed:
        raise RuntimeError(f"{signature.func_name} ({formulation.name}, flags {formulation.flags}): {failed}")
    return kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commands", nargs="*", default=COMMANDS)
    parser.add_argument("--formulations", default="default,phases")
    parser.add_argument("--target", default="cpu", help="the target whose formulations to time (default: cpu)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.5, help="timing per kernel per round")
    args = parser.parse_args()
    names = [name for name in args.formulations.split(",") if name]
    offered_on = Target.parse(args.target)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; us per call, median over rounds")
    print(f"{'signature':<58} {'torch':>9}" + "".join(f" {name:>16}" for name in names))
    for command in args.commands:
        for signature in BooOpRegistry.parse_signatures(command):
            kernels = {name: formulation_kernel(signature, name, offered_on) for name in names}
            inputs = signature.get_sample_args()
            timings: dict[str, list[float]] = {"torch": [], **{name: [] for name in names}}
            for _ in range(args.rounds):
                timings["torch"].append(per_call_us(partial(signature.eager, *inputs), args.seconds))
                for name, kernel in kernels.items():
                    if kernel is not None:
                        timings[name].append(per_call_us(partial(kernel, *inputs), args.seconds))
            torch_us = statistics.median(timings["torch"])
            cells = [f" {statistics.median(timings[n]):>8.0f} ({statistics.median(timings[n]) / torch_us:4.1f}x)"
                     if timings[n] else f" {'-':>16}" for n in names]
            print(f"{signature.func_name[:58]:<58} {torch_us:>9.0f}" + "".join(cells), flush=True)


if __name__ == "__main__":
    main()
