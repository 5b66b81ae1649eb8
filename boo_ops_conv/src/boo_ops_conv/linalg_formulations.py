"""Formulations written as linalg directly (not exported from PyTorch): channels-last
convolutions whose one contraction reads the caller's tensors as they are stored.

* ``implicit_split`` (a weight gradient, any window): ``dW[k, t, c] = sum over images n and
  output pixels o of dY[n, o, k] * x[n, o * stride + t * dilation - padding, c]`` (t a filter
  tap, x read as zero outside itself) as one ``linalg.generic`` over x and dY, reduced over a
  part of the images into a float32 ``(parts, K, taps, C)`` tensor, then a second reduction
  over the parts rounded once to the filter's type.
* ``channels_last`` (a stride-1 data gradient): ``dX[n, i, c] = sum over k and taps t of
  dY[n, i + t * dilation - low, k] * W[k, last tap - t, c]`` (dY read as zero outside
  itself, ``low = dilation * (window - 1) - padding``) as one ``linalg.generic`` over dY and
  the filter's taps reversed (torch's ``flip``, an executable of its own).
* ``phase_axes`` (a data gradient at strides of 1 and 2): dX viewed, for free, as ``(N,
  pixel // stride, phase, ..., C)`` per axis. Pixel ``stride * i + a`` reads dY at ``i +
  q(a) - u`` through tap ``rho(a) + stride * u`` (``q``, ``rho``: ``a + padding`` divided by
  the stride, and its remainder), and ``q(a)`` is affine in ``a`` at strides 1 and 2, so
  ``dX[n, i, a, c] = sum over k and e of dY[n, i + shift + e, k] * W'[k, e, a, c]`` is one
  ``linalg.generic`` over dY as stored, a convolution at stride 1 whose window E covers
  every phase's reads, with ``W'`` the filter's taps gathered by phase (an executable of its
  own; zero where a phase reads fewer taps). No zeros are inserted into dY and no transient
  the size of dX is filled: IREE's module binds dY, ``W'`` and dX to the contraction, and a
  kernel library computes each phase with the taps it reads and nothing else.

* ``depthwise`` (a channels-last depthwise convolution, groups = input = output channels):
  the forward ``y[n, o, c] = sum over taps t of x[n, o * stride + t * dilation - padding, c]
  * w[t, c]`` (+ bias[c]) as one ``linalg.generic`` over x as stored and the filter
  rearranged tap-major (an executable of its own); the stride-1 data gradient the same over
  dY with the taps also reversed; the weight gradient ``dW[c, t] = sum
  over n, o of dY[n, o, c] * x[n, o * stride + t * dilation - padding, c]`` in parts of the
  batch as ``implicit_split``'s. Channels are the innermost parallel dimension, so
  neighbouring threads read neighbouring channels of one pixel.

The padding is a ``tensor.pad`` that IREE fuses into the contraction (:data:`FLAGS`), so on
CUDA IREE's module binds the caller's tensors to the contraction's executable: two
executables for the weight gradient (the products, binding x, dY and the float32 partial
sums, then their sum); two for the data gradient (the filter reversed into a transient,
then the contraction of dY and it). Nothing copies x into columns or a padded image, which
is what a kernel library substituting an implicit GEMM needs (its kernel applies the
padding as it reads). The conv op offers them on CUDA only (IREE's CPU kernels
of them are 7-22x slower than the CPU's own formulations: ``formulations.IMPLICIT_SPLIT``);
there IREE's own kernel of ``implicit_split`` is the first for 16-bit weight gradients of a
window, the data gradient's comes last. ``depthwise`` is offered on the CPU too
(``formulations.DEPTHWISE``).
"""

from __future__ import annotations

import math

import torch

from . import layouts
from .signature import ConvSignature

#: The float32 partial sums hold at most this many elements (32 MiB): enough parts for a
#: wave of output tiles on a large GPU, without a workspace many times the filter's size.
MAX_PARTIAL_ELEMENTS = 2**23
#: At most this many parts of the batch.
MAX_PARTS = 32
#: IREE fuses the padding into the contraction's executable, so it binds the tensor itself.
FLAGS = ("--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops",)
_ELEMENT = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _plain_channels_last(s: ConvSignature) -> bool:
    """Channels-last x, dY and filter (K, *window, C), one group, not transposed, a
    floating-point type."""
    channels_last = layouts.channels_last(s.spatial_rank)
    return (not s.transposed and s.groups == 1 and s.dtype in _ELEMENT
            and s.input_layout == s.output_layout == s.kernel_layout == channels_last)


