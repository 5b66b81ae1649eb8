"""Data-parallel training under torch.compile: one rank's side of a run that torchrun starts,
for BOO's tests and ``benchmarks/ddp.py``.

    python -m torch.distributed.run --nproc-per-node 2 -m boo_core.testing.distributed \\
        --model decoder --backend iree_boo --steps 10 --out DIR

Every rank builds the same network (:func:`~boo_core.testing.models.workload`, one seed),
trains it under ``DistributedDataParallel`` for ``--steps`` steps of SGD eagerly, then again
from the same weights compiled with ``--backend`` (``eager``: the first run only), each rank
on random batches of its own (the same ones in both runs), and writes ``DIR/rank<r>.json``
(:class:`RankResult`): the loss of every step averaged over the ranks, step times, the first
compiled step's time, what BOO's kernel cache did in this process
(:mod:`boo_core.kernels.activity`) and BOO's offload counts. The CPU runs on gloo; GPUs on
NCCL, one per rank (``cuda:LOCAL_RANK``), in bf16.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..dynamo import offload_summary, reset_offload_summary
from ..errors import BooError
from ..kernels import activity
from .models import WORKLOADS, workload


@dataclass
class RankResult:
    """What one rank measured (module docstring). Times are milliseconds per step, the
    first step of each run left out; ``first_step_s`` is the compiled run's first step
    (torch.compile and BOO's kernels: compiled, or loaded from the cache)."""

    rank: int
    world: int
    pid: int
    device: str
    model: str
    backend: str
    eager_losses: list[float]
    eager_ms: list[float]
    losses: list[float] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)
    first_step_s: float = 0.0
    activity: dict[str, int] = field(default_factory=dict)
    activity_seconds: dict[str, float] = field(default_factory=dict)
    offloaded: dict[str, int] = field(default_factory=dict)
    left: dict[str, int] = field(default_factory=dict)
    offload_share: float | None = None
    max_param_diff: float = 0.0

    @property
    def eager_median_ms(self) -> float:
        return statistics.median(self.eager_ms) if self.eager_ms else float("nan")

    @property
    def median_ms(self) -> float:
        return statistics.median(self.step_ms) if self.step_ms else float("nan")

    @classmethod
    def read(cls, path: Path) -> RankResult:
        return cls(**json.loads(path.read_text()))


Batch = tuple[torch.Tensor, torch.Tensor]


def _batches(shape: tuple[int, ...], channels_last: bool, classes: int | None, rank: int, steps: int,
             device: torch.device, dtype: torch.dtype) -> list[Batch]:
    """This rank's batches: inputs and targets (class labels, or a tensor like the output)."""
    found = []
    for step in range(steps):
        generator = torch.Generator().manual_seed(1000 * rank + step)
        x = torch.randn(shape, generator=generator).to(device, dtype)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        target = torch.randint(0, classes, (shape[0],), generator=generator) if classes else \
            torch.randn(shape, generator=generator)
        found.append((x, target.to(device)))
    return found


def _loss(y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if target.dtype == torch.long:
        return F.cross_entropy(y.float(), target)
    return F.mse_loss(y.float(), target)


def _train(step_model: Callable[[torch.Tensor], torch.Tensor], optimizer: torch.optim.Optimizer,
           batches: list[Batch], sync: Callable[[], None]) -> tuple[list[float], list[float]]:
    """Train on ``batches``; the loss of each step averaged over ranks, and each step's ms."""
    losses, times = [], []
    for x, target in batches:
        dist.barrier()
        sync()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = _loss(step_model(x), target)
        loss.backward()
        optimizer.step()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
        mean = loss.detach().float().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / dist.get_world_size())
    return losses, times


