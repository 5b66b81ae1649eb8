"""BOO matmul kernels against torch on the CPU: square, tall-skinny, batched and linear shapes
in float32, float16 and bfloat16.

BOO and torch calls alternate in one loop on the same inputs, so both see the same machine
load; each time is the median of single calls after a warm-up call. The first BOO call per
shape compiles (or loads from the kernel cache); that time is reported apart. bf16 kernels,
and float32 ones with M and N of 512 or more, are data-tiled (boo_ops_matmul.compile_flags);
rel.err is max|BOO - torch| / max|torch|.

    python benchmarks/matmul.py [--budget 1.0] [--dtypes f32,f16,bf16]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from boo_core.signatures.dtypes import dtype_from_name, short_name
from boo_ops_matmul import boo_linear, boo_matmul, matmul_signature_for


@dataclass(frozen=True)
class Shape:
    kind: str
    batch: int | None  # None: 2-D operands
    m: int
    k: int
    n: int
    linear: bool = False  # x @ w.T + bias, then gelu (w stored N×K, as torch.nn.Linear)

    def describe(self) -> str:
        lead = f"{self.batch}x" if self.batch else ""
        text = f"{lead}{self.m}x{self.k} @ {self.k}x{self.n}"
        return text + " +b gelu" if self.linear else text

    def calls(self, dtype: torch.dtype) -> tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor], float]:
        """The BOO call, the torch call, and the FLOPs of one call (from the BOO signature)."""
        if self.linear:
            x, w, b = torch.randn(self.m, self.k), torch.randn(self.n, self.k), torch.randn(self.n)
            x, w, b = x.to(dtype), w.to(dtype), b.to(dtype)
            flops = matmul_signature_for(x, w.mT, bias=b, activation="gelu").flops
            return (lambda: boo_linear(x, w, b, "gelu")), (lambda: F.gelu(F.linear(x, w, b))), flops
        lead = (self.batch,) if self.batch else ()
        a = torch.randn(*lead, self.m, self.k).to(dtype)
        b = torch.randn(*lead, self.k, self.n).to(dtype)
        return (lambda: boo_matmul(a, b)), (lambda: torch.matmul(a, b)), matmul_signature_for(a, b).flops


SHAPES = [
    Shape("square", None, 256, 256, 256),
    Shape("square", None, 1024, 1024, 1024),
    Shape("tall-skinny", None, 4096, 64, 4096),
    Shape("tall-skinny", None, 8192, 1024, 16),
    Shape("batched", 16, 256, 256, 256),
    Shape("linear", None, 512, 1024, 1024, linear=True),
]


def alternate_ms(first: Callable[[], object], second: Callable[[], object], budget_s: float,
                 min_runs: int = 3) -> tuple[float, float]:
    """Median milliseconds of single calls of ``first`` and ``second``, alternating."""
    first(), second()
    samples: tuple[list[float], list[float]] = ([], [])
    start = time.perf_counter()
    while len(samples[0]) < min_runs or time.perf_counter() - start < 2 * budget_s:
        for fn, out in ((first, samples[0]), (second, samples[1])):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples[0]), statistics.median(samples[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of timing per side and shape")
    parser.add_argument("--dtypes", default="f32,f16,bf16")
    args = parser.parse_args()

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of single calls after warm-up")
    print(f"{'kind':<12} {'shape':<28} {'dtype':<5} {'compile s':>9} {'BOO ms':>9} {'torch ms':>9} "
          f"{'BOO/torch':>9} {'BOO GFLOP/s':>11} {'rel.err':>8}")
    for dtype in (dtype_from_name(name) for name in args.dtypes.split(",")):
        for shape in SHAPES:
            boo, reference, flops = shape.calls(dtype)
            start = time.perf_counter()
            result = boo()  # compiles, or loads from the kernel cache
            first_call = time.perf_counter() - start
            expected = reference().float()
            error = ((result.float() - expected).abs().max() / expected.abs().max()).item()
            boo_ms, torch_ms = alternate_ms(boo, reference, args.budget)
            print(f"{shape.kind:<12} {shape.describe():<28} {short_name(dtype):<5} "
                  f"{first_call:>9.2f} {boo_ms:>9.3f} {torch_ms:>9.3f} {boo_ms / torch_ms:>9.2f} "
                  f"{flops / boo_ms / 1e6:>11.1f} {error:>8.1e}", flush=True)


if __name__ == "__main__":
    main()
