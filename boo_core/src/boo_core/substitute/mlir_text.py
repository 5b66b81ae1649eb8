"""Reading IREE's executables out of MLIR text: names, exports, bindings, launch geometry.

IREE prints ``hal.executable`` ops the same way at every stage (sources, configured,
translated), one op header per line, two spaces per nesting level. These functions read
that printed form; they do not parse MLIR in general. What the text does not say (a
workgroup size before translation, a count region that is not constant) is left None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ..kernels.cuda_executable import sanitize_symbol

_EXECUTABLE = re.compile(r"^(\s*)hal\.executable (?:public |private )?@(\S+) \{", re.MULTILINE)
_VARIANT = re.compile(r"hal\.executable\.variant (?:public |private )?@(\S+) target\(<\"([\w-]+)\", \"([\w-]+)\"")
_EXPORT = re.compile(r"hal\.executable\.export (?:public |private )?@(\S+) ordinal\((\d+)\) layout\(")
_BINDING = re.compile(r"#hal\.pipeline\.binding<(\w+)(?:, (\"[^\"]*\"|\w+))?>")
_CONSTANTS = re.compile(r"\bconstants = (\d+)")
_INDEX_CONSTANT = re.compile(r"(%\w+) = arith\.constant (\d+) : index")
_RETURN = re.compile(r"hal\.return (%\w+), (%\w+), (%\w+) :")
_FUNC = re.compile(r"func\.func @(\S+?)\(")
_SUBSPAN = re.compile(r"binding\((\d+)\)[^\n]*?: (!iree_tensor_ext\.dispatch\.tensor|memref)<")
_PIPELINE = re.compile(r"translation_info = #iree_codegen\.translation_info<pipeline = (?:#[\w.]+<(\w+)>|(\w+))")


@dataclass(frozen=True)
class Binding:
    """One binding of an export's pipeline layout: its ordinal (the kernel parameter's
    position), its flags and, where the source says, the tensor it holds."""

    index: int
    flags: str = ""  # "ReadOnly|Indirect", "Indirect", ""
    tensor: str = ""  # "tensor<64x48xf32>" or a memref type
    access: str = ""  # "readonly", "writeonly", "readwrite" ("" when unknown)

    @property
    def read_only(self) -> bool:
        return "ReadOnly" in self.flags

    def to_json(self) -> dict[str, object]:
        return {"binding": self.index, "flags": self.flags, "tensor": self.tensor or None,
                "access": self.access or None}


@dataclass(frozen=True)
class Export:
    """A ``hal.executable.export``: one kernel entry point and how it is launched."""

    name: str
    ordinal: int
    layout: str  # the #hal.pipeline.layout<...> text, verbatim
    bindings: tuple[Binding, ...] = ()
    constants: int = 0
    workgroup_size: tuple[int, ...] | None = None
    subgroup_size: int | None = None
    workgroup_local_memory: int | None = None
    workgroup_count: tuple[int, ...] | None = None  # when the count region returns constants
    count_region: str = ""  # the region's text, verbatim
    count_arguments: str = ""  # the region's arguments, verbatim: "%arg0: !hal.device"
    pipeline: str = ""  # the translation pipeline IREE chose (configured sources)
    lowering_configs: tuple[str, ...] = ()

    @property
    def kernel_name(self) -> str:
        """The GPU entry symbol (CUDA: the name IREE looks the kernel up by in the PTX)."""
        return sanitize_symbol(self.name)


@dataclass(frozen=True)
class Executable:
    """A ``hal.executable``: its name (what substitution files are named after), its
    variant (one per target; BOO compiles for one) and its exports."""

    name: str
    variant: str = ""
    backend: str = ""  # "llvm-cpu", "cuda", "rocm"
    format: str = ""  # "embedded-elf-x86_64", "cuda-nvptx-fb"
    exports: tuple[Export, ...] = ()
    text: str = field(default="", repr=False)  # the op as printed, when read from one file
    target: str = field(default="", repr=False)  # the variant's target attribute, verbatim: <"cuda", ...>

    def export(self, name: str) -> Export | None:
        return next((e for e in self.exports if e.name == name), None)


def _balanced(text: str, start: int, opening: str = "(", closing: str = ")") -> int:
    """Index just past the bracket that closes the one opened at ``text[start - 1]``."""
    depth, position, quoted = 1, start, False
    while position < len(text):
        char = text[position]
        if char == '"':
            quoted = not quoted
        elif not quoted and char == opening:
            depth += 1
        elif not quoted and char == closing:
            depth -= 1
            if depth == 0:
                return position + 1
        position += 1
    return len(text)


def attribute_values(text: str, prefix: str) -> list[str]:
    """Every ``<prefix><...>`` attribute in ``text``, with balanced angle brackets."""
    found = []
    for match in re.finditer(re.escape(prefix) + "<", text):
        end = _balanced(text, match.end(), "<", ">")
        found.append(text[match.start():end])
    return found


def split_executables(module: str) -> dict[str, str]:
    """Each ``hal.executable`` op of a printed module (or file), by name, as text."""
    executables: dict[str, str] = {}
    for match in _EXECUTABLE.finditer(module):
        indent = match.group(1)
        end = module.find(f"\n{indent}}}", match.end())
        executables[match.group(2)] = module[match.start(): len(module) if end < 0 else end + len(indent) + 2]
    return executables


def _int_list(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"(\d+)(?: : index)?", text))


def _parse_export(text: str, match: re.Match[str]) -> Export:
    layout_end = _balanced(text, match.end())
    layout = text[match.end(): layout_end - 1]
    bindings = tuple(Binding(i, (m.group(2) or "").strip('"')) for i, m in enumerate(_BINDING.finditer(layout)))
    constants = _CONSTANTS.search(layout)
    workgroup_size = subgroup = local_memory = count = None
    region = ""
    line_end = text.find("\n", layout_end)
    header = text[layout_end: len(text) if line_end < 0 else line_end]
    arguments = re.match(r"\s*count\(([^)]*)\)", header)
    if header.rstrip().endswith("{"):  # a count region follows, closed by "}" or "} <properties>"
        indent = len(text[text.rfind("\n", 0, match.start()) + 1: match.start()])
        closing = re.compile(rf"^ {{{indent}}}\}}(?: <(.*)>)?\s*$", re.MULTILINE)
        end = closing.search(text, line_end)
        region = text[line_end + 1: end.start() if end else len(text)]
        properties = (end.group(1) or "") if end else ""
        returned = _RETURN.search(region)
        values = dict(_INDEX_CONSTANT.findall(region))
        if returned and all(v in values for v in returned.groups()):
            count = tuple(int(values[v]) for v in returned.groups())
    else:
        properties = header
    sizes = re.search(r"workgroup_size = \[([^\]]*)\]", properties)
    if sizes:
        workgroup_size = _int_list(sizes.group(1))
    if m := re.search(r"subgroup_size = (\d+)", properties):
        subgroup = int(m.group(1))
    if m := re.search(r"workgroup_local_memory = (\d+)", properties):
        local_memory = int(m.group(1))
    return Export(match.group(1), int(match.group(2)), layout, bindings, int(constants.group(1)) if constants else 0,
                  workgroup_size, subgroup, local_memory, count, region.strip("\n"),
                  arguments.group(1) if arguments else "")


def parse_executable(text: str) -> Executable:
    """One printed ``hal.executable`` op (the first in ``text``)."""
    header = _EXECUTABLE.search(text)
    if header is None:
        raise ValueError("no hal.executable op in the text")
    variant = _VARIANT.search(text)
    exports = tuple(_parse_export(text, m) for m in _EXPORT.finditer(text))
    functions = _function_details(text)
    exports = tuple(_with_function(e, functions.get(e.name)) for e in exports)
    target = ""
    if variant:
        start = text.index("target(", variant.start()) + len("target(")
        target = text[start: _balanced(text, start) - 1]
    return Executable(header.group(2), variant.group(1) if variant else "", variant.group(2) if variant else "",
                      variant.group(3) if variant else "", exports, text, target)


@dataclass(frozen=True)
class _Function:
    bindings: dict[int, tuple[str, str]]
    pipeline: str
    lowering_configs: tuple[str, ...]


def _function_details(text: str) -> dict[str, _Function]:
    """Per ``func.func`` of an executable: binding types, pipeline and lowering configs."""
    matches = list(_FUNC.finditer(text))
    details = {}
    for i, match in enumerate(matches):
        body = text[match.start(): matches[i + 1].start() if i + 1 < len(matches) else len(text)]
        bindings = {}
        for sub in _SUBSPAN.finditer(body):
            inner = body[sub.end(): _balanced(body, sub.end(), "<", ">") - 1]
            if sub.group(2) == "memref":
                typed = ("memref<" + re.sub(r", #hal\.descriptor_type<\w+>$", "", inner) + ">", "")
            else:
                access, _, tensor = inner.partition(":")
                typed = (tensor, access)
            bindings.setdefault(int(sub.group(1)), typed)
        pipeline = _PIPELINE.search(body)
        details[match.group(1)] = _Function(bindings, (pipeline.group(1) or pipeline.group(2)) if pipeline else "",
                                            tuple(attribute_values(body, "#iree_cpu.lowering_config")
                                                  + attribute_values(body, "#iree_gpu.lowering_config")
                                                  + attribute_values(body, "#iree_codegen.lowering_config")))
    return details


def _with_function(export: Export, function: _Function | None) -> Export:
    if function is None:
        return export
    bindings = tuple(replace(b, tensor=function.bindings.get(b.index, ("", ""))[0],
                             access=function.bindings.get(b.index, ("", ""))[1]) for b in export.bindings)
    return replace(export, bindings=bindings, pipeline=function.pipeline, lowering_configs=function.lowering_configs)


def merge(later: Executable, earlier: Executable) -> Executable:
    """``later`` (a more translated form) completed with what only ``earlier`` says:
    binding types, the pipeline and lowering configurations."""
    exports = []
    for export in later.exports:
        before = earlier.export(export.name)
        if before is None:
            exports.append(export)
            continue
        bindings = tuple(replace(b, tensor=b.tensor or o.tensor, access=b.access or o.access)
                         for b, o in zip(export.bindings, before.bindings)) + export.bindings[len(before.bindings):]
        exports.append(replace(export, bindings=bindings, pipeline=export.pipeline or before.pipeline,
                               lowering_configs=export.lowering_configs or before.lowering_configs))
    return replace(later, exports=tuple(exports))
