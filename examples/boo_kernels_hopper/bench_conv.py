"""The library's convolution kernels through Triton's own launcher, against cuDNN.

For each ResNet-50 row of benchmarks/gpu.py (bf16, NHWC, batch 32; fwd and bwd): the pad
kernel (where the row needs one) and the convolution kernel, as BOO's module runs them,
checked against float64 PyTorch and timed (device time from the profiler) against torch's
convolution (cuDNN). ``--sweep`` also times other tile configurations; ``--stages`` the chosen
tiles with 2, 3 and 4 pipeline stages and 4 or 8 warps. ``--implicit`` reads x unpadded where
the kernel can (the channels_last module's problem); ``--splits 1,2,4`` also times each
configuration's products in that many splits of the reduction (the split_k module's kernel:
float32 partial sums, their sum not included).

    python3 examples/boo_kernels_hopper/bench_conv.py [--only TEXT] [--sweep] [--stages] [--implicit]
        [--splits 1,2,4] [--tiles 128x128_w8_s4,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from boo_kernels_hopper import conv  # noqa: E402
from boo_kernels_hopper._triton_conv import boo_hopper_conv, boo_hopper_pad  # noqa: E402
from gpu import RESNET50, resnet50_conv  # noqa: E402  (the rows of benchmarks/gpu.py)

BF16 = torch.bfloat16
SWEEP = [conv.ConvConfig(128, 64, 64, 8, 4, 4), conv.ConvConfig(128, 128, 64, 8, 4, 4),
         conv.ConvConfig(128, 128, 64, 8, 8, 4), conv.ConvConfig(128, 256, 64, 8, 8, 3),
         conv.ConvConfig(64, 128, 64, 8, 4, 4), conv.ConvConfig(256, 128, 64, 8, 8, 3),
         conv.ConvConfig(64, 64, 64, 8, 4, 4), conv.ConvConfig(64, 128, 64, 8, 4, 3),
         conv.ConvConfig(128, 64, 64, 8, 4, 3), conv.ConvConfig(64, 256, 64, 8, 8, 3)]


def device_us(fn, batches: int = 5, calls: int = 10) -> float:
    """Median over batches of the device time per call: the kernels' own time from the
    profiler, so that Triton's launcher's host time (tens of µs) does not hide it."""
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(batches):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        samples.append(sum(e.device_time_total for e in profile.key_averages()) / calls)
    return statistics.median(samples)


def runner(problem: conv.ConvProblem, config: conv.ConvConfig, source: torch.Tensor, w: torch.Tensor):
    """A function running the library's kernels as BOO's module does, returning the output,
    and one running only its pad (None where the row needs none)."""
    p = problem
    out = torch.empty(p.n, p.p, p.q, p.cout, device=source.device, dtype=BF16)
    if p.splits > 1:  # float32 partial sums, one slice per split
        out = torch.empty(p.splits, p.n, p.p, p.q, p.cout, device=source.device, dtype=torch.float32)
    image = source
    pad_args = None
    if not (p.direct or p.implicit_pad):
        image = torch.empty(p.n, p.hp, p.wp, p.c, device=source.device, dtype=BF16)
        constants, grid = conv.pad_constants(p.n, p.h, p.w, p.c, p.hp, p.wp, p.lo_h, p.lo_w, p.dh, p.dw, 0)
        pad_args = (grid, constants)
    constants = conv.conv_constants(p, config, 0, 0, False)
    grid = conv.conv_grid(p, config)

    def pad() -> None:
        boo_hopper_pad[(pad_args[0],)](source, image, **pad_args[1], num_warps=4, num_stages=1)

    def run() -> torch.Tensor:
        if pad_args is not None:
            pad()
        no_epilogue = dict.fromkeys(("bias", "mean", "var", "scale", "shift", "res"))
        boo_hopper_conv[(grid,)](x=image, w=w, y=out, **no_epilogue, **constants, num_warps=config.num_warps,
                                 num_stages=config.num_stages)
        return out

    return run, (pad if pad_args is not None else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="rows whose name contains this text ('|' separates several)")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--stages", action="store_true")
    parser.add_argument("--modes", default="fwd,bwd")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--implicit", action="store_true", help="x read unpadded where the kernel can")
    parser.add_argument("--splits", default="1", help="comma-separated numbers of splits of the reduction")
    parser.add_argument("--tiles", default="", help="comma-separated tiles to time beside the chosen ones, as "
                        "conv.config_label writes them: 128x128_w8_s4")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    device = "cuda:0"
    print(f"{'row':<44} {'err':>8} {'ours us':>9} {'pad us':>7} {'cudnn us':>9} {'ratio':>6}  config", flush=True)
    for row in RESNET50:
        for mode in args.modes.split(","):
            name, signature = resnet50_conv(row, mode, args.batch)
            if not any(part in name for part in args.only.split("|")):
                continue
            problem = conv.problem_of(signature)
            if problem is None:
                print(f"{name:<44} not served")
                continue
            if args.implicit:
                problem = conv.padding_as_it_reads(problem) or problem
            inputs = signature.get_sample_args(device=device)
            reference = signature.reference(*[t.double() for t in inputs])
            torch_us = device_us(lambda signature=signature, inputs=inputs: signature.reference(*inputs))
            configs = [conv.choose_config(problem)]
            if args.stages:
                configs += [dataclasses.replace(configs[0], num_warps=warps, num_stages=stages)
                            for warps in (8, 4) for stages in (2, 3, 4)
                            if (warps, stages) != (configs[0].num_warps, configs[0].num_stages)]
            for label in filter(None, args.tiles.split(",")):
                bm, bn, warps, stages = map(int, re.fullmatch(r"(\d+)x(\d+)_w(\d+)_s(\d+)", label).groups())
                configs.append(conv.ConvConfig(bm, bn, 64, 8, warps, stages))
            if args.sweep:
                configs += [cfg for cfg in SWEEP if problem.cout % cfg.bn == 0 and cfg not in configs
                            and problem.cin % 64 == 0]
            for config, splits in [(c, int(s)) for c in configs for s in args.splits.split(",")]:
                if splits > 1 and (problem.mode != "fwd" or problem.cin % config.bk):
                    continue
                try:
                    run, pad = runner(dataclasses.replace(problem, splits=splits), config, *inputs)
                    out = run().double()
                    if splits > 1:
                        out = out.sum(0)
                    error = float((out - reference).norm() / reference.norm())
                    ours = device_us(run)
                    pad_us = device_us(pad) if pad is not None else 0.0
                    print(f"{name:<44} {error:8.1e} {ours:9.1f} {pad_us:7.1f} {torch_us:9.1f} {ours / torch_us:6.2f}  "
                          f"{conv.config_label(config)} splits {splits}", flush=True)
                except Exception as e:  # one config failing must not stop the table
                    print(f"{name:<44} {config}: {type(e).__name__}: {str(e)[:300]}", flush=True)


if __name__ == "__main__":
    main()
