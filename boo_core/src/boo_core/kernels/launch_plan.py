"""Launch plans: what a compiled CUDA kernel does on the device, to run it without IREE's runtime.

For static shapes IREE records a kernel's work once, as a reusable command buffer with
indirect bindings (``..._memoize_apply``), and each call binds the caller's buffers (and
transient ones it allocates) to the command buffer's slots and submits it
(``hal.device.queue.execute.indirect``). At the end of IREE's ``hal`` compilation phase
both are plain text, and the executables are CUDA FlatBuffers holding PTX. A
:class:`LaunchPlan` is that program read back: the slots, the transient buffers, the PTX
modules and kernels, and the commands (dispatches, fills, copies) in order. The runtime
(:mod:`boo_core.runtime.cuda`) replays it with ``cuLaunchKernel`` on torch's stream.

Only that shape of program is read: a kernel whose host code does anything else (several
submissions, a command buffer recorded per call, control flow, a buffer captured in the
command buffer) gets :class:`PlanUnsupported` with the reason and keeps IREE's runtime.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import CacheError
from ..files import read_bytes
from . import owned
from .cuda_executable import CudaKernel, ExecutableFormatError, read_cuda_executable, sanitize_symbol
from .integrity import integrity_key, seal, unseal

logger = logging.getLogger(__name__)

PLAN_FORMAT = 1
PLAN_FILE = "launch_plan.json"
#: No plan of a real kernel is near this (PTX modules included); a bigger file is not BOO's.
MAX_PLAN_BYTES = 256 << 20


class PlanUnsupported(ValueError):
    """The kernel's host program is not one a launch plan can replay (the message says why)."""


@dataclass(frozen=True)
class Slot:
    """One binding slot of the command buffer: a range of a call argument (``arg``, in the
    kernel's order: inputs then outputs) or of a transient buffer (``transient``)."""

    arg: int | None
    transient: int | None
    offset: int
    length: int


@dataclass(frozen=True)
class Binding:
    slot: int
    offset: int
    length: int


@dataclass(frozen=True)
class Dispatch:
    kernel: int  # index into LaunchPlan.kernels
    grid: tuple[int, int, int]
    bindings: tuple[Binding, ...]
    constants: tuple[int, ...] = ()
    op: str = "dispatch"


@dataclass(frozen=True)
class Fill:
    slot: int
    offset: int
    length: int
    pattern: int
    width: int  # bytes of the pattern: 1, 2 or 4
    op: str = "fill"


@dataclass(frozen=True)
class Copy:
    source: Binding
    target: Binding
    op: str = "copy"


Command = Dispatch | Fill | Copy


