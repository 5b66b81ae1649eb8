"""Data-parallel training with BOO on one host: each network trained under
DistributedDataParallel on 1 and N GPUs (torchrun, NCCL), eagerly and compiled with each
backend, from the same weights on the same batches.

    python benchmarks/ddp.py [--models decoder,resnet50,vit_b_16] [--backends iree_boo,iree_boo_inductor]
                             [--gpus 1,2] [--steps 12] [--batch 32] [--backward-kernels 1] [--small]

Every run starts from an empty kernel cache of its own (``--warm``: the 1-rank run's), shared
by its ranks, so the first compiled step pays for every kernel: one rank compiles each and
the others wait on its lock and load it. Per row: milliseconds per step (median, per-GPU batch fixed: weak scaling) of
eager DDP and of the compiled model in that run; scaling efficiency (the 1-GPU step time
over the N-GPU one) of both, and BOO's as a fraction of eager's; the first compiled step's
seconds (slowest rank) and its ratio to the 1-GPU run's; the kernels each rank compiled
and the entries the cache holds (equal totals: compiled once per host); kernels each rank
verified; the largest relative difference between the compiled run's loss curve and eager
DDP's; and BOO's share of the step's conv, matmul and normalization FLOPs. On a machine
without GPUs it runs the CPU ranks on gloo (``--small`` fits them).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import torch

from boo_core.kernels.cache import entry_directories
from boo_core.testing.distributed import RankResult, launch, rank_environment


def run(model: str, backend: str, gpus: int, args: argparse.Namespace, work: Path) -> tuple[list[RankResult], int]:
    """One torchrun job on ``gpus`` ranks with a fresh cache; the ranks' results and the
    entries their cache holds after it."""
    cache = work / (f"cache-{model}-{backend}" if args.warm else f"cache-{model}-{backend}-{gpus}")
    out = work / f"out-{model}-{backend}-{gpus}"
    env = rank_environment(cache, BOO_USE_BACKWARD_KERNELS=args.backward_kernels)
    if torch.cuda.is_available():
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus))
    arguments = ["--model", model, "--backend", backend, "--steps", str(args.steps), "--batch", str(args.batch)]
    results = launch(gpus, out, arguments + (["--small"] if args.small else []), env=env, timeout=args.timeout)
    return results, len(entry_directories(cache))


def relative_gap(losses: list[float], reference: list[float]) -> float:
    return max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses, reference))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="decoder,resnet50,vit_b_16")
    parser.add_argument("--backends", default="iree_boo,iree_boo_inductor")
    parser.add_argument("--gpus", default="", help="rank counts, 1 first (default: 1 and every GPU)")
    parser.add_argument("--steps", type=int, default=12, help="training steps per run (the first is not timed)")
    parser.add_argument("--batch", type=int, default=32, help="per GPU (decoder: sequences of 1,024 tokens)")
    parser.add_argument("--backward-kernels", default="1", choices=("0", "1"),
                        help="BOO_USE_BACKWARD_KERNELS: gradients on BOO kernels (1) or the nested backend")
    parser.add_argument("--small", action="store_true", help="CPU-sized networks")
    parser.add_argument("--warm", action="store_true",
                        help="runs after the 1-rank one reuse its cache (their first steps then load, not compile)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one torchrun job may take")
    parser.add_argument("--keep", type=Path, help="keep caches and per-rank JSON here (default: a temporary folder)")
    args = parser.parse_args()

    available = torch.cuda.device_count()
    counts = [int(n) for n in args.gpus.split(",")] if args.gpus else sorted({1, max(available, 2)})
    if available and max(counts) > available:
        raise SystemExit(f"--gpus: {max(counts)} ranks asked for, {available} GPUs here")
    if counts[0] != 1:
        raise SystemExit("--gpus: the first count must be 1 (the scaling baseline)")
    work = args.keep or Path(tempfile.mkdtemp(prefix="boo-ddp-"))
    device = torch.cuda.get_device_name() if available else "cpu (gloo)"
    print(f"{device} x{max(counts)}, torch {torch.__version__}, batch {args.batch} per rank, {args.steps} steps, "
          f"BOO_USE_BACKWARD_KERNELS={args.backward_kernels}")
    print("| model | backend | ranks | eager DDP ms | BOO ms | vs eager | eager scaling | BOO scaling | "
          "BOO/eager scaling | first step s | vs 1 rank | compiled per rank / cache entries | "
          "verified per rank | loss gap vs eager | BOO share |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |")
    details = []
    try:
        for model in args.models.split(","):
            for backend in args.backends.split(","):
                base = None
                for gpus in counts:
                    try:
                        results, entries = run(model, backend, gpus, args, work)
                    except Exception as e:  # one configuration failing must not hide the others
                        print(f"| {model} | {backend} | {gpus} | failed: {str(e).splitlines()[0][:200]} |", flush=True)
                        details.append(str(e)[-3000:])
                        break
                    eager = max(r.eager_median_ms for r in results)
                    boo = max(r.median_ms for r in results)
                    first = max(r.first_step_s for r in results)
                    base = base or (eager, boo, first)
                    eager_scaling, boo_scaling = base[0] / eager, base[1] / boo
                    compiled = "+".join(str(r.activity["kernel compiled"]) for r in results)
                    verified = "+".join(str(r.activity["verdict checked"]) for r in results)
                    gap = max(relative_gap(r.losses, r.eager_losses) for r in results)
                    share = results[0].offload_share
                    print(f"| {model} | {backend} | {gpus} | {eager:.2f} | {boo:.2f} | {boo / eager:.2f} | "
                          f"{eager_scaling:.1%} | {boo_scaling:.1%} | {boo_scaling / eager_scaling:.1%} | "
                          f"{first:.1f} | {first / base[2]:.2f} | {compiled} / {entries} | {verified} | "
                          f"{gap:.1e} | {'-' if share is None else f'{share:.1%}'} |", flush=True)
                    details.append(json.dumps({"model": model, "backend": backend, "gpus": gpus, "entries": entries,
                                               "ranks": [r.__dict__ for r in results]}))
    finally:
        if args.keep:
            (work / "ddp_results.jsonl").write_text("\n".join(details) + "\n")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for text in details:
        if text.startswith("{"):  # where the first step went: seconds compiling and verifying, per rank
            row = json.loads(text)
            spent = [{k: v for k, v in r["activity_seconds"].items() if v} for r in row["ranks"]]
            print(f"{row['model']} {row['backend']} {row['gpus']} ranks: first steps "
                  f"{[round(r['first_step_s'], 1) for r in row['ranks']]} s; {spent}")
        else:
            print(text)


if __name__ == "__main__":
    main()
