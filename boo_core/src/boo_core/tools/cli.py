"""The ``boo`` command: MIOpenDriver-style tools over every installed op.

Subcommands: ``ops`` (installed ops), ``driver`` (run and time commands), ``numerics``
(check them against PyTorch), ``preload`` (compile them into the cache), ``tune`` (sweep
their configurations), ``dump`` (their executables, for editing and substitution), ``cache``
(``info``, ``clear``, ``path``), ``report`` (an HTML report of result CSVs). docs/cli.md
is the reference.

``driver``, ``numerics``, ``preload``, ``tune`` and ``dump`` take one command, several
commands each quoted as one argument, or ``--commands-file FILE``, plus arguments appended
to each of them. Their own options are parsed first; every other argument belongs to the
commands. An argument after ``--`` always does.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import torch

from ..cluster import ClusterError, RayUnavailable
from ..errors import BooError, DeviceError, is_plugins_failure
from ..kernels.target import Target
from ..kernels.tuning_records import all_records
from ..plugins.registry import BooOpRegistry
from ..runtime.devices import resolve_device
from ..runtime.timing import timer_for
from ..settings import get_settings, settings_override
from ..signatures.commands import TSV_COMMAND_COLUMN, Command, CommandFileError, collect_commands, deduplicate
from ..tune.tuner import TuneOptions
from . import cache_admin, html_report, tune
from .backends import backends
from .driver import DEFAULT_ITERATIONS, CommandResult, DriverOptions, error_text, run_command
from .dump import run_dump
from .preload import CACHE_HIT, COMPILED, FAILED, CachePopulator
from .report import (
    DRIVER_COLUMNS,
    DRIVER_NUMERICS_COLUMNS,
    NUMERICS_COLUMNS,
    CsvReport,
    driver_rows,
    numerics_rows,
    print_driver_result,
    print_numerics_result,
    si,
)
from .tune import run_tune

#: Exit status of a run in which something failed, and of a usage error.
FAILED_EXIT, USAGE_EXIT = 1, 2

_REFERENCE_DTYPES = {"float64": torch.float64, "float32": torch.float32}

_COMMANDS_HELP = f"""\
Commands: give one command (base argument and flags, as MIOpenDriver takes them), several
commands each as one quoted argument ("gemm -m 64 -n 64 -k 64" "gemm -m 32 -n 32 -k 32",
plain arguments after them appended to each), or --commands-file FILE with one command per
line ('#' comments and blank lines skipped, MIOpen log prefixes such as "MIOpen(HIP):
Command [LogCmdConvolution] ./bin/MIOpenDriver" stripped, a repeated command run once).
In a .tsv file, the first row is a header and the '{TSV_COMMAND_COLUMN}' column holds the commands.
With a file, extra arguments are appended to every line: the last value of a flag wins, so
'--in_layout NHWC' or '-F 1' overrides the file's. Put a command whose flags look like this
tool's options after '--'.
"""


class UsageError(BooError):
    """A tool was called wrongly (exit status 2)."""


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _quoted_commands(arguments: Sequence[str]) -> list[Command] | None:
    """Several arguments that each hold a whole command (``"gemm -m 64 ..." "gemm -m 32 ..."``):
    one command each, the plain words after them appended to every one (as with a commands
    file). None where the arguments are the words of one command."""
    words = list(arguments)
    if "--" in words:
        words.remove("--")
    quoted = 0
    while quoted < len(words) and len(words[quoted].split()) > 1:
        quoted += 1
    if quoted == 0 or len(words) == 1:
        return None
    rest = words[quoted:]
    stray = next((w for w in rest if len(w.split()) > 1), None)
    if stray is not None:
        raise UsageError(f"argument {stray!r} holds several words, after the plain argument {rest[0]!r}: give "
                         "each command as one quoted argument, before any flags appended to all of them "
                         "(or use --commands-file)")
    extra = f" {shlex.join(rest)}" if rest else ""
    return deduplicate([Command(text + extra, f"command line, command {number}")
                        for number, text in enumerate(words[:quoted], 1)])


def _commands(args: argparse.Namespace, extra: Sequence[str]) -> list[Command]:
    try:
        commands = (_quoted_commands(extra) if args.commands_file is None else None) \
            or collect_commands(extra, args.commands_file)
    except CommandFileError as e:
        raise UsageError(str(e)) from None
    if not commands:
        where = f"{args.commands_file} holds no commands" if args.commands_file else "no command given"
        raise UsageError(f"{where}: give a command (boo {args.subcommand} conv -n 1 -c 8 ...) "
                         "or --commands-file FILE")
    return commands


def _csv(path: str | None, columns: Sequence[str]) -> CsvReport | contextlib.nullcontext[None]:
    return CsvReport(path, columns) if path else contextlib.nullcontext()


def _count(items: Sequence[object] | int, noun: str) -> str:
    """``3 commands``: how many ``items`` (or that number), and the noun."""
    count = items if isinstance(items, int) else len(items)
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _check_device(device: str, with_boo: bool) -> None:
    try:
        timer_for(device)
        if with_boo:
            resolve_device(device)
    except BooError as e:
        raise UsageError(str(e)) from None


def _reported(result: CommandResult, print_result: Callable[[CommandResult, TextIO], None],
              make_rows: Callable[[CommandResult], list[dict[str, str]]]) -> tuple[CommandResult, list[dict[str, str]]]:
    """Print a command's result and make its CSV rows. Where that fails (a plugin's
    signature that cannot describe itself: its name, FLOP count...), the command is
    reported as an error instead, and the run goes on with the next one."""
    try:
        print_result(result, sys.stdout)
        rows = make_rows(result)
    except BaseException as e:  # a plugin's bug must not stop the batch
        if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
            raise
        result = CommandResult(result.command, op=result.op, error=f"cannot report its results: {error_text(e)}")
        print_result(result, sys.stdout)
        rows = make_rows(result)
    sys.stdout.flush()
    return result, rows


# -- subcommands ------------------------------------------------------------------------------------


def _cmd_ops(args: argparse.Namespace, extra: Sequence[str]) -> int:
    registry = BooOpRegistry.default()
    if args.flags:
        try:
            entry = registry.get_op(args.flags)
        except BooError as e:
            raise UsageError(str(e)) from None
        print(f"{entry.name} ({', '.join(entry.spec.keywords)}; from {entry.distribution}): flags")
        for line in entry.spec.parser.help_lines():
            print(line)
        return 0
    ops = registry.list_ops()
    if not ops:
        print("no BOO ops are installed (install an op package such as boo-ops-conv)")
    for entry in ops:
        keywords = ", ".join(entry.spec.keywords)
        print(f"{entry.name:<12} keywords: {keywords:<20} from {entry.distribution}")
        if entry.spec.description and args.verbose:
            print(f"{'':<12} {entry.spec.description}")
    for conflict in registry.conflicts():
        print(f"conflict: {conflict}")
    for failure in registry.failures:
        print(f"failed: {failure}")
    return FAILED_EXIT if registry.failures or registry.conflicts() else 0


def _cmd_driver(args: argparse.Namespace, extra: Sequence[str]) -> int:
    names = tuple(dict.fromkeys(args.backend or ["boo"]))
    _check_device(args.device, "boo" in names)
    commands = _commands(args, extra)
    options = DriverOptions(backends=names, device=args.device, iterations=args.iter, warmup=args.warmup,
                            seed=args.seed, splat_value=args.splat_input_value, verify=args.verify_numerics,
                            reference_dtype=_REFERENCE_DTYPES[args.reference_dtype])
    iterations = args.iter or f"-i/--iter of each command (default {DEFAULT_ITERATIONS})"
    print(f"boo driver: {_count(commands, 'command')} on {args.device}; backends: {', '.join(names)}; "
          f"timed calls: {iterations}, after {args.warmup} warm-up calls")
    columns = DRIVER_COLUMNS + (DRIVER_NUMERICS_COLUMNS if args.verify_numerics else ())
    failed = runs = 0
    with _csv(args.csv, columns) as csv_report:
        for command in commands:
            result = run_command(command, options)
            result, rows = _reported(result, print_driver_result, lambda r: driver_rows(
                r, args.device, args.verify_numerics, options.reference_dtype))
            if csv_report:
                csv_report.write(rows)
            failed += result.failed
            runs += len(result.runs)
    print(f"\nsummary: {_count(commands, 'command')}, {runs} runs (mode x backend), {failed} failed")
    if args.csv:
        print(f"CSV written to {args.csv}")
    if failed:
        print(f"{failed} of {len(commands)} commands failed", file=sys.stderr)
    return FAILED_EXIT if failed else 0


def _cmd_numerics(args: argparse.Namespace, extra: Sequence[str]) -> int:
    _check_device(args.device, True)
    commands = _commands(args, extra)
    reference_dtype = _REFERENCE_DTYPES[args.reference_dtype]
    options = DriverOptions(device=args.device, seed=args.seed, splat_value=args.splat_input_value, timed=False,
                            verify=True, reference_dtype=reference_dtype)
    print(f"boo numerics: {_count(commands, 'command')} on {args.device}, against PyTorch in {args.reference_dtype}")
    counts = {"PASS": 0, "FAIL": 0, "ERROR": 0}
    with _csv(args.csv, NUMERICS_COLUMNS) as csv_report:
        for command in commands:
            result = run_command(command, options)
            result, rows = _reported(result, print_numerics_result,
                                     lambda r: numerics_rows(r, args.device, reference_dtype))
            for row in rows:
                counts[row["status"]] += 1
            if csv_report:
                csv_report.write(rows)
    print(f"\nsummary: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['ERROR']} ERROR "
          f"(outputs checked, or modes and commands that did not run)")
    if args.csv:
        print(f"CSV written to {args.csv}")
    failed = counts["FAIL"] + counts["ERROR"]
    if failed:
        print(f"numerics: {counts['FAIL']} FAIL, {counts['ERROR']} ERROR", file=sys.stderr)
    return FAILED_EXIT if failed else 0


def _ray_address(args: argparse.Namespace, extra: list[str]) -> None:
    """``--ray`` takes an optional ADDRESS; a word that is none (``--ray conv -n 1 ...``) is
    the command's first word, given back to it."""
    if args.ray is None or args.ray in ("local", "auto") or ":" in args.ray:
        return
    extra.insert(0, args.ray)
    args.ray = "local"