@dataclass(frozen=True)
class LaunchPlan:
    arguments: int  # tensors the kernel takes: inputs then outputs
    slots: tuple[Slot, ...]
    transients: tuple[int, ...]  # sizes in bytes
    modules: tuple[str, ...]  # PTX
    kernels: tuple[CudaKernel, ...]
    commands: tuple[Command, ...]

    def to_dict(self, kernel_sha256: str = "") -> dict[str, Any]:
        """The plan as a JSON-able object, naming the SHA-256 of the module it was read from."""
        return {"format": PLAN_FORMAT, "kernel_sha256": kernel_sha256, **asdict(self)}

    def to_json(self, kernel_sha256: str = "") -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(kernel_sha256), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, kernel_sha256: str | None = None) -> LaunchPlan:
        """The plan ``to_json`` wrote; :class:`ValueError` for anything else."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"malformed launch plan: {e}") from e
        return cls.from_dict(data, kernel_sha256)

    @classmethod
    def from_dict(cls, data: Any, kernel_sha256: str | None = None) -> LaunchPlan:
        """The plan ``to_dict`` made (for the module of ``kernel_sha256``, when given);
        :class:`ValueError` for anything else."""
        try:
            if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
                raise ValueError(f"not a launch plan of format {PLAN_FORMAT}")
            if kernel_sha256 is not None and data.get("kernel_sha256") != kernel_sha256:
                raise ValueError("the launch plan was made with another build of the kernel")
            return cls(
                arguments=int(data["arguments"]),
                slots=tuple(Slot(**s) for s in data["slots"]),
                transients=tuple(int(t) for t in data["transients"]),
                modules=tuple(str(m) for m in data["modules"]),
                kernels=tuple(CudaKernel(k["name"], int(k["module"]), tuple(k["block"]), int(k["shared_memory"]))
                              for k in data["kernels"]),
                commands=tuple(_command(c) for c in data["commands"]),
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"malformed launch plan: {e}") from e


def _command(data: dict[str, Any]) -> Command:
    data = dict(data)
    op = data.pop("op")
    if op == "dispatch":
        return Dispatch(kernel=int(data["kernel"]), grid=tuple(data["grid"]),
                        bindings=tuple(Binding(**b) for b in data["bindings"]),
                        constants=tuple(int(c) for c in data["constants"]))
    if op == "fill":
        return Fill(**data)
    if op == "copy":
        return Copy(Binding(**data["source"]), Binding(**data["target"]))
    raise ValueError(f"unknown command {op!r}")


# -- reading the hal phase's text ----------------------------------------------------------------------

_FUNC = re.compile(r"^  util\.func (public|private) @(\S+?)\((.*?)\)(?: -> [^{]*)?(?: attributes \{.*\})? \{$",
                   re.MULTILINE)
_CONSTANT = re.compile(r"^(%[\w$.-]+) = arith\.constant (-?\d+)(?: : \w+)?$")
_SSA = r"%[\w$.-]+"
_BINARY = re.compile(r'^  hal\.executable (?:public |private )?@(\S+) \{\n    hal\.executable\.binary public @(\S+) '
                     r'<format = "cuda-nvptx-fb", data = dense<"0x([0-9A-Fa-f]+)">', re.MULTILINE)
_IGNORED = ("arith.constant", "util.global.load", "hal.buffer_view.assert", "hal.buffer.assert",
            "hal.element_type", "hal.encoding_type", "hal.device.allocator", "hal.fence.create",
            "hal.memory_type", "hal.buffer_usage", "util.return", "util.null", "hal.device.queue.dealloca",
            "hal.command_buffer.create", "hal.command_buffer.execution_barrier", "hal.command_buffer.finalize",
            "hal.executable.lookup.function")


def plan_from_hal(text: str, function: str) -> LaunchPlan:
    """The launch plan of ``function`` (the kernel's name) in the MLIR IREE prints at the end
    of its ``hal`` phase (``--compile-to=hal``), compiled with the async-external model."""
    bodies = _functions(text)
    entry = bodies.get(f"{function}$async")
    if entry is None:
        raise PlanUnsupported(f"no {function}$async function (compiled without --iree-execution-model=async-external?)")
    parameters, body = entry
    arguments = parameters.count("!hal.buffer_view")
    statements = _statements(body)
    constants = _constants(statements)
    buffers: dict[str, int] = {}
    transients: dict[str, int] = {}
    loads: dict[str, str] = {}
    execute = None
    for statement in statements:
        if m := re.match(rf"({_SSA}) = hal\.buffer_view\.buffer<%arg(\d+) :", statement):
            buffers[m[1]] = int(m[2])
        elif m := re.match(rf"({_SSA}) = hal\.device\.queue\.alloca<.*: !hal\.buffer\{{({_SSA})\}}$", statement):
            transients[m[1]] = _value(constants, m[2])
        elif m := re.match(rf"({_SSA}) = util\.global\.load immutable @(\S+) : !hal\.command_buffer$", statement):
            loads[m[1]] = m[2]
        elif statement.startswith("hal.device.queue.execute.indirect<"):
            if execute is not None:
                raise PlanUnsupported("the kernel submits work more than once")
            execute = statement
        elif not _ignored(statement):
            raise PlanUnsupported(f"host code this plan cannot replay: {statement.split('<')[0][:80]}")
    if execute is None:
        raise PlanUnsupported("no reusable command buffer is submitted")
    commands_var = re.search(rf"commands\(({_SSA})\)", execute)
    if commands_var is None or commands_var[1] not in loads:
        raise PlanUnsupported("the submitted command buffer is not a memoized global")
    transient_order = list(transients)
    slots = []
    for buffer, offset, length in re.findall(rf"\(({_SSA}) : !hal\.buffer\)\[({_SSA}), ({_SSA})\]",
                                             _clause(execute, "bindings")):
        if buffer in buffers:
            slots.append(Slot(buffers[buffer], None, _value(constants, offset), _value(constants, length)))
        elif buffer in transients:
            slots.append(Slot(None, transient_order.index(buffer), _value(constants, offset),
                              _value(constants, length)))
        else:
            raise PlanUnsupported(f"slot bound to {buffer}, neither an argument nor a transient buffer")
    apply = _memoized_function(text, loads[commands_var[1]])
    if apply not in bodies:
        raise PlanUnsupported(f"no function {apply}")
    kernels, commands = _commands(_statements(bodies[apply][1]), _executables(text))
    return LaunchPlan(arguments, tuple(slots), tuple(transients[t] for t in transient_order),
                      tuple(kernels.modules), tuple(kernels.kernels), tuple(commands))


class _KernelTable:
    """Kernels and PTX modules in the order the commands first use them."""

    def __init__(self) -> None:
        self.kernels: list[CudaKernel] = []
        self.modules: list[str] = []

    def add(self, kernel: CudaKernel, modules: tuple[str, ...]) -> int:
        module = modules[kernel.module]
        if module not in self.modules:
            self.modules.append(module)
        local = CudaKernel(kernel.name, self.modules.index(module), kernel.block, kernel.shared_memory)
        if local not in self.kernels:
            self.kernels.append(local)
        return self.kernels.index(local)


def _commands(statements: list[str], executables: dict[str, Any]) -> tuple[_KernelTable, list[Command]]:
    constants = _constants(statements)
    functions: dict[str, tuple[str, str]] = {}
    table = _KernelTable()
    commands: list[Command] = []
    for statement in statements:
        if m := re.match(rf"({_SSA}) = hal\.executable\.lookup\.function .* function\(@(\S+?)::@(\S+?)::@(\S+?)\)",
                         statement):
            functions[m[1]] = (m[2], m[4])
        elif statement.startswith("hal.command_buffer.dispatch<"):
            m = re.search(rf"target\({_SSA} : !hal\.executable\)\[({_SSA})\]", statement)
            if m is None or m[1] not in functions:
                raise PlanUnsupported("a dispatch of an unknown function")
            executable, export = functions[m[1]]
            found = executables.get(executable)
            if found is None:
                raise PlanUnsupported(f"no CUDA binary for executable {executable}")
            name = sanitize_symbol(export)
            kernel = next((k for k in found.kernels if k.name == name), None)
            if kernel is None:
                raise PlanUnsupported(f"executable {executable} has no kernel {name}")
            grid = tuple(_value(constants, v) for v in re.findall(_SSA, _clause(statement, "workgroups")))
            constant_values = tuple(_value(constants, v) & 0xFFFFFFFF
                                    for v in re.findall(_SSA, _clause(statement, "constants", required=False)))
            commands.append(Dispatch(table.add(kernel, found.modules), grid, _slot_ranges(statement, constants),
                                     constant_values))
        elif statement.startswith("hal.command_buffer.fill_buffer<"):
            m = re.search(rf"target\(({_SSA}) : index\)\[({_SSA}), ({_SSA})\] pattern\(({_SSA}) : i(8|16|32)\)",
                          statement)
            if m is None:
                raise PlanUnsupported("a fill of a buffer that is not a slot")
            width = int(m[5]) // 8
            commands.append(Fill(_value(constants, m[1]), _value(constants, m[2]), _value(constants, m[3]),
                                 _value(constants, m[4]) & ((1 << (8 * width)) - 1), width))
        elif statement.startswith("hal.command_buffer.copy_buffer<"):
            m = re.search(rf"source\(({_SSA}) : index\)\[({_SSA})\] target\(({_SSA}) : index\)\[({_SSA})\] "
                          rf"length\(({_SSA})\)", statement)
            if m is None:
                raise PlanUnsupported("a copy between buffers that are not slots")
            length = _value(constants, m[5])
            commands.append(Copy(Binding(_value(constants, m[1]), _value(constants, m[2]), length),
                                 Binding(_value(constants, m[3]), _value(constants, m[4]), length)))
        elif not _ignored(statement):
            raise PlanUnsupported(f"a command this plan cannot replay: {statement.split('<')[0][:80]}")
    if not commands:
        raise PlanUnsupported("the command buffer records nothing")
    return table, commands


def _slot_ranges(statement: str, constants: dict[str, int]) -> tuple[Binding, ...]:
    bindings = _clause(statement, "bindings")
    ranges = re.findall(rf"\(({_SSA}) : (\S+?)\)\[({_SSA}), ({_SSA})\]", bindings)
    if any(kind != "index" for _, kind, _, _ in ranges):
        raise PlanUnsupported("a dispatch binds a buffer captured in the command buffer")
    return tuple(Binding(_value(constants, s), _value(constants, o), _value(constants, n)) for s, _, o, n in ranges)


def _executables(text: str) -> dict[str, Any]:
    found = {}
    for m in _BINARY.finditer(text):
        try:
            found[m[1]] = read_cuda_executable(bytes.fromhex(m[3]))
        except ExecutableFormatError as e:
            raise PlanUnsupported(f"executable {m[1]}: {e}") from e
    return found


def _memoized_function(text: str, global_name: str) -> str:
    """The function whose result the initializer stores into ``global_name``."""
    m = re.search(rf"(%[\w$.-]+) = util\.call @(\S+)\(\) : \(\) -> !hal\.command_buffer\n\s*"
                  rf"util\.global\.store \1, @{re.escape(global_name)} :", text)
    if m is None:
        raise PlanUnsupported(f"no initializer records the command buffer {global_name}")
    return m[2]


def _functions(text: str) -> dict[str, tuple[str, str]]:
    """Each function's parameters and body, by name (IREE prints functions two spaces in
    and closes them with ``  }`` alone on a line)."""
    found = {}
    for m in _FUNC.finditer(text):
        end = text.find("\n  }\n", m.end())
        found[m[2]] = (m[3], text[m.end():end if end >= 0 else len(text)])
    return found


def _statements(body: str) -> list[str]:
    """The body's operations, one string each (continuation lines joined), comments dropped."""
    statements: list[str] = []
    for line in body.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        if line.startswith("    ") and not line.startswith("     ") and not stripped.startswith(("]", ")")):
            statements.append(stripped)
        elif line.startswith("  ^") or stripped.startswith("^"):
            raise PlanUnsupported("the host code has control flow")
        elif statements:
            statements[-1] += " " + stripped
    return statements


