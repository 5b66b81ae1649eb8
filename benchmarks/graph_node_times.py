"""Where a compiled step's host time goes, node by node: a model under ``torch.compile(
backend="iree_boo")`` with each graph run by a timing interpreter, which adds the host time
of every node (BOO's calls, and the aten ops left to eager PyTorch) to its kind's total.

The interpreter adds a few microseconds to every node, so read the table for where the time
goes and how many nodes of each kind a step runs, and the plain ``iree_boo`` step time for
what a user sees (printed first, without the interpreter). The same graphs without BOO's
rewrite (the aten ops BOO's nodes replace, run eagerly) are timed the same way first: the
first table, the host time each aten op costs, to hold BOO's nodes against.

With ``--train`` a step is a forward and a backward (``model.train()``; the gradient of
the output's sum), and the table has the backward graph's nodes too. The step time not in
any node is the host time around the graphs (Dynamo's guards, AOTAutograd's wrappers and
the autograd engine) and, on a GPU, the wait for the last kernels.

    python benchmarks/graph_node_times.py [--model resnet50] [--train] [--batch 32] [--steps 20] [--top 20]
                                          (--model: any of boo_core.testing.models.WORKLOADS)
"""

from __future__ import annotations

import argparse
import collections
import time
from collections.abc import Callable

import torch
import torch.fx

import boo_core.dynamo.backends as backends
from boo_core.testing.models import WORKLOADS, workload_on


class TimingInterpreter(torch.fx.Interpreter):
    """Runs a graph, adding each node's host time to ``totals`` under its kind."""

    def __init__(self, module: torch.fx.GraphModule, totals: dict[str, float], counts: collections.Counter):
        super().__init__(module)
        self.totals, self.counts = totals, counts

    def run_node(self, node: torch.fx.Node):
        start = time.perf_counter()
        result = super().run_node(node)
        kind = _kind(node)
        self.totals[kind] += time.perf_counter() - start
        self.counts[kind] += 1
        return result


def _kind(node: torch.fx.Node) -> str:
    pattern = getattr(node.target, "pattern", None)  # a BOO KernelCall
    if pattern is not None:
        return f"BOO {pattern.name}"
    if node.op == "call_function":
        return str(node.target) if isinstance(node.target, torch._ops.OpOverload) else node.target.__name__
    return node.op


def step_ms(step: Callable[[], object], steps: int, sync: Callable[[], None]) -> float:
    for _ in range(3):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="resnet50", choices=WORKLOADS)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--small", action="store_true", help="the small model (a CPU smoke run)")
    parser.add_argument("--train", action="store_true", help="forward and backward steps")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model, x = workload_on(args.model, args.batch, args.device, torch.bfloat16 if cuda else torch.float32,
                           small=args.small)
    model.train(args.train)

    def stepper(run: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], object]:
        if not args.train:
            return lambda: run(x)

        def step() -> None:
            model.zero_grad(set_to_none=True)
            run(x).sum().backward()
        return step

    with torch.set_grad_enabled(args.train):
        eager = step_ms(stepper(model), args.steps, sync)
        torch._dynamo.reset()
        plain = torch.compile(model, backend="iree_boo", dynamic=False)
        boo = step_ms(stepper(plain), args.steps, sync)

        aten = interpreted_step(model, stepper, args.steps, sync, with_boo=False)
        boo_nodes = interpreted_step(model, stepper, args.steps, sync, with_boo=True)
    what = "training" if args.train else "inference"
    print(f"{args.model} {what}, {args.device}, batch {args.batch}: eager {eager:.2f} ms/step, iree_boo {boo:.2f}")
    for title, (interpreted, totals, counts) in (("without BOO (the graphs' aten ops)", aten),
                                                  ("iree_boo", boo_nodes)):
        print(f"\n{title}: {interpreted:.2f} ms/step interpreted, the nodes' own host time "
              f"{sum(totals.values()) / args.steps * 1e3:.2f} ms")
        print("| node kind | per step | host us per step | us each |")
        print("| --- | ---: | ---: | ---: |")
        for kind, seconds in sorted(totals.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"| {kind[:70]} | {counts[kind] // args.steps} | {seconds / args.steps * 1e6:.0f} | "
                  f"{seconds / counts[kind] * 1e6:.1f} |")


def interpreted_step(model: torch.nn.Module, stepper: Callable, steps: int, sync: Callable[[], None], *,
                     with_boo: bool) -> tuple[float, dict[str, float], collections.Counter]:
    """ms per step of ``model`` under ``iree_boo`` with every graph run by a
    :class:`TimingInterpreter` (``with_boo=False``: the graphs as AOTAutograd gave them, BOO's
    rewrite skipped), and the interpreter's totals and counts over ``steps`` steps."""
    totals: dict[str, float] = collections.defaultdict(float)
    counts: collections.Counter = collections.Counter()
    rewrite = backends.rewrite

    def timed_rewrite(gm: torch.fx.GraphModule, **kwargs):
        report = rewrite(gm, **kwargs) if with_boo else None
        gm.forward = lambda *inputs: TimingInterpreter(gm, totals, counts).run(*inputs)
        return report

    backends.rewrite = timed_rewrite
    try:
        torch._dynamo.reset()
        step = stepper(torch.compile(model, backend="iree_boo", dynamic=False))
        step_ms(step, 1, sync)
        totals.clear()
        counts.clear()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        return (time.perf_counter() - start) / steps * 1e3, totals, counts
    finally:
        backends.rewrite = rewrite


if __name__ == "__main__":
    main()