def _with_cluster_options(args: argparse.Namespace, extra: Sequence[str],
                          run: Callable[[argparse.Namespace, Sequence[str]], int]) -> int:
    """``run`` after what preload and tune share: ``--ray``'s optional address, ``--shared-cache``
    (only with ``--ray``) and ``--cache-dir``."""
    extra = list(extra)
    _ray_address(args, extra)
    if args.shared_cache and args.ray is None:
        raise UsageError("--shared-cache applies to the workers of a Ray cluster: give --ray as well")
    with settings_override(cache_dir=args.cache_dir) if args.cache_dir else contextlib.nullcontext():
        return run(args, extra)


def _cmd_preload(args: argparse.Namespace, extra: Sequence[str]) -> int:
    return _with_cluster_options(args, extra, _preload)


def _preload(args: argparse.Namespace, extra: Sequence[str]) -> int:
    commands = _commands(args, extra)
    try:
        populator = CachePopulator(commands=commands, targets=args.target or (() if args.device else ["cpu"]),
                                   jobs=args.jobs, progress=sys.stderr, device=args.device, ray=args.ray,
                                   shared_cache=args.shared_cache)
    except RayUnavailable as e:
        raise UsageError(f"--ray: {e}") from None
    except BooError as e:
        raise UsageError(str(e)) from None
    verified = f", verified on {args.device}" if args.device else ""
    if args.ray is None:
        where = f"-j {populator.jobs}"
    else:
        where = "on a local Ray instance" if args.ray == "local" else f"on the Ray cluster at {args.ray}"
        where += f" (at most {args.jobs} task{'' if args.jobs == 1 else 's'} at once)" if args.jobs else ""
        where += ", workers writing into the shared cache" if args.shared_cache else ""
    print(f"boo preload: {_count(commands, 'command')} for {', '.join(populator.targets)}{verified}, "
          f"{where}, into {get_settings().cache_dir}")
    start = time.perf_counter()
    try:
        outcomes = populator.run()
    except ClusterError as e:
        raise UsageError(f"--ray: {e}") from None
    counts = {status: sum(o.status == status for o in outcomes) for status in (COMPILED, CACHE_HIT, FAILED)}
    print(f"compiled {counts[COMPILED]}, cache hits {counts[CACHE_HIT]}, failed {counts[FAILED]} "
          f"in {time.perf_counter() - start:.1f} s")
    for failure in populator.get_failures():
        what = f"{failure.func_name} for {failure.target}" if failure.func_name else failure.command
        print(f"\nFAILED {what} ({failure.source})")
        print("  " + failure.error.replace("\n", "\n  "))
        if failure.reproducer:
            print(f"  reproducer: {' and '.join(failure.reproducer)}")
    return FAILED_EXIT if counts[FAILED] else 0


