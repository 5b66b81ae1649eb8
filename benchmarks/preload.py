"""Cache pre-population: ``-j 1`` against ``-j 2`` (and more) on the same distinct commands.

Each setting runs in a fresh process of its own and compiles the same kernels into an
empty cache through ``CachePopulator`` (what ``boo preload`` runs). Before the clock starts,
that process compiles one other kernel into a scratch cache, so one-time costs (importing
the exporter, its first trace) are paid by neither setting; the forked workers of ``-j 2``
inherit that warm state, as the in-process ``-j 1`` does.

    python benchmarks/preload.py [--kernels 8] [--jobs 1 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

import boo_core
from boo_core import CachePopulator


def distinct_commands(count: int) -> list[str]:
    """``count`` small float32 3x3 convolutions of different sizes (one kernel each)."""
    return [f"conv -n 1 -c 8 -H {8 + i} -W {8 + i} -k 16 -y 3 -x 3 -p 1 -q 1 -F 1" for i in range(count)]


def compile_all(commands: list[str], jobs: int) -> tuple[float, str]:
    """Seconds to preload ``commands`` into an empty cache with ``jobs`` processes, and the
    first failure's error (empty when every kernel compiled)."""
    with tempfile.TemporaryDirectory(prefix="boo-preload-warmup-") as scratch:
        boo_core.configure(cache_dir=scratch)
        CachePopulator(commands=["conv -n 1 -c 4 -H 4 -W 4 -k 4 -F 1"], jobs=1).run()
    with tempfile.TemporaryDirectory(prefix=f"boo-preload-j{jobs}-") as cache_dir:
        boo_core.configure(cache_dir=cache_dir)
        populator = CachePopulator(commands=commands, jobs=jobs)
        start = time.perf_counter()
        outcomes = populator.run()
        seconds = time.perf_counter() - start
    failures = [o for o in outcomes if o.status != "compiled"]
    return seconds, failures[0].error if failures else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=8, help="distinct kernels to compile (default: 8)")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="settings of -j (default: 1 2)")
    args = parser.parse_args()

    commands = distinct_commands(args.kernels)
    print(f"{len(commands)} distinct conv kernels, target cpu, {os.cpu_count()} CPUs, empty cache each time")
    print(f"{'jobs':>4} {'seconds':>9} {'s/kernel':>9} {'speed-up':>9}")
    baseline = None
    for jobs in args.jobs:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as fresh:
            seconds, error = fresh.submit(compile_all, commands, jobs).result()
        if error:
            raise SystemExit(f"-j {jobs}: a kernel failed: {error}")
        baseline = baseline or seconds
        print(f"{jobs:>4} {seconds:>9.2f} {seconds / len(commands):>9.2f} {baseline / seconds:>8.2f}x")


if __name__ == "__main__":
    main()
