"""Run the Hopper library's persistent GEMM kernels with Triton's interpreter
(``TRITON_INTERPRET=1``, set before Triton is imported) on small float16 problems, on the CPU,
and print one line per problem: its relative error against float64 and the unwritten (NaN)
outputs; for the stream-K kernel also whether every counter of a split tile counted each of
its programs once. Run by test_gemm_interpreted.py in a process of its own."""

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
from boo_kernels_hopper._triton_gemm import boo_hopper_gemm_stream_k, boo_hopper_gemm_tma  # noqa: E402


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


def _operands(m: int, n: int, k: int, trans_a: bool, trans_b: bool, beta: float, bias: bool):
    generator = torch.Generator().manual_seed(m * n + k)
    a = torch.randn((k, m) if trans_a else (m, k), generator=generator).half()
    b = torch.randn((n, k) if trans_b else (k, n), generator=generator).half()
    c = torch.randn(m, n, generator=generator).half() if beta else None
    bias_vector = torch.randn(n, generator=generator).half() if bias else None
    return a, b, c, bias_vector


def _error(out, a, b, c, bias_vector, trans_a, trans_b, alpha, beta, activation) -> float:
    ref = alpha * ((a.double().T if trans_a else a.double()) @ (b.double().T if trans_b else b.double()))
    ref = ref + (beta * c.double() if beta else 0) + (bias_vector.double() if bias_vector is not None else 0)
    ref = torch.nn.functional.gelu(ref) if activation == "gelu" else ref
    return float((out.double() - ref).norm() / ref.norm())


def check(m: int, n: int, k: int, trans_a: bool, trans_b: bool, programs: int, alpha: float = 1.0,
          beta: float = 0.0, bias: bool = False, activation: str = "") -> dict:
    """The stream-K kernel, in TILE x TILE tiles and K steps of STEP."""
    a, b, c, bias_vector = _operands(m, n, k, trans_a, trans_b, beta, bias)
    tiles_m, tiles_n, steps = math.ceil(m / TILE), math.ceil(n / TILE), math.ceil(k / STEP)
    counters = torch.zeros(tiles_m * tiles_n, dtype=torch.int32)
    partials = torch.full((2 * programs * TILE * TILE,), float("nan"))
    out = torch.full((m, n), float("nan")).half()
    boo_hopper_gemm_stream_k[(programs,)](a, b, c, bias_vector, counters, partials, out, m, n, k, trans_a, trans_b,
                                          alpha, beta, beta != 0.0, bias, activation, TILE, TILE, STEP, 8, programs)
    # runs of equal length: tile t's steps [t * steps, (t + 1) * steps) meet these programs
    total = tiles_m * tiles_n * steps
    starts = [p * total // programs for p in range(programs)] + [total]
    expected = []
    for t in range(tiles_m * tiles_n):
        meeting = [p for p in range(programs) if starts[p] < (t + 1) * steps and starts[p + 1] > t * steps]
        expected.append(len(meeting) if len(meeting) > 1 else 0)
    return {"error": _error(out, a, b, c, bias_vector, trans_a, trans_b, alpha, beta, activation),
            "unwritten": int(out.isnan().sum()), "counted": counters.tolist() == expected,
            "split_tiles": sum(1 for e in expected if e)}


def check_tma(m: int, n: int, k: int, trans_a: bool, trans_b: bool, programs: int, bn: int, tail_pieces: int,
              alpha: float = 1.0, beta: float = 0.0, bias: bool = False, activation: str = "") -> dict:
    """The TMA kernel in TILE x ``bn`` tiles (stored in two column slices where ``bn`` is over
    TILE), its last round in ``tail_pieces`` pieces."""
    a, b, c, bias_vector = _operands(m, n, k, trans_a, trans_b, beta, bias)
    out = torch.full((m, n), float("nan")).half()
    boo_hopper_gemm_tma[(programs,)](a, b, c, bias_vector, out, m, n, k, trans_a, trans_b, alpha, beta, beta != 0.0,
                                     bias, activation, TILE, bn, STEP, 8, programs, 2 if bn > TILE else 1,
                                     tail_pieces)
    return {"error": _error(out, a, b, c, bias_vector, trans_a, trans_b, alpha, beta, activation),
            "unwritten": int(out.isnan().sum())}


if __name__ == "__main__":
    for problem in json.loads(sys.argv[1]):
        run = check_tma if problem.get("kernel") == "tma" else check
        print(json.dumps(run(*problem["args"], **problem.get("kwargs", {}))), flush=True)
