"""Measure the library's matmuls on a Hopper GPU: Triton's own launch of every tile
configuration on the shapes real models give (``--sweep``); BOO's kernel on those shapes
against torch's; then the routes through BOO (get_launchable, boo_matmul, BooLinear,
torch.compile(backend="iree_boo")) on three large shapes. ``--long-k`` instead times long-K
weight gradients with and without the split-K candidates, ``--stream-k`` the shapes of both
lists the stream-K kernel is offered for, with and without it. Each result is checked against
float64 and timed as benchmarks/gpu.py times (device time from the profiler, median of 5
batches of 5 calls).

    python examples/boo_kernels_hopper/bench.py [--sweep] [--any-shape] [--long-k] [--stream-k] [--only REGEX]
"""

from __future__ import annotations

import argparse
import functools
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from boo_kernels_hopper import gemm  # noqa: E402
from gpu import device_us, peaks  # noqa: E402

from boo_core import get_launchable  # noqa: E402
from boo_ops_matmul import BooLinear, MatmulSignature, boo_matmul  # noqa: E402

BF16 = torch.bfloat16
ONLY = ""  # --only: a regular expression over the signatures' function names
SHAPES = ((8192, 4096, 1024), (8192, 1024, 4096), (4096, 4096, 4096))  # (m, n, k) of benchmarks/gpu.py
#: Shapes real models give a matmul (batch 32): ViT-B/16's linear layers (6,304 tokens), forward,
#: data and weight gradients, its attention's batched products, a decoder block's MLP (8×1024
#: tokens, width 1024), and odd sizes.
ANY_SHAPE = (
    MatmulSignature(m=6304, n=2304, k=768, trans_b=True, bias=True, dtype=BF16),  # qkv projection
    MatmulSignature(m=6304, n=768, k=768, trans_b=True, bias=True, dtype=BF16),  # attention output
    MatmulSignature(m=6304, n=3072, k=768, trans_b=True, bias=True, dtype=BF16),  # MLP up
    MatmulSignature(m=6304, n=768, k=3072, trans_b=True, bias=True, dtype=BF16),  # MLP down
    MatmulSignature(m=6304, n=768, k=3072, dtype=BF16),  # MLP up's data gradient (dY @ W)
    MatmulSignature(m=6304, n=768, k=2304, dtype=BF16),  # qkv's data gradient
    MatmulSignature(m=6304, n=768, k=768, dtype=BF16),  # attention output's data gradient
    MatmulSignature(m=3072, n=768, k=6304, trans_a=True, dtype=BF16),  # MLP up's weight gradient
    MatmulSignature(m=768, n=768, k=6304, trans_a=True, dtype=BF16),  # attention output's weight gradient
    MatmulSignature(m=197, n=197, k=64, batch=384, trans_b=True, dtype=BF16),  # q @ k^T
    MatmulSignature(m=197, n=64, k=197, batch=384, dtype=BF16),  # p @ v
    MatmulSignature(m=8192, n=4096, k=1024, trans_b=True, bias=True, activation="gelu", dtype=BF16),  # decoder MLP
    MatmulSignature(m=8192, n=1024, k=4096, trans_b=True, bias=True, dtype=torch.float16),
    MatmulSignature(m=1000, n=1000, k=1000, dtype=BF16),
)
#: Weight gradients with a long K (the tokens) and few output tiles, from benchmarks/gpu.py's
#: traced networks (batch 32): ConvNeXt-T's linear layers by stage, ViT-B/16's attention output,
#: the decoder block's; the matmul op offers them ``split_k`` (and, for comparison, three it does not).
LONG_K = tuple(MatmulSignature(m=m, n=n, k=k, trans_a=True, dtype=BF16) for m, n, k in (
    (96, 384, 100352), (384, 96, 100352), (192, 768, 25088), (768, 192, 25088), (384, 1536, 6272),
    (1536, 384, 6272), (768, 768, 6304), (1024, 1024, 32768), (768, 3072, 6304), (3072, 768, 6304),
    (3072, 1024, 32768)))


