"""Running commands the way MIOpenDriver does: every mode, on every backend.

:func:`run_command` parses a command into its signatures (one per mode), makes inputs once
per signature, and for each backend prepares it (compile or load, timed apart), calls it
once (the outputs are summarized; for a backend that compiles lazily this call is its
compile time), times it, and optionally checks its numerics on the same inputs. Nothing
raises: a command that does not parse, or a backend that fails, is recorded as an error
and the run goes on. ``boo driver`` and ``boo numerics`` are thin layers over it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..errors import BooError, describe_error, is_plugins_failure
from ..plugins.extensions import PreparedBackend
from ..runtime.timing import TimingStats, timer_for
from ..signatures.commands import Command
from ..signatures.signature import Signature, TensorSpec
from ..verify.numerics import Comparison, check_outputs
from .backends import get_backend

#: Timed calls when neither ``--iter`` nor the command's ``-i/--iter`` says (MIOpen's default).
DEFAULT_ITERATIONS = 10
#: Most timed calls a command's own ``-i/--iter`` may ask for: one line of a commands file
#: must not hold the batch for hours (the tool's ``--iter`` is not bounded).
MAX_COMMAND_ITERATIONS = 100_000


@dataclass(frozen=True)
class DriverOptions:
    """How to run commands.

    ``iterations=None`` takes the command's ``-i/--iter``. ``timed=False`` skips the first
    call and the timing (``boo numerics``); ``verify`` checks each run's numerics against
    the reference computed in ``reference_dtype``.
    """

    backends: tuple[str, ...] = ("boo",)
    device: str = "cpu"
    iterations: int | None = None
    warmup: int = 3
    seed: int | None = 0
    splat_value: float | None = None
    timed: bool = True
    verify: bool = False
    reference_dtype: torch.dtype = torch.float64


@dataclass
class BackendRun:
    """One mode of a command on one backend."""

    signature: Signature
    backend: str
    error: str = ""
    cache: str = ""  # see PreparedBackend.cache
    formulation: str = ""  # see PreparedBackend.formulation
    passed_over: tuple[str, ...] = ()
    substitution: str = ""  # see PreparedBackend.substitution
    lazy: bool = False  # compiled on its first call
    compile_seconds: float | None = None
    load_seconds: float | None = None
    outputs: list[str] = field(default_factory=list)  # one summary per output
    timing: TimingStats | None = None
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def status(self) -> str:
        """``error`` (it did not run), ``fail`` (numerics out of tolerance) or ``ok``."""
        if self.error:
            return "error"
        return "fail" if any(not c.passed for c in self.comparisons) else "ok"

    @property
    def tflops(self) -> float | None:
        return _rate(self.signature.flops, self.timing.median * 1e6) if self.timing else None

    @property
    def gbps(self) -> float | None:
        return _rate(self.signature.bytes_moved, self.timing.median * 1e3) if self.timing else None


def _rate(count: int, per: float) -> float:
    """``count / per``, infinite where the count is too large for a float or ``per`` is 0."""
    try:
        return count / per
    except (OverflowError, ZeroDivisionError):
        return math.inf


@dataclass
class CommandResult:
    """A command, the op it names, and its runs; ``error`` when it could not be parsed."""

    command: Command
    op: str = ""
    error: str = ""
    runs: list[BackendRun] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.error) or any(run.status != "ok" for run in self.runs)


def error_text(error: BaseException) -> str:
    """How the tools report an error: BOO's own messages as they are, others with their type."""
    if isinstance(error, BooError):
        return str(error)
    return describe_error(error)


def summarize(name: str, tensor: torch.Tensor) -> str:
    """A one-line description of an output tensor."""
    text = f"{name}: shape={tuple(tensor.shape)} dtype={str(tensor.dtype).removeprefix('torch.')}"
    values = tensor.detach().double()
    finite = values[torch.isfinite(values)]
    if finite.numel():
        std = finite.std().item() if finite.numel() > 1 else 0.0
        text += f" mean={finite.mean().item():.6g} std={std:.6g}"
    if finite.numel() != values.numel():
        text += f" non-finite={values.numel() - finite.numel()}"
    return text


