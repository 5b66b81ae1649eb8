"""Every BOO setting, declared once: its environment variable, type, default and meaning.

:data:`SETTINGS` is the one registry. :class:`Settings` (a snapshot) has one field per row,
:func:`configure` changes any of them from Python, and the README's settings table is
:func:`markdown_table`'s output (a test keeps the two equal). The environment is read on
first use, never at import; a bad value is an error naming the variable.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import BooError


class SettingError(BooError, ValueError):
    """A setting has a value BOO cannot use; the message names the variable."""


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base).absolute() / "boo"


# -- value parsers: text from the environment -> value; ValueError with a short reason -------

def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 0 or 1")


def _path(text: str | os.PathLike[str]) -> Path:
    """``~`` or ``~user`` expanded, made absolute: a relative path starting with ``-`` would
    read as an option to the tools BOO passes it to (iree-compile)."""
    path = Path(text)
    try:
        path = path.expanduser()
    except RuntimeError:  # ~user of no such user, or ~ without a home directory
        raise ValueError(f"cannot expand {path.parts[0]}: no such user or home directory") from None
    return path.absolute()


def _optional_path(text: str) -> Path | None:
    return _path(text) if text.strip() else None


def _flags(text: str) -> tuple[str, ...]:
    """Options added to iree-compile's command line: each must start with ``-`` (a word
    that does not would be read as an input file, an empty one too)."""
    try:
        flags = tuple(shlex.split(text))
    except ValueError as e:
        raise ValueError(f"cannot split into flags: {e}") from None
    for flag in flags:
        if not flag.startswith("-") or flag in ("-", "--"):
            raise ValueError(f"{flag!r} is not an option (each flag starts with -, its value after =: "
                             "--iree-opt-level=O3)")
    return flags


def _names(text: str) -> frozenset[str]:
    return frozenset(name.strip() for name in text.split(",") if name.strip())


def _name_set(value: str | Iterable[str]) -> frozenset[str]:
    """Names given as comma-separated text or as any collection of names."""
    return _names(value) if isinstance(value, str) else frozenset(value)


#: The ops whose gradients ``BOO_USE_BACKWARD_KERNELS=auto`` puts on BOO's kernels, by device
#: type: those whose gradient kernels made whole training steps faster than the nested
#: backend's (docs/architecture.md, "Which gradients run on BOO by default").
AUTO_BACKWARD_OPS: dict[str, frozenset[str]] = {"cuda": frozenset({"bnorm"})}


def _backward_ops(value: str | bool | Iterable[str]) -> bool | str | frozenset[str]:
    """``0``/``1`` (no op's or every op's backward kernels), ``auto`` (:data:`AUTO_BACKWARD_OPS`
    on each device), or the ops whose backward kernels run, by op name, comma-separated
    (``bnorm,layernorm``) or as a collection."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if isinstance(value, str):
        try:
            return _boolean(value)
        except ValueError:
            names = _names(value)
    else:
        names = frozenset(value)
    if not names or not all(name.replace("_", "").isalnum() for name in names):
        raise ValueError("expected 0, 1, auto or op names separated by commas (bnorm,layernorm)")
    return names


def _text_or_none(text: str) -> str | None:
    return text.strip() or None


def _user(text: str) -> int | None:
    """A user name or uid -> the uid (``""``: None)."""
    value = text.strip()
    if not value:
        return None
    if value.isdigit():
        return int(value)
    try:
        import pwd

        return pwd.getpwnam(value).pw_uid
    except (ImportError, KeyError):
        raise ValueError(f"no user {value!r} on this machine") from None


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("expected a positive number of seconds")
    return value


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower() or choices[0]
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value

    return parse


def _verify(text: str) -> str:
    """``auto`` (GPUs only), ``1``/``all`` (every device) or ``0``/``off``."""
    value = text.strip().lower()
    if value in ("", "auto", "gpu"):
        return "auto"
    if value in ("1", "true", "yes", "on", "all"):
        return "all"
    if value in ("0", "false", "no", "off"):
        return "off"
    raise ValueError("expected auto, 1 or 0")