#: Configurations the sweep times beside those ``gemm.configs_for`` offers.
SWEEP_ONLY = (gemm.GemmConfig(bm=128, bn=128, num_stages=5, tma=True),  # the TMA tiles without the split tail
              gemm.GemmConfig(num_stages=3, tma=True),
              gemm.GemmConfig(bm=128, bn=128, num_stages=4, tma=True, split_tail=True),
              gemm.GemmConfig(bm=64, bn=256, num_warps=4, num_stages=4, tma=True),
              gemm.GemmConfig(bm=256, bn=128, num_stages=3, tma=True, split_tail=True),
              gemm.GemmConfig(num_stages=3, tma=True, split_tail=True),
              gemm.GemmConfig(bm=128, bn=128, num_stages=6, tma=True, split_tail=True))


def chosen(signatures: tuple[MatmulSignature, ...]) -> list[MatmulSignature]:
    """The signatures whose function name matches ``--only``."""
    return [s for s in signatures if re.search(ONLY, s.func_name)]


def error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def _triton_run(signature: MatmulSignature, config: gemm.GemmConfig, args: tuple[torch.Tensor, ...]):
    """A call of the library's kernel through Triton's own launcher (which allocates the TMA
    kernel's scratch for its tensor maps)."""
    import triton
    from boo_kernels_hopper._triton_gemm import boo_hopper_gemm, boo_hopper_gemm_tma

    p = gemm.problem_of(signature)
    a, b, *rest = args
    c = rest.pop(0) if p.has_c else None
    bias = rest.pop(0) if p.bias else None
    out = torch.empty(signature.output_shape, device=a.device, dtype=a.dtype)
    common = (a, b, c, bias, out, p.m, p.n, p.k, p.trans_a, p.trans_b, p.alpha, p.beta, p.has_c, p.bias,
              p.activation or "", config.bm, config.bn, config.bk, config.group)
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    if config.tma:
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device=a.device))
        schedule = gemm.tma_schedule(p, config)
        return out, functools.partial(boo_hopper_gemm_tma[(schedule["PROGRAMS"],)], *common,
                                      *schedule.values(), **options)
    return out, functools.partial(boo_hopper_gemm[(p.tiles(config), p.batch)], *common, **options)


def sweep(device: str) -> None:
    """Every configuration on every shape, through Triton's launcher (its host time hides
    kernels under ~20 us: use the routes' table for those)."""
    import triton

    peak, _ = peaks(device)
    for signature in chosen(ANY_SHAPE):
        args = signature.get_sample_args(device=device)
        ref = signature.reference(*(t.double() for t in args))
        with torch.no_grad():
            ms = triton.testing.do_bench(functools.partial(signature.eager, *args), warmup=25, rep=100,
                                         return_mode="median")
        print(f"sweep {signature.func_name} torch: {ms * 1e3:.1f} us", flush=True)
        problem = gemm.problem_of(signature)
        configs = gemm.configs_for(problem)
        extra = [c for c in SWEEP_ONLY if c not in configs and (not c.tma or gemm.tma_serves(problem))]
        for index, config in enumerate(configs + extra):
            out, run = _triton_run(signature, config, args)
            ms = triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median")
            tflops = signature.flops / ms / 1e9
            print(f"sweep {signature.func_name} {config}{' (first)' if index == 0 else ''}: {ms * 1e3:.1f} us "
                  f"{tflops:.0f} TFLOP/s {100 * tflops / peak:.1f}% error {error(out, ref):.1e}", flush=True)


def with_and_without(module: Any, switch: str, signature: MatmulSignature, device: str) -> dict[bool, Any]:
    """BOO's kernel for ``signature`` with the library's ``module.switch`` on (True) and off
    (False), each chosen afresh."""
    from boo_core import clear_launchables

    found = {}
    for offered in (True, False):
        setattr(module, switch, offered)
        clear_launchables()
        found[offered] = get_launchable(signature, device)
    setattr(module, switch, True)
    return found


