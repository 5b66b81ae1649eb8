"""What the conv op's linalg formulations share (:mod:`.linalg_formulations`,
:mod:`.grouped_formulations`): MLIR text for types and maps, :class:`Writer` of one function
in BOO's calling convention, and a weight gradient's parts of the batch."""

from __future__ import annotations

import math

import torch

from . import layouts
from .signature import ConvSignature

#: IREE fuses a formulation's padding into its contraction's executable, which then binds the
#: tensor itself.
FLAGS = ("--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops",)
#: The float32 partial sums hold at most this many elements (32 MiB): enough parts for a
#: wave of output tiles on a large GPU, without a workspace many times the filter's size.
MAX_PARTIALELEMENTS = 2**23
#: At most this many parts of the batch.
MAX_PARTS = 32
ELEMENT = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def parts(s: ConvSignature) -> int:
    """How many parts ``implicit_split`` cuts the batch into: the largest divisor of N that
    is at most :data:`MAX_PARTS` and keeps the partial sums within :data:`MAX_PARTIALELEMENTS`."""
    filter_elements = math.prod(s.kernel_shape)
    n = s.input_shape[0]
    return max(d for d in range(1, min(n, MAX_PARTS) + 1)
               if n % d == 0 and (d == 1 or d * filter_elements <= MAX_PARTIALELEMENTS))


def extent_of_x_read(s: ConvSignature) -> tuple[int, ...]:
    """Per spatial axis, how much of x the windows' extent covers (x past it is never read)."""
    return tuple(min(n, extent - p) for n, extent, p in zip(s.input_shape[2:], s.read_extents, s.padding))


def channels_last_float(s: ConvSignature) -> bool:
    """x, dY (y) and the filter channels-last, not transposed, a floating-point type these
    formulations write (:data:`ELEMENT`)."""
    channels_last = layouts.channels_last(s.spatial_rank)
    return (not s.transposed and s.dtype in ELEMENT
            and s.input_layout == s.output_layout == s.kernel_layout == channels_last)


def windows_read_x(s: ConvSignature) -> bool:
    """Whether the windows read x on every spatial axis (:func:`extent_of_x_read`)."""
    return all(u > 0 for u in extent_of_x_read(s))


def padding_within_window(s: ConvSignature) -> bool:
    """Whether the padding is within the dilated window on every axis (a data gradient then
    reads dY with the padding ``d * (f - 1) - p`` on each side)."""
    return all(p <= d * (f - 1) for p, d, f in zip(s.padding, s.dilation, s.window))