def _auto_switch(value: str | bool) -> str:
    """A GPU-only default: ``auto`` (on GPUs), ``all`` (every device) or ``off``; also a bool."""
    return _verify({True: "1", False: "0"}.get(value, value) if isinstance(value, bool) else str(value))


@dataclass(frozen=True)
class Setting:
    """One row of the registry: ``Settings.<name>`` is read from ``$<env>``."""

    name: str
    env: str
    parse: Callable[[str], Any]
    default: Callable[[], Any]
    shown_default: str
    doc: str
    #: Whether the setting can change which kernel serves a signature, or how it runs (its
    #: value is then part of every in-memory launchable's key: :meth:`Settings.kernel_key`).
    #: Declared for each setting, so a new one cannot be left out of the key by accident.
    selects_kernel: bool = dataclasses.field(kw_only=True)

    def from_environment(self) -> Any:
        raw = os.environ.get(self.env)
        if raw is None or (raw.strip() == "" and self.parse is not _text_or_none):
            return self.default()
        try:
            return self.parse(raw)
        except ValueError as e:
            raise SettingError(f"{self.env}={raw!r}: {e}") from None


def _const(value: Any) -> Callable[[], Any]:
    return lambda: value


SETTINGS: tuple[Setting, ...] = (
    Setting("cache_enabled", "BOO_CACHE_ON", _boolean, _const(True), "`1`",
            "keep compiled kernels on disk (`0`: in memory, this process only)", selects_kernel=True),
    Setting("cache_dir", "BOO_CACHE_DIR", _path, _default_cache_dir, "`~/.cache/boo`",
            "where the cache lives (`$XDG_CACHE_HOME/boo` if set); a shared one that other users can write must "
            "be sticky (`chmod +t`), or BOO compiles in memory (docs/architecture.md, threat model)",
            selects_kernel=True),
    Setting("cache_owner", "BOO_CACHE_OWNER", _user, _const(None), "you",
            "the user (name or uid) whose integrity key a shared cache holds: this process then uses entries that "
            "user signed, read-only (docs/architecture.md, \"Threat model\")", selects_kernel=True),
    Setting("extra_compile_flags", "BOO_EXTRA_COMPILE_FLAGS", _flags, _const(()), "empty",
            "iree-compile flags added to every kernel (part of the cache key)", selects_kernel=True),
    Setting("tuning_spec", "BOO_TUNING_SPEC_PATH", _optional_path, _const(None), "empty",
            "an IREE transform-dialect tuning spec applied to every compile (its content is part of the cache key)",
            selects_kernel=True),
    Setting("compile_timeout", "BOO_COMPILE_TIMEOUT", _seconds, _const(900.0), "`900`",
            "seconds one iree-compile may take before it is stopped and reported", selects_kernel=True),
    Setting("compile_threading", "BOO_COMPILE_THREADING", _boolean, _const(True), "`1`",
            "`0`: each iree-compile runs on one thread (`--mlir-disable-threading`; the kernel is byte for byte the "
            "same), for machines that run a compile per core at once: `boo preload -j` does so by itself",
            selects_kernel=False),
    Setting("lock_timeout", "BOO_LOCK_TIMEOUT", _seconds, _const(1200.0), "`1200`",
            "seconds to wait for another process compiling the same kernel before compiling it in memory (a stopped "
            "holder is given up on after 5 s)", selects_kernel=False),
    Setting("cpu_driver", "BOO_CPU_DRIVER", _choice("auto", "local-sync", "local-task"), _const("auto"), "`auto`",
            "`local-sync` (inline), `local-task` (threads), or `auto`: small kernels inline", selects_kernel=True),
    Setting("cuda_target", "BOO_CUDA_TARGET", _text_or_none, _const(None), "from the GPU",
            "IREE CUDA target (`sm_80`, `sm_89`...); `get_launchable(..., target=)` per call", selects_kernel=True),
    Setting("cuda_launch", "BOO_CUDA_LAUNCH", _choice("direct", "iree"), _const("direct"), "`direct`",
            "`direct`: CUDA kernels launched on torch's current stream, no host wait (CUDA-graph capturable); "
            "`iree`: through IREE's runtime, which waits on the host (a kernel with no launch plan always does)",
            selects_kernel=True),
    Setting("cuda_graph_replay", "BOO_CUDA_GRAPH_REPLAY", _boolean, _const(True), "`1`",
            "`1`: a direct launch of several commands is recorded as a CUDA graph and relaunched as one where its "
            "buffers repeat (docs/gpu.md); `0`: command by command", selects_kernel=True),
    Setting("use_backward_kernels", "BOO_USE_BACKWARD_KERNELS", _backward_ops, _const("auto"), "`auto`",
            "`1`: gradients (autograd and torch.compile backward graphs) on BOO kernels; `0`: on PyTorch's (or the "
            "nested backend's); op names, comma-separated (`bnorm,layernorm`): those ops' gradients only (`boo ops` "
            "lists the names); `auto`: on CUDA the channels-last batch norms' (measured faster in whole training "
            "steps, channels-first ones slower: docs/architecture.md), elsewhere none", selects_kernel=False),
    Setting("graph_rewrites", "BOO_GRAPH_REWRITES", _auto_switch, _const("auto"), "`auto`",
            "torch.compile applies the plugins' graph rewrites before matching (an inference batch norm folded "
            "into a 1-D or 3-D convolution before it, or one whose statistics have another dtype than the data; "
            "a 2-D conv + batch norm is one CBAInfer kernel instead; a channels-first network's convolutions given "
            "channels-last operands, which its activations then keep): `auto` in graphs on GPUs, `1` on every "
            "device, `0` never; the rewrites of a training step's joint graph, which change no value (a "
            "training batch norm's gradient without the running statistics), apply on every device unless `0` "
            "(measured: docs/plugins.md, Graph rewrites)",
            selects_kernel=False),
    Setting("verify", "BOO_VERIFY", _verify, _const("auto"), "`auto`",
            "check each kernel against PyTorch on first use per device model, verdict kept in the cache: "
            "`auto` on GPUs, `1` on every device, `0` never (unsafe: a GPU kernel IREE miscompiled then runs)",
            selects_kernel=True),
    Setting("substitutions", "BOO_SUBSTITUTIONS", _optional_path, _const(None), "empty",
            "a directory of replacement executables: `<target>/<func_name>/{sources,configurations,binaries}/"
            "<executable>.<ext>` (docs/cli.md); their content is part of the cache key, and substituted kernels "
            "are always verified", selects_kernel=True),
    Setting("use_tuned", "BOO_USE_TUNED", _boolean, _const(True), "`1`",
            "`0`: ignore the tuning database (`boo tune` results: the winners, and where PyTorch's kernel won, "
            "torch.compile leaving the node to PyTorch)", selects_kernel=True),
    Setting("compile_strict", "BOO_COMPILE_STRICT", _boolean, _const(False), "`0`",
            "`1`: in torch.compile, a kernel BOO cannot compile or run is an error, not a fallback",
            selects_kernel=False),
    Setting("strict_plugins", "BOO_STRICT_PLUGINS", _boolean, _const(False), "`0`",
            "`1`: a plugin that fails to load is an error, not a warning", selects_kernel=False),
    Setting("plugin_autoload", "BOO_DISABLE_PLUGIN_AUTOLOAD", lambda t: not _boolean(t), _const(True), "`0`",
            "`1`: load no entry points; register plugins with `BooOpRegistry.register_plugin`", selects_kernel=False),
    Setting("disabled_plugins", "BOO_DISABLE_PLUGINS", _names, _const(frozenset()), "empty",
            "comma-separated plugin (entry-point) names to skip", selects_kernel=False),
    Setting("loaded_plugins", "BOO_LOAD_PLUGINS", lambda t: _names(t) or None, _const(None), "empty",
            "comma-separated plugin (entry-point) names: load only these (empty: every installed one); "
            "`BOO_DISABLE_PLUGINS` still skips", selects_kernel=False),
    Setting("worker", "BOO_WORKER", _boolean, _const(True), "`1`",
            "`1`: kernels are verified and tuned in a worker process, so one that crashes or hangs fails its check "
            "instead of ending the caller (docs/architecture.md, \"Candidate kernels run in a worker\"); `0`: in "
            "the calling process", selects_kernel=False),
    Setting("worker_timeout", "BOO_WORKER_TIMEOUT", _seconds, _const(600.0), "`600`",
            "seconds the worker process may take over one kernel's check (and timing) before it is stopped and the "
            "kernel fails", selects_kernel=False),
    Setting("worker_idle", "BOO_WORKER_IDLE", _seconds, _const(60.0), "`60`",
            "seconds the worker process waits for the next kernel before it exits, freeing its GPU memory (it also "
            "exits with its caller); a later check starts a new one", selects_kernel=False),
    Setting("trace_hooks", "BOO_TRACE_HOOKS", _boolean, _const(False), "`0`",
            "`1`: log every hook call (pluggy's tracing) at debug level on logger `boo_core.plugins`",
            selects_kernel=False),
)

