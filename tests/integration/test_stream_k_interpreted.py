"""The Hopper library's stream-K GEMM kernel, run by Triton's interpreter on the CPU: every
output element written and right against float64 with transposed operands, edge tiles, the
whole epilogue and several program counts; every split tile counted once per program that
shares it. The interpreter runs the programs one after another, so this checks the schedule
and the adding of split tiles, not their ordering under concurrency (tests/gpu does that on a
Hopper GPU). Needs Triton, not a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("boo_kernels_hopper")

SCRIPT = Path(__file__).with_name("stream_k_interpreted.py")
#: (M, N, K, A transposed, B transposed, programs), 32 x 32 tiles and 16-long K steps; every
#: stored row a multiple of 16 bytes (what the kernel's tensor maps need).
PROBLEMS = [
    {"args": [100, 72, 200, False, False, 7]},  # 12 tiles of 13 steps over 7 programs: runs cross tiles
    {"args": [104, 72, 200, True, False, 7]},  # a weight gradient's A, stored transposed
    {"args": [64, 64, 64, False, True, 3]},  # B stored transposed, four tiles over three programs
    {"args": [96, 40, 1000, True, False, 5]},  # long K: every tile split
    {"args": [100, 72, 200, False, True, 13], "kwargs": {"alpha": 0.5, "beta": 1.0, "bias": True,
                                                         "activation": "gelu"}},  # the epilogue on added tiles
    {"args": [40, 24, 1000, False, False, 9]},  # two tiles shared by nine programs
]


def test_the_stream_k_kernel_writes_every_element_and_adds_each_split_tile_once():
    result = subprocess.run([sys.executable, str(SCRIPT), json.dumps(PROBLEMS)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == len(PROBLEMS)
    for problem, row in zip(PROBLEMS, rows, strict=True):
        assert row["unwritten"] == 0 and row["counted"] and row["error"] < 1e-3, (problem, row)
    assert all(row["split_tiles"] > 0 for row in rows)  # every problem has tiles its programs share
