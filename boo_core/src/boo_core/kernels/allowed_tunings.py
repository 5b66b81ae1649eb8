"""What a tuning record may ask of the compiler: only what BOO's own tuning spaces generate.

A record's winner becomes iree-compile flags and edits of configured executables. Sealed
records (:mod:`boo_core.kernels.integrity`) come from this user's own tunes, but the seal
only proves who wrote a record, not that its content is harmless; and an option such as
``--iree-llvmcpu-embedded-linker-path`` runs a program, others load plugins or read files.
So every record is also checked here before use: its flags against an allow-list of the
options the tuning spaces emit (codegen switches whose values are plain words), its
configuration against the fields and value types :mod:`.configs` applies. Anything else
makes the record unusable, with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .configs import PARALLEL_LEVELS, REDUCTION_LEVELS, REDUCTIONS

#: iree-compile options a tuning space may emit, without a value or with a plain one.
ALLOWED_OPTIONS = frozenset({
    "--iree-opt-data-tiling",
    "--iree-llvmcpu-enable-ukernels",
    "--iree-llvmcpu-reassociate-fp-reductions",
    "--iree-opt-level",
    "--iree-dispatch-creation-enable-aggressive-fusion",
})
_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_.,+-]{0,64}$")
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,127}$")
_MAX_TILE = 1 << 20


def flags_problem(flags: Sequence[str]) -> str | None:
    """Why ``flags`` may not come from a record (None when every one may)."""
    for flag in flags:
        name, eq, value = str(flag).partition("=")
        if name not in ALLOWED_OPTIONS:
            return (f"flag {flag!r} is not one BOO's tuning spaces generate (allowed: "
                    f"{', '.join(sorted(ALLOWED_OPTIONS))})")
        if eq and not _PLAIN_VALUE.match(value):
            return f"flag {flag!r} has a value that is not a plain word"
    return None


def config_problem(config: Mapping[str, Any] | None, *, nested: bool = False) -> str | None:
    """Why ``config`` may not come from a record (None when it is a configuration of the
    fields :mod:`.configs` applies, each of its type; ``reductions`` one such configuration,
    itself without ``reductions``)."""
    if config is None:
        return None
    if not isinstance(config, Mapping):
        return "its configuration is not an object"
    for key, value in config.items():
        if key == REDUCTIONS and not nested:
            problem = config_problem(value, nested=True)
            if problem is not None:
                return f"its '{REDUCTIONS}' configuration: {problem.removeprefix('its ')}"
        elif key in (*PARALLEL_LEVELS, *REDUCTION_LEVELS):
            if not _tiles(value, length=None):
                return f"configuration field {key!r} is not a list of tile sizes"
        elif key == "workgroup_size":
            if not _tiles(value, length=3):
                return "configuration field 'workgroup_size' is not three thread counts"
        elif key == "prefetch_num_stages":
            if not _count(value):
                return "configuration field 'prefetch_num_stages' is not a count"
        elif key == "mma_kind":
            if not isinstance(value, str) or not _IDENTIFIER.match(value):
                return "configuration field 'mma_kind' is not an MMA layout name"
        else:
            return f"configuration field {key!r} is not one BOO's tuning spaces generate"
    return None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_TILE


def _tiles(value: Any, length: int | None) -> bool:
    return isinstance(value, (list, tuple)) and len(value) <= 16 and (length is None or len(value) == length) and \
        all(_count(v) for v in value)