def _cmd_tune(args: argparse.Namespace, extra: Sequence[str]) -> int:
    return _with_cluster_options(args, extra, _tune)


def _tune(args: argparse.Namespace, extra: Sequence[str]) -> int:
    if args.ray is None:
        _check_device(args.device, True)  # on a cluster, the device may be on its nodes only
    commands = _commands(args, extra)
    if args.report and not args.csv:
        raise UsageError("--report needs --csv: the report is made from the CSV")
    if args.iter < 1 or (args.jobs is not None and args.jobs < 1) or (args.budget is not None and args.budget <= 0):
        raise UsageError("--iter and -j must be at least 1, --budget more than 0")
    jobs = args.jobs or 0 if args.ray is not None else args.jobs or os.cpu_count() or 1
    options = TuneOptions(device=args.device, jobs=jobs, budget_seconds=args.budget, iterations=args.iter,
                          retune=args.retune, ray=args.ray, shared_cache=args.shared_cache)
    if args.ray is not None:
        where = "a local Ray instance" if args.ray == "local" else f"the Ray cluster at {args.ray}"
        print(f"boo tune: {_count(commands, 'command')} on {args.device}, compiled on {where}"
              + (f" (at most {_count(args.jobs, 'task')} at once)" if args.jobs else "")
              + (", workers writing into the shared cache" if args.shared_cache else "")
              + f", into {get_settings().cache_dir}")
    try:
        _, failed = run_tune(commands, options, csv_path=args.csv, report=args.report, export=args.export)
    except RayUnavailable as e:
        raise UsageError(f"--ray: {e}") from None
    except ClusterError as e:
        raise UsageError(f"--ray: {e}") from None
    except DeviceError as e:
        raise UsageError(str(e)) from None
    return FAILED_EXIT if failed else 0


