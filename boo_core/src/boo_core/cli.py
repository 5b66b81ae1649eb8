"""The ``boo`` command.

Subcommands:

* ``boo ops``: installed ops, their command keywords and distributions, and plugins that
  failed to load.
* ``boo driver``: run MIOpenDriver-style commands through BOO kernels and time them.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from .driver import CommandResult, read_commands, run_command
from .errors import BooError
from .registry import BooOpRegistry


def _cmd_ops(args: argparse.Namespace) -> int:
    registry = BooOpRegistry.default()
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
    return 1 if registry.failures or registry.conflicts() else 0


def _print_result(result: CommandResult) -> None:
    print(f"\n{result.command}")
    for run in result.runs:
        t = run.timing
        source = "cache hit" if run.cache_hit else f"compiled in {run.compile_seconds:.2f} s"
        print(f"  {run.signature.func_name}")
        print(f"    kernel: {source}, loaded in {run.load_seconds * 1e3:.1f} ms")
        print(f"    output: {run.output_summary}")
        print(f"    time (us): min {t.min:.1f}  median {t.median:.1f}  mean {t.mean:.1f}  max {t.max:.1f}  "
              f"stdev {t.stdev:.1f}  ({len(t.samples_us)} iterations)")
        print(f"    throughput: {run.tflops:.4f} TFLOP/s  {run.gbps:.3f} GB/s")
    if result.error is not None:
        print(f"  error: {result.error}")


def _cmd_driver(args: argparse.Namespace) -> int:
    commands: list[str] = []
    if args.commands_file:
        commands.extend(read_commands(args.commands_file))
    if args.command:
        commands.append(" ".join(args.command))
    if not commands:
        print("boo driver: give a command (boo driver conv -n 1 ...) or --commands-file FILE", file=sys.stderr)
        return 2
    failures = 0
    for command in commands:
        result = run_command(command, device=args.device, iterations=args.iter, warmup=args.warmup)
        _print_result(result)
        failures += result.error is not None
    if failures:
        print(f"\n{failures} of {len(commands)} commands failed", file=sys.stderr)
    return 1 if failures else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="boo", description="BOO: standalone IREE kernels for PyTorch ops.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what BOO does (compiles, cache)")
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

    ops = sub.add_parser("ops", help="list installed ops and plugin failures",
                         description="List installed ops, their command keywords and distributions, "
                                     "and plugins that failed to load. Exits 1 if any plugin failed.")
    ops.set_defaults(func=_cmd_ops)

    driver = sub.add_parser(
        "driver", help="run and time MIOpenDriver-style commands",
        description="Run MIOpenDriver-style commands through BOO kernels and time them. Example:\n"
                    "  boo driver convbfp16 -n 8 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -F 1\n"
                    "  boo driver --commands-file examples/sample_commands.txt",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    driver.add_argument("--commands-file", metavar="FILE", help="one command per line; # starts a comment")
    driver.add_argument("--device", default="cpu", help="device to run on (default: cpu)")
    driver.add_argument("--iter", type=int, default=None,
                        help="timed iterations (default: the command's -i/--iter, else 10)")
    driver.add_argument("--warmup", type=int, default=3, help="untimed calls before timing (default: 3)")
    driver.add_argument("command", nargs=argparse.REMAINDER, help="an MIOpenDriver command: base argument and flags")
    driver.set_defaults(func=_cmd_driver)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except BooError as e:
        print(f"boo {args.subcommand}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
