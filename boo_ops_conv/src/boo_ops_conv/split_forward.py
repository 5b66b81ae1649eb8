"""``split_k`` (CUDA): a channels-last 16-bit forward convolution whose output tiles would
leave most of a GPU idle, written as linalg.

At small batches a ResNet's late convolutions have few output pixels: at batch 1 a 7x7 map
with 512 output channels is 4 output tiles of 128 x 128 for the 132 multiprocessors of an
H100, each tile reducing 4,608 products (3x3 windows of 512 channels). Here the reduction is
cut into :func:`parts` slices of the input channels: one contraction over x as stored (its
padding fused in, as in :mod:`.linalg_formulations`) into float32 partial sums ``(parts, N,
P, Q, K)``, then their sum with the epilogue, rounded once. IREE's module is two
executables: the products, binding x, the filter and the partial sums (a transient IREE
allocates per call), and the sum. A kernel library replaces the products with a kernel whose
programs each run one tile's share of the reduction.

Measured on an H200 (the Hopper library's kernel alone, ``bench_conv.py --implicit --splits
1,2,4,8``, µs, cuDNN's in parentheses): 512->512 3x3 @7 at batch 1 23.7, 17.3, 9.8, 6.1
(11.0); at batch 8 26.6, 17.6, 10.6, 9.9 (11.7); 2048->512 1x1 @7 at batch 8 12.6, 9.2, 6.3,
6.4 (5.8). Two slices do not pay for the sum's executable (about 5 µs for batch 32's 7x7
maps): at batch 32 those maps' 52 tiles in two slices took 22.6 against 24.8 unsplit, and
1024->256 1x1 @14 at batch 8 6.0 against 6.6 (four slices of 256 products: 6.2, their float32
sums written outweighing the shorter reduction). At batch 1, where the tiles are very few and
the sums small, slices of 256 pay: 1024->256 1x1 @14 6.3 -> 3.4 in four (cuDNN 3.5), 128->128
3x3 @28 7.4 -> 4.0 (5.9), 1024->512 1x1 @14 6.5 -> 3.8 (7.2). So ``split_k`` is offered where
the output tiles fill at most a quarter of the multiprocessors, in at least :data:`MIN_PARTS`
slices.

The epilogue is the forward's (:class:`Epilogue`): a bias; the result rounded to the data's
type (what both references' convolutions output); for CBAInfer, a per-channel batch norm
from running statistics and a residual; then the activation, rounded again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .linalg_common import Writer, affine_map, extent_of_x_read, iterators, tensor_type
from .signature import ConvSignature

#: ``split_k`` cuts a reduction (window taps x input channels) into the most slices, at least
#: :data:`MIN_PARTS` and at most :data:`MAX_PARTS` (the most measured), whose output tiles of
#: :data:`TILE` x :data:`TILE` fill :data:`SMS` multiprocessors (an H100 SXM's) at most once,
#: each slice reducing at least :data:`MIN_SLICE` products, or :data:`MIN_SLICE_FEW_TILES`
#: where there are at most :data:`VERY_FEW_TILES` tiles (module docstring).
SMS = 132
TILE = 128
MIN_PARTS = 4
MAX_PARTS = 8
MIN_SLICE = 512
MIN_SLICE_FEW_TILES = 256
VERY_FEW_TILES = 16
#: Activations the epilogue computes: the conv op's names, and CBAInfer's (MIOpen's) for them.
ACTIVATIONS = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "logistic": "sigmoid"}
_HALF = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Epilogue:
    """What follows the convolution's sum, in order, on float32 values: ``bias``; then the
    sum rounded to the data's type and widened again (what the convolution's own output
    holds); the batch norm ``(y - mean) * rsqrt(var + eps) * scale + shift`` when ``eps`` is
    given; the residual; ``beta * activation(alpha * y)`` (alpha and beta for tanh only)."""

    bias: bool = False
    eps: float | None = None
    residual: bool = False
    activation: str | None = None  # relu, sigmoid, tanh
    alpha: float = 1.0
    beta: float = 1.0


def parts(s: ConvSignature) -> int | None:
    """How many slices of the input channels ``split_k`` sums ``s`` over (a divisor of C, see
    :data:`MIN_PARTS`); None where ``s`` is not such a convolution (:func:`serves`) or no
    split of at least :data:`MIN_PARTS` slices fits."""
    if not serves(s):
        return None
    n, c = s.input_shape[:2]
    pixels = n * s.output_spatial[0] * s.output_spatial[1]
    tiles = -(-pixels // TILE) * -(-s.output_channels // TILE)
    reduction = c * s.window[0] * s.window[1]
    least = MIN_SLICE_FEW_TILES if tiles <= VERY_FEW_TILES else MIN_SLICE
    found = [d for d in range(MIN_PARTS, min(MAX_PARTS, SMS // tiles) + 1) if c % d == 0 and reduction // d >= least]
    return max(found) if found else None


def serves(s: ConvSignature) -> bool:
    """A 2-D, 16-bit, channels-last forward of one group, undilated, not transposed, with an
    activation the epilogue has."""
    return (s.mode == "fwd" and not s.transposed and s.spatial_rank == 2 and s.groups == 1 and s.dtype in _HALF
            and all(d == 1 for d in s.dilation)
            and (s.input_layout, s.kernel_layout, s.output_layout) == ("NHWC", "NHWC", "NHWC")
            and (s.activation is None or s.activation in ACTIVATIONS))


def conv_epilogue(s: ConvSignature) -> Epilogue:
    """The conv op's own epilogue: its bias, then its activation."""
    return Epilogue(bias=bool(s.bias), activation=s.activation)


