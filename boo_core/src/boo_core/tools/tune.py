"""``boo tune``: tune the kernels of MIOpenDriver-style commands, record the winners, and
write what was measured (CSV, HTML report, an IREE tuning spec)."""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from ..errors import BooError, is_plugins_failure
from ..signatures.commands import Command
from ..tune.cluster import gpu_task_summary
from ..tune.peaks import Peaks, measure_peaks
from ..tune.spec import export_spec
from ..tune.tuner import KernelTune, TuneOptions, Tuner
from .driver import error_text
from .html_report import write_report
from .progress import ProgressBar
from .report import TUNE_COLUMNS

#: How the errors of candidates that a Ray cluster failed (not their compiler) start.
CLUSTER_ERRORS = ("on the Ray cluster: ", "measuring on the Ray cluster: ")
def _number(value: float | None, spec: str = ".6g") -> str:
    return "" if value is None else format(value, spec)


def tune_rows(tune: KernelTune, peaks: Peaks | None) -> list[dict[str, str]]:
    """The CSV rows of one kernel's tune."""
    signature = tune.signature
    baseline = tune.result(tune.baseline)
    rows = []
    for result in tune.results:
        t = result.time_us
        tflops = signature.flops / t / 1e6 if t else None
        gbps = signature.bytes_moved / t / 1e3 if t else None
        fraction = None
        if t and peaks is not None:
            fraction = 100 * max(tflops / peaks.tflops, gbps / peaks.gbps)
        speedup = baseline.time_us / t if t and baseline and baseline.time_us else None
        rows.append({
            "func_name": signature.func_name, "command": tune.command, "op": type(signature).op_name,
            "mode": signature.mode, "target": tune.target, "device": tune.device, "candidate": result.label,
            "formulation": result.formulation, "config": json.dumps(result.config, sort_keys=True) if result.config
            else "", "flags": " ".join(result.flags), "compile_s": _number(result.compile_seconds, ".3f"),
            "verdict": result.verdict, "time_us": _number(t, ".3f"), "tflops": _number(tflops),
            "gbps": _number(gbps), "pct_peak": _number(fraction, ".2f"),
            "peak_tflops": _number(peaks.tflops if peaks else None),
            "peak_gbps": _number(peaks.gbps if peaks else None),
            "speedup": _number(speedup, ".4g"), "winner": "1" if result.label == tune.winner else "0",
            "baseline": "1" if result.label == tune.baseline else "0",
            "torch_us": _number(tune.torch_us, ".3f"), "flops": str(signature.flops),
            "bytes": str(signature.bytes_moved), "error": result.error,
        })
    return rows


def run_tune(commands: Sequence[Command], options: TuneOptions, *, csv_path: str | None = None,
             report: str | None = None, export: str | None = None, progress: bool = True) -> tuple[int, int]:
    """Tune every kernel of ``commands``; (kernels tuned or kept, kernels without a winner).
    Prints a summary table; writes the CSV, the report and the spec when asked."""
    kernels, failed = [], 0
    for command in commands:
        try:
            kernels += [(command.text, s) for s in command.parse().signatures]
        except BaseException as e:  # a bad line is reported; the others are tuned
            if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
                raise
            print(f"error ({command.source}): {error_text(e)}")
            failed += 1
    tuner = Tuner(options, write_progress_bar(sys.stderr) if progress else None, sys.stderr if progress else None)
    # On a cluster tuning for a GPU, the device is the nodes': no peaks measured here.
    here = options.ray is None or tuner.device.torch_device.type == "cpu"
    peaks = measure_peaks(options.device) if (csv_path or report) and here else None
    start = time.perf_counter()
    tunes = tuner.tune(kernels)
    print(f"tuned {len(tunes)} kernels on {tuner.device_name} in {time.perf_counter() - start:.0f} s")
    if tuner.gpu_tasks:
        print(f"Ray: {gpu_task_summary(tuner.gpu_tasks)}")
    print(f"{'kernel':<58} {'default us':>11} {'tuned us':>10} {'torch us':>10} {'speed-up':>8}  winner")
    torch_faster: list[str] = []
    for tune in tunes:
        name = tune.signature.func_name[:58]
        if tune.reused:
            print(f"{name:<58} {'(tuned before: kept; --retune to tune again)':>44}")
            continue
        winner, baseline = tune.result(tune.winner), tune.result(tune.baseline)
        if winner is None:
            failed += 1
            print(f"{name:<58} {'no candidate compiled and verified':>44}")
            continue
        base = baseline.time_us if baseline and baseline.time_us else float("nan")
        torch_us = tune.torch_us if tune.torch_us is not None else float("nan")
        if tune.torch_us is not None and tune.torch_us < winner.time_us:
            torch_faster.append(tune.signature.func_name)
        print(f"{name:<58} {base:>11.1f} {winner.time_us:>10.1f} {torch_us:>10.1f} {base / winner.time_us:>8.2f}  "
              f"{winner.label}")
    if torch_faster:  # torch.compile leaves their nodes to PyTorch while the records are used (BOO_USE_TUNED=1)
        print(f"PyTorch's kernel timed faster than every candidate ({len(torch_faster)}): torch.compile leaves "
              f"their nodes to PyTorch: {', '.join(torch_faster)}")
    lost = [(tune, r) for tune in tunes for r in tune.results if r.error.startswith(CLUSTER_ERRORS)]
    for tune, result in lost:  # the cluster's failures, not the candidates': a rerun tries them again
        print(f"FAILED {tune.signature.func_name} {result.label}: " + result.error.replace("\n", "\n  "))
    failed += len({id(tune) for tune, _ in lost if tune.winner})  # those without a winner are counted
    if csv_path:
        with open(csv_path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(TUNE_COLUMNS), restval="")
            writer.writeheader()
            for tune in tunes:
                writer.writerows(tune_rows(tune, peaks))
        print(f"CSV written to {csv_path}")
    if report:
        if not csv_path:
            raise BooError("--report needs --csv (the report is made from it)")
        write_report([Path(csv_path)], Path(report), title="boo tune")
        print(f"report written to {report}")
    if export:
        count = export_spec(Path(export), [t.signature for t in tunes], tuner.device.target.name, tuner.device_name)
        print(f"tuning spec with {count} configured kernels written to {export}")
    return len(tunes), failed