def tensor_type(shape: tuple[int, ...], element: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{element}>"


def vtensor_type(shape: tuple[int, ...], element: str, value: bool = True) -> str:
    return f"!torch.{'vtensor' if value else 'tensor'}<[{','.join(map(str, shape))}],{element}>"


def affine_map(dims: list[str], results: list[str]) -> str:
    return f"affine_map<({', '.join(dims)}) -> ({', '.join(results)})>"


def iterators(parallel: int, reduction: int) -> str:
    return ", ".join(['"parallel"'] * parallel + ['"reduction"'] * reduction)


class Writer:
    """Lines of one function in BOO's calling convention (inputs, then the output written
    in place), its tensors of element type ``e``; the function is named ``func_name``
    (default the signature's)."""

    def __init__(self, s: ConvSignature, func_name: str | None = None) -> None:
        self.s = s
        self.func_name = func_name or s.func_name
        self.e = ELEMENT[s.dtype]
        self.lines: list[str] = []

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def function(self, inputs: list[tuple[str, tuple[int, ...]]], output: tuple[str, tuple[int, ...]]) -> None:
        """Open the function; each input becomes a builtin tensor named ``%<name>_b``, and
        ``%int1``.. ``%int3`` are torch's integers."""
        params = [f"%{name}: {vtensor_type(shape, self.e)}" for name, shape in inputs]
        params.append(f"%{output[0]}: {vtensor_type(output[1], self.e, value=False)}")
        self.lines.append(f"func.func @{self.func_name}({', '.join(params)}) {{")
        for value in (1, 2, 3):
            self.emit(f"%int{value} = torch.constant.int {value}")
        for name, shape in inputs:
            self.emit(f"%{name}_b = torch_c.to_builtin_tensor %{name} : {vtensor_type(shape, self.e)} -> "
                      f"{tensor_type(shape, self.e)}")
        self.emit("%zero = arith.constant 0.0 : f32")
        self.emit(f"%zero_e = arith.constant 0.0 : {self.e}")

    def pad(self, name: str, value: str, shape: tuple[int, ...], low: list[int], high: list[int]) -> str:
        """``value`` zero-padded (``low``/``high`` per dimension), or itself if nothing is added."""
        if not any(low) and not any(high):
            return value
        padded = tuple(d + lo + hi for d, lo, hi in zip(shape, low, high))
        self.emit(f"{name} = tensor.pad {value} low[{', '.join(map(str, low))}] high[{', '.join(map(str, high))}] {{")
        self.emit(f"^bb0({', '.join(f'%i{i}: index' for i in range(len(shape)))}):")
        self.emit(f"  tensor.yield %zero_e : {self.e}")
        self.emit(f"}} : {tensor_type(shape, self.e)} to {tensor_type(padded, self.e)}")
        return name

    def zeros(self, name: str, shape: tuple[int, ...]) -> str:
        self.emit(f"{name}_e = tensor.empty() : {tensor_type(shape, 'f32')}")
        self.emit(f"{name} = linalg.fill ins(%zero : f32) outs({name}_e : {tensor_type(shape, 'f32')}) -> "
                  f"{tensor_type(shape, 'f32')}")
        return name

    def products(self, name: str, maps: list[str], parallel: int, reduction: int, ins: list[tuple[str, tuple]],
                 out: tuple[str, tuple[int, ...]]) -> str:
        """A float32 sum of products of the two ``ins`` (widened from the element type)."""
        values = ", ".join(v for v, _ in ins)
        types = ", ".join(tensor_type(shape, self.e) for _, shape in ins)
        self.emit(f"{name} = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = "
                  f"[{iterators(parallel, reduction)}]}} ins({values} : {types}) "
                  f"outs({out[0]} : {tensor_type(out[1], 'f32')}) {{")
        self.emit(f"^bb0(%a: {self.e}, %b: {self.e}, %acc: f32):")
        a, b = ("%a", "%b") if self.e == "f32" else ("%a_f", "%b_f")
        if self.e != "f32":
            self.emit(f"  %a_f = arith.extf %a : {self.e} to f32")
            self.emit(f"  %b_f = arith.extf %b : {self.e} to f32")
        self.emit(f"  %product = arith.mulf {a}, {b} : f32")
        self.emit("  %sum = arith.addf %acc, %product : f32")
        self.emit("  linalg.yield %sum : f32")
        self.emit(f"}} -> {tensor_type(out[1], 'f32')}")
        return name

    def flipped(self, shape: tuple[int, ...]) -> str:
        """The filter input ``%w`` (of ``shape``: channels, window, channels) with its taps
        reversed along every spatial axis (torch's ``flip``, an executable of its own), as
        ``%w_f``."""
        rank = len(shape) - 2
        self.emit(f"%flip_dims = torch.prim.ListConstruct {', '.join(f'%int{a + 1}' for a in range(rank))} : "
                  f"({', '.join('!torch.int' for _ in range(rank))}) -> !torch.list<int>")
        self.emit(f"%w_flipped = torch.aten.flip %w, %flip_dims : {vtensor_type(shape, self.e)}, !torch.list<int> -> "
                  f"{vtensor_type(shape, self.e)}")
        self.emit(f"%w_f = torch_c.to_builtin_tensor %w_flipped : {vtensor_type(shape, self.e)} -> "
                  f"{tensor_type(shape, self.e)}")
        return "%w_f"

    def add_bias(self, value: str, shape: tuple[int, ...]) -> str:
        """``%biased``: float32 ``value`` (channels last) plus the input ``%shift`` (one value a
        channel, widened)."""
        rank = len(shape) - 2
        outer = ["n", *(f"o{a}" for a in range(rank)), "c"]
        self.emit(f"%biased = linalg.generic {{indexing_maps = [{affine_map(outer, ['c'])}, "
                  f"{affine_map(outer, outer)}], iterator_types = [{iterators(rank + 2, 0)}]}} "
                  f"ins(%shift_b : {tensor_type(shape[-1:], self.e)}) outs({value} : {tensor_type(shape, 'f32')}) {{")
        self.emit(f"^bb0(%bv: {self.e}, %acc: f32):")
        if self.e != "f32":
            self.emit(f"  %bv_f = arith.extf %bv : {self.e} to f32")
        self.emit(f"  %sum = arith.addf %acc, {'%bv' if self.e == 'f32' else '%bv_f'} : f32")
        self.emit("  linalg.yield %sum : f32")
        self.emit(f"}} -> {tensor_type(shape, 'f32')}")
        return "%biased"

    def sum_over(self, value: str, shape: tuple[int, ...], dims: list[str], loops: list[str], kept: list[str],
                 total: tuple[int, ...]) -> str:
        """``%total``: float32 ``value`` (of ``shape``, its dimensions named ``dims``) summed
        over the dimensions not in ``kept``, iterated in the order ``loops`` (``kept``'s, then
        the summed ones); ``total`` is the result's shape, its dimensions ``kept``."""
        self.zeros("%total_z", total)
        self.emit(f"%total = linalg.generic {{indexing_maps = [{affine_map(loops, dims)}, "
                  f"{affine_map(loops, kept)}], iterator_types = [{iterators(len(kept), len(loops) - len(kept))}]}} "
                  f"ins({value} : {tensor_type(shape, 'f32')}) outs(%total_z : {tensor_type(total, 'f32')}) {{")
        self.emit("^bb0(%p: f32, %acc: f32):")
        self.emit("  %sum = arith.addf %acc, %p : f32")
        self.emit("  linalg.yield %sum : f32")
        self.emit(f"}} -> {tensor_type(total, 'f32')}")
        return "%total"

    def store(self, value: str, out: str, shape: tuple[int, ...]) -> str:
        """Round float32 ``value`` once to the element type, write it into output ``out``, end."""
        dims = [f"d{i}" for i in range(len(shape))]
        if self.e != "f32":
            self.emit(f"%rounded_e = tensor.empty() : {tensor_type(shape, self.e)}")
            identity = affine_map(dims, dims)
            self.emit(f"%rounded = linalg.generic {{indexing_maps = [{identity}, {identity}], "
                      f"iterator_types = [{iterators(len(shape), 0)}]}} ins({value} : {tensor_type(shape, 'f32')}) "
                      f"outs(%rounded_e : {tensor_type(shape, self.e)}) {{")
            self.emit(f"^bb0(%v: f32, %unused: {self.e}):")
            self.emit(f"  %r = arith.truncf %v : f32 to {self.e}")
            self.emit(f"  linalg.yield %r : {self.e}")
            self.emit(f"}} -> {tensor_type(shape, self.e)}")
            value = "%rounded"
        self.emit(f"%result = torch_c.from_builtin_tensor {value} : {tensor_type(shape, self.e)} -> "
                  f"{vtensor_type(shape, self.e)}")
        self.emit(f"torch.overwrite.tensor.contents %result overwrites %{out} : {vtensor_type(shape, self.e)}, "
                  f"{vtensor_type(shape, self.e, value=False)}")
        self.emit("return")
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"


def in_parts(w: Writer, s: ConvSignature, g: int) -> tuple[str, tuple[int, ...]]:
    """A weight gradient's dY and x (``%dy_b``, ``%x_b``) viewed as ``g`` parts of the batch:
    dY as ``%dy_p`` and its shape, x cut to the extent the windows read and padded (its
    value; its shape is ``(g, N / g, *read_extents, C)``)."""
    n, c = s.input_shape[:2]
    size, out = tuple(s.input_shape[2:]), tuple(s.output_spatial)
    groups = "[[0, 1], " + ", ".join(f"[{i + 2}]" for i in range(s.spatial_rank + 1)) + "]"
    parted_dy, parted_x = (g, n // g, *out, s.output_channels), (g, n // g, *size, c)
    for name, whole, parted in (("dy", (n, *out, s.output_channels), parted_dy), ("x", (n, *size, c), parted_x)):
        w.emit(f"%{name}_p = tensor.expand_shape %{name}_b {groups} output_shape [{', '.join(map(str, parted))}] : "
               f"{tensor_type(whole, w.e)} into {tensor_type(parted, w.e)}")
    x, used = "%x_p", extent_of_x_read(s)
    if used != size:  # x past the windows' extent is never read: cut it off
        cut = (g, n // g, *used, c)
        w.emit(f"%x_cut = tensor.extract_slice %x_p[{', '.join('0' for _ in cut)}] [{', '.join(map(str, cut))}] "
               f"[{', '.join('1' for _ in cut)}] : {tensor_type(parted_x, w.e)} to {tensor_type(cut, w.e)}")
        x = "%x_cut"
    high = [extent - p - u for extent, p, u in zip(s.read_extents, s.padding, used)]
    return w.pad("%x_pad", x, (g, n // g, *used, c), [0, 0, *s.padding, 0], [0, 0, *high, 0]), parted_dy