def _cmd_dump(args: argparse.Namespace, extra: Sequence[str]) -> int:
    commands = _commands(args, extra)
    try:
        targets = [Target.parse(t) for t in dict.fromkeys(args.target or ["cpu"])]
    except BooError as e:
        raise UsageError(str(e)) from None
    root = Path(args.to)
    print(f"boo dump: {_count(commands, 'command')} for {', '.join(t.name for t in targets)} into {root}")
    failed = run_dump(commands, targets, root, sys.stdout, formulation=args.formulation)
    print(f"\n{failed} failed" if failed else "\nindex of each kernel: <kernel directory>/index.txt (and index.json)")
    return FAILED_EXIT if failed else 0


def _cmd_cache_info(args: argparse.Namespace, extra: Sequence[str]) -> int:
    settings = get_settings()
    print(f"cache: {settings.cache_dir}" + ("" if settings.cache_enabled else " (disabled: BOO_CACHE_ON=0)"))
    entries = cache_admin.scan(settings.cache_dir)
    records = all_records(settings.cache_dir)
    for line in cache_admin.summary_lines(entries, tuned=len(records)):
        print(line)
    if args.list:
        for entry in entries:
            print(f"  {entry.directory.name}  {si(entry.size, 'B')}  {entry.state}")
        for record in records:
            winner = record.label or record.formulation
            torch_time = f", PyTorch {record.torch_us:.1f} us" if record.torch_us else ""
            left = ": torch.compile leaves it to PyTorch" if 0 < record.torch_us < record.time_us else ""
            print(f"  tuned: {record.func_name} on {record.target} ({record.device}): {winner} "
                  f"{record.time_us:.1f} us (default {record.default_time_us:.1f} us{torch_time}){left}")
    return 0