def run_rank(model_name: str, backend: str, steps: int, batch: int, *, small: bool, lr: float,
             mode: str | None = None) -> RankResult:
    """Train as one rank of an initialised process group (module docstring)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = torch.cuda.is_available() and dist.get_backend() == "nccl"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dtype = torch.bfloat16 if cuda else torch.float32
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model, shape, channels_last = workload(model_name, batch, small=small)
    model = model.to(device, dtype)
    initial = copy.deepcopy(model.state_dict())
    with torch.no_grad():
        out_shape = model(torch.zeros(shape, device=device, dtype=dtype)).shape
    classes = out_shape[-1] if len(out_shape) == 2 else None
    batches = _batches(shape, channels_last, classes, rank, steps, device, dtype)

    def trained(compiled_with: str | None) -> tuple[nn.Module, list[float], list[float], float]:
        module = copy.deepcopy(model)
        module.load_state_dict(initial)
        ddp = nn.parallel.DistributedDataParallel(module, device_ids=[device.index] if cuda else None)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
        step_model = ddp if compiled_with is None else torch.compile(ddp, backend=compiled_with, mode=mode,
                                                                     dynamic=False)
        losses, times = _train(step_model, optimizer, batches, sync)
        return module, losses, times[1:], times[0] / 1e3

    _, eager_losses, eager_ms, _ = trained(None)
    result = RankResult(rank, world, os.getpid(), str(device), model_name, backend, eager_losses, eager_ms)
    if backend == "eager":
        return result
    torch._dynamo.reset()
    reset_offload_summary()
    activity.reset()
    module, result.losses, result.step_ms, result.first_step_s = trained(backend)
    result.activity, result.activity_seconds = activity.counts(), activity.seconds()
    summary = offload_summary()
    result.offloaded, result.left = dict(summary.offloaded), dict(summary.fallbacks)
    result.offload_share = summary.offload_share
    # DDP keeps the replicas equal: every rank's weights after training must be rank 0's.
    flat = torch.cat([p.detach().float().flatten() for p in module.parameters()])
    reference = flat.clone()
    dist.broadcast(reference, 0)
    result.max_param_diff = float((flat - reference).abs().max())
    return result


def rank_environment(cache_dir: Path, **variables: str) -> dict[str, str]:
    """The environment for a job's ranks: this process's without its ``BOO_*`` settings, the
    kernel cache at ``cache_dir`` (shared by the ranks), one OpenMP thread per rank unless
    ``OMP_NUM_THREADS`` says otherwise, Python's fault handler on, and ``variables``."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("BOO_")}
    env.update({"BOO_CACHE_DIR": str(cache_dir), "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
                "PYTHONFAULTHANDLER": "1", **variables})  # a rank that crashes prints where
    return env


def launch(ranks: int, out: Path, arguments: list[str], *, env: dict[str, str] | None = None,
           timeout: float = 1800) -> list[RankResult]:
    """Run :func:`main` on ``ranks`` processes of this host through torchrun (a free port, a
    fresh rendezvous), each writing under ``out``; their results, by rank. Raises
    :class:`~boo_core.errors.BooError` with the end of the output when a rank fails."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               "-m", __name__, "--out", str(out), *arguments]
    done = subprocess.run(command, env=env, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if done.returncode:
        raise BooError(f"{' '.join(command)} exited with {done.returncode}:\n{done.stdout[-6000:]}")
    return [RankResult.read(out / f"rank{rank}.json") for rank in range(ranks)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=WORKLOADS, default="tiny_convnet")
    parser.add_argument("--backend", default="iree_boo", help="iree_boo, iree_boo_inductor, inductor or eager")
    parser.add_argument("--mode", default=None, help="torch.compile's mode")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--small", action="store_true", help="the network's CPU-sized cousin")
    parser.add_argument("--out", type=Path, required=True, help="a folder for rank<r>.json")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps: at least 2 (the first step of each run is not timed)")
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        result = run_rank(args.model, args.backend, args.steps, args.batch, small=args.small, lr=args.lr,
                          mode=args.mode)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"rank{result.rank}.json").write_text(json.dumps(dataclasses.asdict(result), indent=1))
        dist.barrier()
    finally:
        # torch.compile's caches keep the compiled DDP modules, and through their reducers the
        # process group, alive into interpreter teardown. A rank aborted there now and then on
        # CI ("terminate called without an active exception", SIGABRT, after both ranks had
        # written their results; three times in two days, never outside pytest), likely a
        # gloo group's threads destroyed unjoined: so they are released first.
        torch._dynamo.reset()
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