def any_shape(device: str) -> None:
    """BOO's kernel for each shape (the first configuration, verified, launched directly)
    against torch's (cuBLAS), and BOO's without the TMA kernel, device time from the profiler."""
    peak, _ = peaks(device)
    print(f"measured peak bf16 matmul (torch 8192^3): {peak:.0f} TFLOP/s")
    print(f"{'signature':<64} {'torch us':>9} {'BOO us':>9} {'no TMA':>8} {'BOO/torch':>9} {'torch %':>8} "
          f"{'BOO %':>6} {'error':>8}  served by")
    ratios = {"boo": [], "no_tma": []}
    for signature in chosen(ANY_SHAPE):
        args = signature.get_sample_args(device=device)
        ref = signature.reference(*(t.double() for t in args))
        found = with_and_without(gemm, "OFFER_TMA", signature, device)
        launchable = found[True]
        sub = launchable.substitution
        served = f"{launchable.formulation}{' + ' + sub.label if sub else ''}, verified={launchable.verified}"
        with torch.no_grad():
            torch_us = device_us(signature.eager, args)
            boo_us, no_tma_us = (device_us(found[o], args) for o in (True, False))
            err = max(error(found[o](*args), ref) for o in (True, False))
        ratios["boo"].append(boo_us / torch_us)
        ratios["no_tma"].append(no_tma_us / torch_us)
        share = [signature.flops / us / 1e6 / peak * 100 for us in (torch_us, boo_us)]
        print(f"{signature.func_name:<64} {torch_us:>9.1f} {boo_us:>9.1f} {no_tma_us:>8.1f} {boo_us / torch_us:>9.2f} "
              f"{share[0]:>7.1f}% {share[1]:>5.1f}% {err:>8.1e}  {served}", flush=True)
    print("geometric mean BOO/torch over {} shapes: {:.2f} (without the TMA kernel {:.2f})".format(
        len(ratios["boo"]), statistics.geometric_mean(ratios["boo"]), statistics.geometric_mean(ratios["no_tma"])))


def switch_table(signatures: list[MatmulSignature], module: Any, switch: str, device: str, *, off: str, ratio: str,
                 without: str, name_width: int, extra: tuple[str, Any] | None = None) -> None:
    """Each of ``signatures``: torch's (cuBLAS), BOO's first verified kernel with the library's
    ``module.switch`` on and with it off (column ``off``, its ratio to torch ``ratio``), device
    time; then the geometric means (the one without: "without ``without``"). ``extra``: a
    column's header and its value from the library's problem, after the signature."""
    peak, _ = peaks(device)
    print(f"measured peak bf16 matmul (torch 8192^3): {peak:.0f} TFLOP/s")
    extra_header = f" {extra[0]:>6}" if extra else ""
    print(f"{'signature':<{name_width}}{extra_header} {'torch us':>9} {'BOO us':>8} {off:>{max(8, len(off))}} "
          f"{'BOO/torch':>9} {ratio:>{len(ratio)}} {'torch %':>8} {'BOO %':>6} {'error':>8}  served by")
    ratios: dict[bool, list[float]] = {True: [], False: []}
    for signature in signatures:
        args = signature.get_sample_args(device=device)
        ref = signature.reference(*(t.double() for t in args))
        found = with_and_without(module, switch, signature, device)
        with torch.no_grad():
            torch_us = device_us(signature.eager, args)
            on_us, off_us = (device_us(found[o], args) for o in (True, False))
            err = max(error(found[o](*args), ref) for o in (True, False))
        ratios[True].append(on_us / torch_us)
        ratios[False].append(off_us / torch_us)
        sub = found[True].substitution
        served = f"{found[True].formulation}{' + ' + sub.label if sub else ''}, verified={found[True].verified}"
        share = [signature.flops / us / 1e6 / peak * 100 for us in (torch_us, on_us)]
        extra_value = f" {extra[1](gemm.problem_of(signature)):>6.2f}" if extra else ""
        print(f"{signature.func_name:<{name_width}}{extra_value} {torch_us:>9.1f} {on_us:>8.1f} "
              f"{off_us:>{max(8, len(off))}.1f} {on_us / torch_us:>9.2f} {off_us / torch_us:>{len(ratio)}.2f} "
              f"{share[0]:>7.1f}% {share[1]:>5.1f}% {err:>8.1e}  {served}", flush=True)
    if ratios[True]:
        on, off_mean = (statistics.geometric_mean(ratios[o]) for o in (True, False))
        print(f"geometric mean BOO/torch over {len(ratios[True])} shapes: {on:.2f} (without {without} {off_mean:.2f})")


