"""Exception types raised by BOO.

Every error BOO raises on purpose derives from :class:`BooError`, so callers can catch the
family; each subclass also derives from the builtin type a Python user would expect.
"""

from __future__ import annotations


class BooError(Exception):
    """Base class of every error BOO raises on purpose."""


class CommandError(BooError, ValueError):
    """A command line is malformed: unknown op or flag, missing or bad value.

    ``flag`` names the flag at fault (``"-n/--batchsize"``) when there is one.
    """

    def __init__(self, message: str, *, flag: str | None = None, command: str | None = None):
        super().__init__(message)
        self.flag = flag
        self.command = command


class UnknownOpError(CommandError):
    """No installed op claims the command's base argument."""


class UnsupportedError(BooError, ValueError):
    """A well-formed request asks for something BOO does not support (yet).

    ``flag`` names the flag at fault when the request came from a command line.
    """

    def __init__(self, message: str, *, flag: str | None = None):
        super().__init__(message)
        self.flag = flag


class PluginError(BooError):
    """A plugin failed to load or register, or two plugins claim the same thing."""


class PluginExit(Exception):
    """Plugin code raised what is not an ``Exception`` (``SystemExit`` from ``sys.exit()``,
    ``GeneratorExit``, a ``BaseException`` of its own): the plugin's failure, handled like
    any exception of its, never the end of the process. The message says what the plugin
    did; the original is the cause. Not a :class:`BooError`: BOO reports it as the plugin's."""


def is_plugins_failure(error: BaseException) -> bool:
    """Whether ``error``, raised by plugin code, is the plugin's to answer for: everything
    (``sys.exit()`` included) except a ``KeyboardInterrupt``, which is the user's Ctrl-C."""
    return not isinstance(error, KeyboardInterrupt)


def describe_error(error: BaseException) -> str:
    """What plugin code did, for messages: ``RuntimeError: boom``, ``called sys.exit(3)``."""
    if isinstance(error, SystemExit):
        return f"called sys.exit({'' if error.code is None else repr(error.code)})"
    if isinstance(error, PluginExit):
        return str(error)
    return f"{type(error).__name__}: {error}"


class CompileError(BooError):
    """A kernel could not be built. The message carries the reproducer: MLIR path, command
    and, once recorded in the cache, the compiler's log.

    ``recordable``: the failure is a property of the key (the compiler rejected it), not of
    this attempt (a timeout, no compiler installed), so the cache may remember it.
    """

    def __init__(self, message: str, *, mlir_path: str | None = None, command: str | None = None,
                 log_path: str | None = None, recordable: bool = False):
        super().__init__(message)
        self.mlir_path = mlir_path
        self.command = command
        self.log_path = log_path
        self.recordable = recordable


class SubstitutionError(CompileError):
    """Executables given to replace a kernel's own cannot be used: a missing or misnamed
    file, a file the compiler rejects, or a kernel that failed verification. The message
    names the file (or the verdict). Never recorded as the key's compile failure: the
    same check runs again, and fails the same way, until the files change."""


class ArgumentError(BooError, ValueError):
    """A tensor passed to a launchable does not match its signature."""


class LaunchError(BooError, RuntimeError):
    """A kernel failed while running on its device."""


class KernelLoadError(BooError, RuntimeError):
    """A compiled kernel the device's runtime refuses to load, rebuilt once and refused
    again (compiled for another target, or a substituted executable the device rejects)."""


class DeviceError(BooError, RuntimeError):
    """A device string cannot be used: unknown, absent, or not targetable by IREE."""


class CacheError(BooError):
    """The cache cannot be used as asked (a lock not obtained in time, say)."""


class CacheUnwritable(CacheError, OSError):
    """The cache directory cannot be written (read-only, full, not a directory, or an entry
    whose lock cannot be had): BOO compiles in memory instead, with a warning."""


class CacheUntrusted(CacheError):
    """The cache's integrity key is not this user's alone (another user made it, can read
    it or can write it): anything signed with it may be someone else's, so the cache is
    refused. The message names the file, its owner or mode, and what to do."""


class BooCacheWarning(UserWarning):
    """The kernel cache could not be used as configured; BOO went on without it."""


class BooFallbackWarning(UserWarning):
    """Part of a compiled graph could not use a BOO kernel and runs on the nested backend."""