def _constants(statements: list[str]) -> dict[str, int]:
    return {m[1]: int(m[2]) for s in statements if (m := _CONSTANT.match(s))}


def _value(constants: dict[str, int], name: str) -> int:
    if name not in constants:
        raise PlanUnsupported(f"{name} is not a constant (a dynamic size?)")
    return constants[name]


def _clause(statement: str, name: str, *, required: bool = True) -> str:
    """The text inside ``name([...])`` in ``statement``."""
    start = statement.find(f"{name}([")
    if start < 0:
        if required:
            raise PlanUnsupported(f"no {name} in {statement[:60]}")
        return ""
    end = statement.find("])", start)
    return statement[start + len(name) + 2:end]


def _ignored(statement: str) -> bool:
    operation = statement.split(" = ", 1)[1] if re.match(rf"{_SSA}(?:, {_SSA})* = ", statement) else statement
    return operation.startswith(_IGNORED)


# -- in a cache entry ---------------------------------------------------------------------------------

HAL_PHASE_FLAG = "--dump-compilation-phases-to"


def hal_phase_text(directory: Path) -> str | None:
    """The hal phase's MLIR that ``--dump-compilation-phases-to=directory`` left there."""
    found = sorted(directory.glob("*.hal.mlir"))
    return found[0].read_text() if found else None


