"""Grouped convolutions written as linalg directly: channels-last convolutions whose
contraction reads the caller's tensors as they are stored, with channels innermost.

* ``depthwise`` (one channel per group, groups = input = output channels): the forward
  ``y[n, o, c] = sum over taps t of x[n, o * stride + t * dilation - padding, c] * w[t, c]``
  (+ bias[c]) as one ``linalg.generic`` over x as stored and the filter rearranged tap-major
  (an executable of its own); the stride-1 data gradient the same over dY with the taps also
  reversed; the weight gradient ``dW[c, t] = sum over n, o of dY[n, o, c] * x[n, o * stride +
  t * dilation - padding, c]`` in parts of the batch, as ``implicit_split``'s. Neighbouring
  threads read neighbouring channels of one pixel.
* ``grouped`` (several channels in each of several groups): the channels viewed as (groups,
  channels of a group), for free; the forward ``y[n, o, g, k] = sum over taps t and c of
  x[n, o * stride + t * dilation - padding, g, c] * w[g, k, t, c]`` (+ bias) as one
  contraction over x as stored; the stride-1 data gradient the same over dY with the
  filter's taps reversed (torch's ``flip``) and its channels' roles swapped; the weight
  gradient ``dW[g, k, t, c] = sum over n, o of dY[n, o, g, k] * x[n, o * stride + t *
  dilation - padding, g, c]`` in parts of the batch.

The padding is a ``tensor.pad`` IREE fuses into the contraction (``linalg_common.FLAGS``). Where the
conv op offers them: ``formulations.DEPTHWISE`` and ``formulations.GROUPED``.
"""

from __future__ import annotations

from .linalg_common import (
    Writer,
    affine_map,
    channels_last_float,
    extent_of_x_read,
    in_parts,
    iterators,
    padding_within_window,
    parts,
    tensor_type,
    windows_read_x,
)
from .signature import ConvSignature


def is_depthwise(s: ConvSignature) -> bool:
    """A channels-last depthwise convolution: one input and one output channel per group,
    as many groups as channels, not transposed, a floating-point type."""
    c = s.input_shape[1]
    return s.groups == c > 1 and s.kernel_shape[:2] == (c, 1) and channels_last_float(s)


def serves_depthwise(s: ConvSignature) -> bool:
    """Whether ``depthwise`` computes ``s``: a depthwise convolution (:func:`is_depthwise`);
    a forward with no activation (a bias is added), a weight gradient whose windows read x, or
    a stride-1 data gradient with padding within the dilated window."""
    return is_depthwise(s) and _written_mode(s)


def _written_mode(s: ConvSignature) -> bool:
    """Whether the mode of ``s`` is one these formulations write: a forward with no activation
    (a bias is added), a weight gradient whose windows read x, or a stride-1 data gradient
    with padding within the dilated window."""
    if s.mode == "fwd":
        return s.activation is None
    if s.mode == "wrw":
        return windows_read_x(s)
    return s.mode == "bwd" and all(st == 1 for st in s.stride) and padding_within_window(s)


def _taps_by_position(w: Writer, value: str, shape: tuple[int, ...], reverse: bool) -> str:
    """The filter ``(C, *window, 1)`` as ``(*window, C)`` (each tap's channels side by side,
    as the image holds them), its taps reversed if ``reverse``: a gather kept an executable
    of its own (IREE would fuse a plain transpose into the contraction, whose threads would
    then read the taps a channel apart)."""
    rank = len(shape) - 2
    by_tap = (*shape[1:-1], shape[0])
    dims = [f"d{i}" for i in range(rank + 1)]
    w.emit(f"%w_by_tap_e = tensor.empty() : {tensor_type(by_tap, w.e)}")
    w.emit(f"%w_by_tap = linalg.generic {{indexing_maps = [{affine_map(dims, dims)}], iterator_types = "
           f"[{iterators(rank + 1, 0)}]}} outs(%w_by_tap_e : {tensor_type(by_tap, w.e)}) {{")
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
    w.emit(f"  %tap = tensor.extract {value}[%tap_c, {', '.join(taps)}, %tap_zero] : {tensor_type(shape, w.e)}")
    w.emit(f"  linalg.yield %tap : {w.e}")
    w.emit(f"}} -> {tensor_type(by_tap, w.e)}")
    return "%w_by_tap"