def _cmd_cache_clear(args: argparse.Namespace, extra: Sequence[str]) -> int:
    cache_dir = get_settings().cache_dir
    try:
        target = Target.parse(args.target) if args.target else None
    except BooError as e:
        raise UsageError(str(e)) from None
    cleared = cache_admin.clear(cache_dir, target, broken_only=args.broken)
    removed = [e for e in cleared if not e.only_leftovers]
    tidied = [e for e in cleared if e.only_leftovers]
    scope = (" broken or failed" if args.broken else "") + (f" compiled for {target.name}" if target else "")
    size = si(sum(e.size for e in removed), "B")
    print(f"removed {len(removed)} entries{scope} ({size}) from {cache_dir}")
    if tidied:
        entries = "entry, which stays" if len(tidied) == 1 else "entries, which stay"
        print(f"removed leftover temporary files ({si(sum(e.size for e in tidied), 'B')}) from {len(tidied)} "
              f"complete {entries}")
    return 0


def _cmd_cache_path(args: argparse.Namespace, extra: Sequence[str]) -> int:
    settings = get_settings()
    print(settings.cache_dir)
    if not settings.cache_enabled:
        print("note: the disk cache is disabled (BOO_CACHE_ON=0)", file=sys.stderr)
    return 0


def _cmd_report(args: argparse.Namespace, extra: Sequence[str]) -> int:
    try:
        return html_report.run(args)
    except html_report.ResultsFileError as e:
        raise UsageError(str(e)) from None


# -- argument parsing -------------------------------------------------------------------------------


def _subparser(sub: argparse._SubParsersAction, name: str, summary: str, description: str,
               takes_commands: bool = False) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=summary, description=description, allow_abbrev=False,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(takes_commands=takes_commands)
    if takes_commands:
        parser.add_argument("--commands-file", metavar="FILE",
                            help=f"commands to run, one per line (.tsv: a '{TSV_COMMAND_COLUMN}' column)")
    return parser


def _substitution_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--substitutions", metavar="ROOT",
                        help="replace kernels' executables with the files under ROOT/<target>/<func_name>/ "
                             "(sources/, configurations/, binaries/; as BOO_SUBSTITUTIONS): substituted kernels are "
                             "always verified against PyTorch")


