"""What a BOO kernel after a PyTorch op costs on the CPU: the two alternating, against each alone.

Under ``torch.compile(backend="iree_boo")`` on the CPU, BOO's kernels (IREE's workers) and the
ops left to PyTorch (its OpenMP threads, which spin for a while after each op) take turns on
the same cores. Each configuration runs in a process of its own (OpenMP reads its settings
when PyTorch starts): a float32 linear layer's product on BOO (2048 x 128 @ 128 x 384 with a
bias, untuned) and a layer norm on PyTorch, each alone, then alternating; median µs per
iteration (``cpu_drivers.per_call_us``, the median of three rounds). ``x`` is the alternating
time over the sum of the two alone.

    python benchmarks/cpu_contention.py [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

#: (label, extra environment) of each configuration.
CONFIGS = [("default", {}), ("BOO_CPU_DRIVER=local-sync", {"BOO_CPU_DRIVER": "local-sync"}),
           ("OMP_WAIT_POLICY=PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"})]

CHILD = r"""
import statistics, sys
sys.path.insert(0, sys.argv[2])
import torch
from cpu_drivers import per_call_us
from boo_core import get_launchable
torch.set_num_threads(int(sys.argv[1]))
kernel = get_launchable("gemm -m 2048 -k 128 -n 384 -u 0 -v 1 -b 1 --bias 1")
a, b, bias = kernel.signature.get_sample_args()
y = torch.randn(2048, 384)
torch_op = lambda: torch.nn.functional.layer_norm(y, (384,))
boo_op = lambda: kernel(a, b, bias)
def both():
    torch_op()
    boo_op()
rounds = [(per_call_us(torch_op), per_call_us(boo_op), per_call_us(both)) for _ in range(3)]
print(*(statistics.median(r[i] for r in rounds) for i in range(3)), kernel.driver)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="PyTorch's intra-op threads")
    args = parser.parse_args()
    print(f"{args.threads} PyTorch threads, {os.cpu_count()} CPUs; median µs per iteration")
    print("| configuration | BOO driver | PyTorch op alone | BOO kernel alone | alternating | x |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for label, extra in CONFIGS:
        env = {**os.environ, "BOO_USE_TUNED": "0", **extra}
        out = subprocess.run([sys.executable, "-c", CHILD, str(args.threads), str(Path(__file__).parent)], env=env,
                             capture_output=True, text=True, check=True).stdout.split()
        torch_us, boo_us, both_us = (float(v) for v in out[:3])
        print(f"| {label} | {out[3]} | {torch_us:.0f} | {boo_us:.0f} | {both_us:.0f} | "
              f"{both_us / (torch_us + boo_us):.2f} |", flush=True)


if __name__ == "__main__":
    main()