def _source_read(w: Writer, s: ConvSignature, channels: int) -> tuple[str, tuple[int, ...], list[int], list[int],
                                                                      tuple[int, ...]]:
    """What a forward's (or a stride-1 data gradient's) contraction reads: x (dY), cut to the
    extent its windows read where they stop short of its end; that extent; its padding below
    and above on each spatial axis; the windows' strides."""
    rank, forward = s.spatial_rank, s.mode == "fwd"
    n = s.input_shape[0]
    out, size = tuple(s.output_spatial), tuple(s.input_shape[2:])
    if forward:
        source, strides, used = (n, *size), s.stride, extent_of_x_read(s)
        low, high = list(s.padding), [e - p - u for e, p, u in zip(s.read_extents, s.padding, used)]
    else:
        source, strides, used = (n, *out), (1,) * rank, out
        low = [d * (f - 1) - p for d, f, p in zip(s.dilation, s.window, s.padding)]
        high = [i + d * (f - 1) - lo - o for i, d, f, lo, o in zip(size, s.dilation, s.window, low, out)]
    value = "%x_b" if forward else "%dy_b"
    if tuple(used) != source[1:]:  # x past the windows' extent is never read: cut it off
        cut = (n, *used, channels)
        w.emit(f"%src_cut = tensor.extract_slice {value}[{', '.join('0' for _ in cut)}] "
               f"[{', '.join(map(str, cut))}] [{', '.join('1' for _ in cut)}] : "
               f"{tensor_type((*source, channels), w.e)} to {tensor_type(cut, w.e)}")
        value = "%src_cut"
    return value, tuple(used), low, high, tuple(strides)


