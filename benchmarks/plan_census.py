"""What the CUDA launch plans of a network's BOO kernels hold besides dispatches: fills and copies.

For each distinct kernel ``torch.compile(backend="iree_boo")`` makes of a traced network (bf16;
traced on this machine, so no GPU is needed), the module of the formulation that would serve it
on a Hopper GPU (the Hopper kernel library's first candidate's, where the library serves the
kernel; else the op's first formulation), cross-compiled for ``--target`` (the sm_80 PTX BOO
builds for an H100 or H200), and its launch plan
(docs/gpu.md, "Memory and streams"): dispatches, the bytes its fills zero and its copies move,
its transient buffers. A substituted kernel replaces dispatches, not fills or copies, so what
this lists is what a step pays on top of its kernels. Kernels with the most such bytes first,
each with the calls one step of each pass makes of it; the totals are per kernel and per
step (dispatches launched, bytes filled and copied); for a training pass, the tensors the
step's forward saves for its backward (each one autograd holds and hands over every step).

    python benchmarks/plan_census.py [--models resnet50] [--passes training,inference] [--batch 32]
                                     [--target cuda:sm_80] [--only TEXT]
"""

from __future__ import annotations

import argparse
import importlib.util

import torch

from boo_core import BooOpRegistry, Formulation
from boo_core.dynamo import kernel_calls, offload_summary, reset_offload_summary
from boo_core.kernels.launch_plan import Copy, Dispatch, Fill, LaunchPlan
from boo_core.kernels.request import KernelRequest
from boo_core.kernels.target import Target
from boo_core.settings import settings_override
from boo_core.signatures.signature import Signature
from boo_core.testing.models import workload_on

LIBRARY = importlib.util.find_spec("boo_kernels_hopper") is not None


def route(signature: Signature, target: Target) -> tuple[Formulation, str]:
    """The formulation that would serve ``signature`` on a Hopper GPU, and what says so."""
    offered = BooOpRegistry.default().formulations(signature, target)
    if LIBRARY:
        from boo_kernels_hopper import hooks

        library = hooks.candidates(signature, target)
        if library:
            name = library[0].formulation
            return next(f for f in offered if f.name == name) if name else offered[0], f"library: {library[0].name}"
    return offered[0], "op"


def census(plan: LaunchPlan) -> tuple[int, int, int, int]:
    """Dispatches, bytes filled, bytes copied, bytes of transient buffers."""
    dispatches = sum(isinstance(c, Dispatch) for c in plan.commands)
    filled = sum(c.length for c in plan.commands if isinstance(c, Fill))
    copied = sum(c.source.length for c in plan.commands if isinstance(c, Copy))
    return dispatches, filled, copied, sum(plan.transients)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50")
    parser.add_argument("--passes", default="training,inference")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--target", default="cuda:sm_80")
    parser.add_argument("--only", default="", help="only kernels whose name contains this text")
    args = parser.parse_args()
    target = Target.parse(args.target)
    signatures: dict[str, Signature] = {}
    calls: dict[str, int] = {}
    saved: list[str] = []
    for name in args.models.split(","):
        model, x = workload_on(name, args.batch, "cpu", torch.bfloat16)
        for training in [p == "training" for p in args.passes.split(",")]:
            reset_offload_summary()
            for signature, count in kernel_calls(model.train(training), x, backward=training):
                signatures.setdefault(signature.func_name, signature)
                calls[signature.func_name] = calls.get(signature.func_name, 0) + count
            if training:
                saved.append(f"{name}: {sum(g.saved_for_backward for g in offload_summary().graphs)}")
    rows = []
    with settings_override(cuda_launch="direct"):
        for func_name, signature in signatures.items():
            if args.only not in func_name:
                continue
            formulation, why = route(signature, target)
            plan = KernelRequest.create(signature, target, formulation).fetch().plan
            if isinstance(plan, str):
                rows.append((func_name, formulation.name, why, None, plan))
            else:
                rows.append((func_name, formulation.name, why, census(plan), ""))
    rows.sort(key=lambda r: -(r[3][1] + r[3][2]) if r[3] else 0)
    print(f"{len(rows)} kernels, target {target.name}; MB = 1e6 bytes; calls: per step of each pass")
    print(f"{'kernel':<80} {'formulation':<16} {'calls':>5} {'disp':>4} {'fill MB':>8} {'copy MB':>8} "
          f"{'transient MB':>12}  route")
    totals, per_step, step_calls = [0, 0, 0, 0], [0, 0, 0], 0
    for func_name, formulation, why, counts, error in rows:
        n = calls[func_name]
        if counts is None:
            print(f"{func_name[:80]:<80} {formulation:<16} {n:>5} no plan: {error}")
            continue
        totals = [a + b for a, b in zip(totals, counts)]
        per_step = [a + n * b for a, b in zip(per_step, counts[:3])]
        step_calls += n
        d, filled, copied, transient = counts
        print(f"{func_name[:80]:<80} {formulation:<16} {n:>5} {d:>4} {filled / 1e6:8.1f} {copied / 1e6:8.1f} "
              f"{transient / 1e6:12.1f}  {why}")
    print(f"{'total, each kernel once':<80} {'':<16} {'':>5} {totals[0]:>4} {totals[1] / 1e6:8.1f} "
          f"{totals[2] / 1e6:8.1f} {totals[3] / 1e6:12.1f}")
    print(f"{'per step (each kernel times its calls)':<80} {'':<16} {step_calls:>5} {per_step[0]:>4} "
          f"{per_step[1] / 1e6:8.1f} {per_step[2] / 1e6:8.1f}")
    if saved:
        print(f"tensors a training step's forward saves for its backward: {', '.join(saved)}")


if __name__ == "__main__":
    main()
