"""The stages a substitution's files replace executables at: each stage's folder, the
iree-compile flag that takes it, and which file replaces which executable."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

#: Stage folders -> the iree-compile flag taking a directory of files named by executable.
STAGES: dict[str, str] = {
    "sources": "--iree-hal-substitute-executable-sources-from",
    "configurations": "--iree-hal-substitute-executable-configurations-from",
    "binaries": "--iree-hal-substitute-executable-objects-from",
}
#: Where a relative ``#hal.executable.object<{path = ...}>`` in a substituted source is found.
SEARCH_PATH_FLAG = "--iree-hal-executable-object-search-path"


def stage_files(files: Mapping[str, bytes]) -> dict[str, dict[str, str]]:
    """``{stage: {executable: relative path}}`` for the files that replace executables.
    The executable is the file name without its last extension (IREE's rule)."""
    staged: dict[str, dict[str, str]] = {}
    for name in files:
        parts = PurePosixPath(name).parts
        if len(parts) == 2 and parts[0] in STAGES:
            staged.setdefault(parts[0], {})[PurePosixPath(parts[1]).stem] = name
    return staged