def depthwise_mlir(s: ConvSignature) -> str:
    """``depthwise``'s kernel of a forward or a data gradient (:func:`serves_depthwise`):
    x or dY convolved with the filter's taps (reversed for the data gradient), then y or dX."""
    rank, forward = s.spatial_rank, s.mode == "fwd"
    n, c = s.input_shape[:2]
    window, out, size = tuple(s.window), tuple(s.output_spatial), tuple(s.input_shape[2:])
    whole_w = (c, *window, 1)
    w = Writer(s)
    dest = (n, *out) if forward else (n, *size)
    if forward:
        w.function([("x", (n, *size, c)), ("w", whole_w)] + ([("shift", (c,))] if s.bias else []), ("y", (*dest, c)))
    else:
        w.function([("dy", (n, *out, c)), ("w", whole_w)], ("dx", (*dest, c)))
    value, used, low, high, strides = _source_read(w, s, c)
    value = w.pad("%src_pad", value, (n, *used, c), [0, *low, 0], [0, *high, 0])
    padded = (n, *(u + lo + hi for u, lo, hi in zip(used, low, high)), c)
    taps = _taps_by_position(w, "%w_b", whole_w, reverse=not forward)
    pixels, tap_dims = [f"o{a}" for a in range(rank)], [f"t{a}" for a in range(rank)]
    dims = ["n", *pixels, "c", *tap_dims]
    index = [f"{o} * {st} + {t} * {d}" for o, t, st, d in zip(pixels, tap_dims, strides, s.dilation)]
    result = (*dest, c)
    sums = w.products("%sums", [affine_map(dims, ["n", *index, "c"]), affine_map(dims, [*tap_dims, "c"]),
                                affine_map(dims, ["n", *pixels, "c"])], rank + 2, rank,
                      [(value, padded), (taps, (*window, c))], (w.zeros("%sums_z", result), result))
    if forward and s.bias:
        sums = w.add_bias(sums, result)
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
    w = Writer(s)
    w.function([("dy", (n, *out, c)), ("x", (n, *size, c))], ("dw", (c, *window, 1)))
    x, parted_dy = in_parts(w, s, g)
    # the partial sums (parts, *window, C): channels innermost, as x and dY hold them
    partial = (g, *window, c)
    taps, pixels = [f"t{i}" for i in range(rank)], [f"o{i}" for i in range(rank)]
    dims = ["g", *taps, "c", "m", *pixels]
    x_index = [f"{o} * {st} + {t} * {d}" for o, t, st, d in zip(pixels, taps, s.stride, s.dilation)]
    w.products("%partial", [affine_map(dims, ["g", "m", *x_index, "c"]), affine_map(dims, ["g", "m", *pixels, "c"]),
                            affine_map(dims, ["g", *taps, "c"])], rank + 2, rank + 1,
               [(x, (g, n // g, *s.read_extents, c)), ("%dy_p", parted_dy)], (w.zeros("%partial_z", partial), partial))
    total = (c, *window)
    w.sum_over("%partial", partial, ["g", *taps, "c"], [*taps, "c", "g"], ["c", *taps], total)
    whole = (c, *window, 1)
    last = "[" + ", ".join(f"[{i}]" for i in range(rank)) + f", [{rank}, {rank + 1}]]"
    w.emit(f"%total_w = tensor.expand_shape %total {last} output_shape [{', '.join(map(str, whole))}] : "
           f"{tensor_type(total, 'f32')} into {tensor_type(whole, 'f32')}")
    return w.store("%total_w", "dw", whole)


# -- grouped --------------------------------------------------------------------------------------


def serves_grouped(s: ConvSignature) -> bool:
    """Whether ``grouped`` computes ``s``: a channels-last convolution of several groups, not
    depthwise (:func:`is_depthwise`), not transposed; a forward with no activation (a bias is
    added), a stride-1 data gradient with padding within the dilated window, or a weight
    gradient whose windows read x."""
    return s.groups > 1 and not is_depthwise(s) and channels_last_float(s) and _written_mode(s)


def _by_group(w: Writer, name: str, value: str, shape: tuple[int, ...], groups: int, element: str) -> str:
    """``value`` of ``shape`` with its last dimension (channels) split into (groups, channels
    of a group)."""
    rank = len(shape)
    split = (*shape[:-1], groups, shape[-1] // groups)
    reassociation = "[" + ", ".join(f"[{i}]" for i in range(rank - 1)) + f", [{rank - 1}, {rank}]]"
    w.emit(f"{name} = tensor.expand_shape {value} {reassociation} output_shape [{', '.join(map(str, split))}] : "
           f"{tensor_type(shape, element)} into {tensor_type(split, element)}")
    return name


def _filter_by_group(w: Writer, value: str, s: ConvSignature) -> tuple[str, tuple[int, ...]]:
    """The filter ``(K, *window, C/G)`` as ``(G, K/G, *window, C/G)``."""
    k, rank = s.output_channels, s.spatial_rank
    shape = tuple(s.kernel_shape[:1]) + tuple(s.window) + tuple(s.kernel_shape[1:2])
    split = (s.groups, k // s.groups, *shape[1:])
    reassociation = "[[0, 1], " + ", ".join(f"[{i + 2}]" for i in range(rank + 1)) + "]"
    w.emit(f"%w_g = tensor.expand_shape {value} {reassociation} output_shape [{', '.join(map(str, split))}] : "
           f"{tensor_type(shape, w.e)} into {tensor_type(split, w.e)}")
    return "%w_g", split


def _collapse_groups(w: Writer, value: str, shape: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
    """A float32 ``value`` whose last two dimensions are (groups, channels of a group), as one."""
    rank = len(shape) - 1
    whole = (*shape[:-2], shape[-2] * shape[-1])
    reassociation = "[" + ", ".join(f"[{i}]" for i in range(rank - 1)) + f", [{rank - 1}, {rank}]]"
    w.emit(f"%whole = tensor.collapse_shape {value} {reassociation} : {tensor_type(shape, 'f32')} into "
           f"{tensor_type(whole, 'f32')}")
    return "%whole", whole


def grouped_mlir(s: ConvSignature) -> str:
    """``grouped``'s kernel of a forward or a stride-1 data gradient (:func:`serves_grouped`):
    ``y[n, o, g, k] = sum over taps t and a group's channels c of x[n, o * stride + t *
    dilation - padding, g, c] * w[g, k, t, c]`` (+ bias), one contraction over x (or dY, the
    filter's taps reversed and its channels swapped) as stored."""
    rank, forward, groups = s.spatial_rank, s.mode == "fwd", s.groups
    n, c = s.input_shape[:2]
    k, window, out, size = s.output_channels, tuple(s.window), tuple(s.output_spatial), tuple(s.input_shape[2:])
    stored_w = (k, *window, c // groups)
    w = Writer(s)
    if forward:
        channels, dest, result_channels = c, (n, *out), k
        w.function([("x", (n, *size, c)), ("w", stored_w)] + ([("shift", (k,))] if s.bias else []), ("y", (*dest, k)))
        filt = "%w_b"
    else:
        channels, dest, result_channels = k, (n, *size), c
        w.function([("dy", (n, *out, k)), ("w", stored_w)], ("dx", (*dest, c)))
        filt = w.flipped(stored_w)
    value, used, low, high, strides = _source_read(w, s, channels)
    value = _by_group(w, "%src_g", value, (n, *used, channels), groups, w.e)
    value = w.pad("%src_pad", value, (n, *used, groups, channels // groups), [0, *low, 0, 0], [0, *high, 0, 0])
    padded = (n, *(u + lo + hi for u, lo, hi in zip(used, low, high)), groups, channels // groups)
    filt, by_group = _filter_by_group(w, filt, s)
    pixels, taps = [f"o{a}" for a in range(rank)], [f"t{a}" for a in range(rank)]
    index = [f"{o} * {st} + {t} * {d}" for o, t, st, d in zip(pixels, taps, strides, s.dilation)]
    result = (*dest, groups, result_channels // groups)
    # forward: out channel j = k of the filter, reduced over its c; data gradient: j = c, reduced over k
    dims = ["n", *pixels, "g", "j", *taps, "r"]
    filter_index = ["g", "j", *taps, "r"] if forward else ["g", "r", *taps, "j"]
    sums = w.products("%sums", [affine_map(dims, ["n", *index, "g", "r"]), affine_map(dims, filter_index),
                                affine_map(dims, ["n", *pixels, "g", "j"])], rank + 3, rank + 1,
                      [(value, padded), (filt, by_group)], (w.zeros("%sums_z", result), result))
    sums, whole = _collapse_groups(w, sums, result)
    if forward and s.bias:
        sums = w.add_bias(sums, whole)
    return w.store(sums, "y" if forward else "dx", whole)


def grouped_weight_gradient_mlir(s: ConvSignature) -> str:
    """``grouped``'s kernel of a weight gradient (:func:`serves_grouped`): ``dW[g, k, t, c] =
    sum over n, o of dY[n, o, g, k] * x[n, o * stride + t * dilation - padding, g, c]`` as
    float32 sums over parts of the batch (:func:`parts`), then over the parts."""
    rank, groups = s.spatial_rank, s.groups
    n, c = s.input_shape[:2]
    k, window, out, size = s.output_channels, tuple(s.window), tuple(s.output_spatial), tuple(s.input_shape[2:])
    g = parts(s)
    w = Writer(s)
    stored_w = (k, *window, c // groups)
    w.function([("dy", (n, *out, k)), ("x", (n, *size, c))], ("dw", stored_w))
    x, parted_dy = in_parts(w, s, g)
    x = _by_group(w, "%x_g", x, (g, n // g, *s.read_extents, c), groups, w.e)
    dy = _by_group(w, "%dy_g", "%dy_p", parted_dy, groups, w.e)
    taps, pixels = [f"t{i}" for i in range(rank)], [f"o{i}" for i in range(rank)]
    dims = ["p", "g", "k", *taps, "c", "m", *pixels]
    x_index = [f"{o} * {st} + {t} * {d}" for o, t, st, d in zip(pixels, taps, s.stride, s.dilation)]
    partial = (g, groups, k // groups, *window, c // groups)
    w.products("%partial", [affine_map(dims, ["p", "m", *x_index, "g", "c"]),
                            affine_map(dims, ["p", "m", *pixels, "g", "k"]),
                            affine_map(dims, ["p", "g", "k", *taps, "c"])], rank + 4, rank + 1,
               [(x, (g, n // g, *s.read_extents, groups, c // groups)),
                (dy, (*parted_dy[:-1], groups, k // groups))], (w.zeros("%partial_z", partial), partial))
    total = partial[1:]
    kept = ["g", "k", *taps, "c"]
    w.sum_over("%partial", partial, ["p", *kept], [*kept, "p"], kept, total)
    reassociation = "[[0, 1], " + ", ".join(f"[{i + 2}]" for i in range(rank + 1)) + "]"
    w.emit(f"%total_w = tensor.collapse_shape %total {reassociation} : {tensor_type(total, 'f32')} into "
           f"{tensor_type(stored_w, 'f32')}")
    return w.store("%total_w", "dw", stored_w)
