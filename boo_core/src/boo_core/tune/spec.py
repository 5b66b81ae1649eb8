"""Tuning winners as an IREE transform-dialect tuning spec (``boo tune --export``).

The spec is a transform library IREE applies while it configures executables
(``--iree-codegen-tuning-spec-path``, which ``BOO_TUNING_SPEC_PATH`` passes to every
compile): for each tuned kernel whose winner carries a per-dispatch configuration, a
matcher recognises the root op of its dispatch by its shape and body
(``transform.iree.match.cast_compatible_dag_from_root``) and ``@apply_op_config`` sets
the winning ``compilation_info`` on it. Winners that are formulations without a
configuration change what is compiled, not how: no spec can express them, and they are
listed in the spec's header comment (the tuning database applies them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ..files import MAX_SPEC_BYTES, read_text
from ..kernels.cache import atomic_write
from ..kernels.configs import split_top_level
from ..kernels.request import KernelRequest
from ..kernels.target import Target
from ..kernels.tuning_records import read_record
from ..plugins.registry import BooOpRegistry
from ..signatures.signature import Signature

_OPERANDS = re.compile(r"ins\((?P<ins>[^:]*):(?P<in_types>[^)]*)\)\s*outs\((?P<outs>[^:]*):(?P<out_types>[^)]*)\)")
_ATTRS = re.compile(r"\s*(attrs\s*=\s*)?\{lowering_config = [^\n]*?>\}")
_TRANSLATION = re.compile(r"translation_info = (#iree_codegen\.translation_info<.*?>)\}", re.S)


def _root_op(configured: str) -> tuple[str, str] | None:
    """The root op of a configured executable (its text, lowering config removed) and its
    lowering config attribute, or None."""
    lines = configured.splitlines()
    for index, line in enumerate(lines):
        found = re.search(r"lowering_config = (#iree_(?:gpu|cpu)\.lowering_config<.*?>)(?=\}\s)", line)
        if found is None or not re.search(r"workgroup = |distribution = ", found.group(1)):
            continue
        text = [line]
        if line.rstrip().endswith("{"):  # a generic: its region follows, up to "} -> tensor<...>"
            depth = 1
            for following in lines[index + 1:]:
                text.append(following)
                depth += following.count("{") - following.count("}")
                if depth <= 0:
                    break
        return "\n".join(text), found.group(1)
    return None


def _free_values(text: str) -> set[str]:
    """SSA values ``text`` uses but does not define (results or block arguments)."""
    defined: set[str] = set()
    for line in text.splitlines():
        left, eq, _ = line.partition(" = ")
        if eq and left.strip().startswith("%"):
            defined.update(re.findall(r"%[\w$.-]+", left))
        for arguments in re.findall(r"\^bb\d+\(([^)]*)\)", line):
            defined.update(re.findall(r"(%[\w$.-]+)\s*:", arguments))
    return set(re.findall(r"%[\w$.-]+", text)) - defined


def _matcher(name: str, root: str, lowering: str, translation: str) -> str:
    """A matcher named ``name`` for ``root`` yielding its compilation info."""
    operands = _OPERANDS.search(root)
    if operands is None:
        raise ValueError(f"{name}: cannot read the root op's operands")
    values = [v.strip() for v in operands.group("ins").split(",") + operands.group("outs").split(",") if v.strip()]
    types = [t.strip() for group in ("in_types", "out_types") for t in split_top_level(operands.group(group))]
    body = _ATTRS.sub("", root, count=1)
    free = _free_values(body) - set(values)
    if free:
        raise ValueError(f"{name}: the root op uses values defined outside it ({', '.join(sorted(free))})")
    body = re.sub(r"^\s*%[\w]+ = ", "%root = ", body.lstrip(), count=1)
    for position, value in enumerate(values):
        body = re.sub(rf"{re.escape(value)}(?![\w])", f"%arg{position + 1}", body)
    arguments = ", ".join(f"%arg{i + 1}: {t}" for i, t in enumerate(types))
    indented = "\n".join("      " + line.strip() for line in body.splitlines())
    return f"""  transform.named_sequence @{name}(%arg0: !transform.any_op {{transform.readonly}})
      -> (!transform.any_op, !transform.any_param) {{
    %ins, %outs = transform.iree.match.cast_compatible_dag_from_root %arg0 {{
    ^bb0({arguments}):
{indented}
    }} : (!transform.any_op) -> (!transform.any_value, !transform.any_value)
    %config = transform.param.constant #iree_codegen.compilation_info<lowering_config = {lowering},
        translation_info = {translation}> -> !transform.any_param
    transform.yield %arg0, %config : !transform.any_op, !transform.any_param
  }}"""


def spec_text(matchers: Sequence[tuple[str, str]], notes: Sequence[str]) -> str:
    """The spec module for ``(name, matcher text)`` pairs."""
    header = "".join(f"// {note}\n" for note in notes)
    body = "\n".join(text for _, text in matchers)
    entries = ",\n".join(f"        @{name} -> @apply_op_config" for name, _ in matchers)
    dispatch = f"""    %res = transform.foreach_match in %arg0
{entries}
      : (!transform.any_op) -> !transform.any_op
    transform.yield %res : !transform.any_op""" if matchers else "    transform.yield %arg0 : !transform.any_op"
    return f"""{header}module @boo_tuning_spec attributes {{transform.with_named_sequence,
                                   iree_codegen.tuning_spec_with_default_entrypoint}} {{
  transform.named_sequence @apply_op_config(%op: !transform.any_op {{transform.readonly}},
                                            %config: !transform.any_param {{transform.readonly}}) {{
    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param
    transform.yield
  }}
{body}
  transform.named_sequence @__kernel_config(%arg0: !transform.any_op {{transform.consumed}}) -> !transform.any_op
      attributes {{iree_codegen.tuning_spec_entrypoint}} {{
{dispatch}
  }}
}}
"""


def export_spec(path: Path, signatures: Sequence[Signature], target: str, device: str) -> int:
    """Write the spec of the recorded winners of ``signatures`` on ``target`` and
    ``device`` to ``path``; how many configured kernels it holds."""
    matchers: list[tuple[str, str]] = []
    notes = [f"BOO tuning spec: winners of boo tune on {device} ({target})."]
    parsed = Target.parse(target)
    for signature in signatures:
        record = read_record(signature, target, device)
        if record is None:
            notes.append(f"{signature.func_name}: not tuned")
            continue
        if not record.config:
            notes.append(f"{signature.func_name}: the winner is formulation {record.formulation!r} without a "
                         "configuration (applied by the tuning database, not by a spec)")
            continue
        formulation = next(f for f in BooOpRegistry.default().formulations(signature, parsed)
                           if f.name == record.formulation)
        request = KernelRequest.create(signature, parsed, formulation, config=record.config, extra_flags=record.flags)
        directory = request.directory
        configured = sorted((directory / "configurations").glob("*.mlir")) if directory else []
        for index, file in enumerate(configured):
            text = read_text(file, MAX_SPEC_BYTES, what="configured executable")  # FileRefused names it
            root, translation = _root_op(text), _TRANSLATION.search(text)
            if root is None or translation is None:
                continue
            name = f"match_{signature.func_name[:80]}_{index}"
            try:
                matchers.append((name, _matcher(name, root[0], root[1], translation.group(1))))
            except ValueError as e:  # a root op a matcher cannot describe: say so in the spec
                notes.append(f"{signature.func_name}: no matcher: {e}")
    atomic_write(path, spec_text(matchers, notes))
    return len(matchers)