_BY_NAME = {s.name: s for s in SETTINGS}

_NORMALIZE: dict[str, Callable[[Any], Any]] = {
    "cache_dir": _path,
    "tuning_spec": lambda v: None if v is None else _path(v),
    "substitutions": lambda v: None if v is None else _path(v),
    "extra_compile_flags": lambda v: _flags(v if isinstance(v, str) else shlex.join(map(str, v))),
    "disabled_plugins": _name_set,
    "loaded_plugins": lambda v: None if v is None else _name_set(v) or None,
    "verify": _auto_switch,
    "use_backward_kernels": _backward_ops,
    "graph_rewrites": _auto_switch,
    "compile_timeout": float,
    "lock_timeout": float,
    "worker_timeout": float,
    "worker_idle": float,
    "cache_owner": lambda v: _user(str(v)) if v is not None else None,
}


@dataclass(frozen=True)
class Settings:
    """A snapshot of every setting (one field per row of :data:`SETTINGS`)."""

    cache_enabled: bool = True
    cache_dir: Path = dataclasses.field(default_factory=_default_cache_dir)
    cache_owner: int | None = None
    extra_compile_flags: tuple[str, ...] = ()
    tuning_spec: Path | None = None
    compile_timeout: float = 900.0
    compile_threading: bool = True
    lock_timeout: float = 1200.0
    cpu_driver: str = "auto"
    cuda_target: str | None = None
    cuda_launch: str = "direct"
    cuda_graph_replay: bool = True
    use_backward_kernels: bool | str | frozenset[str] = "auto"
    graph_rewrites: str = "auto"
    verify: str = "auto"
    substitutions: Path | None = None
    use_tuned: bool = True
    compile_strict: bool = False
    strict_plugins: bool = False
    plugin_autoload: bool = True
    disabled_plugins: frozenset[str] = frozenset()
    loaded_plugins: frozenset[str] | None = None
    worker: bool = True
    worker_timeout: float = 600.0
    worker_idle: float = 60.0
    trace_hooks: bool = False

    @classmethod
    def from_environment(cls) -> Settings:
        return cls(**{s.name: s.from_environment() for s in SETTINGS})

    def kernel_key(self) -> tuple[Any, ...]:
        """The values of the settings that select kernels (``Setting.selects_kernel``): what
        an in-memory launchable's key holds of the settings."""
        return tuple(getattr(self, setting.name) for setting in SETTINGS if setting.selects_kernel)

    def backward_ops(self, device_type: str | None) -> bool | frozenset[str]:
        """``BOO_USE_BACKWARD_KERNELS`` for tensors on ``device_type``: every op's gradients
        (True), none (False) or those ops'; ``auto`` is :data:`AUTO_BACKWARD_OPS`'s for the
        device (none where the device is not known)."""
        choice = self.use_backward_kernels
        if choice == "auto":
            return AUTO_BACKWARD_OPS.get(device_type or "", frozenset()) or False
        return choice

    def backward_kernels_for(self, op_name: str, device_type: str | None = None) -> bool:
        """Whether gradients of op ``op_name`` on ``device_type`` run on BOO kernels
        (``BOO_USE_BACKWARD_KERNELS``); the op registry's
        :meth:`~boo_core.OpRegistry.backward_kernels_for` also checks that every op the
        setting names is registered."""
        choice = self.backward_ops(device_type)
        return choice if isinstance(choice, bool) else op_name in choice

    def verifies(self, device_type: str) -> bool:
        """Whether kernels are verified on first use on a device of ``device_type``."""
        return _switched_on(self.verify, device_type)

    def rewrites_graphs(self, device_type: str) -> bool:
        """Whether torch.compile applies graph rewrites to a graph on ``device_type``."""
        return _switched_on(self.graph_rewrites, device_type)

    def rewrites_joint_graphs(self) -> bool:
        """Whether torch.compile applies joint rewrites (what a training forward saves, no
        value changed) to a training step: on every device unless the switch is off."""
        return self.graph_rewrites != "off"