def serves_weight_gradient(s: ConvSignature) -> bool:
    """Whether ``implicit_split`` computes ``s``: a channels-last weight gradient whose
    windows read x."""
    return s.mode == "wrw" and _plain_channels_last(s) and all(u > 0 for u in _extent_of_x_read(s))


def serves_data_gradient(s: ConvSignature) -> bool:
    """Whether the linalg ``channels_last`` formulation computes ``s``: a stride-1
    channels-last data gradient of a window of several taps, with no bias, padding within
    the dilated window."""
    return (s.mode == "bwd" and _plain_channels_last(s) and math.prod(s.window) > 1
            and all(st == 1 for st in s.stride) and not getattr(s, "bias", False)
            and all(p <= d * (f - 1) for p, d, f in zip(s.padding, s.dilation, s.window)))


def serves_strided_data_gradient(s: ConvSignature) -> bool:
    """Whether ``phase_axes`` computes ``s``: a channels-last data gradient, undilated, no
    bias, strides of 1 and 2 with a 2 among them, each of dX's extents a multiple of its
    stride (dX viewed as phases for free), padding within the window."""
    return (s.mode == "bwd" and _plain_channels_last(s) and not getattr(s, "bias", False)
            and all(d == 1 for d in s.dilation) and set(s.stride) <= {1, 2} and 2 in s.stride
            and all(h % st == 0 for h, st in zip(s.input_shape[2:], s.stride))
            and all(p < f for p, f in zip(s.padding, s.window)))


def parts(s: ConvSignature) -> int:
    """How many parts ``implicit_split`` cuts the batch into: the largest divisor of N that
    is at most :data:`MAX_PARTS` and keeps the partial sums within :data:`MAX_PARTIAL_ELEMENTS`."""
    filter_elements = math.prod(s.kernel_shape)
    n = s.input_shape[0]
    return max(d for d in range(1, min(n, MAX_PARTS) + 1)
               if n % d == 0 and (d == 1 or d * filter_elements <= MAX_PARTIAL_ELEMENTS))


def _extent_of_x_read(s: ConvSignature) -> tuple[int, ...]:
    """Per spatial axis, how much of x the windows' extent covers (x past it is never read)."""
    return tuple(min(n, extent - p) for n, extent, p in zip(s.input_shape[2:], s.read_extents, s.padding))


