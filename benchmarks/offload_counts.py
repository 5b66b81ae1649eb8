"""What ``torch.compile(backend="iree_boo")`` puts on BOO's kernels in a torchvision network
(random weights, bf16, channels-last): the offload summary after one inference (under
``no_grad``) and after one training step. For each, it prints the share of the counted FLOPs on
BOO, the BOO kernels by pattern, the conv/norm/matmul ops left to the nested backend, and the
reasons and notes the summary gives.

    python benchmarks/offload_counts.py [--model resnet50] [--batch 32] [--size 224] [--device cuda]
"""

from __future__ import annotations

import argparse

import torch

from boo_core.dynamo import offload_summary, reset_offload_summary
from boo_core.testing.models import import_torchvision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="a torchvision.models constructor's name")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=224, help="the input images' height and width")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    constructor = getattr(import_torchvision().models, args.model)
    for training in (False, True):
        torch._dynamo.reset()
        reset_offload_summary()
        model = constructor().to(args.device, torch.bfloat16).to(memory_format=torch.channels_last).train(training)
        x = torch.randn(args.batch, 3, args.size, args.size, device=args.device, dtype=torch.bfloat16)
        x = x.to(memory_format=torch.channels_last)
        with torch.set_grad_enabled(training):
            y = torch.compile(model, backend="iree_boo")(x)
        if training:
            y.float().sum().backward()
        summary = offload_summary()
        share = "-" if summary.offload_share is None else f"{summary.offload_share:.1%}"
        print(f"{'training step' if training else 'inference'}: {share} of the counted FLOPs on BOO")
        print("  BOO kernels:", dict(summary.offloaded.most_common()))
        print("  left to the nested backend:", {op: n for op, n in summary.fallbacks.most_common()
                                                 if any(word in op for word in ("norm", "conv", "mm"))})
        print("  reasons:", dict(summary.reasons))
        print("  notes:", sorted({graph.note for graph in summary.graphs if graph.note}))


if __name__ == "__main__":
    main()