def long_k(device: str) -> None:
    """Each LONG_K weight gradient: torch's (cuBLAS), BOO's first verified kernel (split-K
    where the op offers it), and BOO's without the split-K candidates, device time."""
    from boo_kernels_hopper import hooks

    switch_table(list(LONG_K), hooks, "OFFER_SPLIT_K", device, off="no split", ratio="unsplit/torch",
                 without="split-K", name_width=52)


def stream_k(device: str) -> None:
    """Each shape of ANY_SHAPE and LONG_K the stream-K kernel is offered for: torch's (cuBLAS),
    BOO's first verified kernel with stream-K offered first, and BOO's without it, device time."""
    gemm.STREAM_K_FIRST_BELOW = 1.0  # first wherever it is offered
    served = [s for s in chosen(ANY_SHAPE + LONG_K) if gemm.stream_k_serves(gemm.problem_of(s))]
    switch_table(served, gemm, "OFFER_STREAM_K", device, off="no SK", ratio="no SK/torch", without="stream-K",
                 name_width=64, extra=("round", gemm.round_filling))


def routes(device: str) -> None:
    peak, _ = peaks(device)
    print(f"measured peak bf16 matmul (torch 8192^3): {peak:.0f} TFLOP/s")
    rows = []
    for m, n, k in SHAPES:
        a, b = torch.randn(m, k, device=device, dtype=BF16), torch.randn(k, n, device=device, dtype=BF16)
        launchable = get_launchable(MatmulSignature(m=m, n=n, k=k, dtype=BF16), device)
        sub = launchable.substitution
        served = f"{sub.name if sub else launchable.formulation} verified={launchable.verified} {launchable.launch}"
        linear = BooLinear(k, n, bias=False, device=device, dtype=BF16)
        with torch.no_grad():
            linear.weight.copy_(b.mT)
        compiled = torch.compile(lambda x, y: x @ y, backend="iree_boo", dynamic=False)
        routes = {"torch.matmul": torch.matmul, "get_launchable": launchable, "boo_matmul": boo_matmul,
                  "BooLinear(no bias)": lambda x, _, layer=linear: layer(x), "torch.compile iree_boo": compiled}
        for name, fn in routes.items():
            with torch.no_grad():
                out = fn(a, b)
                us = device_us(fn, (a, b))
            tflops = 2 * m * n * k / us / 1e6
            rows.append(f"{m}x{k}@{k}x{n:<6} {name:<24} {us:8.1f} us {tflops:6.0f} TFLOP/s {100 * tflops / peak:5.1f}% "
                        f"err {error(out, a.double() @ b.double()):.1e}")
        rows.append(f"    get_launchable served by: {served}")
    print("\n".join(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--sweep", action="store_true", help="every tile configuration through Triton's launcher")
    parser.add_argument("--any-shape", action="store_true", help="the shapes real models give (ANY_SHAPE) only")
    parser.add_argument("--long-k", action="store_true", help="long-K weight gradients (LONG_K), split or not, only")
    parser.add_argument("--stream-k", action="store_true",
                        help="the shapes the stream-K kernel is offered for, with and without it, only")
    parser.add_argument("--only", default="", help="the shapes whose function name matches this regular expression")
    args = parser.parse_args()
    ONLY = args.only
    if args.stream_k:
        stream_k(args.device)
        raise SystemExit(0)
    if args.long_k:
        long_k(args.device)
        raise SystemExit(0)
    if args.sweep:
        sweep(args.device)
    any_shape(args.device)
    if not args.any_shape:
        routes(args.device)
