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


class BooFallbackWarning(UserWarning):
    """Part of a compiled graph could not use a BOO kernel and runs on the nested backend."""