def _switched_on(switch: str, device_type: str) -> bool:
    """A GPU-only switch's value (:func:`_auto_switch`) for a device of ``device_type``."""
    return switch == "all" or (switch == "auto" and device_type != "cpu")


_lock = threading.Lock()
_current: Settings | None = None


def get_settings() -> Settings:
    """The current settings (the environment is read on the first call)."""
    global _current
    current = _current
    if current is None:
        with _lock:
            if _current is None:
                _current = Settings.from_environment()
            current = _current
    return current


def configure(**changes: object) -> Settings:
    """Change settings from Python: keyword names are :class:`Settings` fields (every
    setting of :data:`SETTINGS`); the others keep their value. Launchables already built
    keep working; new ones use the new settings."""
    global _current
    unknown = sorted(set(changes) - set(_BY_NAME))
    if unknown:
        raise TypeError(f"configure() got unknown settings {unknown}; known: {sorted(_BY_NAME)}")
    normalized = {}
    for name, value in changes.items():
        try:
            normalized[name] = _NORMALIZE.get(name, lambda v: v)(value)
        except ValueError as e:
            raise SettingError(f"configure({name}={value!r}): {e}") from None
    with _lock:
        base = _current if _current is not None else Settings.from_environment()
        _current = dataclasses.replace(base, **normalized)
        return _current


def reload_from_environment() -> Settings:
    """Forget Python-side changes and read the environment again."""
    global _current
    with _lock:
        _current = Settings.from_environment()
        return _current


@contextmanager
def settings_override(**changes: object) -> Iterator[Settings]:
    """Temporarily :func:`configure` (restores the previous settings on exit)."""
    global _current
    previous = get_settings()
    try:
        yield configure(**changes)
    finally:
        with _lock:
            _current = previous


def markdown_table() -> str:
    """The README's settings table."""
    lines = ["| environment | `configure()` | default | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| `{s.env}` | `{s.name}` | {s.shown_default} | {s.doc} |" for s in SETTINGS]
    return "\n".join(lines)


def use_settings(settings: Settings) -> None:
    """Make ``settings`` the current settings as they are (a snapshot taken in another
    process: BOO's worker process runs under its caller's)."""
    global _current
    if not isinstance(settings, Settings):
        raise TypeError(f"use_settings() takes a Settings, got {type(settings).__name__}")
    with _lock:
        _current = settings
