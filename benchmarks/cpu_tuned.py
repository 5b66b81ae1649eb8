"""BOO on the CPU, untuned and tuned, against PyTorch, in one run.

The kernels of issue 14's CPU table (f32): conv 3x3 8x64x56x56 forward, backward-data and
backward-weight, conv 1x1 8x128x24x48->384, gemm 1024^3, layer norm 4096x1024. With
``--tune`` they are tuned first (``boo tune``: every formulation, configuration and flag
set, verified, timed; the winner recorded); then each is timed three ways in alternating
rounds (the machine is shared: ratios within a round are what to compare): BOO untuned
(BOO_USE_TUNED=0), BOO tuned, and PyTorch.

    python benchmarks/cpu_tuned.py [--tune] [--rounds 5] [--seconds 0.5] [-j 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from boo_core import BooOpRegistry, clear_launchables, get_launchable
from boo_core.kernels.tuning_records import read_record
from boo_core.settings import settings_override
from boo_core.verify.verdicts import device_identity

COMMANDS = {
    "conv 3x3 fwd": "conv -n 8 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -F 1",
    "conv 3x3 bwd": "conv -n 8 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -F 2",
    "conv 3x3 wrw": "conv -n 8 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -F 4",
    "conv 1x1 fwd": "conv -n 8 -c 128 -H 24 -W 48 -k 384 -y 1 -x 1 -F 1",
    "gemm 1024^3": "gemm -m 1024 -n 1024 -k 1024",
    "layernorm 4096x1024": "layernorm -X 4096x1024 -o 1 -m 1 -F 1",
}


def per_call_us(fn, seconds: float) -> float:
    """Median wall time of calls of ``fn`` over about ``seconds``."""
    fn()
    samples, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(samples) < 3:
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tune", action="store_true", help="tune the kernels first")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5, help="per kernel, way and round")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    rows = [(name, BooOpRegistry.parse_command(command)) for name, command in COMMANDS.items()]
    if args.tune:
        from boo_core.signatures.commands import Command
        from boo_core.tools.tune import run_tune
        from boo_core.tune.tuner import TuneOptions

        run_tune([Command(c, name) for name, c in COMMANDS.items()], TuneOptions(jobs=args.jobs, iterations=10),
                 progress=False)
    results = []
    for name, signature in rows:
        args_ = signature.get_sample_args()
        clear_launchables()
        with settings_override(use_tuned=False):
            untuned = get_launchable(signature)
        tuned = get_launchable(signature)
        ways = {"untuned": lambda u=untuned, a=args_: u(*a), "tuned": lambda t=tuned, a=args_: t(*a),
                "torch": lambda s=signature, a=args_: s.eager(*a)}
        rounds = []
        for _ in range(args.rounds):
            times = {way: per_call_us(fn, args.seconds) for way, fn in ways.items()}
            rounds.append(times)
        ratio = statistics.median(r["tuned"] / r["torch"] for r in rounds)
        untuned_ratio = statistics.median(r["untuned"] / r["torch"] for r in rounds)
        median = {way: statistics.median(r[way] for r in rounds) for way in ways}
        record = read_record(signature, tuned.request.target.name, device_identity(torch.device("cpu")))
        results.append((name, median, untuned_ratio, ratio, untuned.formulation,
                        record.label if record is not None and tuned.formulation == record.formulation
                        else tuned.formulation))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; medians over {args.rounds} rounds")
    print(f"{'kernel':<22} {'untuned us':>11} {'tuned us':>10} {'torch us':>10} {'untuned/torch':>14} "
          f"{'tuned/torch':>12}  served by (tuned)")
    for name, median, untuned_ratio, ratio, before, after in results:
        print(f"{name:<22} {median['untuned']:>11.0f} {median['tuned']:>10.0f} {median['torch']:>10.0f} "
              f"{untuned_ratio:>14.2f} {ratio:>12.2f}  {before} -> {after}")
    print(f"geometric mean BOO/torch: untuned {statistics.geometric_mean(r[2] for r in results):.2f}, "
          f"tuned {statistics.geometric_mean(r[3] for r in results):.2f}; worst tuned row "
          f"{max(r[3] for r in results):.2f}")


if __name__ == "__main__":
    main()