def _tensor(shape: tuple[int, ...], element: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{element}>"


def _vtensor(shape: tuple[int, ...], element: str, value: bool = True) -> str:
    return f"!torch.{'vtensor' if value else 'tensor'}<[{','.join(map(str, shape))}],{element}>"


def _map(dims: list[str], results: list[str]) -> str:
    return f"affine_map<({', '.join(dims)}) -> ({', '.join(results)})>"


def _iterators(parallel: int, reduction: int) -> str:
    return ", ".join(['"parallel"'] * parallel + ['"reduction"'] * reduction)


class _Writer:
    """Lines of one function in BOO's calling convention (inputs, then the output written
    in place), its tensors of element type ``e``."""

    def __init__(self, s: ConvSignature) -> None:
        self.s = s
        self.e = _ELEMENT[s.dtype]
        self.lines: list[str] = []

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def function(self, inputs: list[tuple[str, tuple[int, ...]]], output: tuple[str, tuple[int, ...]]) -> None:
        """Open the function; each input becomes a builtin tensor named ``%<name>_b``, and
        ``%int1``.. ``%int3`` are torch's integers."""
        params = [f"%{name}: {_vtensor(shape, self.e)}" for name, shape in inputs]
        params.append(f"%{output[0]}: {_vtensor(output[1], self.e, value=False)}")
        self.lines.append(f"func.func @{self.s.func_name}({', '.join(params)}) {{")
        for value in (1, 2, 3):
            self.emit(f"%int{value} = torch.constant.int {value}")
        for name, shape in inputs:
            self.emit(f"%{name}_b = torch_c.to_builtin_tensor %{name} : {_vtensor(shape, self.e)} -> "
                      f"{_tensor(shape, self.e)}")
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
        self.emit(f"}} : {_tensor(shape, self.e)} to {_tensor(padded, self.e)}")
        return name

    def zeros(self, name: str, shape: tuple[int, ...]) -> str:
        self.emit(f"{name}_e = tensor.empty() : {_tensor(shape, 'f32')}")
        self.emit(f"{name} = linalg.fill ins(%zero : f32) outs({name}_e : {_tensor(shape, 'f32')}) -> "
                  f"{_tensor(shape, 'f32')}")
        return name

    def products(self, name: str, maps: list[str], parallel: int, reduction: int, ins: list[tuple[str, tuple]],
                 out: tuple[str, tuple[int, ...]]) -> str:
        """A float32 sum of products of the two ``ins`` (widened from the element type)."""
        values = ", ".join(v for v, _ in ins)
        types = ", ".join(_tensor(shape, self.e) for _, shape in ins)
        self.emit(f"{name} = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = "
                  f"[{_iterators(parallel, reduction)}]}} ins({values} : {types}) "
                  f"outs({out[0]} : {_tensor(out[1], 'f32')}) {{")
        self.emit(f"^bb0(%a: {self.e}, %b: {self.e}, %acc: f32):")
        a, b = ("%a", "%b") if self.e == "f32" else ("%a_f", "%b_f")
        if self.e != "f32":
            self.emit(f"  %a_f = arith.extf %a : {self.e} to f32")
            self.emit(f"  %b_f = arith.extf %b : {self.e} to f32")
        self.emit(f"  %product = arith.mulf {a}, {b} : f32")
        self.emit("  %sum = arith.addf %acc, %product : f32")
        self.emit("  linalg.yield %sum : f32")
        self.emit(f"}} -> {_tensor(out[1], 'f32')}")
        return name

    def store(self, value: str, out: str, shape: tuple[int, ...]) -> str:
        """Round float32 ``value`` once to the element type, write it into output ``out``, end."""
        dims = [f"d{i}" for i in range(len(shape))]
        if self.e != "f32":
            self.emit(f"%rounded_e = tensor.empty() : {_tensor(shape, self.e)}")
            self.emit(f"%rounded = linalg.generic {{indexing_maps = [{_map(dims, dims)}, {_map(dims, dims)}], "
                      f"iterator_types = [{_iterators(len(shape), 0)}]}} ins({value} : {_tensor(shape, 'f32')}) "
                      f"outs(%rounded_e : {_tensor(shape, self.e)}) {{")
            self.emit(f"^bb0(%v: f32, %unused: {self.e}):")
            self.emit(f"  %r = arith.truncf %v : f32 to {self.e}")
            self.emit(f"  linalg.yield %r : {self.e}")
            self.emit(f"}} -> {_tensor(shape, self.e)}")
            value = "%rounded"
        self.emit(f"%result = torch_c.from_builtin_tensor {value} : {_tensor(shape, self.e)} -> "
                  f"{_vtensor(shape, self.e)}")
        self.emit(f"torch.overwrite.tensor.contents %result overwrites %{out} : {_vtensor(shape, self.e)}, "
                  f"{_vtensor(shape, self.e, value=False)}")
        self.emit("return")
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"


def _in_parts(w: _Writer, s: ConvSignature, g: int) -> tuple[str, tuple[int, ...]]:
    """A weight gradient's dY and x (``%dy_b``, ``%x_b``) viewed as ``g`` parts of the batch:
    dY as ``%dy_p`` and its shape, x cut to the extent the windows read and padded (its
    value; its shape is ``(g, N / g, *read_extents, C)``)."""
    n, c = s.input_shape[:2]
    size, out = tuple(s.input_shape[2:]), tuple(s.output_spatial)
    groups = "[[0, 1], " + ", ".join(f"[{i + 2}]" for i in range(s.spatial_rank + 1)) + "]"
    parted_dy, parted_x = (g, n // g, *out, s.output_channels), (g, n // g, *size, c)
    for name, whole, parted in (("dy", (n, *out, s.output_channels), parted_dy), ("x", (n, *size, c), parted_x)):
        w.emit(f"%{name}_p = tensor.expand_shape %{name}_b {groups} output_shape [{', '.join(map(str, parted))}] : "
               f"{_tensor(whole, w.e)} into {_tensor(parted, w.e)}")
    x, used = "%x_p", _extent_of_x_read(s)
    if used != size:  # x past the windows' extent is never read: cut it off
        cut = (g, n // g, *used, c)
        w.emit(f"%x_cut = tensor.extract_slice %x_p[{', '.join('0' for _ in cut)}] [{', '.join(map(str, cut))}] "
               f"[{', '.join('1' for _ in cut)}] : {_tensor(parted_x, w.e)} to {_tensor(cut, w.e)}")
        x = "%x_cut"
    high = [extent - p - u for extent, p, u in zip(s.read_extents, s.padding, used)]
    return w.pad("%x_pad", x, (g, n // g, *used, c), [0, 0, *s.padding, 0], [0, 0, *high, 0]), parted_dy


def weight_gradient_mlir(s: ConvSignature) -> str:
    """``implicit_split``'s kernel of ``s`` (:func:`serves_weight_gradient`): dY and x, then dW."""
    rank = s.spatial_rank
    n, c = s.input_shape[:2]
    k, window, out = s.output_channels, tuple(s.window), tuple(s.output_spatial)
    g = parts(s)
    w = _Writer(s)
    w.function([("dy", (n, *out, k)), ("x", (n, *s.input_shape[2:], c))], ("dw", (k, *window, c)))
    x, parted_dy = _in_parts(w, s, g)
    partial = (g, k, *window, c)
    taps, pixels = [f"t{i}" for i in range(rank)], [f"o{i}" for i in range(rank)]
    dims = ["g", "k", *taps, "c", "m", *pixels]
    x_index = [f"{o} * {st} + {t} * {d}" for o, t, st, d in zip(pixels, taps, s.stride, s.dilation)]
    w.products("%partial", [_map(dims, ["g", "m", *x_index, "c"]), _map(dims, ["g", "m", *pixels, "k"]),
                            _map(dims, ["g", "k", *taps, "c"])], rank + 3, rank + 1,
               [(x, (g, n // g, *s.read_extents, c)), ("%dy_p", parted_dy)], (w.zeros("%partial_z", partial), partial))
    whole = (k, *window, c)
    outer = ["k", *taps, "c"]
    w.zeros("%total_z", whole)
    w.emit(f"%total = linalg.generic {{indexing_maps = [{_map([*outer, 'g'], ['g', *outer])}, "
           f"{_map([*outer, 'g'], outer)}], iterator_types = [{_iterators(rank + 2, 1)}]}} "
           f"ins(%partial : {_tensor(partial, 'f32')}) outs(%total_z : {_tensor(whole, 'f32')}) {{")
    w.emit("^bb0(%p: f32, %acc: f32):")
    w.emit("  %sum = arith.addf %acc, %p : f32")
    w.emit("  linalg.yield %sum : f32")
    w.emit(f"}} -> {_tensor(whole, 'f32')}")
    return w.store("%total", "dw", whole)


def data_gradient_mlir(s: ConvSignature) -> str:
    """The linalg ``channels_last`` kernel of ``s`` (:func:`serves_data_gradient`): dY and
    the filter, then dX."""
    rank = s.spatial_rank
    n, c = s.input_shape[:2]
    k, window, out, size = s.output_channels, tuple(s.window), tuple(s.output_spatial), tuple(s.input_shape[2:])
    w = _Writer(s)
    w.function([("dy", (n, *out, k)), ("w", (k, *window, c))], ("dx", (n, *size, c)))
    # the filter's taps reversed: torch's flip (linalg rejects a contraction indexing the
    # taps backwards, ``2 - t``: its loop bounds must come from some operand's plain dims)
    w.emit(f"%flip_dims = torch.prim.ListConstruct {', '.join(f'%int{a + 1}' for a in range(rank))} : "
           f"({', '.join('!torch.int' for _ in range(rank))}) -> !torch.list<int>")
    w.emit(f"%w_flipped = torch.aten.flip %w, %flip_dims : {_vtensor((k, *window, c), w.e)}, !torch.list<int> -> "
           f"{_vtensor((k, *window, c), w.e)}")
    w.emit(f"%w_f = torch_c.to_builtin_tensor %w_flipped : {_vtensor((k, *window, c), w.e)} -> "
           f"{_tensor((k, *window, c), w.e)}")
    low = [d * (f - 1) - p for d, f, p in zip(s.dilation, s.window, s.padding)]
    high = [i + d * (f - 1) - lo - o for i, d, f, lo, o in zip(size, s.dilation, s.window, low, out)]
    dy = w.pad("%dy_pad", "%dy_b", (n, *out, k), [0, *low, 0], [0, *high, 0])
    padded = (n, *(o + lo + hi for o, lo, hi in zip(out, low, high)), k)
    pixels, taps = [f"i{a}" for a in range(rank)], [f"t{a}" for a in range(rank)]
    dims = ["n", *pixels, "c", "k", *taps]
    dy_index = [f"{i} + {t} * {d}" for i, t, d in zip(pixels, taps, s.dilation)]
    dx = (n, *size, c)
    w.products("%sums", [_map(dims, ["n", *dy_index, "k"]), _map(dims, ["k", *taps, "c"]),
                         _map(dims, ["n", *pixels, "c"])], rank + 2, rank + 1,
               [(dy, padded), ("%w_f", (k, *window, c))], (w.zeros("%sums_z", dx), dx))
    return w.store("%sums", "dx", dx)


def phase_geometry(stride: int, padding: int, window: int) -> tuple[int, int, int]:
    """Per axis of ``phase_axes``: the window E of its contraction, the shift of its reads
    in dY (``q0 - U + 1``, U = ceil(window / stride) the taps a phase reads at most), and
    ``q1`` (``q(a) = (a + padding) div stride = q0 + q1 * a``). Phase ``a`` reads dY at ``i +
    q(a) - u`` for ``u < U``: over all phases ``i + shift + e`` for ``e < E = U + q1 *
    (stride - 1)``, through tap ``stride * (E - 1 - e) + a - q1``."""
    taps = -(-window // stride)
    q0, q1 = padding // stride, (1 if stride == 2 and padding % 2 else 0)
    return taps + q1 * (stride - 1), q0 - taps + 1, q1


def strided_data_gradient_mlir(s: ConvSignature) -> str:
    """The linalg ``phase_axes`` kernel of ``s`` (:func:`serves_strided_data_gradient`): dY
    and the filter, then dX."""
    rank = s.spatial_rank
    n, c = s.input_shape[:2]
    k, window, out, size = s.output_channels, tuple(s.window), tuple(s.output_spatial), tuple(s.input_shape[2:])
    geometry = [phase_geometry(st, p, f) for st, p, f in zip(s.stride, s.padding, window)]
    w = _Writer(s)
    w.function([("dy", (n, *out, k)), ("w", (k, *window, c))], ("dx", (n, *size, c)))
    # W'[k, e, a, ..., c] = W[k, t, ..., c] with t = stride * (E - 1 - e) + a - q1 (zero
    # outside the window): one gather, its indices computed in the body (IREE's tiling gets
    # a map that indexes the taps backwards wrong)
    whole = (k, *window, c)
    by_phase = (k, *(d for st, (e, _, _) in zip(s.stride, geometry) for d in (e, st)), c)
    identity = [f"d{i}" for i in range(len(by_phase))]
    w.emit(f"%w_phases_e = tensor.empty() : {_tensor(by_phase, w.e)}")
    w.emit(f"%w_phases = linalg.generic {{indexing_maps = [{_map(identity, identity)}], iterator_types = "
           f"[{_iterators(len(by_phase), 0)}]}} outs(%w_phases_e : {_tensor(by_phase, w.e)}) {{")
    w.emit(f"^bb0(%unused: {w.e}):")
    w.emit("  %k = linalg.index 0 : index")
    w.emit(f"  %c = linalg.index {len(by_phase) - 1} : index")
    w.emit("  %i_0 = arith.constant 0 : index")
    w.emit("  %ok_init = arith.constant true")
    ok, taps = "%ok_init", []
    for axis, (st, f, (e, _, q1)) in enumerate(zip(s.stride, window, geometry)):
        w.emit(f"  %e{axis} = linalg.index {1 + 2 * axis} : index")
        w.emit(f"  %a{axis} = linalg.index {2 + 2 * axis} : index")
        w.emit(f"  %base{axis} = arith.constant {st * (e - 1) - q1} : index")
        w.emit(f"  %st{axis} = arith.constant {st} : index")
        w.emit(f"  %f{axis} = arith.constant {f} : index")
        w.emit(f"  %se{axis} = arith.muli %e{axis}, %st{axis} : index")
        w.emit(f"  %b{axis} = arith.addi %base{axis}, %a{axis} : index")
        w.emit(f"  %t{axis} = arith.subi %b{axis}, %se{axis} : index")
        w.emit(f"  %lo{axis} = arith.cmpi sge, %t{axis}, %i_0 : index")
        w.emit(f"  %hi{axis} = arith.cmpi slt, %t{axis}, %f{axis} : index")
        w.emit(f"  %in{axis} = arith.andi %lo{axis}, %hi{axis} : i1")
        w.emit(f"  %ok{axis} = arith.andi {ok}, %in{axis} : i1")
        w.emit(f"  %tc{axis} = arith.select %in{axis}, %t{axis}, %i_0 : index")
        ok = f"%ok{axis}"
        taps.append(f"%tc{axis}")
    w.emit(f"  %v = tensor.extract %w_b[%k, {', '.join(taps)}, %c] : {_tensor(whole, w.e)}")
    w.emit(f"  %r = arith.select {ok}, %v, %zero_e : {w.e}")
    w.emit(f"  linalg.yield %r : {w.e}")
    w.emit(f"}} -> {_tensor(by_phase, w.e)}")
    # dY read at i + (q0 - U + 1) + e: a convolution of dY at stride 1, zero outside itself
    low = [max(0, -shift) for _, shift, _ in geometry]
    high = [max(0, h // st + shift + e - 1 - o) for h, st, (e, shift, _), o in zip(size, s.stride, geometry, out)]
    dy = w.pad("%dy_pad", "%dy_b", (n, *out, k), [0, *low, 0], [0, *high, 0])
    padded = (n, *(o + lo + hi for o, lo, hi in zip(out, low, high)), k)
    pixels, phases, taps = ([f"{letter}{a}" for a in range(rank)] for letter in "iae")
    viewed_dims = ["n", *(d for pair in zip(pixels, phases) for d in pair), "c"]
    dims = [*viewed_dims, "k", *taps]
    dy_index = [f"{i} + {e} + {shift + lo}" if shift + lo else f"{i} + {e}"
                for i, e, (_, shift, _), lo in zip(pixels, taps, geometry, low)]
    viewed = (n, *(d for h, st in zip(size, s.stride) for d in (h // st, st)), c)
    w.products("%sums", [_map(dims, ["n", *dy_index, "k"]),
                         _map(dims, ["k", *(d for pair in zip(taps, phases) for d in pair), "c"]),
                         _map(dims, viewed_dims)],
               2 * rank + 2, rank + 1, [(dy, padded), ("%w_phases", by_phase)],
               (w.zeros("%sums_z", viewed), viewed))
    groups = "[[0], " + ", ".join(f"[{2 * a + 1}, {2 * a + 2}]" for a in range(rank)) + f", [{2 * rank + 1}]]"
    dx = (n, *size, c)
    w.emit(f"%sums_dx = tensor.collapse_shape %sums {groups} : {_tensor(viewed, 'f32')} into {_tensor(dx, 'f32')}")
    return w.store("%sums_dx", "dx", dx)


# -- depthwise ------------------------------------------------------------------------------------


def is_depthwise(s: ConvSignature) -> bool:
    """A channels-last depthwise convolution: one input and one output channel per group,
    as many groups as channels, not transposed, a floating-point type."""
    channels_last = layouts.channels_last(s.spatial_rank)
    c = s.input_shape[1]
    return (not s.transposed and s.groups == c > 1 and s.kernel_shape[:2] == (c, 1) and s.dtype in _ELEMENT
            and s.input_layout == s.output_layout == s.kernel_layout == channels_last)


def serves_depthwise(s: ConvSignature) -> bool:
    """Whether ``depthwise`` computes ``s``: a depthwise convolution (:func:`is_depthwise`);
    a forward with no activation (a bias is added), a weight gradient whose windows read x, or
    a stride-1 data gradient with padding within the dilated window."""
    if not is_depthwise(s):
        return False
    if s.mode == "fwd":
        return s.activation is None
    if s.mode == "wrw":
        return all(u > 0 for u in _extent_of_x_read(s))
    return (s.mode == "bwd" and all(st == 1 for st in s.stride)
            and all(p <= d * (f - 1) for p, d, f in zip(s.padding, s.dilation, s.window)))


def _taps_by_position(w: _Writer, value: str, shape: tuple[int, ...], reverse: bool) -> str:
    """The filter ``(C, *window, 1)`` as ``(*window, C)`` (each tap's channels side by side,
    as the image holds them), its taps reversed if ``reverse``: a gather kept an executable
    of its own (IREE would fuse a plain transpose into the contraction, whose threads would
    then read the taps a channel apart)."""
    rank = len(shape) - 2
    by_tap = (*shape[1:-1], shape[0])
    dims = [f"d{i}" for i in range(rank + 1)]
    w.emit(f"%w_by_tap_e = tensor.empty() : {_tensor(by_tap, w.e)}")
    w.emit(f"%w_by_tap = linalg.generic {{indexing_maps = [{_map(dims, dims)}], iterator_types = "
           f"[{_iterators(rank + 1, 0)}]}} outs(%w_by_tap_e : {_tensor(by_tap, w.e)}) {{")
    w.emit(f"^bb0(%unused_tap: {w.e}):")
    w.emit(f"  %tap_c = linalg.index {rank} : index")
    w.emit("  %tap_zero = arith.constant 0 : index")
    taps = []
    for axis, f in enumerate(shape[1:-1]):
        w.emit(f"  %tap_i{axis} = linalg.index {axis} : index")
        w.emit(f"  %tap_last{axis} = arith.constant {f - 1} : index")
        if reverse:
            w.emit(f"  %tap_r{axis} = arith.subi %tap_last{axis}, %tap_i{axis} : index")
        else:  # i itself, which IREE does not see as a transpose (it would fuse that into the contraction)
            w.emit(f"  %tap_r{axis} = arith.minui %tap_i{axis}, %tap_last{axis} : index")
        taps.append(f"%tap_r{axis}")
    w.emit(f"  %tap = tensor.extract {value}[%tap_c, {', '.join(taps)}, %tap_zero] : {_tensor(shape, w.e)}")
    w.emit(f"  linalg.yield %tap : {w.e}")
    w.emit(f"}} -> {_tensor(by_tap, w.e)}")
    return "%w_by_tap"


def depthwise_mlir(s: ConvSignature) -> str:
    """``depthwise``'s kernel of a forward or a data gradient (:func:`serves_depthwise`):
    x or dY convolved with the filter's taps (reversed for the data gradient), then y or dX."""
    rank, forward = s.spatial_rank, s.mode == "fwd"
    n, c = s.input_shape[:2]
    window, out, size = tuple(s.window), tuple(s.output_spatial), tuple(s.input_shape[2:])
    whole_w = (c, *window, 1)
    w = _Writer(s)
    if forward:
        source, dest = (n, *size), (n, *out)
        inputs = [("x", (n, *size, c)), ("w", whole_w)] + ([("shift", (c,))] if s.bias else [])
        w.function(inputs, ("y", (*dest, c)))
        strides = s.stride
        used = _extent_of_x_read(s)
        low, high = list(s.padding), [e - p - u for e, p, u in zip(s.read_extents, s.padding, used)]
    else:
        source, dest = (n, *out), (n, *size)
        w.function([("dy", (*source, c)), ("w", whole_w)], ("dx", (*dest, c)))
        strides, used = (1,) * rank, out
        low = [d * (f - 1) - p for d, f, p in zip(s.dilation, s.window, s.padding)]
        high = [i + d * (f - 1) - lo - o for i, d, f, lo, o in zip(size, s.dilation, s.window, low, out)]
    value = "%x_b" if forward else "%dy_b"
    if tuple(used) != source[1:]:  # x past the windows' extent is never read: cut it off
        cut = (n, *used, c)
        w.emit(f"%src_cut = tensor.extract_slice {value}[{', '.join('0' for _ in cut)}] "
               f"[{', '.join(map(str, cut))}] [{', '.join('1' for _ in cut)}] : {_tensor((*source, c), w.e)} to "
               f"{_tensor(cut, w.e)}")
        value = "%src_cut"
    value = w.pad("%src_pad", value, (n, *used, c), [0, *low, 0], [0, *high, 0])
    padded = (n, *(u + lo + hi for u, lo, hi in zip(used, low, high)), c)
    taps = _taps_by_position(w, "%w_b", whole_w, reverse=not forward)
    pixels, tap_dims = [f"o{a}" for a in range(rank)], [f"t{a}" for a in range(rank)]
    dims = ["n", *pixels, "c", *tap_dims]
    index = [f"{o} * {st} + {t} * {d}" for o, t, st, d in zip(pixels, tap_dims, strides, s.dilation)]
    result = (*dest, c)
    sums = w.products("%sums", [_map(dims, ["n", *index, "c"]), _map(dims, [*tap_dims, "c"]),
                                _map(dims, ["n", *pixels, "c"])], rank + 2, rank,
                      [(value, padded), (taps, (*window, c))], (w.zeros("%sums_z", result), result))
    if forward and s.bias:
        outer = ["n", *pixels, "c"]
        w.emit(f"%biased = linalg.generic {{indexing_maps = [{_map(outer, ['c'])}, {_map(outer, outer)}], "
               f"iterator_types = [{_iterators(rank + 2, 0)}]}} ins(%shift_b : {_tensor((c,), w.e)}) "
               f"outs({sums} : {_tensor(result, 'f32')}) {{")
        w.emit(f"^bb0(%bv: {w.e}, %acc: f32):")
        if w.e != "f32":
            w.emit(f"  %bv_f = arith.extf %bv : {w.e} to f32")
        w.emit(f"  %sum = arith.addf %acc, {'%bv' if w.e == 'f32' else '%bv_f'} : f32")
        w.emit("  linalg.yield %sum : f32")
        w.emit(f"}} -> {_tensor(result, 'f32')}")
        sums = "%biased"
    return w.store(sums, "y" if forward else "dx", result)


def depthwise_weight_gradient_mlir(s: ConvSignature) -> str:
    """``depthwise``'s kernel of a weight gradient (:func:`serves_depthwise`): dY and x, then
    dW, summed in parts of the batch (:func:`parts`) as float32, then over the parts. (Parts
    of dY's rows as well, x indexed by the part and the row together, crashed iree-compile
    3.13.)"""
    rank = s.spatial_rank
    n, c = s.input_shape[:2]
    window, out, size = tuple(s.window), tuple(s.output_spatial), tuple(s.input_shape[2:])
    g = parts(s)
    w = _Writer(s)
    w.function([("dy", (n, *out, c)), ("x", (n, *size, c))], ("dw", (c, *window, 1)))
    x, parted_dy = _in_parts(w, s, g)
    # the partial sums (parts, *window, C): channels innermost, as x and dY hold them
    partial = (g, *window, c)
    taps, pixels = [f"t{i}" for i in range(rank)], [f"o{i}" for i in range(rank)]
    dims = ["g", *taps, "c", "m", *pixels]
    x_index = [f"{o} * {st} + {t} * {d}" for o, t, st, d in zip(pixels, taps, s.stride, s.dilation)]
    w.products("%partial", [_map(dims, ["g", "m", *x_index, "c"]), _map(dims, ["g", "m", *pixels, "c"]),
                            _map(dims, ["g", *taps, "c"])], rank + 2, rank + 1,
               [(x, (g, n // g, *s.read_extents, c)), ("%dy_p", parted_dy)], (w.zeros("%partial_z", partial), partial))
    total = (c, *window)
    outer = [*taps, "c", "g"]
    w.zeros("%total_z", total)
    w.emit(f"%total = linalg.generic {{indexing_maps = [{_map(outer, ['g', *taps, 'c'])}, "
           f"{_map(outer, ['c', *taps])}], iterator_types = [{_iterators(rank + 1, 1)}]}} "
           f"ins(%partial : {_tensor(partial, 'f32')}) outs(%total_z : {_tensor(total, 'f32')}) {{")
    w.emit("^bb0(%p: f32, %acc: f32):")
    w.emit("  %sum = arith.addf %acc, %p : f32")
    w.emit("  linalg.yield %sum : f32")
    w.emit(f"}} -> {_tensor(total, 'f32')}")
    whole = (c, *window, 1)
    last = "[" + ", ".join(f"[{i}]" for i in range(rank)) + f", [{rank}, {rank + 1}]]"
    w.emit(f"%total_w = tensor.expand_shape %total {last} output_shape [{', '.join(map(str, whole))}] : "
           f"{_tensor(total, 'f32')} into {_tensor(whole, 'f32')}")
    return w.store("%total_w", "dw", whole)
