"""Which kernels does IREE's CUDA path get wrong, and what serves each class with default settings?

For every command of a grid (per op: dtypes x layouts/transposes x batches x aligned and
odd sizes x epilogues...), each of the op's formulations is compiled, then:

* ``raw``: the ``default`` formulation (the export of the op's reference, as IREE compiles
  it), verification off, checked against PyTorch in float64 (fresh random inputs, outputs
  poisoned with NaN);
* ``served``: what a call gets with default settings (the formulation chain, verified on
  first use), checked the same way. With default settings nothing may be wrong.

Prints one row per kernel, the wrong classes, and a summary. ``--time`` adds the device
time of what serves (torch.profiler) next to PyTorch's.

    python benchmarks/gpu_scan.py --op matmul [--op layernorm --op softmax --op conv] [--device cuda:0] [-j 16]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import statistics
import time

import torch

from boo_core import BooOpRegistry, CachePopulator, resolve_device
from boo_core.runtime.lookup import get_launchable
from boo_core.runtime.timing import cuda_timer
from boo_core.settings import settings_override
from boo_core.verify.numerics import check_launchable

SUFFIX = {"f32": "", "f16": "fp16", "bf16": "bfp16"}


def matmul_grid() -> list[tuple[str, str]]:
    """(class, command): 3 dtypes x 4 transposes x 2 batches x 3 sizes x 2 epilogues = 144."""
    rows = []
    for dtype, (ta, tb), batch, (size, (m, n, k)), epilogue in itertools.product(
            SUFFIX, ((0, 0), (0, 1), (1, 0), (1, 1)), (1, 3),
            (("aligned", (64, 128, 32)), ("odd", (38, 65, 38)), ("odd", (17, 33, 9))), ("", "bias+relu")):
        extra = " --bias 1 --activation relu" if epilogue else ""
        klass = f"{dtype} {'nt'[ta]}{'nt'[tb]} b{batch} {size} {epilogue or 'plain'}"
        rows.append((klass, f"gemm{SUFFIX[dtype]} -m {m} -n {n} -k {k} -u {ta} -v {tb} -b {batch}{extra}"))
    return rows


def layernorm_grid() -> list[tuple[str, str]]:
    """3 dtypes x 5 shapes x 4 affine choices x forward/backward = 120."""
    rows = []
    shapes = (("8x16", 1), ("37x100", 1), ("4x1024", 1), ("3x5x64", 1), ("2x3x5x7", 2))
    affine = (("none", "-m 0"), ("weight+bias", "-m 1"), ("weight", "-m 1 --bias 0"), ("bias", "-m 0 --bias 1"))
    for dtype, (shape, o), (params, flags), forw in itertools.product(SUFFIX, shapes, affine, (1, 2)):
        klass = f"{dtype} {shape}/o{o} {params} {'fwd' if forw == 1 else 'bwd'}"
        rows.append((klass, f"layernorm{SUFFIX[dtype]} --input {shape} -o {o} {flags} -F {forw}"))
    return rows


def softmax_grid() -> list[tuple[str, str]]:
    """3 dtypes x 2 modes x 3 algorithms x forward/backward x 3 shapes = 108."""
    rows = []
    shapes = ((2, 7, 3, 5), (4, 64, 1, 1), (1, 1000, 1, 1))
    for dtype, mode, algorithm, forw, (n, c, h, w) in itertools.product(SUFFIX, (0, 1), (0, 1, 2), (1, 2), shapes):
        klass = f"{dtype} {('instance', 'channel')[mode]} {('fast', 'accurate', 'log')[algorithm]} " \
                f"{'fwd' if forw == 1 else 'bwd'}"
        rows.append((klass, f"softmax{SUFFIX[dtype]} -n {n} -c {c} -H {h} -W {w} -m {mode} -a {algorithm} -F {forw}"))
    return rows


def conv_grid() -> list[tuple[str, str]]:
    """3 dtypes x 2 layouts x windows 1/3/5 x paddings x strides, forward/data/weight."""
    rows = []
    for dtype, layout, window, padding, stride, forw in itertools.product(
            SUFFIX, ("NHWC", "NCHW"), (1, 3, 5), (0, 1, 2), (1, 2), (1, 2, 4)):
        if window == 1 and padding:
            continue
        klass = f"{dtype} {layout} {window}x{window} p{padding} s{stride} {({1: 'fwd', 2: 'bwd', 4: 'wrw'})[forw]}"
        rows.append((klass, f"conv{SUFFIX[dtype]} -n 4 -c 64 -H 14 -W 14 -k 64 -y {window} -x {window} -p {padding} "
                            f"-q {padding} -u {stride} -v {stride} -F {forw} --in_layout {layout} "
                            f"--fil_layout {layout} --out_layout {layout}"))
    return rows


GRIDS = {"matmul": matmul_grid, "layernorm": layernorm_grid, "softmax": softmax_grid, "conv": conv_grid}


def check(launchable, runs: int = 3) -> str:
    """``ok`` when right on ``runs`` calls with fresh inputs (a race shows on some calls only)."""
    for run in range(runs):
        failed = [c for c in check_launchable(launchable) if not c.passed]
        if failed:
            return f"WRONG {max(c.max_rel_error for c in failed):.1e}" + (f" (call {run + 1})" if run else "")
    return "ok"


def device_us(fn, args) -> float:
    return statistics.median(cuda_timer(lambda: fn(*args), device=torch.device("cuda"), iterations=5,
                                        warmup=2).samples_us)


def scan(op: str, device: str, jobs: int, timed: bool) -> tuple[int, int, int]:
    rows = [(klass, command, signature) for klass, command in GRIDS[op]()
            for signature in BooOpRegistry.parse_signatures(command)]
    start = time.time()
    target = resolve_device(device).target.name
    CachePopulator(commands=sorted({command for _, command, _ in rows}), targets=[target], jobs=jobs).run()
    print(f"\n== {op}: {len(rows)} kernels, every formulation compiled in {time.time() - start:.0f} s")
    wrong_classes: collections.Counter[str] = collections.Counter()
    served_by: collections.Counter[str] = collections.Counter()
    still_wrong = 0
    for klass, _, signature in rows:
        try:
            with settings_override(verify=False):
                raw = check(get_launchable(signature, device, formulation="default"))
        except Exception as e:  # a compile failure is a finding, not a stop
            raw = f"ERROR {type(e).__name__}"
        launchable = get_launchable(signature, device)
        served = check(launchable)
        served_by[launchable.formulation] += 1
        still_wrong += served != "ok"
        if raw != "ok":
            wrong_classes[klass] += 1
        timing = ""
        if timed:
            args = signature.get_sample_args(device=device)
            timing = f"  {device_us(launchable, args):9.1f} us  torch {device_us(signature.eager, args):9.1f} us"
        print(f"{klass:<34} {signature.func_name[:60]:<60} raw: {raw:<13} served {launchable.formulation}: "
              f"{served}{timing}", flush=True)
    print(f"\n{op}: raw export wrong in {sum(wrong_classes.values())} of {len(rows)} kernels; "
          f"with default settings {still_wrong} wrong; served by: "
          + ", ".join(f"{name} {n}" for name, n in served_by.most_common()))
    for klass, count in sorted(wrong_classes.items()):
        print(f"  wrong class: {klass} ({count})")
    return len(rows), sum(wrong_classes.values()), still_wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", action="append", choices=sorted(GRIDS), help="ops to scan (default: all)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("-j", "--jobs", type=int, default=16)
    parser.add_argument("--time", action="store_true", help="also time what serves, and PyTorch")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # references in float64 anyway
    totals = [(op, *scan(op, args.device, args.jobs, args.time)) for op in (args.op or list(GRIDS))]
    print(f"\n{'op':<10} {'kernels':>8} {'raw wrong':>10} {'wrong with defaults':>20}")
    for op, kernels, raw_wrong, wrong in totals:
        print(f"{op:<10} {kernels:>8} {raw_wrong:>10} {wrong:>20}")


if __name__ == "__main__":
    main()
