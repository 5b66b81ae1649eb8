"""Host time of each BOO node of a compiled network against the aten ops it replaced.

The network is compiled with ``torch.compile(backend="iree_boo")``; every BOO node of its
graphs (forward, and with ``--train`` backward, on BOO's backward kernels) is caught with
the tensors of its first call, and with the graph nodes it replaced (its match). Each node
is then called on those tensors, and so are the aten ops it took out of the graph, run one
by one as the graph ran them (a convolution, batch norm and ReLU for a fused inference conv;
``t`` and ``addmm`` for a linear layer; a value they read that the kernel does not take, such
as the bias of a layer norm's backward, is a zero tensor of its metadata), timed as
``node_overhead.py`` times one node: host time per call over batches of 100 calls that never
fill the GPU's launch queue (on the CPU the kernels' time counts too). Medians per pattern.
This is every node of real networks; ``node_overhead.py`` takes single layers through each
of a node's routes.

    python benchmarks/node_host_time.py [--models resnet50,vit_b_16,decoder] [--batch 1] [--train]
"""

from __future__ import annotations

import argparse
import operator
import statistics
from collections import defaultdict
from collections.abc import Callable

import node_overhead  # benchmarks/node_overhead.py, beside this script
import torch
import torch.fx

import boo_core.dynamo.rewrite as rewrite
from boo_core.dynamo.kernel_call import KernelCall
from boo_core.plugins.patterns import FusionMatch
from boo_core.settings import settings_override
from boo_core.testing.models import workload_on


def replaced_ops(match: FusionMatch) -> Callable[[tuple], object]:
    """The aten ops a match took out of the graph, as a function of the kernel call's inputs
    (read from the graph before the rewrite erases them)."""
    matched = (*match.nodes, *match.applied)
    steps: list[tuple[torch.fx.Node, Callable, tuple, dict]] = []
    for node in matched:
        for arg in node.all_input_nodes:  # the root's items that the applied nodes read
            if arg.target is operator.getitem and arg.args[0] in matched and arg not in (s[0] for s in steps):
                steps.append((arg, arg.target, arg.args, dict(arg.kwargs)))
        steps.append((node, node.target, node.args, dict(node.kwargs)))
    order = {node: index for index, node in enumerate(match.root.graph.nodes)}
    steps.sort(key=lambda step: order[step[0]])  # graph order: an applied node may read a later-listed one

    stand_ins: dict[torch.fx.Node, torch.Tensor] = {}

    def run(inputs: tuple) -> object:
        values: dict[torch.fx.Node, object] = dict(zip(match.inputs, inputs))

        def value(node: torch.fx.Node) -> object:
            if node in values:
                return values[node]
            # A value the kernel does not take (a bias only db's shape needs, running statistics
            # the rewrite hands the kernel in another form): a tensor of its metadata costs the host the same.
            meta = node.meta["val"]
            if not isinstance(meta, torch.Tensor):
                return meta
            if node not in stand_ins:
                stand_ins[node] = torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype,
                                                      device=inputs[0].device).zero_()
            return stand_ins[node]

        for node, target, args, kwargs in steps:
            args, kwargs = torch.fx.node.map_arg((args, kwargs), value)
            values[node] = target(*args, **kwargs)
        return values[match.root]

    return run


def caught_nodes(model: torch.nn.Module, x: torch.Tensor, train: bool) -> list[tuple[KernelCall, tuple, Callable]]:
    """Every BOO node of the compiled model's graphs: its call, the tensors of its first call
    and the aten ops it replaced (:func:`replaced_ops`)."""
    replaced: dict[int, Callable[[tuple], object]] = {}
    caught: dict[int, tuple[KernelCall, tuple, Callable]] = {}
    original, bound_call = KernelCall.__call__, rewrite._bound_call

    def binding(pattern, match, as_custom_op):
        call, payload = bound_call(pattern, match, as_custom_op)
        replaced[id(call)] = replaced_ops(match)  # now: the rewrite erases the match's nodes next
        return call, payload

    def catching(self: KernelCall, *inputs: torch.Tensor):
        if id(self) in replaced:
            caught.setdefault(id(self), (self, inputs, replaced[id(self)]))
        return original(self, *inputs)

    KernelCall.__call__, rewrite._bound_call = catching, binding
    try:
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="iree_boo", dynamic=False)
        with torch.set_grad_enabled(train):
            y = compiled(x)
            if train:
                y.float().sum().backward()
    finally:
        KernelCall.__call__, rewrite._bound_call = original, bound_call
    return list(caught.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", default="resnet50,vit_b_16,decoder")
    parser.add_argument("--batch", type=int, default=1, help="small, so the kernels themselves stay short")
    parser.add_argument("--calls", type=int, default=1000, help="calls timed per node and per set of aten ops")
    parser.add_argument("--train", action="store_true", help="training graphs, backward kernels on")
    parser.add_argument("--small", action="store_true", help="the models' small cousins (a CPU smoke run)")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    print(f"host us per call, {args.device}, batch {args.batch}, {'training' if args.train else 'inference'}")
    print("| model | BOO node | nodes | BOO us | aten us | BOO - aten |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for name in args.models.split(","):
        model, x = workload_on(name, args.batch, args.device, dtype, small=args.small)
        model.train(args.train)
        with settings_override(use_backward_kernels=args.train):
            nodes = caught_nodes(model, x, args.train)
        times: dict[str, list[tuple[float, float]]] = defaultdict(list)
        with torch.no_grad():
            for call, inputs, replaced in nodes:
                boo = node_overhead.per_call_us(lambda c=call, i=inputs: c(*i), args.calls, args.device)
                aten = node_overhead.per_call_us(lambda r=replaced, i=inputs: r(i), args.calls, args.device)
                times[call.pattern.name].append((boo, aten))
        for pattern, pairs in sorted(times.items()):
            boo, aten = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
            print(f"| {name} | {pattern} | {len(pairs)} | {boo:.1f} | {aten:.1f} | {boo - aten:+.1f} |")


if __name__ == "__main__":
    main()
