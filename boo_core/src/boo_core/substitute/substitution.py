"""Substitutions: replacement executables for one kernel, and what identifies them.

A substitution is a set of files laid out like a kernel's dump (``boo dump``), each named
after the ``hal.executable`` it replaces (IREE's naming)::

    sources/<executable>.mlir          replaces the executable before IREE configures it
    configurations/<executable>.mlir   ... after configuration (the lowering config chosen)
    binaries/<executable>.<ext>        ... after translation: an object (.ptx, .cubin...)
    anything else                      support files (objects a source refers to)

The files' content identifies it in cache keys (:attr:`Substitution.digest`), never their
path. A plugin that builds its files only when a kernel is compiled (a kernel library
running nvcc) gives a ``build`` function and a ``key`` that determines what it builds.

A kernel library may also bring the module its kernel runs in: a
:class:`~boo_core.Formulation` of its own (MLIR in BOO's calling convention) in place of the
name of one of the op's, for a kernel that needs what no formulation of the op gives it (a
workspace, counters zeroed before each launch: ``hal.dispatch.extern`` with the library's
object). Its files may then be only the objects that module names (no executable of IREE's
is replaced); the module's MLIR is hashed into the kernel's cache key.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from ..errors import SubstitutionError, describe_error, is_plugins_failure
from ..files import MAX_KERNEL_FILE_BYTES, FileRefused, read_bytes
from ..kernels.formulation import Formulation
from .build import build
from .stages import STAGES

if TYPE_CHECKING:
    from .executables import KernelExecutables

Files = Mapping[str, bytes]
Builder = Callable[["KernelExecutables"], Mapping[str, "bytes | str"]]


def _check_path(name: str, where: str) -> str:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or name != path.as_posix():
        raise SubstitutionError(f"{where}: file name {name!r} must be a relative path inside the substitution "
                                "(like sources/<executable>.mlir)")
    return name


def _as_bytes(files: Mapping[str, bytes | str], where: str, replaces: bool = True) -> dict[str, bytes]:
    if not isinstance(files, Mapping):
        raise SubstitutionError(f"{where}: files must be a mapping of relative paths to bytes or str, "
                                f"got {type(files).__name__}")
    result = {}
    for name, content in files.items():
        if not isinstance(name, str) or not isinstance(content, (bytes, str)):
            raise SubstitutionError(f"{where}: file {name!r} must map a str path to bytes or str content")
        result[_check_path(name, where)] = content.encode() if isinstance(content, str) else bytes(content)
    if replaces and not any(PurePosixPath(n).parts[0] in STAGES and len(PurePosixPath(n).parts) == 2 for n in result):
        raise SubstitutionError(f"{where}: no file replaces an executable: put files in "
                                f"{', '.join(f'{s}/' for s in STAGES)} named <executable>.<ext>")
    return result


def files_digest(files: Mapping[str, bytes]) -> str:
    """SHA-256 over every file's relative path and content."""
    listing = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}
    return hashlib.sha256(json.dumps(listing, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True, eq=False)
class Substitution:
    """Replacement executables for one kernel (module docstring).

    Give ``files`` (relative path -> content), or ``build`` and ``key``: ``build`` is called
    with the kernel's executables (:class:`~boo_core.substitute.executables.KernelExecutables`)
    only when the kernel is compiled, and returns the files; ``key`` is a string that
    determines them (a generator's version, its parameters), hashed into the cache key.
    ``formulation`` names the op formulation whose executables the files replace (default:
    the first that compiles), or is a formulation of the substitution's own (module
    docstring). ``origin`` is ``user`` or the plugin that supplied it;
    ``location`` is the directory the files were read from, for messages.
    """

    name: str
    files: Files | None = field(default=None, repr=False)
    build: Builder | None = field(default=None, repr=False)
    key: str | None = None
    formulation: str | Formulation | None = None
    origin: str = "user"
    location: Path | None = None

    def __post_init__(self) -> None:
        where = f"substitution {self.name!r}"
        if not isinstance(self.name, str) or not self.name.strip():
            raise SubstitutionError("a substitution needs a non-empty name")
        if (self.files is None) == (self.build is None):
            raise SubstitutionError(f"{where}: give files, or build and key (not both)")
        if self.build is not None and not (isinstance(self.key, str) and self.key):
            raise SubstitutionError(f"{where}: a substitution built on demand needs a key (a str that "
                                    "determines what build returns)")
        if self.formulation is not None and not isinstance(self.formulation, (str, Formulation)):
            raise SubstitutionError(f"{where}: formulation must be a formulation's name or a Formulation, "
                                    f"not {type(self.formulation).__name__}")
        if self.own_formulation is not None:
            if self.own_formulation.mlir is None:
                raise SubstitutionError(f"{where}: a formulation a substitution brings must give its MLIR (mlir=), "
                                        "which the kernel's cache key holds")
            _ = self._module_digest  # made here, in the plugin's hook, where its failure is the plugin's
        if self.files is not None:
            object.__setattr__(self, "files", _as_bytes(self.files, where, self.own_formulation is None))

    @classmethod
    def from_directory(cls, directory: str | Path, *, name: str | None = None,
                       formulation: str | None = None) -> Substitution:
        """Read every file under ``directory`` (hidden files skipped)."""
        root = Path(directory).expanduser()
        if not root.is_dir():
            raise SubstitutionError(f"substitution directory {root} does not exist or is not a directory")
        files = {}
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root)
            if any(part.startswith(".") for part in relative.parts) or path.is_dir():
                continue
            try:  # a FIFO, a device or a huge file is refused, naming it, before it is read
                files[relative.as_posix()] = read_bytes(path, MAX_KERNEL_FILE_BYTES, what="substitution file")
            except FileRefused as e:
                raise SubstitutionError(str(e)) from None
            except OSError as e:
                raise SubstitutionError(f"substitution file {path} cannot be read: {e.strerror or e}") from None
        label = name or root.name
        try:
            return cls(label, files, formulation=formulation, location=root)
        except SubstitutionError as e:
            raise SubstitutionError(str(e).replace(f"substitution {label!r}", f"substitution {root}")) from None

    @property
    def formulation_name(self) -> str | None:
        """The name of the formulation whose module the files complete (None: the first that compiles)."""
        return self.formulation.name if isinstance(self.formulation, Formulation) else self.formulation

    @property
    def own_formulation(self) -> Formulation | None:
        """The formulation the substitution brings (module docstring), if it brings one."""
        return self.formulation if isinstance(self.formulation, Formulation) else None

    @property
    def label(self) -> str:
        """How tools show it: the name, and the plugin that supplied it."""
        return self.name if self.origin == "user" else f"{self.name} (from {self.origin})"

    @functools.cached_property
    def digest(self) -> str:
        """What identifies the substitution in cache keys: the files' content, or the
        ``key`` of one built on demand."""
        if self.files is not None:
            return files_digest(self.files)
        return hashlib.sha256(f"built:{self.key}".encode()).hexdigest()

    def key_material(self) -> dict[str, Any]:
        """The cache-key entry: digest, origin (a plugin's version included), the
        formulation it applies to. Not the name or the location: the same files anywhere
        are the same kernel."""
        material = {"digest": self.digest, "origin": self.origin, "formulation": self.formulation_name}
        if self.own_formulation is not None:
            material["module"] = self._module_digest
        return material

    @functools.cached_property
    def _module_digest(self) -> str:
        """SHA-256 of the MLIR of the formulation it brings (made once: a library's text)."""
        try:
            text = self.own_formulation.mlir()  # type: ignore[union-attr]
        except Exception as e:
            raise SubstitutionError(f"substitution {self.name!r}: its formulation's mlir() failed: "
                                    f"{describe_error(e)}") from e
        if not isinstance(text, str):
            raise SubstitutionError(f"substitution {self.name!r}: its formulation's mlir() returned "
                                    f"{type(text).__name__}, not str")
        return hashlib.sha256(text.encode()).hexdigest()

    def materialize(self, executables: KernelExecutables) -> dict[str, bytes]:
        """The files (calling ``build`` when the substitution is built on demand)."""
        if self.files is not None:
            return dict(self.files)
        try:
            built = self.build(executables)  # type: ignore[misc]
        except SubstitutionError:
            raise
        except BaseException as e:  # a library's generator calling sys.exit() fails this kernel, not the process
            if not is_plugins_failure(e):
                raise
            raise SubstitutionError(f"substitution {self.label}: building its files failed: "
                                    f"{describe_error(e)}") from e
        return _as_bytes(built, f"substitution {self.label}", self.own_formulation is None)

    def build_kernel(self, request: Any, entry: Any) -> tuple[str, bytes]:
        """Compile ``request`` (a :class:`~boo_core.kernels.request.KernelRequest` carrying
        this substitution) into the cache ``entry`` (None: a scratch directory): the
        reproducer and the kernel (:func:`boo_core.substitute.build.build`)."""
        return build(request, entry)

    def shown_path(self, relative: str) -> str:
        """A file as messages name it: its path on disk, or ``<name>:<relative path>``."""
        return str(self.location / relative) if self.location else f"{self.label}:{relative}"

    @property
    def from_user(self) -> bool:
        """Whether the user gave it (a user's substitution that fails is an error, not passed over)."""
        return self.origin == "user"

    def with_origin(self, origin: str) -> Substitution:
        return replace(self, origin=origin)
