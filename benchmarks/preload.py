"""Cache pre-population: ``-j 1`` against ``-j 2`` (and more), and against Ray workers, on
the same distinct commands.

Each setting runs in a fresh process of its own and compiles the same kernels into an
empty cache through ``CachePopulator`` (what ``boo preload`` runs). Before the clock starts,
that process compiles one other kernel into a scratch cache, so one-time costs (importing
the exporter, its first trace) are paid by neither setting; the forked workers of ``-j 2``
inherit that warm state, as the in-process ``-j 1`` does.

With ``--ray``, each count N of ``--jobs`` is also run on Ray: a local Ray instance of N
CPUs (N workers), or with ``--ray ADDRESS`` the cluster there, N tasks at a time. Ray's
workers are fresh processes, so before the clock starts N other kernels are preloaded on
them (each worker imports torch and traces once); the table gives that warm-up and the
time to start (or join) Ray apart from the preload itself, which includes sending every
kernel back and writing it into the cache. Speed-ups are against ``-j 1``.

    python benchmarks/preload.py [--kernels 8] [--jobs 1 2]
    python benchmarks/preload.py --ray --kernels 32 --jobs 1 4 8 16
    python benchmarks/preload.py --ray auto --kernels 32 --jobs 1 4 8 16

A local instance started here gets a Ray token of its own through the environment (unless
``RAY_AUTH_MODE`` or ``RAY_AUTH_TOKEN`` is set), so it writes no ``~/.ray/auth_token``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor

import boo_core
from boo_core import CachePopulator


def distinct_commands(count: int, channels: int = 8) -> list[str]:
    """``count`` small float32 3x3 convolutions of different sizes (one kernel each)."""
    return [f"conv -n 1 -c {channels} -H {8 + i} -W {8 + i} -k 16 -y 3 -x 3 -p 1 -q 1 -F 1" for i in range(count)]


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
    return seconds, _first_error(outcomes)


def compile_on_ray(commands: list[str], workers: int, address: str) -> tuple[float, float, float, str]:
    """Seconds to start (or join) Ray, to warm ``workers`` workers, and to preload
    ``commands`` into an empty cache on them; and the first failure's error."""
    from boo_core.cluster import RayCluster
    from boo_core.cluster.ray_cluster import is_local

    start = time.perf_counter()
    cluster = RayCluster.connect(address, num_cpus=workers if is_local(address) else None)
    started = time.perf_counter() - start
    try:
        with tempfile.TemporaryDirectory(prefix="boo-preload-warmup-") as scratch:
            boo_core.configure(cache_dir=scratch)
            start = time.perf_counter()
            CachePopulator(commands=distinct_commands(workers, channels=4), ray=cluster, jobs=workers).run()
            warmed = time.perf_counter() - start
        with tempfile.TemporaryDirectory(prefix=f"boo-preload-ray{workers}-") as cache_dir:
            boo_core.configure(cache_dir=cache_dir)
            populator = CachePopulator(commands=commands, ray=cluster, jobs=workers)
            start = time.perf_counter()
            outcomes = populator.run()
            seconds = time.perf_counter() - start
    finally:
        cluster.close()
    return started, warmed, seconds, _first_error(outcomes)


def _first_error(outcomes) -> str:
    failures = [o for o in outcomes if o.status != "compiled"]
    return (failures[0].error or failures[0].status) if failures else ""


def fresh(function, *args):
    """``function(*args)`` in a fresh process of its own."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as process:
        return process.submit(function, *args).result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=8, help="distinct kernels to compile (default: 8)")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="settings of -j (default: 1 2)")
    parser.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                        help="also on Ray: a local instance of N CPUs, or the cluster at ADDRESS ('auto': this "
                             "machine's), N tasks at a time")
    args = parser.parse_args()
    if args.ray == "local" and not {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN"} & set(os.environ):
        os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=uuid.uuid4().hex)

    commands = distinct_commands(args.kernels)
    ray = "" if args.ray is None else (" and Ray (a local instance of N CPUs)" if args.ray == "local"
                                       else f" and Ray (the cluster at {args.ray}, N tasks at a time)")
    print(f"{len(commands)} distinct conv kernels, target cpu, {os.cpu_count()} CPUs, empty cache each time; "
          f"-j N{ray}")
    header = f"{'N':>3} {'-j N s':>8} {'s/kernel':>8} {'speed-up':>8}"
    if args.ray is not None:
        header += f" {'Ray s':>8} {'s/kernel':>8} {'speed-up':>8} {'start s':>8} {'warm-up s':>9}"
    print(header)
    baseline = None
    for jobs in args.jobs:
        seconds, error = fresh(compile_all, commands, jobs)
        if error:
            raise SystemExit(f"-j {jobs}: a kernel failed: {error}")
        baseline = baseline or seconds
        line = f"{jobs:>3} {seconds:>8.2f} {seconds / len(commands):>8.2f} {baseline / seconds:>7.2f}x"
        if args.ray is not None:
            started, warmed, seconds, error = fresh(compile_on_ray, commands, jobs, args.ray)
            if error:
                raise SystemExit(f"Ray, {jobs} workers: a kernel failed: {error}")
            line += (f" {seconds:>8.2f} {seconds / len(commands):>8.2f} {baseline / seconds:>7.2f}x"
                     f" {started:>8.2f} {warmed:>9.2f}")
        print(line, flush=True)


if __name__ == "__main__":
    main()
