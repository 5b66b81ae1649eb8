"""Result CSVs of both kinds, written by the tests of ``boo report`` (unit and browser)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from boo_core.tools.html_report import TUNE_COLUMNS
from boo_core.tools.report import DRIVER_COLUMNS

CONV = "conv2d_fwd_bf16_n32c64h56w56_k64c64y3x3_s1x1_p1x1_d1x1_g1_nhwc_nhwc_nhwc"
GEMM = "matmul_bf16_b1m4096n4096k4096_nn_rowmajor_alpha1p0_beta0p0"
NORM = "layernorm_f32_4096x1024"
PEAK_TFLOPS, PEAK_GBPS = 989.0, 3350.0

#: kernel -> (op, mode, flops, bytes, torch_us, [(candidate, verdict, time_us or None, winner)])
TUNE = {
    CONV: ("conv", "fwd", 7.4e9, 2.57e7, 24.0, [
        ("default", "pass", 1823.0, False),
        ("im2col", "pass", 265.0, True),
        ("default/wg128x128_k64_s3", "fail: 12 elements out of tolerance", 20.0, False),  # wrong but fastest
        ("explicit_pad", "compile error", None, False),
    ]),
    GEMM: ("matmul", "", 1.374e11, 1.007e8, 180.0, [
        ("default", "pass", 340.0, False),
        ("default/wg128x128_k64_s3", "pass", 212.0, True),
    ]),
    NORM: ("layernorm", "fwd", 2.1e7, 3.36e7, 35.0, [
        ("default", "pass", 40.0, True),
        ("default/rows8", "not timed", None, False),
    ]),
}


def tune_rows(peaks: bool = True) -> list[dict[str, str]]:
    rows = []
    for func_name, (op, mode, flops, nbytes, torch_us, candidates) in TUNE.items():
        default_us = candidates[0][2]
        for candidate, verdict, time_us, winner in candidates:
            timed = time_us is not None
            rows.append({
                "func_name": func_name, "command": f"{op} -n 32", "op": op, "mode": mode, "target": "cuda:sm_90",
                "device": "NVIDIA H100 80GB HBM3", "candidate": candidate,
                "formulation": candidate.split("/")[0],
                "config": json.dumps({"workgroup": [128, 128], "k": 64}) if "/" in candidate else "",
                "flags": "--iree-opt-level=O3" if candidate == "im2col" else "", "compile_s": "2.5",
                "verdict": verdict, "time_us": f"{time_us}" if timed else "",
                "tflops": f"{flops / time_us / 1e6:.6g}" if timed else "",
                "gbps": f"{nbytes / time_us / 1e3:.6g}" if timed else "", "pct_peak": "",
                "peak_tflops": str(PEAK_TFLOPS) if peaks else "", "peak_gbps": str(PEAK_GBPS) if peaks else "",
                "speedup": f"{default_us / time_us:.4g}" if timed else "", "winner": "1" if winner else "0",
                "torch_us": str(torch_us), "flops": f"{flops:.0f}", "bytes": f"{nbytes:.0f}",
                "error": "iree-compile: error: failed to legalize" if verdict == "compile error" else "",
            })
    return rows


#: kernel -> (mode, flops, bytes, {backend: (status, median_us or None)})
DRIVER = {
    "conv2d_bwd_f32_n8c64h56w56_k64c64y3x3_s1x1_p1x1_d1x1_g1_nchw_nchw_nchw":
        ("bwd", 3.7e9, 1.0e7, {"boo": ("ok", 9100.0), "torch": ("ok", 2460.0), "inductor": ("ok", 2600.0)}),
    "matmul_f32_b1m1024n1024k1024_nn_rowmajor_alpha1p0_beta0p0":
        ("", 2.147e9, 1.258e7, {"boo": ("fail", 31000.0), "torch": ("ok", 9400.0), "inductor": ("error", None)}),
}


def driver_rows() -> list[dict[str, str]]:
    rows = [{"command": "conv -n 1 --pad_hh 1", "source": "cmds.txt:1", "op": "conv", "status": "error",
             "device": "cpu", "error": "unknown flag --pad_hh"}]
    for func_name, (mode, flops, nbytes, backends) in DRIVER.items():
        for backend, (status, median_us) in backends.items():
            timed = median_us is not None
            rows.append({
                "command": "conv -n 8 -F 2" if mode else "gemm -m 1024", "source": "cmds.txt:2",
                "op": "conv" if mode else "matmul", "mode": mode, "func_name": func_name, "backend": backend,
                "device": "cpu", "status": status, "error": "inductor failed" if status == "error" else "",
                "cache": "hit" if backend == "boo" else "", "compile_s": "0.0", "load_s": "0.0",
                "iterations": "10" if timed else "", "min_us": f"{median_us * 0.9}" if timed else "",
                "median_us": f"{median_us}" if timed else "", "mean_us": f"{median_us}" if timed else "",
                "max_us": f"{median_us * 1.2}" if timed else "", "stddev_us": "1.0" if timed else "",
                "flops": f"{flops:.0f}", "bytes": f"{nbytes:.0f}",
                "tflops": f"{flops / median_us / 1e6:.6g}" if timed else "",
                "gbps": f"{nbytes / median_us / 1e3:.6g}" if timed else "", "formulation": "",
            })
    return rows


def write_csv(path: Path, columns: tuple[str, ...] | list[str], rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), restval="", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_tune_csv(path: Path, peaks: bool = True) -> Path:
    return write_csv(path, TUNE_COLUMNS, tune_rows(peaks))


def write_driver_csv(path: Path) -> Path:
    return write_csv(path, DRIVER_COLUMNS, driver_rows())


def timed_measurements() -> tuple[int, int]:
    """How many points (and bars) the report draws: (tune section, driver section)."""
    tune = sum(2 + bool(torch_us) for *_, torch_us, _ in TUNE.values())  # default, tuned, torch
    driver = sum(median_us is not None for *_, backends in DRIVER.values() for _, median_us in backends.values())
    return tune, driver
