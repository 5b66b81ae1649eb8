"""Run the Hopper library's stream-K kernel with Triton's interpreter (``TRITON_INTERPRET=1``,
set before Triton is imported) on small float16 problems, on the CPU, and print one line per
problem: its relative error against float64, the unwritten (NaN) outputs, and whether every
counter of a split tile counted each of its programs once. Run by test_stream_k_interpreted.py
in a process of its own."""

from __future__ import annotations

import builtins
import json
import math
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton.runtime.interpreter as interpreter  # noqa: E402
from boo_kernels_hopper._triton_gemm import boo_hopper_gemm_stream_k  # noqa: E402


class _IntOfScalars(type):
    """``int`` for the interpreter's module: the same type to isinstance(), but int() of the
    interpreter's scalars, which are one-element arrays (NumPy 2 refuses to convert them)."""

    def __call__(cls, value=0, *rest):
        if isinstance(value, np.ndarray) and value.size == 1:
            value = value.reshape(())
        return builtins.int(value, *rest)

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, builtins.int)

    def __subclasscheck__(cls, other) -> bool:
        return issubclass(other, builtins.int)


# its tensors' __index__ calls int() (a loop over K steps from a run's bounds)
interpreter.int = _IntOfScalars("int", (), {})

TILE, STEP = 32, 16


def check(m: int, n: int, k: int, trans_a: bool, trans_b: bool, programs: int, alpha: float = 1.0,
          beta: float = 0.0, bias: bool = False, activation: str = "") -> dict:
    generator = torch.Generator().manual_seed(m * n + k)
    a = torch.randn((k, m) if trans_a else (m, k), generator=generator).half()
    b = torch.randn((n, k) if trans_b else (k, n), generator=generator).half()
    c = torch.randn(m, n, generator=generator).half() if beta else None
    bias_vector = torch.randn(n, generator=generator).half() if bias else None
    tiles_m, tiles_n, steps = math.ceil(m / TILE), math.ceil(n / TILE), math.ceil(k / STEP)
    counters = torch.zeros(tiles_m * tiles_n, dtype=torch.int32)
    partials = torch.full((2 * programs * TILE * TILE,), float("nan"))
    out = torch.full((m, n), float("nan")).half()
    boo_hopper_gemm_stream_k[(programs,)](a, b, c, bias_vector, counters, partials, out, m, n, k, trans_a, trans_b,
                                          alpha, beta, beta != 0.0, bias, activation, TILE, TILE, STEP, 8, programs)
    ref = alpha * ((a.double().T if trans_a else a.double()) @ (b.double().T if trans_b else b.double()))
    ref = ref + (beta * c.double() if beta else 0) + (bias_vector.double() if bias else 0)
    ref = torch.nn.functional.gelu(ref) if activation == "gelu" else ref
    # runs of equal length: tile t's steps [t * steps, (t + 1) * steps) meet these programs
    total = tiles_m * tiles_n * steps
    starts = [p * total // programs for p in range(programs)] + [total]
    expected = []
    for t in range(tiles_m * tiles_n):
        meeting = [p for p in range(programs) if starts[p] < (t + 1) * steps and starts[p + 1] > t * steps]
        expected.append(len(meeting) if len(meeting) > 1 else 0)
    return {"error": float((out.double() - ref).norm() / ref.norm()), "unwritten": int(out.isnan().sum()),
            "counted": counters.tolist() == expected, "split_tiles": sum(1 for e in expected if e)}


if __name__ == "__main__":
    for problem in json.loads(sys.argv[1]):
        print(json.dumps(check(*problem["args"], **problem.get("kwargs", {}))), flush=True)
