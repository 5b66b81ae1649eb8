"""The Hopper library's persistent GEMM kernels, run by Triton's interpreter on the CPU: every
output element written and right against float64 with transposed operands, edge tiles, the
whole epilogue and several program counts. The stream-K kernel: every split tile counted once
per program that shares it. The TMA kernel: its last round cut in halves or quarters. The
interpreter runs the programs one after another, so this checks the schedule and the adding of
split tiles, not their ordering under concurrency (tests/gpu does that on a Hopper GPU). Needs
Triton, not a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("boo_kernels_hopper")

SCRIPT = Path(__file__).with_name("gemm_interpreted.py")
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


#: (M, N, K, A transposed, B transposed, programs, tile columns, pieces): 32-row tiles. 200 rows
#: and 64 columns are 14 tiles of 32 x 32; on 12 programs, 2 are left over after one round, the
#: last of them in the last row of tiles, whose lower half lies past M (8 of its 32 rows are).
TMA_PROBLEMS = [
    {"kernel": "tma", "args": [200, 64, 96, False, False, 12, 32, 0]},  # no pieces: a second round
    {"kernel": "tma", "args": [200, 64, 96, False, False, 12, 32, 4]},  # 2 tiles as 8 quarters
    {"kernel": "tma", "args": [200, 64, 96, True, True, 12, 32, 2]},  # as 4 halves, both operands transposed
    {"kernel": "tma", "args": [100, 128, 80, False, True, 7, 64, 4],  # 32 x 64 tiles stored in two slices:
     "kwargs": {"alpha": 0.5, "beta": 1.0, "bias": True, "activation": "gelu"}},  # 1 left, 4 quarters
]


def test_the_tma_kernel_writes_every_element_with_its_last_round_in_pieces():
    result = subprocess.run([sys.executable, str(SCRIPT), json.dumps(TMA_PROBLEMS)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == len(TMA_PROBLEMS)
    for problem, row in zip(TMA_PROBLEMS, rows, strict=True):
        assert row["unwritten"] == 0 and row["error"] < 1e-3, (problem, row)
