"""IREE's data tiling on the CPU for the kernels whose work is a matmul, against PyTorch.

For each command, the op's first CPU formulation (for a forward convolution: ``im2col``) is
built twice, without and with ``--iree-opt-data-tiling`` (whatever the formulation's own
flags say), each verified against float64 PyTorch first, and both are timed with PyTorch's
own op (``signature.eager``) in alternating rounds (median wall time per call; the machine is
shared: compare ratios within a run).

    python benchmarks/cpu_data_tiling.py [--rounds 3] [--seconds 0.4] [COMMAND ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from cpu_formulations import verified_cpu_kernel
from cpu_tuned import per_call_us  # the same timing as the CPU table's

from boo_core import BooOpRegistry, Target

TILING = "--iree-opt-data-tiling"
_NHWC = "--in_layout NHWC --out_layout NHWC --fil_layout NHWC"
#: ResNet-18-like forwards at batch 8 (a 64 x 64 input's maps), bf16 and f32, NHWC and NCHW,
#: and a CBAInfer (conv + batch norm + ReLU) of the first.
COMMANDS = [
    *(f"{base} {shape} -F 1 {_NHWC}" for base in ("convbfp16", "conv") for shape in (
        "-n 8 -c 64 -H 16 -W 16 -k 64 -y 3 -x 3 -p 1 -q 1",
        "-n 8 -c 128 -H 8 -W 8 -k 128 -y 3 -x 3 -p 1 -q 1",
        "-n 8 -c 256 -H 4 -W 4 -k 256 -y 3 -x 3 -p 1 -q 1",
        "-n 8 -c 128 -H 16 -W 16 -k 256 -y 1 -x 1",
        "-n 8 -c 64 -H 32 -W 32 -k 128 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2")),
    "convbfp16 -n 8 -c 64 -H 32 -W 32 -k 128 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -F 1",
    "CBAInferbfp16 -n 8 -c 64 -H 16 -W 16 -k 64 -y 3 -x 3 -p 1 -q 1 -F 1 -M 1 -m 3 --layout NHWC",
]


def built(signature, formulation, tiled: bool):
    """The CPU kernel of ``formulation`` with or without data tiling, verified."""
    flags = tuple(f for f in formulation.flags if f != TILING) + ((TILING,) if tiled else ())
    return verified_cpu_kernel(signature, dataclasses.replace(formulation, flags=flags))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.4, help="per kernel, way and round")
    parser.add_argument("commands", nargs="*", help="commands (default: ResNet-18-like forwards)")
    args = parser.parse_args()
    print(f"{'command':<84} {'formulation':<12} {'without':>8} {'with':>8} {'torch':>8}  (µs per call)")
    for command in args.commands or COMMANDS:
        for signature in BooOpRegistry.parse_signatures(command):
            formulation = BooOpRegistry.default().formulations(signature, Target.parse("cpu"))[0]
            kernels = {tiled: built(signature, formulation, tiled) for tiled in (False, True)}
            inputs = signature.get_sample_args()
            samples: dict[str, list[float]] = {"without": [], "with": [], "torch": []}
            for _ in range(args.rounds):
                for tiled, kernel in kernels.items():
                    samples["with" if tiled else "without"].append(
                        per_call_us(lambda kernel=kernel, inputs=inputs: kernel(*inputs), args.seconds))
                samples["torch"].append(per_call_us(lambda s=signature, inputs=inputs: s.eager(*inputs), args.seconds))
            us = {name: statistics.median(values) for name, values in samples.items()}
            print(f"{command[:84]:<84} {formulation.name:<12} {us['without']:8.0f} {us['with']:8.0f} "
                  f"{us['torch']:8.0f}", flush=True)


if __name__ == "__main__":
    main()