def _input_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu",
                        help="torch device to run on (default: cpu; cuda:N once BOO launches on GPUs)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    parser.add_argument("--splat-input-value", type=float, metavar="V",
                        help="fill every input with V instead of random values")
    parser.add_argument("--reference-dtype", choices=sorted(_REFERENCE_DTYPES), default="float64",
                        help="dtype the PyTorch reference computes in (default: float64)")
    parser.add_argument("--csv", metavar="FILE", help="also write the results as CSV (columns: docs/cli.md)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="boo", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="BOO: standalone IREE kernels for PyTorch ops, with MIOpenDriver-style tools.",
        epilog="Run 'boo SUBCOMMAND --help' for each tool's options and examples; docs/cli.md is the reference.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what BOO does (compiles, cache)")
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

    ops = _subparser(sub, "ops", "list installed ops and plugin failures",
                     "List installed ops, their command keywords and distributions, and plugins that\n"
                     "failed to load. Exits 1 if any plugin failed or two plugins claim one keyword.\n"
                     "With --flags OP, list that op's flags: name, default, meaning.")
    ops.add_argument("--flags", metavar="OP", help="print the flags of op OP (conv, matmul, ...)")
    ops.set_defaults(func=_cmd_ops)

    backend_list = "\n".join(f"  {b.name:<13} {b.description}" for b in backends())
    driver = _subparser(sub, "driver", "run and time MIOpenDriver-style commands", f"""\
Run MIOpenDriver-style commands and time them. For each command, every mode it runs (conv
-F 0: fwd, bwd and wrw) on every backend: the output tensors, per-call time (min, median,
mean, max, stddev in microseconds, after warm-up calls) and throughput (TFLOP/s and GB/s
from the op's FLOP and byte counts, at the median time). Compile and load time are
reported apart and never timed. A command that fails is reported and the run goes on; the
exit status is 1 if any failed. The command's -t, -V and -w flags are accepted and ignored:
BOO always times, and checks numerics with --verify-numerics.

Backends (--backend, repeatable; default boo):
{backend_list}

{_COMMANDS_HELP}
Examples:
  boo driver convbfp16 -n 8 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -F 1 --in_layout NHWC
  boo driver --commands-file examples/sample_commands.txt --csv results.csv
  boo driver --commands-file cmds.txt --backend boo --backend torch --iter 50 -F 1
  boo driver --verify-numerics conv -n 2 -c 16 -H 14 -W 14 -k 32 -F 0""", takes_commands=True)
    driver.add_argument("--backend", action="append", choices=[b.name for b in backends()],
                        help="what to run: boo (default), torch, inductor, boo_inductor; repeatable")
    driver.add_argument("--iter", type=_positive, help="timed calls (default: the command's -i/--iter, else 10)")
    driver.add_argument("--warmup", type=_non_negative, default=3, help="untimed calls before timing (default: 3)")
    driver.add_argument("--verify-numerics", action="store_true",
                        help="also compare each backend's outputs with the PyTorch reference (as boo numerics)")
    _input_options(driver)
    _substitution_option(driver)
    driver.set_defaults(func=_cmd_driver)

    numerics = _subparser(sub, "numerics", "check BOO kernels against PyTorch", f"""\
Check BOO kernels against PyTorch. For each command and mode, the kernel runs on random
inputs into outputs pre-filled with NaN, and each output is compared elementwise with the
op's PyTorch reference computed in float64 from the same inputs:

  |boo - ref| <= rtol * |ref| + atol
  rtol = 2 * eps(dtype)
  atol = max|ref| * (eps(dtype) + 8 * eps(float32) * sqrt(n))

n is the op's accumulation length (products summed per output element). Reported: max
absolute error, max relative error (max abs error / max|ref|), the tolerance, PASS/FAIL.
The exit status is 1 if any output fails or any command or mode does not run.

{_COMMANDS_HELP}
Examples:
  boo numerics --commands-file examples/sample_commands.txt
  boo numerics convbfp16 -n 2 -c 64 -H 14 -W 14 -k 64 -F 0 --in_layout NHWC
  boo numerics --commands-file cmds.txt --reference-dtype float32 --csv numerics.csv""",
                          takes_commands=True)
    _input_options(numerics)
    _substitution_option(numerics)
    numerics.set_defaults(func=_cmd_numerics)

    preload = _subparser(sub, "preload", "compile commands into the kernel cache ahead of time", f"""\
Compile the kernels of commands into the kernel cache, for one or more targets, in
parallel processes, so later runs only load them. No device is needed: cuda and rocm
targets cross-compile on any machine. Kernels already cached count as cache hits. Prints a
progress bar on stderr, then how many kernels were compiled, found in the cache, or
failed, with the reproducer (source.mlir and compile_command.txt in the cache entry) of
each failure. The exit status is 1 if any failed. From Python: boo_core.CachePopulator.

{_COMMANDS_HELP}
-j is also conv's dilation flag: a command using it goes after '--'.

Examples:
  boo preload --commands-file examples/sample_commands.txt -j 4
  boo preload --commands-file cmds.txt --target cpu --target cuda:sm_80 --target rocm:gfx942
  boo preload -j 2 -- conv -n 1 -c 8 -H 8 -W 8 -k 8 -l 2 -j 2 -F 1
  boo preload --commands-file cmds.txt --ray                  # a local Ray instance
  boo preload --commands-file cmds.txt --ray auto --target cuda:sm_80 --device cuda
  boo preload --commands-file cmds.txt --ray 10.0.0.5:6379 --cache-dir /shared/boo --shared-cache""",
                          takes_commands=True)
    preload.add_argument("--target", action="append", metavar="TARGET",
                         help="cpu (default), cuda:sm_80, rocm:gfx942...; repeatable")
    preload.add_argument("-j", "--jobs", type=_positive,
                         help="parallel compile processes (default: one per CPU); with --ray, the most tasks "
                              "submitted at once (default: no limit) and a local instance's CPUs")
    preload.add_argument("--device", metavar="DEVICE",
                         help="also verify each kernel on this device (cuda:0) and record the verdict, so that "
                              "no first call pays for it; its target is added to the targets")
    _substitution_option(preload)
    preload.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                         help="compile (and verify) as tasks on a Ray cluster: no ADDRESS starts a local Ray "
                              "instance, 'auto' joins the cluster running here (ray start), HOST:PORT that one; "
                              'needs pip install "boo-core[ray]"')
    preload.add_argument("--shared-cache", action="store_true",
                         help="with --ray: the cache directory is mounted at the same path on every node, and "
                              "workers write into it directly instead of sending kernels back")
    preload.add_argument("--cache-dir", metavar="DIR", help="the kernel cache to fill (default: BOO_CACHE_DIR)")
    preload.set_defaults(func=_cmd_preload)

    tune.add_parser(sub, _subparser)
    sub.choices["tune"].set_defaults(func=_cmd_tune)

    dump = _subparser(sub, "dump", "dump kernels' executables for reading, editing and substitution", f"""\
Dump each kernel of the commands (each mode) for each target: its executables as IREE
formed them (sources/), as configured with the lowering configuration IREE chose
(configurations/), as target binaries (binaries/: PTX for CUDA, ELF objects for the CPU),
as standalone benchmark modules (benchmarks/), IREE's intermediates, and an index
(index.txt, index.json) naming each executable with its exports, bindings, workgroup size
and count. A kernel goes to DIR/<target>/<func_name>/ (replaced if there). The formulation
dumped is the one that serves: the first that compiles. No device is needed: cuda and rocm
targets cross-compile.

To replace an executable: edit its file, copy it into a substitution root under the same
folder name, ROOT/<target>/<func_name>/sources/<executable>.mlir (or configurations/, or
binaries/ for an object), and run with --substitutions ROOT (or BOO_SUBSTITUTIONS=ROOT).

{_COMMANDS_HELP}
Examples:
  boo dump --to dumps gemm -m 256 -n 256 -k 256
  boo dump --to dumps --target cpu --target cuda:sm_80 --commands-file examples/sample_commands.txt
  boo dump --to dumps --substitutions subs gemm -m 256 -n 256 -k 256   # the substituted kernel""",
                       takes_commands=True)
    dump.add_argument("--to", required=True, metavar="DIR", help="where to write the dumps")
    dump.add_argument("--target", action="append", metavar="TARGET",
                      help="cpu (default), cuda:sm_80, rocm:gfx942...; repeatable")
    dump.add_argument("--formulation", metavar="NAME", help="dump this formulation of the op instead of the first "
                                                             "that compiles")
    _substitution_option(dump)
    dump.set_defaults(func=_cmd_dump)

    cache = _subparser(sub, "cache", "what the kernel cache holds; clear it", """\
Inspect or clear the kernel cache (BOO_CACHE_DIR, default ~/.cache/boo).

Examples:
  boo cache info            entries, total size, targets, compiler versions, broken entries
  boo cache info --list     ... and every entry
  boo cache clear           remove every entry
  boo cache clear --target cuda:sm_80
  boo cache clear --broken  remove damaged entries and recorded compile failures
  boo cache path            print the cache directory""")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    info = _subparser(cache_sub, "info", "entries, size, targets, compiler versions",
                      "Summarize the kernel cache from each entry's meta.json; broken entries (an\n"
                      "interrupted or failed compile, a truncated kernel) are listed with the reason.")
    info.add_argument("-l", "--list", action="store_true", help="list every entry")
    info.set_defaults(func=_cmd_cache_info)
    clear = _subparser(cache_sub, "clear", "remove cached kernels",
                       "Remove cache entries and say what was removed. Only directories named like\n"
                       "cache entries are touched. An entry being compiled is removed after its compile.")
    clear.add_argument("--target", help="only entries compiled for this target (cpu, cuda:sm_80, rocm:gfx942...)")
    clear.add_argument("--broken", action="store_true",
                       help="only damaged entries (and leftovers of killed compiles) and recorded compile failures")
    clear.set_defaults(func=_cmd_cache_clear)
    path = _subparser(cache_sub, "path", "print the cache directory", "Print the kernel cache directory.")
    path.set_defaults(func=_cmd_cache_path)

    report = _subparser(sub, "report", "an HTML report (roofline, bars, tables) of tune or driver CSVs",
                        html_report.REPORT_HELP)
    html_report.add_arguments(report)
    report.set_defaults(func=_cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not args.takes_commands:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        with contextlib.ExitStack() as stack:
            if getattr(args, "substitutions", None):
                root = Path(args.substitutions)
                if not root.is_dir():
                    raise UsageError(f"--substitutions {root}: not a directory")
                stack.enter_context(settings_override(substitutions=root))
            return args.func(args, extra)
    except UsageError as e:
        print(f"boo {args.subcommand}: error: {e}", file=sys.stderr)
        return USAGE_EXIT
    except BooError as e:
        print(f"boo {args.subcommand}: error: {e}", file=sys.stderr)
        return FAILED_EXIT


if __name__ == "__main__":
    sys.exit(main())