def write_plan(directory: Path, hal_text: str | None, function: str, kernel: bytes) -> str:
    """Read the plan of ``function`` from the hal phase's text and save it in the cache entry
    at ``directory`` for the module ``kernel``, or why there is none, sealed under the
    cache's integrity key; returns that reason ("" when a plan was saved). A write that
    fails is only logged: the plan is optional."""
    digest = hashlib.sha256(kernel).hexdigest()
    try:
        if hal_text is None:
            raise PlanUnsupported("iree-compile wrote no hal phase")
        data, reason = plan_from_hal(hal_text, function).to_dict(digest), ""
    except PlanUnsupported as e:
        reason = str(e)
        data = {"format": PLAN_FORMAT, "kernel_sha256": digest, "unsupported": reason}
    try:
        secret = integrity_key(directory.parent, create=True) or b""
        owned.write(directory.parent, directory / PLAN_FILE, json.dumps(seal(secret, plan_purpose(digest), data),
                                                                        sort_keys=True))
    except (OSError, CacheError) as e:  # CacheUnwritable is one; CacheUntrusted: a key that is not ours
        logger.info("%s: launch plan not saved in %s: %s", function, directory, e)
    return reason


def plan_purpose(kernel_sha256: str) -> str:
    """What a launch plan's seal is for: the plan of the module of this SHA-256."""
    return f"launch plan {kernel_sha256}"


def read_plan(directory: Path, kernel: bytes) -> LaunchPlan | str | None:
    """What the entry at ``directory`` says about launching the module ``kernel``: its plan,
    the reason it has none (a string), or None when it says nothing valid for this module
    sealed under the cache's key (a plan decides which code runs on which memory: one
    someone else wrote is never launched)."""
    digest = hashlib.sha256(kernel).hexdigest()
    try:
        sealed = json.loads(read_bytes(directory / PLAN_FILE, MAX_PLAN_BYTES, what="launch plan",
                                       follow_symlinks=False))
        data = unseal(integrity_key(directory.parent), plan_purpose(digest), sealed)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if data is None:
        if isinstance(sealed, dict):
            logger.warning("cache entry %s: its launch plan is not sealed by this cache's key for this kernel; "
                           "it is not used", directory.name)
        return None
    if data.get("kernel_sha256") == digest and isinstance(data.get("unsupported"), str):
        return data["unsupported"]
    try:
        return LaunchPlan.from_dict(data, digest)
    except ValueError:
        return None


def plan_for_entry(directory: Path, kernel: bytes, function: str) -> LaunchPlan | str:
    """The entry's plan, or why there is none (a string). A plan is made only when the
    kernel is compiled: one missing or not sealed by this cache is not remade from the
    entry's files (they may be someone else's), and IREE's runtime runs the kernel."""
    found = read_plan(directory, kernel)
    if found is not None:
        return found
    return (f"the cache entry has no launch plan sealed by this cache for {function} (plans are made when a kernel "
            "is compiled: `boo cache clear` and a new compile make one)")
