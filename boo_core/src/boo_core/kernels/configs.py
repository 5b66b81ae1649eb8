"""Per-dispatch lowering configurations: a tuning candidate's tiles applied to the
executables IREE configured, through IREE's own substitution of configured executables.

A *configuration* is a JSON-able mapping, for the dispatch's root op (the one IREE gave a
``lowering_config`` with workgroup or distribution tiles):

* tile lists by level, named as IREE names them: ``workgroup``, ``subgroup``, ``thread``,
  ``reduction`` (CUDA, pipeline TileAndFuse), ``distribution``, ``vector_common_parallel``,
  ``vector_reduction`` (llvm-cpu). A list names the *innermost* loops of its kind: parallel
  loops for the parallel levels, reduction loops for the reduction ones, so one
  configuration fits a matmul and its batched form (outer parallel loops get 1 at the
  workgroup/distribution level and 0 elsewhere);
* ``mma_kind`` (an ``#iree_gpu.mma_layout`` name such as ``NV_MMA_SYNC_F32_16x8x16_BF16``);
* ``workgroup_size`` ([x, y, z] threads) and ``prefetch_num_stages`` (the translation info).

A configuration with ``thread`` tiles is for elementwise dispatches (:func:`~boo_core.tune.space.elementwise_configs`):
it configures only roots without reduction loops and with at least as many parallel loops
as its ``workgroup`` tiles, so a kernel's reductions and smaller elementwise dispatches keep
IREE's configurations. Its ``reductions`` key, a configuration of the same fields, is for
the roots *with* reduction loops and at least as many parallel loops as its ``workgroup``
tiles: a kernel of reductions and elementwise passes (batch norm's) configures both kinds.

Building a configured kernel (:func:`compile_with_config`): iree-compile stops after
configuring the executables and dumps them, BOO edits the root op of each contraction
dispatch, and the real compile substitutes the edited executables
(``--iree-hal-substitute-executable-configurations-from``). The edited files stay in the
kernel's cache entry (``configurations/``), next to the compile command: the reproducer.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import CompileError
from ..files import MAX_SPEC_BYTES, FileRefused, read_text
from . import owned

PARALLEL_LEVELS = ("workgroup", "subgroup", "thread", "distribution", "vector_common_parallel",
                   "vector_inner_parallel")
REDUCTION_LEVELS = ("reduction", "vector_reduction")
#: Levels whose untiled outer loops take 1 (one iteration per workgroup) rather than 0 (not tiled).
_OUTER_ONE = ("workgroup", "distribution")

_ROOT_CONFIG = re.compile(r"lowering_config = #iree_(gpu|cpu)\.lowering_config<(\{.*?\}|[^<>]*?)>(?=[\s,}])")
_ITERATORS = re.compile(r'iterator_types = \[([^\]]*)\]')
_NAMED_OP = re.compile(r"= (linalg\.[a-z0-9_]+)")
#: Loop kinds of the named contractions IREE leaves named in dispatches (p: parallel, r: reduction).
NAMED_LOOPS = {"linalg.matmul": "ppr", "linalg.matmul_transpose_a": "ppr", "linalg.matmul_transpose_b": "ppr",
               "linalg.batch_matmul": "pppr", "linalg.batch_matmul_transpose_a": "pppr",
               "linalg.batch_matmul_transpose_b": "pppr", "linalg.conv_2d_nchw_fchw": "ppppr" + "rr",
               "linalg.conv_2d_nhwc_hwcf": "pppp" + "rrr"}
_EXECUTABLE = re.compile(r"hal\.executable (?:public |private )?@(\S+) \{")
#: A configuration's key for the nested configuration of its roots with reduction loops.
REDUCTIONS = "reductions"


def split_top_level(text: str) -> list[str]:
    """``text`` split at commas outside brackets."""
    parts, depth, current = [], 0, []
    for char in text:
        if char in "[<({":
            depth += 1
        elif char in "]>)}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def _parse_items(body: str) -> dict[str, str | None]:
    items: dict[str, str | None] = {}
    for part in split_top_level(body):
        key, eq, value = part.partition("=")
        items[key.strip()] = value.strip() if eq else None
    return items


def _render_items(items: Mapping[str, str | None]) -> str:
    return ", ".join(key if value is None else f"{key} = {value}" for key, value in items.items())


def _aligned(values: Sequence[int], kinds: Sequence[str], wanted: str, level: str,
             current: str | None) -> list[int] | None:
    """``values`` (sizes for the innermost loops of kind ``wanted``) over the root's loops;
    the other loops keep IREE's sizes (1 for outer parallel loops at the workgroup or
    distribution level, 0 elsewhere, when IREE gave none). None where the root has fewer
    loops of that kind than ``values`` has sizes."""
    positions = [i for i, kind in enumerate(kinds) if kind == wanted]
    if len(values) > len(positions):
        return None
    existing = [int(v) for v in re.findall(r"-?\d+", current or "")]
    if len(existing) != len(kinds):
        outer = 1 if level in _OUTER_ONE else 0
        existing = [outer if kind == wanted else 0 for kind in kinds]
    for position, value in zip(positions[len(positions) - len(values):], values):
        existing[position] = int(value)
    return existing


def configure_root(line: str, config: Mapping[str, Any], *, reductions: bool = False) -> str | None:
    """The root op's line with ``config`` applied to its lowering config; None when the line
    is not a root op BOO can configure (no tile levels, or no iterator types), or not one
    ``config`` is for: with ``thread`` tiles, roots of its rank or more without reduction
    loops; with ``reductions`` (a nested configuration), roots of its rank or more with them;
    and never roots with fewer loops of a kind than a level of ``config`` has sizes for (IREE
    drops unit dimensions: a configuration written for (channels, plane) does not fit the
    plane alone)."""
    match = _ROOT_CONFIG.search(line)
    kinds = _loop_kinds(line)
    if match is None or kinds is None:
        return None
    if ("thread" in config or reductions) and (
            ("reduction" in kinds) != reductions or kinds.count("parallel") < len(config.get("workgroup", ()))):
        return None
    dialect, body = match.group(1), match.group(2)
    braced = body.startswith("{")
    items = _parse_items(body[1:-1] if braced else body)
    if not ({"workgroup", "distribution"} & set(items)):
        return None
    for level, values in config.items():
        wanted = "parallel" if level in PARALLEL_LEVELS else "reduction" if level in REDUCTION_LEVELS else None
        if wanted is not None:
            sizes = _aligned(values, kinds, wanted, level, items.get(level))
            if sizes is None:
                return None
            items[level] = str(sizes)
        elif level == "mma_kind":
            items[level] = f"#iree_gpu.mma_layout<{values}>"
    rendered = _render_items(items)
    replacement = f"lowering_config = #iree_{dialect}.lowering_config<{'{' + rendered + '}' if braced else rendered}>"
    return line[:match.start()] + replacement + line[match.end():]


def _loop_kinds(line: str) -> list[str] | None:
    """``parallel``/``reduction`` per loop of the op on ``line`` (a generic's iterator types,
    or a named contraction's), or None."""
    iterators = _ITERATORS.search(line)
    if iterators is not None:
        return [k.strip().strip('"') for k in iterators.group(1).split(",")]
    named = _NAMED_OP.search(line)
    loops = NAMED_LOOPS.get(named.group(1)) if named else None
    return [{"p": "parallel", "r": "reduction"}[c] for c in loops] if loops else None


def _configure_translation(text: str, config: Mapping[str, Any]) -> str:
    if "workgroup_size" in config:
        size = ", ".join(str(int(v)) for v in config["workgroup_size"])
        text = re.sub(r"(translation_info = #iree_codegen\.translation_info<[^\n]*?workgroup_size = )\[[^\]]*\]",
                      rf"\g<1>[{size}]", text)
    if "prefetch_num_stages" in config:
        text = re.sub(r"prefetch_num_stages = \d+", f"prefetch_num_stages = {int(config['prefetch_num_stages'])}",
                      text)
    return text


def apply_config(configured: str, config: Mapping[str, Any]) -> str | None:
    """A configured executable with ``config`` applied to its root op, or None when it has
    no root op the configuration fits (a copy or elementwise dispatch)."""
    own = {key: value for key, value in config.items() if key != REDUCTIONS}
    choices = [(chosen, nested) for chosen, nested in ((own, False), (config.get(REDUCTIONS), True)) if chosen]
    lines = configured.splitlines(keepends=True)
    applied = None
    for index, line in enumerate(lines):
        for chosen, nested in choices:
            if chosen.get("mma_kind") and "mma_kind" not in line:
                continue  # a GPU configuration is for contractions IREE maps to matrix instructions
            edited = configure_root(line, chosen, reductions=nested)
            if edited is not None:
                lines[index], applied = edited, chosen
                break
    return _configure_translation("".join(lines), applied) if applied is not None else None


def executable_name(configured: str) -> str:
    """The ``hal.executable`` symbol a configured dump defines (what substitution matches)."""
    match = _EXECUTABLE.search(configured)
    if match is None:
        raise ValueError("not a configured hal.executable")
    return match.group(1)


def compile_with_config(compile_command: Sequence[str], directory: Path, config: Mapping[str, Any],
                        timeout: float, required: bool = True) -> list[str]:
    """Dump the executables IREE configures for ``compile_command`` (an iree-compile command
    line, without its output flags), apply ``config`` and write the edited ones into
    ``directory/configurations``; the flags that make the real compile use them. A
    configuration that fits no executable is an error where ``required``, else no flags
    (a substitution replaced the executables it was for)."""
    dumped, edited = directory / "configured", directory / "configurations"
    for folder in (dumped, edited):  # emptied, in a directory of this user's alone (owned)
        owned.remove_tree(directory.parent, folder)
        owned.ensure_directory(directory.parent, folder)
    command = [*compile_command, "--compile-to=executable-configurations",
               f"--iree-hal-dump-executable-configurations-to={dumped}", "-o", "/dev/null"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CompileError(f"iree-compile did not configure the executables within {timeout:g} s") from None
    if result.returncode != 0:
        raise CompileError(f"iree-compile failed configuring the executables (exit {result.returncode}):\n"
                           f"{result.stderr.strip()[:2000]}", command=" ".join(command), recordable=True)
    applied = 0
    for path in sorted(dumped.glob("*.mlir")):
        try:  # the cache entry's folder: what another process put there is checked before it is read
            configured = read_text(path, MAX_SPEC_BYTES, what="configured executable")
        except FileRefused as e:
            raise CompileError(f"cannot apply configuration {dict(config)}: {e}") from None
        text = apply_config(configured, config)
        if text is not None:
            owned.write(directory.parent, edited / f"{executable_name(text)}.mlir", text)
            applied += 1
    if not applied and not required:
        return []
    if not applied:
        raise CompileError(f"configuration {dict(config)} fits no dispatch of this kernel (no root op with its "
                           "tile levels)", recordable=True)
    return [f"--iree-hal-substitute-executable-configurations-from={edited}"]