def run_command(command: Command, options: DriverOptions) -> CommandResult:
    """Parse ``command`` and run each of its modes on each backend of ``options``."""
    result = CommandResult(command)
    try:
        parsed = command.parse()
        iterations = options.iterations
        if iterations is None:
            iterations = int(parsed.run_options.get("iter", DEFAULT_ITERATIONS))
            if iterations < 1:
                raise BooError(f"the command's -i/--iter is {iterations}: it must be at least 1")
            if iterations > MAX_COMMAND_ITERATIONS:
                raise BooError(f"the command's -i/--iter is {iterations}: at most {MAX_COMMAND_ITERATIONS} "
                               "(the tool's --iter option overrides it)")
    except BaseException as e:  # BooError, or a plugin parser's bug: either way, the next command runs
        if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
            raise
        result.error = error_text(e)
        return result
    result.op = parsed.op
    device = torch.device(options.device)
    for signature in parsed.signatures:
        try:
            problem = memory_problem(signature, device)
            if problem:
                raise BooError(f"{command.text}: {problem}")
            args = signature.get_sample_args(device=device, seed=options.seed, splat_value=options.splat_value)
        except BaseException as e:  # a plugin's bug must not end the run
            if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
                raise
            error = error_text(e)
            if _is_out_of_memory(e):
                error = (f"{command.text}: cannot allocate the inputs of {signature.func_name} "
                         f"({_gigabytes(_tensor_bytes(signature.input_specs()))}) on {device}: out of memory")
            result.runs += [BackendRun(signature, name, error=error) for name in options.backends]
            continue
        for name in options.backends:
            result.runs.append(_run_backend(name, signature, args, device, iterations, options))
    return result


def device_memory(device: torch.device) -> int | None:
    """Bytes of memory ``device`` has (the host's RAM for the CPU), or None if unknown."""
    try:
        if device.type == "cpu":
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device).total_memory
    except (OSError, ValueError, RuntimeError, AssertionError):
        pass
    return None


def memory_problem(signature: Signature, device: torch.device) -> str | None:
    """Why ``signature``'s inputs and outputs cannot all be held on ``device`` (more bytes
    than it has memory), or None; checked before allocating, so that a command too large
    for the device is refused rather than fail inside torch or be killed by the OOM killer."""
    memory = device_memory(device)
    needed = _tensor_bytes(signature.input_specs()) + _tensor_bytes(signature.output_specs())
    if memory is None or needed <= memory:
        return None
    return (f"the tensors of {signature.func_name} take {_gigabytes(needed)} (inputs and outputs), "
            f"more than the {_gigabytes(memory)} of memory of {device}")


def _tensor_bytes(specs: Sequence[TensorSpec]) -> int:
    return sum(spec.nbytes for spec in specs)


def _gigabytes(count: int) -> str:
    return f"{count / 1e9:.3g} GB"


def _is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is torch failing to allocate (CUDA's OutOfMemoryError, the CPU
    allocator's RuntimeError)."""
    if isinstance(error, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(error, RuntimeError) and "can't allocate memory" in str(error)


def _run_backend(name: str, signature: Signature, args: Sequence[torch.Tensor], device: torch.device,
                 iterations: int, options: DriverOptions) -> BackendRun:
    run = BackendRun(signature, name)
    try:
        prepared = get_backend(name).prepare(signature, device)
        run.cache, run.lazy = prepared.cache, prepared.lazy
        run.formulation, run.passed_over = prepared.formulation, prepared.passed_over
        run.substitution = prepared.substitution
        run.compile_seconds, run.load_seconds = prepared.compile_seconds, prepared.load_seconds
        if options.timed:
            start = time.perf_counter()
            outputs = _as_tuple(prepared.call(*args))
            if prepared.lazy:
                run.compile_seconds = time.perf_counter() - start
            specs = signature.output_specs()
            if len(outputs) != len(specs):
                raise BooError(f"backend {name} returned {len(outputs)} outputs, "
                               f"{signature.func_name} has {len(specs)}")
            run.outputs = [summarize(spec.name, tensor) for spec, tensor in zip(specs, outputs, strict=True)]
            timer = timer_for(device)
            run.timing = timer(lambda: prepared.call(*args), device=device, iterations=iterations,
                               warmup=options.warmup)
        if options.verify:
            run.comparisons = _check(prepared, signature, args, options.reference_dtype)
    except BaseException as e:  # any backend failure (export, Inductor, a plugin's bug) is reported, not fatal
        if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
            raise
        run.error = error_text(e)
    return run


def _check(prepared: PreparedBackend, signature: Signature, args: Sequence[torch.Tensor],
           reference_dtype: torch.dtype) -> list[Comparison]:
    if prepared.check is not None:
        return prepared.check(args, reference_dtype)
    return check_outputs(signature, args, _as_tuple(prepared.call(*args)), reference_dtype=reference_dtype)


def _as_tuple(outputs: torch.Tensor | Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)
