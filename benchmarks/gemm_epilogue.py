"""What each epilogue activation costs the Hopper library's GEMM kernel (H100): the Triton
kernel launched directly (no IREE), one configuration per shape as the library chooses it,
device time per call from CUDA events over 50 calls, against the same product with no
activation and against cuBLAS's ``F.linear`` followed by torch's activation.

    python benchmarks/gemm_epilogue.py [--acts relu,gelu,silu]
"""

from __future__ import annotations

import argparse
import functools

import torch
import torch.nn.functional as F
from boo_kernels_hopper import gemm
from boo_kernels_hopper._triton_gemm import boo_hopper_gemm

SHAPES = [(6304, 3072, 768), (8192, 4096, 1024), (6304, 768, 3072)]  # ViT-B/16's MLP up, the decoder's, a down
TORCH_ACTS = {"": lambda y: y, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}


def timed_us(call, repeats: int = 50) -> float:
    call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acts", default="relu,gelu,silu")
    acts = [""] + parser.parse_args().acts.split(",")
    print(f"{torch.cuda.get_device_name()}; bf16, B transposed (a linear layer), bias")
    print("| M×N×K | activation | BOO µs | BOO max err vs f32 | cuBLAS + torch µs |")
    print("| --- | --- | ---: | ---: | ---: |")
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        exact = F.linear(a.float(), w.float(), bias.float())
        for act in acts:
            problem = gemm.GemmProblem(m, n, k, trans_b=True, bias=True, activation=act or None)
            config = gemm.choose_config(problem)
            boo = functools.partial(
                boo_hopper_gemm[(problem.tiles(config), 1)], a, w, None, bias, out, M=m, N=n, K=k, TRANS_A=False,
                TRANS_B=True, ALPHA=1.0, BETA=0.0, HAS_C=False, HAS_BIAS=True, ACT=act, BM=config.bm, BN=config.bn,
                BK=config.bk, GROUP=config.group, num_warps=config.num_warps, num_stages=config.num_stages)
            boo_us = timed_us(boo)
            error = float((out.float() - TORCH_ACTS[act](exact)).abs().max())
            activated = TORCH_ACTS[act]
            torch_us = timed_us(functools.partial(lambda f, *args: f(F.linear(*args)), activated, a, w, bias))
            print(f"| {m}×{n}×{k} | {act or 'none'} | {boo_us:.1f} | {error:.2e} | {torch_us:.1f} |", flush=True)


if __name__ == "__main__":
    main()