def forward_mlir(s: ConvSignature, epilogue: Epilogue, inputs: list[str], func_name: str | None = None) -> str:
    """``split_k``'s kernel of the convolution ``s`` (:func:`parts` of it): the inputs named
    ``inputs`` in the signature's order (``x``, ``w``, then the epilogue's: ``b`` or ``bias``,
    ``scale``, ``shift``, ``mean``, ``var``, ``r``), then y."""
    g = parts(s)
    if g is None:
        raise ValueError(f"{s.func_name}: not a convolution split_k serves")
    # %b and %r are names the products and the rounding use
    inputs = [{"b": "bias", "r": "residual"}.get(name, name) for name in inputs]
    n, c, h, width = s.input_shape
    k, (r, t), (p, q) = s.output_channels, s.window, s.output_spatial
    shapes = {"x": (n, h, width, c), "w": (k, r, t, c), "residual": (n, p, q, k)}
    w = Writer(s, func_name)
    w.function([(name, shapes.get(name, (k,))) for name in inputs], ("y", (n, p, q, k)))
    # the channels viewed as (slice, channel of a slice), for free (linalg takes each loop's
    # bound from a plain dimension of some operand), before the padding, which IREE then
    # fuses into the products
    cg = c // g
    used = extent_of_x_read(s)
    for name, whole, parted in (("x", shapes["x"], (n, h, width, g, cg)), ("w", shapes["w"], (k, r, t, g, cg))):
        w.emit(f"%{name}_g = tensor.expand_shape %{name}_b [[0], [1], [2], [3, 4]] output_shape "
               f"[{', '.join(map(str, parted))}] : {tensor_type(whole, w.e)} into {tensor_type(parted, w.e)}")
    x = "%x_g"
    if used != (h, width):  # x past the windows' extent is never read: cut it off
        w.emit(f"%x_cut = tensor.extract_slice %x_g[0, 0, 0, 0, 0] [{n}, {used[0]}, {used[1]}, {g}, {cg}] "
               f"[1, 1, 1, 1, 1] : {tensor_type((n, h, width, g, cg), w.e)} to "
               f"{tensor_type((n, *used, g, cg), w.e)}")
        x = "%x_cut"
    high = [extent - pad - u for extent, pad, u in zip(s.read_extents, s.padding, used)]
    x_parted, w_parted = (n, *s.read_extents, g, cg), (k, r, t, g, cg)
    x = w.pad("%x_pad", x, (n, *used, g, cg), [0, *s.padding, 0, 0], [0, *high, 0, 0])
    partial = (g, n, p, q, k)
    dims = ["g", "n", "p", "q", "k", "r", "t", "c"]
    x_index = ["n", f"p * {s.stride[0]} + r", f"q * {s.stride[1]} + t", "g", "c"]
    w.products("%partial", [affine_map(dims, x_index), affine_map(dims, ["k", "r", "t", "g", "c"]),
                            affine_map(dims, ["g", "n", "p", "q", "k"])], 5, 3,
               [(x, x_parted), ("%w_g", w_parted)], (w.zeros("%partial_z", partial), partial))
    whole = (n, p, q, k)
    outer = ["n", "p", "q", "k"]
    total = w.sum_over("%partial", partial, ["g", *outer], [*outer, "g"], outer, whole)
    return w.store(_epilogue(w, total, epilogue, whole, [name for name in inputs if name not in ("x", "w")]),
                   "y", whole)