def add_parser(sub: argparse._SubParsersAction, make: object) -> None:
    """The ``tune`` verb (``make`` is cli's subparser factory)."""
    parser = make(sub, "tune", "tune kernels: formulations x configurations x flags, keep the fastest verified", """\
Tune the kernels of MIOpenDriver-style commands on a device. For each kernel, every
candidate is compiled (in parallel processes): each of the op's formulations, and the
per-dispatch configurations and flag sets of its tuning space. Each is checked against
PyTorch in float64 on fresh random inputs into outputs poisoned with NaN (a wrong one is
recorded and never chosen, however fast) and timed with the driver's timer (device time on
CUDA), in a worker process: a candidate that crashes it or outlasts BOO_WORKER_TIMEOUT is
recorded as failed and the run goes on. The fastest verified candidate is recorded in the tuning database in the cache
directory (per signature, target, compiler version and device model); get_launchable, the
eager ops and torch.compile use it from then on (BOO_USE_TUNED=0 ignores it). A killed run
resumes where it stopped; a kernel tuned before is kept unless --retune.

Examples:
  boo tune --device cuda:0 --commands-file cmds.txt --csv tune.csv --report tune.html
  boo tune gemmbfp16 -m 4096 -n 4096 -k 4096 --device cuda:0 --export spec.mlir
  boo tune -j 2 --budget 120 -- conv -n 8 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -F 4""", True)
    parser.add_argument("--device", default="cpu", help="device to tune on (default: cpu; cuda:0...)")
    parser.add_argument("-j", "--jobs", type=int, default=None,
                        help="parallel compile processes (default: one per CPU); with --ray, the most tasks "
                             "submitted at once (default: no limit) and a local instance's CPUs")
    parser.add_argument("--budget", type=float, metavar="SECONDS", help="time budget per kernel (compile and measure)")
    parser.add_argument("--iter", type=int, default=20, help="timed calls per candidate (default: 20)")
    parser.add_argument("--retune", action="store_true", help="tune kernels that have a record again")
    parser.add_argument("--csv", metavar="FILE", help="every candidate's results as CSV (columns: docs/cli.md)")
    parser.add_argument("--report", metavar="FILE.html", help="an HTML report of the results (needs --csv)")
    parser.add_argument("--export", metavar="SPEC.mlir",
                        help="write the winners' configurations as an IREE tuning spec (BOO_TUNING_SPEC_PATH)")
    parser.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                        help="compile the candidates as tasks on a Ray cluster, and on a GPU verify and time them "
                             "on its nodes with that GPU model: no ADDRESS starts a local Ray instance, 'auto' joins "
                             'the cluster running here (ray start), HOST:PORT that one; needs pip install '
                             '"boo-core[ray]"')
    parser.add_argument("--shared-cache", action="store_true",
                        help="with --ray: the cache directory is mounted at the same path on every node, and "
                             "workers write into it directly instead of sending kernels back")
    parser.add_argument("--cache-dir", metavar="DIR", help="the kernel cache to tune into (default: BOO_CACHE_DIR)")


def write_progress_bar(stream: TextIO) -> Callable[[int, int, str], None]:
    """A progress callback drawing :class:`~boo_core.tools.progress.ProgressBar` on ``stream``."""
    bars: dict[int, ProgressBar] = {}

    def update(done: int, total: int, note: str) -> None:
        bar = bars.setdefault(total, ProgressBar(total, stream))
        bar.update(done, note)
        if done == total:
            bar.close()

    return update
