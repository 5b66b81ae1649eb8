"""Host time of one BOO node of a compiled graph against the aten op it replaced.

The table gives, per call in microseconds: the aten op; the node as the compiled graph runs
it (bound when the graph compiled: ``KernelCall``); the same node through the op's eager
entry point (the path every call took before nodes were bound: ``pattern.launch``); the node
as Inductor's code calls it (``torch.ops.boo.fused``); and the bare kernel
(``Launchable.try_call``). On a GPU these are host times: each batch of 100 calls is timed
from a synchronized device until the last call returns, without waiting for the kernels
(100 launches never fill CUDA's queue), so the kernels' own time does not count; on the CPU
they include the kernel. On a GPU the table adds layers of ResNet-50 (batch 32, bf16,
channels-last), whose convolutions the kernel library serves where it is installed.

    python benchmarks/node_overhead.py [--device cuda] [--calls 3000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import overhead  # benchmarks/overhead.py, beside this script
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from boo_core.dynamo import custom_op
from boo_core.dynamo.kernel_call import KernelCall
from boo_core.dynamo.rewrite import rewrite
from boo_core.settings import settings_override

aten = torch.ops.aten


def cases(device: str) -> dict[str, tuple[Callable[..., object], tuple[torch.Tensor, ...]]]:
    """Name -> (aten-level function of one op, inputs): small shapes of real layers."""
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32

    def t(*shape: int, channels_last: bool = False) -> torch.Tensor:
        x = torch.randn(*shape, device=device, dtype=dtype)
        return x.contiguous(memory_format=torch.channels_last) if channels_last else x

    found = {
        "conv 3x3 + relu (NHWC)": (
            lambda x, w: torch.relu(aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)),
            (t(2, 16, 8, 8, channels_last=True), t(16, 16, 3, 3, channels_last=True))),
        "conv backward (NHWC)": (
            lambda dy, x, w: aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                       [True, True, False]),
            (t(2, 16, 8, 8, channels_last=True), t(2, 16, 8, 8, channels_last=True),
             t(16, 16, 3, 3, channels_last=True))),
        "linear (addmm, w.t())": (lambda x, w, b: aten.addmm(b, x, w.t()), (t(32, 64), t(64, 64), t(64))),
        "layer norm": (lambda x, w, b: aten.native_layer_norm(x, [64], w, b, 1e-5)[0], (t(32, 64), t(64), t(64))),
    }
    if device.startswith("cuda"):
        found.update({
            "ResNet-50 conv 3x3 64->64 @56 + bias + relu": (
                lambda x, w, b: torch.relu(aten.convolution(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)),
                (t(32, 64, 56, 56, channels_last=True), t(64, 64, 3, 3, channels_last=True), t(64))),
            "ResNet-50 conv 1x1 256->64 @56 + bias": (
                lambda x, w, b: aten.convolution(x, w, b, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
                (t(32, 256, 56, 56, channels_last=True), t(64, 256, 1, 1, channels_last=True), t(64))),
            "ResNet-50 conv 3x3 64->64 @56 backward": (
                lambda dy, x, w: aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                           [True, True, False]),
                (t(32, 64, 56, 56, channels_last=True), t(32, 64, 56, 56, channels_last=True),
                 t(64, 64, 3, 3, channels_last=True))),
            "ResNet-50 fc (addmm, w.t())": (lambda x, w, b: aten.addmm(b, x, w.t()),
                                            (t(32, 2048), t(1000, 2048), t(1000))),
        })
    return found


def per_call_us(fn: Callable[[], object], calls: int, device: str, batch: int = 100) -> float:
    """Median host time of one call over batches of ``batch`` calls (the module docstring)."""
    if not device.startswith("cuda"):
        return overhead.per_call_us(fn, calls)
    for _ in range(batch):
        fn()
    times = []
    for _ in range(max(calls // batch, 1)):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        times.append((time.perf_counter() - start) / batch * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def measure(name: str, fn: Callable[..., object], inputs: tuple[torch.Tensor, ...], device: str,
            calls: int) -> dict[str, float]:
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    with settings_override(use_backward_kernels=True):
        report = rewrite(gm, backend="bench", kind="backward" if "backward" in name else "inference",
                         as_custom_op=False)
    [node] = [n for n in gm.graph.nodes if isinstance(n.target, KernelCall)]
    call: KernelCall = node.target
    placeholders = {n: t for n, t in zip((n for n in gm.graph.nodes if n.op == "placeholder"), inputs)}
    args = [placeholders.get(a) if a in placeholders else None for a in node.args]
    if any(a is None for a in args):  # an input made by a view in the graph (w.t())
        env: dict[torch.fx.Node, object] = dict(placeholders)
        for n in gm.graph.nodes:
            if n is node:
                break
            if n.op == "call_function":
                env[n] = n.target(*(env.get(a, a) for a in n.args), **n.kwargs)
        args = [env[a] for a in node.args]
    launchables = _launchables(call, args)
    name, payload = call.pattern.name, call.payload()
    custom_op.kernel_call(name, payload).bind(args)
    with torch.no_grad():
        return {
            "aten op": per_call_us(lambda: fn(*inputs), calls, device),
            "BOO node (bound)": per_call_us(lambda: call(*args), calls, device),
            "eager entry (before)": per_call_us(lambda: call.pattern.launch(call.spec, args), calls, device),
            "torch.ops.boo.fused": per_call_us(
                lambda: torch.ops.boo.fused.default(name, payload, args), calls, device),
            "bare kernel(s)": per_call_us(lambda: [f() for f in launchables], calls, device),
            "kernels": len(launchables),
            "offloaded": sum(report.offloaded.values()),
        }


def _launchables(call: KernelCall, args: list[torch.Tensor]) -> list[Callable[[], object]]:
    """The node's kernels, each with arguments that pass its checks (to time them alone)."""
    from boo_core import get_launchable

    found = []
    for signature in call.pattern.signatures(call.spec, args):
        launchable = get_launchable(signature, args[0].device)
        sample = [torch.randn(s.shape, device=args[0].device).to(s.dtype) for s in launchable.signature.input_specs()]
        found.append(lambda launchable=launchable, sample=sample: launchable.try_call(*sample))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    columns = ("aten op", "BOO node (bound)", "eager entry (before)", "torch.ops.boo.fused", "bare kernel(s)")
    print(f"host time per call, us ({args.device}, torch {torch.__version__}); node - aten is BOO's extra host cost")
    print(f"| op | {' | '.join(columns)} | node - aten |")
    print("| --- |" + " ---: |" * (len(columns) + 1))
    for name, (fn, inputs) in cases(args.device).items():
        row = measure(name, fn, inputs, args.device, args.calls)
        cells = " | ".join(f"{row[c]:.1f}" for c in columns)
        print(f"| {name} ({row['kernels']} kernel(s)) | {cells} | {row['BOO node (bound)'] - row['aten op']:+.1f} |")


if __name__ == "__main__":
    main()
