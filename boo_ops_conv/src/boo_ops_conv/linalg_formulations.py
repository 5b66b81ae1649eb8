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

The padding is a ``tensor.pad`` that IREE fuses into the contraction
(``linalg_common.FLAGS``), so on CUDA IREE's module binds the caller's tensors to the
contraction's executable: two
executables for the weight gradient (the products, binding x, dY and the float32 partial
sums, then their sum); two for the data gradient (the filter reversed into a transient,
then the contraction of dY and it). Nothing copies x into columns or a padded image, which
is what a kernel library substituting an implicit GEMM needs (its kernel applies the
padding as it reads). The conv op offers them on CUDA only (IREE's CPU kernels
of them are 7-22x slower than the CPU's own formulations: ``formulations.IMPLICIT_SPLIT``);
there IREE's own kernel of ``implicit_split`` is the first for 16-bit weight gradients of a
window, the data gradient's comes last. (Grouped convolutions: :mod:`.grouped_formulations`.)
"""

from __future__ import annotations

import math

from .linalg_common import (
    Writer,
    affine_map,
    channels_last_float,
    in_parts,
    iterators,
    padding_within_window,
    parts,
    tensor_type,
    windows_read_x,
)
from .signature import ConvSignature


def _plain_channels_last(s: ConvSignature) -> bool:
    """Channels-last x, dY and filter (K, *window, C), one group, not transposed, a
    floating-point type."""
    return s.groups == 1 and channels_last_float(s)


def serves_weight_gradient(s: ConvSignature) -> bool:
    """Whether ``implicit_split`` computes ``s``: a channels-last weight gradient whose
    windows read x."""
    return s.mode == "wrw" and _plain_channels_last(s) and windows_read_x(s)


def serves_data_gradient(s: ConvSignature) -> bool:
    """Whether the linalg ``channels_last`` formulation computes ``s``: a stride-1
    channels-last data gradient of a window of several taps, with no bias, padding within
    the dilated window."""
    return (s.mode == "bwd" and _plain_channels_last(s) and math.prod(s.window) > 1
            and all(st == 1 for st in s.stride) and not getattr(s, "bias", False) and padding_within_window(s))


def serves_strided_data_gradient(s: ConvSignature) -> bool:
    """Whether ``phase_axes`` computes ``s``: a channels-last data gradient, undilated, no
    bias, strides of 1 and 2 with a 2 among them, each of dX's extents a multiple of its
    stride (dX viewed as phases for free), padding within the window."""
    return (s.mode == "bwd" and _plain_channels_last(s) and not getattr(s, "bias", False)
            and all(d == 1 for d in s.dilation) and set(s.stride) <= {1, 2} and 2 in s.stride
            and all(h % st == 0 for h, st in zip(s.input_shape[2:], s.stride))
            and all(p < f for p, f in zip(s.padding, s.window)))


def weight_gradient_mlir(s: ConvSignature) -> str:
    """``implicit_split``'s kernel of ``s`` (:func:`serves_weight_gradient`): dY and x, then dW."""
    rank = s.spatial_rank
    n, c = s.input_shape[:2]
    k, window, out = s.output_channels, tuple(s.window), tuple(s.output_spatial)
    g = parts(s)
    w = Writer(s)
    w.function([("dy", (n, *out, k)), ("x", (n, *s.input_shape[2:], c))], ("dw", (k, *window, c)))
    x, parted_dy = in_parts(w, s, g)
    partial = (g, k, *window, c)
    taps, pixels = [f"t{i}" for i in range(rank)], [f"o{i}" for i in range(rank)]
    dims = ["g", "k", *taps, "c", "m", *pixels]
    x_index = [f"{o} * {st} + {t} * {d}" for o, t, st, d in zip(pixels, taps, s.stride, s.dilation)]
    w.products("%partial", [affine_map(dims, ["g", "m", *x_index, "c"]), affine_map(dims, ["g", "m", *pixels, "k"]),
                            affine_map(dims, ["g", "k", *taps, "c"])], rank + 3, rank + 1,
               [(x, (g, n // g, *s.read_extents, c)), ("%dy_p", parted_dy)], (w.zeros("%partial_z", partial), partial))
    whole = (k, *window, c)
    outer = ["k", *taps, "c"]
    return w.store(w.sum_over("%partial", partial, ["g", *outer], [*outer, "g"], outer, whole), "dw", whole)


def data_gradient_mlir(s: ConvSignature) -> str:
    """The linalg ``channels_last`` kernel of ``s`` (:func:`serves_data_gradient`): dY and
    the filter, then dX."""
    rank = s.spatial_rank
    n, c = s.input_shape[:2]
    k, window, out, size = s.output_channels, tuple(s.window), tuple(s.output_spatial), tuple(s.input_shape[2:])
    w = Writer(s)
    w.function([("dy", (n, *out, k)), ("w", (k, *window, c))], ("dx", (n, *size, c)))
    # the filter's taps reversed: torch's flip (linalg rejects a contraction indexing the
    # taps backwards, ``2 - t``: its loop bounds must come from some operand's plain dims)
    w.flipped((k, *window, c))
    low = [d * (f - 1) - p for d, f, p in zip(s.dilation, s.window, s.padding)]
    high = [i + d * (f - 1) - lo - o for i, d, f, lo, o in zip(size, s.dilation, s.window, low, out)]
    dy = w.pad("%dy_pad", "%dy_b", (n, *out, k), [0, *low, 0], [0, *high, 0])
    padded = (n, *(o + lo + hi for o, lo, hi in zip(out, low, high)), k)
    pixels, taps = [f"i{a}" for a in range(rank)], [f"t{a}" for a in range(rank)]
    dims = ["n", *pixels, "c", "k", *taps]
    dy_index = [f"{i} + {t} * {d}" for i, t, d in zip(pixels, taps, s.dilation)]
    dx = (n, *size, c)
    w.products("%sums", [affine_map(dims, ["n", *dy_index, "k"]), affine_map(dims, ["k", *taps, "c"]),
                         affine_map(dims, ["n", *pixels, "c"])], rank + 2, rank + 1,
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
    w = Writer(s)
    w.function([("dy", (n, *out, k)), ("w", (k, *window, c))], ("dx", (n, *size, c)))
    # W'[k, e, a, ..., c] = W[k, t, ..., c] with t = stride * (E - 1 - e) + a - q1 (zero
    # outside the window): one gather, its indices computed in the body (IREE's tiling gets
    # a map that indexes the taps backwards wrong)
    whole = (k, *window, c)
    by_phase = (k, *(d for st, (e, _, _) in zip(s.stride, geometry) for d in (e, st)), c)
    identity = [f"d{i}" for i in range(len(by_phase))]
    w.emit(f"%w_phases_e = tensor.empty() : {tensor_type(by_phase, w.e)}")
    w.emit(f"%w_phases = linalg.generic {{indexing_maps = [{affine_map(identity, identity)}], iterator_types = "
           f"[{iterators(len(by_phase), 0)}]}} outs(%w_phases_e : {tensor_type(by_phase, w.e)}) {{")
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
    w.emit(f"  %v = tensor.extract %w_b[%k, {', '.join(taps)}, %c] : {tensor_type(whole, w.e)}")
    w.emit(f"  %r = arith.select {ok}, %v, %zero_e : {w.e}")
    w.emit(f"  linalg.yield %r : {w.e}")
    w.emit(f"}} -> {tensor_type(by_phase, w.e)}")
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
    w.products("%sums", [affine_map(dims, ["n", *dy_index, "k"]),
                         affine_map(dims, ["k", *(d for pair in zip(taps, phases) for d in pair), "c"]),
                         affine_map(dims, viewed_dims)],
               2 * rank + 2, rank + 1, [(dy, padded), ("%w_phases", by_phase)],
               (w.zeros("%sums_z", viewed), viewed))
    groups = "[[0], " + ", ".join(f"[{2 * a + 1}, {2 * a + 2}]" for a in range(rank)) + f", [{2 * rank + 1}]]"
    dx = (n, *size, c)
    w.emit(f"%sums_dx = tensor.collapse_shape %sums {groups} : {tensor_type(viewed, 'f32')} into "
           f"{tensor_type(dx, 'f32')}")
    return w.store("%sums_dx", "dx", dx)