def _epilogue(w: Writer, total: str, e: Epilogue, shape: tuple[int, ...], operands: list[str]) -> str:
    """``%finished``: float32 ``total`` through the epilogue ``e``, its operands the inputs
    ``operands`` (one value a channel, or the ``residual`` of ``shape``)."""
    dims = ["n", "p", "q", "k"]
    maps = [affine_map(dims, dims)] + [affine_map(dims, dims if name == "residual" else ["k"]) for name in operands]
    types = [tensor_type(shape, "f32")] + [tensor_type(shape if name == "residual" else shape[-1:], w.e)
                                           for name in operands]
    w.emit(f"%finished_e = tensor.empty() : {tensor_type(shape, 'f32')}")
    w.emit(f"%finished = linalg.generic {{indexing_maps = [{', '.join(maps)}, {affine_map(dims, dims)}], "
           f"iterator_types = [{iterators(4, 0)}]}} ins({', '.join([total] + [f'%{o}_b' for o in operands])} : "
           f"{', '.join(types)}) outs(%finished_e : {tensor_type(shape, 'f32')}) {{")
    w.emit(f"^bb0(%v: f32, {', '.join(f'%{o}_v: {w.e}' for o in operands)}{', ' if operands else ''}%unused: f32):")
    widened = {}
    for name in operands:
        w.emit(f"  %{name}_f = arith.extf %{name}_v : {w.e} to f32")
        widened[name] = f"%{name}_f"
    value = "%v"
    if "bias" in operands:
        w.emit(f"  %biased = arith.addf %v, {widened['bias']} : f32")
        value = "%biased"
    w.emit(f"  %rounded = arith.truncf {value} : f32 to {w.e}")
    w.emit(f"  %conv = arith.extf %rounded : {w.e} to f32")
    value = "%conv"
    if e.eps is not None:
        w.emit(f"  %eps = arith.constant {e.eps:.9e} : f32")
        w.emit(f"  %var_eps = arith.addf {widened['var']}, %eps : f32")
        w.emit("  %inv = math.rsqrt %var_eps : f32")
        w.emit(f"  %centered = arith.subf %conv, {widened['mean']} : f32")
        w.emit("  %normed = arith.mulf %centered, %inv : f32")
        w.emit(f"  %scaled = arith.mulf %normed, {widened['scale']} : f32")
        w.emit(f"  %shifted = arith.addf %scaled, {widened['shift']} : f32")
        value = "%shifted"
    if e.residual:
        w.emit(f"  %added = arith.addf {value}, {widened['residual']} : f32")
        value = "%added"
    if e.activation == "relu":
        w.emit(f"  %act = arith.maximumf {value}, %zero : f32")
        value = "%act"
    elif e.activation == "sigmoid":
        w.emit("  %one = arith.constant 1.0 : f32")
        w.emit(f"  %negated = arith.negf {value} : f32")
        w.emit("  %exp = math.exp %negated : f32")
        w.emit("  %denominator = arith.addf %one, %exp : f32")
        w.emit("  %act = arith.divf %one, %denominator : f32")
        value = "%act"
    elif e.activation == "tanh":
        w.emit(f"  %alpha = arith.constant {e.alpha:.9e} : f32")
        w.emit(f"  %beta = arith.constant {e.beta:.9e} : f32")
        w.emit(f"  %inner = arith.mulf {value}, %alpha : f32")
        w.emit("  %tanh = math.tanh %inner : f32")
        w.emit("  %act = arith.mulf %tanh, %beta : f32")
        value = "%act"
    w.emit(f"  linalg.yield {value} : f32")
    w.emit(f"}} -> {tensor_type(shape, 'f32')}")
    return "%finished"
