"""The ways a convolution becomes a kernel, in the order BOO tries them.

Every formulation computes the same function as :meth:`ConvSignature.reference`, with the
same tensors; BOO takes the first that compiles (and, where it verifies kernels, passes),
and ``boo tune`` times them all.

* ``cropped`` (forward and weight gradient): the input padded explicitly and cut to the
  extent the windows read. IREE 3.13 rejects strided convolutions whose last window stops
  short of the end of the padded input (``inferred input/output operand #1 has shape's
  dimension #2 to be 7, but found 5``); without the unread tail the shapes agree. Offered
  first for that class, where ``default`` would fail to compile.
  For a transposed convolution's data and weight gradients (the ordinary convolution of dY
  and its weight gradient), the same on dY: an output padding leaves a tail of dY unread.
* ``default``: the export of the reference (``aten.convolution``).
* ``explicit_pad``: the padding as its own op, then an unpadded convolution. For a data
  gradient or a transposed forward, the computation without padding (on the padded input's
  shape), then cut back by it: first where the padding exceeds what the dilated window
  reaches (p > d*(f-1) on some axis), whose kernels IREE 3.13 computes wrongly on the CPU
  (12 of 2,006 random conv kernels, ``benchmarks/random_commands.py``).
* ``im2col``: an implicit GEMM. The windows unfolded by strided slices of the channels-last
  input (one per filter tap, channels minor), then one matmul per group with 16-bit operands
  accumulating in float32: forward ``columns (N*P x T*C) @ W (T*C x K)``; weight gradient
  ``dY^T (K x N*P) @ columns``, also as ``im2col_split32``/``im2col_split128``, the long sum
  over N*P cut into that many partial products that run in parallel; data gradient of a
  stride-1 convolution, the forward im2col of dY with the filter flipped.
* ``phases`` (the data gradient of a strided, undilated convolution of a window, padded
  within it, not patchifying; first on the CPU, else a tuning candidate): per phase of dX's
  pixels (``i * stride + phase``), the stride-1 ``im2col`` convolution of dY with the taps
  that reach it, reversed, put in place by strided slices: no zeros inserted in dY
  (``default``'s route, stride-product times the work; :data:`PHASES_FIRST_ON_THE_CPU`).
* ``matmul_scatter`` (the data gradient of an unpadded, ungrouped, strided 1x1
  convolution): dY (channels minor) times the filter gives dX at the pixels the windows
  read, and zeros are put between them by pads and reshapes: no convolution over a
  zero-inserted dY (``default``'s route, stride-product times the work).
* ``patches`` (the data gradient of a patchifying convolution: unpadded, undilated, one
  group, stride = window > 1, such as a patch embedding or ConvNeXt's 2x2/s2 downsampling;
  first): dY (channels minor) times the filter gives each window's patch of dX, put back in
  place by a reshape and one permutation; no convolution over a zero-inserted dY (H100,
  ConvNeXt-T's 2x2/s2 data gradients: 55-83 µs against IREE's 270-503). For such a
  convolution the unfolded windows of ``im2col`` and ``im2col_splitN`` are a reshape of x,
  and on CUDA ``im2col_split32`` or ``im2col_split128`` comes first for its weight gradient
  (:data:`PATCH_WEIGHTS_SPLIT_FINER`).
* ``staged_sums`` (the bias gradient of a channels-last dY, first): dY as (pixels, channels)
  summed over parts of :data:`BIAS_GRADIENT_ROWS` pixels, then over the parts. IREE's kernel
  of the reference's one long sum per channel is serial along the pixels.
* ``image_sums`` (the bias gradient of a channels-first dY; first on CUDA): each image's
  channel summed over its pixels (contiguous), then the images' sums added.
* ``logical_layout``: a channels-last convolution computed on NC[D]HW copies of its
  tensors, then stored back in its layout.
* ``channels_last`` (CUDA, a padded 2-D channels-last forward, last): the reference's
  export compiled with IREE's conversion of convolutions to channels-last and its padding
  fused into the convolution (:data:`CHANNELS_LAST_FLAGS`), so that IREE's module is one
  executable reading x, the filter (K, Y, X, C) and writing y as stored, with no padded copy
  of x between two executables. It is what the Hopper kernel library substitutes into (its
  kernel applies the padding as it reads); IREE's own kernel of it is untested here, so it
  comes after every other formulation. For a stride-1 channels-last data gradient (CUDA,
  last) the formulation of that name is written as linalg
  (:mod:`~boo_ops_conv.linalg_formulations`): the filter's taps reversed, then one
  contraction over dY as stored, its padding fused in: the module the library reads dY
  unpadded from.
* ``implicit_split`` (CUDA, a channels-last weight gradient; first in 16-bit for a window of
  several taps but a patchifying convolution's, else last): written as linalg, one
  contraction over x and dY as stored (x's padding fused in) into float32 sums over parts of
  the batch, then their sum: no columns and no padded copy of x (:data:`IMPLICIT_SPLIT`).
* ``phase_axes`` (CUDA, a channels-last strided data gradient at strides of 1 and 2 that
  divide dX; first for a dX of few channels under overlapping windows, the stem's, else
  last): written as linalg, dX's phases as axes of a free view of it, one contraction over
  dY as stored (its padding fused in) and the filter gathered by phase: no zero-inserted
  dY, no filled transient. It is the module the Hopper library computes phase by phase in,
  each phase with the taps it reads (:data:`PHASE_AXES`).
* ``split_k`` (CUDA, a 16-bit channels-last forward whose output tiles would fill at most a
  quarter of an H100's multiprocessors, such as a ResNet's 7x7 and 14x14 maps at small
  batches; last):
  written as linalg, one contraction over x as stored (its padding fused in) into float32
  sums over slices of the input channels, then their sum with the epilogue
  (:mod:`.split_forward`): the module a kernel library runs several programs per output tile in.

CUDA (an H100, sm_80 PTX; benchmarks/gpu_scan.py and boo tune, docs/gpu.md): IREE 3.13
computes wrongly 16-bit forward convolutions whose input is channels-last and padded (at
batch 32 also through NCHW copies and explicit padding; channels-first padded ones came out
wrong on a few calls in 40 by every route but im2col, random_commands.py), forward 1x1 convolutions with an
NCHW input in 16-bit types, and, at batch 32, 16-bit 1x1 weight gradients by every route but
im2col. For those classes BOO offers its remedies first: ``im2col`` then ``f32_compute``
(computed in float32, rounded once), ``matmul_1x1`` (NCHW 1x1 unpadded ungrouped: a batched
matmul), ``im2col_split32``. Verification (on by default on GPUs) refuses any formulation
that comes out wrong, and the next one serves.

CPU: ``im2col`` comes first for ungrouped channels-last or strided forwards, where IREE's own
convolution is about 9x slower, and for channels-first ones on output rows at most 4 pixels
wide (``im2col_first_on_the_cpu``), ``im2col_split128`` for
every weight gradient, where it is 8-22x faster (``WEIGHT_GRADIENT_FIRST_ON_THE_CPU``), and
``matmul_scatter`` for the strided 1x1 data gradients it serves (``SCATTER_FIRST_ON_THE_CPU``),
and ``staged_sums`` for channels-last bias gradients (:data:`BIAS_GRADIENT_ROWS`; on CUDA
too). Elsewhere each comes after ``default``, for ``boo tune`` to time.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import torch
import torch.nn.functional as F

from boo_core import Formulation, Target

from . import grouped_formulations, layouts, linalg_common, linalg_formulations, split_forward
from .signature import ACTIVATIONS, ConvSignature

_HALF = (torch.bfloat16, torch.float16)
#: The weight gradient's first formulation on the CPU. IREE's own kernel of the reference
#: took 8-22x its time there (2-core CPU, f32, median ms of 10 calls, against torch's: 3x3
#: 128->128 @8 NHWC batch 32 97.4 against 5.2 (torch 2.7); 3x3 64->64 @16 NCHW 108.0 against
#: 6.5 (3.3); 1x1/2 64->128 @16 NHWC 6.95 against 0.32 (0.24); the 7x7/2 stem, 3 channels @64
#: NHWC, 110.7 against 13.7 (2.3); 3x3 64->64 in 4 groups @32 NHWC batch 8 49.2 against 4.7
#: (0.76)). ``im2col_split32`` and ``im2col`` each won some of these by up to 13% and lost
#: others by 1.5x and 2.1x; ``boo tune`` times them all.
WEIGHT_GRADIENT_FIRST_ON_THE_CPU = "im2col_split128"
#: Whether ``matmul_scatter`` comes first for the strided 1x1 data gradients it serves on the CPU.
SCATTER_FIRST_ON_THE_CPU = True
#: Whether ``phases`` comes first for the strided data gradients it serves on the CPU.
#: benchmarks/cpu_formulations.py (2-core CPU, batch 8, 3x3/2, µs, default -> phases, torch):
#: f32 128 @28 NCHW 16,028 -> 5,341 (4,926), NHWC 16,238 -> 5,719 (1,934); f32 64 @56 NCHW
#: 13,023 -> 6,578 (7,690); bf16 256 @14 NHWC 121,146 -> 8,044 (2,798).
PHASES_FIRST_ON_THE_CPU = True
#: Pixels per partial sum of ``staged_sums``, the bias gradient's first formulation on the CPU
#: for a channels-last dY. 2-core CPU, f32, batch 32, median µs of 15 calls, IREE's default ->
#: parts of 16, 32, 64 pixels (torch): ConvNeXt-T's 96 channels @56 7044 -> 1956, 1950, 1656
#: (1500); 384 @14 757 -> 481, 431, 443 (221); 768 @7 354 -> 216, 216, 1025 (88); 64 @16 at
#: batch 8 32 -> 23, 23, 22 (14); bf16 96 @56, parts of 32: 4582 -> 1052 (torch 13422). An NCHW dY is read
#: across its strides and loses (128 @32: 1266 -> 3203 with parts of 64): it keeps ``default``.
#: H100, bf16, batch 32, µs from the profiler (benchmarks/gpu.py --traced, ConvNeXt-T's eight
#: channels-last rows), IREE's default -> staged_sums (torch): 96 @56 722.8 -> 29.2 (32.6),
#: 192 @28 179.5 -> 9.9 (28.6), 384 @14 45.6 -> 8.4 (12.6), 768 @7 88.5 -> 4.6 (8.8);
#: compiled with IREE's reduction vector distribution, 3.0-6.4x torch's time instead of 0.34-0.90.
BIAS_GRADIENT_ROWS = 32
#: On CUDA, ``staged_sums`` compiles without IREE's reduction vector distribution (above).
NO_REDUCTION_VECTOR_DISTRIBUTION = ("--iree-codegen-llvmgpu-use-reduction-vector-distribution=false",)
#: A patchifying convolution's weight gradient on CUDA takes ``im2col_split32`` first, or
#: ``im2col_split128`` where the filter has fewer elements than this (few output tiles: more
#: parts of the reduction run in parallel). H100, bf16, batch 32, µs, split32 / split128
#: (cuDNN): ConvNeXt-T's stem 96x3x4x4 1134.1 / 80.1 (60.5); its 2x2/s2 downsamplings 192x96
#: 104.3 / 96.7 (25.9), 384x192 68.0 / 114.2 (15.6), 768x384 113.7 / 113.6 (14.0); ViT-B/16's
#: patch embedding 768x3x16x16 168.2 / 288.0 (194.8); IREE's own convolution 329-701.
PATCH_WEIGHTS_SPLIT_FINER = 2**15
#: ``implicit_split`` (linalg_formulations) comes first on CUDA for 16-bit channels-last
#: weight gradients of a window. IREE's own kernels, H100, bf16, batch 32, µs, implicit_split
#: / im2col_split32 / im2col_split128 (cuDNN): ResNet-50's 3x3 64->64 @56 144 / 828 / 949
#: (32); 128->128/2 @56 110 / 884 / 844 (28); 128 @28 108 / 543 / 504 (27); 256/2 @28 115 / 508
#: / 571 (21); 256 @14 115 / 304 / 367 (21); 512/2 @14 123 / 409 / 409 (21); 512 @7 120 / 326 /
#: 326 (20). (The Hopper kernel library substitutes into it first, ahead of every formulation.)
#: Not offered on the CPU, nor the linalg ``channels_last`` data gradient: IREE's CPU kernels
#: of them took 7-22x the time of the CPU's own formulations (benchmarks/cpu_formulations.py
#: --target cuda:sm_80, 2-core CPU, batch 8, NHWC 3x3, ms: f32 64 @28 wrw 88.0 against
#: im2col_split128's 4.3, bwd 76.8 against im2col's 3.5; bf16 256 @14 wrw 351.7 against 51.7,
#: bwd 421.2 against 22.8).
IMPLICIT_SPLIT = "implicit_split"
#: The linalg data gradient at strides of 1 and 2 (linalg_formulations), offered on CUDA only:
#: the module a kernel library computes phase by phase in. IREE's own kernel of it makes the
#: multiply-adds of a window spanning every phase's taps (2x2 at 3x3/2, 4x4 at 7x7/2) where
#: ``default`` convolves a zero-inserted dY with the whole window. It comes first for a dX of
#: fewer than :data:`PHASE_AXES_FIRST_BELOW` channels under windows that overlap (no kernel
#: library's tiles take those): the 7x7/2 stem's (3 channels, bf16, batch 32, H200) 1,009 us
#: against ``default``'s 5,405 (benchmarks/gpu.py --formulations phase_axes); last elsewhere
#: (untimed there).
PHASE_AXES = "phase_axes"
#: A 16-bit channels-last forward of few output tiles (CUDA, last): :mod:`.split_forward`.
SPLIT_K = "split_k"
#: A channels-last depthwise convolution written as linalg (grouped_formulations), first
#: (on the CPU a weight gradient's comes after ``default``): the exported formulations'
#: kernels run these on an NCHW copy, a thread per output with its neighbours a channel plane
#: apart. On the CPU (benchmarks/cpu_formulations.py --target cuda:sm_80, 2 cores, batch 8,
#: NHWC, µs, default -> depthwise (torch)): f32 96 @56 7x7 forward 35964 -> 5401 (2167), data
#: gradient 64003 -> 6370 (6627), weight gradient 90270 -> 47984 (21122); f32 384 @14 9924 ->
#: 1546 (576), 21096 -> 1596 (955), 15471 -> 13612 (5559); bf16 96 @56 forward 50001 ->
#: 6164 (1694) but weight gradient 40652 -> 63310 (31853); f32 3x3/2 144 @56 forward 16771 ->
#: 1839 (740), and its weight gradient failed to compile for the CPU (it does for CUDA); f32
#: 3x3 32 @112 data gradient 39063 -> 2070 (1777). (torch's data gradients: its
#: convolution_backward, timed on its own later; ConvSignature.eager.) IREE's own kernels, H200, bf16,
#: batch 32, ConvNeXt-T's four 7x7 rows (96 @56 .. 768 @7), µs, default -> depthwise
#: (cuDNN): forwards 1157 -> 720 (95), 633 -> 348 (55), 345 -> 165 (30), 158 -> 78 (23);
#: weight gradients 10686 -> 894 (75), 1838 -> 360 (34), 432 -> 202 (23), 122 -> 72 (16);
#: data gradients 716 -> 721 (167), 261 -> 349 (80), 254 -> 166 (42), 271 -> 78 (28).
#: (The Hopper kernel library substitutes into its module: docs/gpu.md.)
DEPTHWISE = "depthwise"
#: A channels-last grouped convolution (several channels a group) written as linalg
#: (grouped_formulations), after ``default``: a tuning candidate, and the module a kernel
#: library can put a grouped kernel into. On the CPU no faster than ``default``
#: (benchmarks/cpu_formulations.py, 2 cores, f32, batch 8, NHWC, 32 groups, µs, default ->
#: grouped (torch)): 3x3 128 @56 forward 48035 -> 43988 (4897), data gradient 47863 -> 45813
#: (6585), weight gradient 55998 -> 50751 (8460); 512 @14 35563 -> 43336 (1309), 27995 ->
#: 66156 (2212), 39995 -> 48959 (1351); bf16 256 @28 forward 68267 -> 68014 (1305). Not yet
#: measured on a GPU.
GROUPED = "grouped"
PHASE_AXES_FIRST_BELOW = 64
#: On the CPU a bf16 forward's ``im2col`` matmul is data-tiled (its operands packed into tiles
#: shaped for the CPU's dot-product instructions), as the matmul op's bf16 products are.
#: ``python benchmarks/cpu_data_tiling.py`` (2026-11-29, the 2-core AVX-512-BF16 machine, batch
#: 8, one run, µs, without -> with (PyTorch)): NHWC 3x3 64 @16 1552 -> 764 (416), 3x3 128 @8
#: 1447 -> 616 (384), 3x3 256 @4 1853 -> 515 (422), 1x1 128->256 @16 1279 -> 487 (388), 3x3/2
#: 64->128 @32 3472 -> 1101 (737); NCHW 3x3/2 3531 -> 1269 (801); CBAInfer 3x3 64 @16 1689 ->
#: 1228 (633). Not float32: slower on 4 of the 5 NHWC rows (3x3 64 @16 933 -> 1328); IREE's
#: microkernels on top gained nothing in a first run.
CPU_BF16_DATA_TILING = ("--iree-opt-data-tiling",)
#: iree-compile flags of the ``channels_last`` formulation (module docstring): convolutions
#: made channels-last, their padding fused into them.
CHANNELS_LAST_FLAGS = (
    "--iree-preprocessing-pass-pipeline=builtin.module(util.func(iree-preprocessing-convert-conv-to-channels-last))",
    "--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops",
)


def channels_last_formulation() -> Formulation:
    """The ``channels_last`` formulation (module docstring)."""
    return Formulation("channels_last", flags=CHANNELS_LAST_FLAGS,
                       description="IREE's channels-last convolution with its padding fused in: one executable")


def conv_formulations(signature: ConvSignature, target: Target) -> tuple[Formulation, ...]:
    """The conv op's formulations for ``signature`` on ``target`` (module docstring)."""
    s = signature
    cuda = target.backend == "cuda"
    cpu = target.backend == "llvm-cpu"  # there im2col reads channels-last operands in place (_columns, _tap_major)
    windowed = s.mode in ("fwd", "wrw") and not s.transposed
    first: list[Formulation] = []
    later: list[Formulation] = []
    # 16-bit padded forward convolutions on CUDA: IREE's kernels are wrong for channels-last
    # inputs, and intermittently (a few calls in 40) for channels-first ones too, cropped or
    # not; im2col was right in every run, so it comes before everything else.
    half_padded_forward = cuda and s.mode == "fwd" and not s.transposed and s.dtype in _HALF and any(s.padding)
    if windowed and _reads_less_than_padded(s):
        first.append(Formulation("cropped", computation=lambda *a: _unpadded(s, a, crop=True),
                                 description="input padded explicitly and cut to the extent the windows read"))
    if s.transposed and s.mode in ("bwd", "wrw") and any(s.output_padding):
        first.append(Formulation("cropped", computation=lambda *a: _adjoint_cropped(s, a),
                                 description="the adjoint convolution of dY, padded explicitly and cut "
                                             "to the extent x's windows read"))
    if s.mode == "fwd" and not s.transposed:
        im2col = Formulation("im2col", computation=lambda *a: _im2col(s, a, in_place=cpu),
                             flags=im2col_flags(s, target),
                             description="implicit GEMM: unfolded windows (channels minor) times the filter")
        if cuda and _is_unpadded_nchw_1x1(s):
            first.append(Formulation("matmul_1x1", computation=lambda *a: _one_by_one_matmul(s, *a),
                                     description="an unpadded NCHW 1x1 convolution as a batched matmul"))
        if half_padded_forward:
            first[:0] = [im2col, Formulation("f32_compute", computation=lambda *a: _in_float32(s, *a),
                                             description="computed in float32, rounded once")]
        elif im2col_first_on_the_cpu(s, target):
            first.insert(0, im2col)
        else:
            later.append(im2col)
        later.append(Formulation("explicit_pad", computation=lambda *a: _unpadded(s, a, crop=False),
                                 description="explicit padding, then an unpadded convolution"))
    if s.mode == "wrw" and not s.transposed:
        splits = [Formulation(f"im2col_split{n}",
                              computation=lambda *a, n=n: _im2col_weight_gradient(s, a, n, in_place=cpu),
                              description=f"dY^T @ columns, the reduction cut into about {n} partial products")
                  for n in (32, 128)]
        if cuda and s.dtype in _HALF and all(w == 1 for w in s.window):
            first.append(splits.pop(0))  # IREE's own kernels for this class came out wrong at batch 32
        elif cuda and _patchifies(s):  # the columns are a reshape of x (_patches)
            first.append(splits.pop(1 if math.prod(s.kernel_shape) < PATCH_WEIGHTS_SPLIT_FINER else 0))
        elif cpu:
            first += [f for f in splits if f.name == WEIGHT_GRADIENT_FIRST_ON_THE_CPU]
            splits = [f for f in splits if f.name != WEIGHT_GRADIENT_FIRST_ON_THE_CPU]
        later += [*splits,
                  Formulation("im2col", computation=lambda *a: _im2col_weight_gradient(s, a, 1, in_place=cpu),
                              description="dY^T @ columns in one product"),
                  Formulation("explicit_pad", computation=lambda *a: _unpadded(s, a, crop=False),
                              description="explicit padding, then an unpadded convolution")]
        if cuda and linalg_formulations.serves_weight_gradient(s):
            implicit = Formulation(
                IMPLICIT_SPLIT, mlir=lambda: linalg_formulations.weight_gradient_mlir(s),
                flags=linalg_common.FLAGS,
                description="one contraction over x's windows as stored, in parts of the batch, then their sum")
            # IREE's own kernel of it: 3-7x faster than the columns' (IMPLICIT_SPLIT), where
            # those are not a reshape of x (a patchifying convolution's: PATCH_WEIGHTS_SPLIT_FINER)
            if s.dtype in _HALF and not _patchifies(s) and math.prod(s.window) > 1:
                first.insert(0, implicit)
            else:
                later.append(implicit)
    if s.mode == "bwd" and _patchifies(s):
        first.append(Formulation("patches", computation=lambda *a: _patch_data_gradient(s, a),
                                 description="dY @ W, each row a patch of dX put back in place"))
    if _in_phases(s):
        (first if cpu and PHASES_FIRST_ON_THE_CPU else later).append(Formulation(
            "phases", computation=lambda *a: _phase_data_gradient(s, a, in_place=cpu),
            description="one convolution of dY per phase of dX's pixels: no zeros inserted"))
    if _scatters(s):
        scatter = Formulation("matmul_scatter", computation=lambda *a: _strided_1x1_data_gradient(s, a),
                              description="dY @ W at the strided pixels, zeros between them")
        (first if cpu and SCATTER_FIRST_ON_THE_CPU else later).append(scatter)
    if ((s.mode == "bwd" and not s.transposed) or (s.mode == "fwd" and s.transposed)) and _beyond_the_window(s):
        first.insert(0, Formulation("explicit_pad", computation=lambda *a: _padded_then_cropped(s, a),
                                    description="computed without padding, then cut back by it"))
    if s.mode == "bwd" and not s.transposed and all(st == 1 for st in s.stride) \
            and linalg_common.padding_within_window(s):
        later.append(Formulation("im2col", computation=lambda *a: _data_gradient_as_forward(s, a, in_place=cpu),
                                 description="the forward im2col of dY with the filter flipped"))
    if s.mode == "bwd_bias" and s.output_layout == layouts.channels_last(s.spatial_rank):
        first.append(Formulation(
            "staged_sums", computation=lambda *a: _bias_gradient_in_parts(s, a, BIAS_GRADIENT_ROWS),
            description=f"sums over parts of {BIAS_GRADIENT_ROWS} pixels, then over the parts",
            flags=NO_REDUCTION_VECTOR_DISTRIBUTION if cuda else ()))
    elif s.mode == "bwd_bias" and s.output_layout == layouts.LOGICAL[s.spatial_rank]:
        (first if cuda else later).append(Formulation(
            "image_sums", computation=lambda *a: _bias_gradient_per_image(s, a),
            description="each image's pixels summed, then the images"))
    if not _all_logical(s) and s.mode != "bwd_bias":
        later.append(Formulation("logical_layout", computation=lambda *a: _in_logical_layout(s, a),
                                 description="computed on NC[D]HW copies of the tensors"))
    if cuda and s.mode == "fwd" and not s.transposed and s.spatial_rank == 2 and any(s.padding) \
            and (s.input_layout, s.kernel_layout, s.output_layout) == ("NHWC", "NHWC", "NHWC"):
        later.append(channels_last_formulation())
    if cuda and s.mode == "bwd" and linalg_formulations.serves_data_gradient(s):
        later.append(Formulation(
            "channels_last", mlir=lambda: linalg_formulations.data_gradient_mlir(s), flags=linalg_common.FLAGS,
            description="one contraction over dY as stored (its padding fused in) and the filter flipped"))
    if cuda and linalg_formulations.serves_strided_data_gradient(s):
        overlapping = any(f > st for f, st in zip(s.window, s.stride))  # not a 1x1's, not a patchifying one's
        few_channels = s.input_shape[1] < PHASE_AXES_FIRST_BELOW and overlapping
        (first if few_channels else later).append(Formulation(
            PHASE_AXES, mlir=lambda: linalg_formulations.strided_data_gradient_mlir(s),
            flags=linalg_common.FLAGS,
            description="dX's phases as axes: one contraction over dY as stored and the filter's taps by phase"))
    if grouped_formulations.serves_depthwise(s):
        depthwise = Formulation(
            DEPTHWISE, flags=linalg_common.FLAGS,
            mlir=lambda: (grouped_formulations.depthwise_weight_gradient_mlir(s) if s.mode == "wrw"
                          else grouped_formulations.depthwise_mlir(s)),
            description="one contraction per channel over x (dY) as stored, channels innermost")
        (first if cuda or s.mode != "wrw" else later).insert(0, depthwise)
    if grouped_formulations.serves_grouped(s):
        later.append(Formulation(
            GROUPED, flags=linalg_common.FLAGS,
            mlir=lambda: (grouped_formulations.grouped_weight_gradient_mlir(s) if s.mode == "wrw"
                          else grouped_formulations.grouped_mlir(s)),
            description="one contraction over x (dY) as stored, its channels viewed as (groups, channels)"))
    if cuda and split_forward.parts(s):
        later.append(split_k_formulation(s, split_forward.conv_epilogue(s), [spec.name for spec in s.input_specs()]))
    return (*first, Formulation("default"), *later)


def im2col_flags(s: ConvSignature, target: Target) -> tuple[str, ...]:
    """A forward ``im2col``'s iree-compile flags: :data:`CPU_BF16_DATA_TILING` for bf16 on the CPU."""
    return CPU_BF16_DATA_TILING if target.backend == "llvm-cpu" and s.dtype == torch.bfloat16 else ()


def split_k_formulation(conv: ConvSignature, epilogue: split_forward.Epilogue, inputs: list[str],
                        func_name: str | None = None) -> Formulation:
    """``split_k`` (:mod:`.split_forward`) of the forward convolution ``conv`` followed by
    ``epilogue``, its inputs named ``inputs``, its function ``func_name``."""
    return Formulation(
        SPLIT_K, mlir=lambda: split_forward.forward_mlir(conv, epilogue, inputs, func_name), flags=linalg_common.FLAGS,
        description=f"float32 sums over {split_forward.parts(conv)} slices of the input channels (one contraction "
                    "over x as stored), then their sum with the epilogue")


# -- geometry ------------------------------------------------------------------------------------


def _reads_less_than_padded(s: ConvSignature) -> bool:
    return any(extent < n + 2 * p for extent, n, p in zip(s.read_extents, s.input_shape[2:], s.padding))


def _is_unpadded_nchw_1x1(s: ConvSignature) -> bool:
    return (s.input_layout == layouts.LOGICAL[s.spatial_rank] and all(w == 1 for w in s.window)
            and not any(s.padding) and s.groups == 1)


def im2col_first_on_the_cpu(s: ConvSignature, target: Target) -> bool:
    """Ungrouped channels-last or strided forwards on the CPU: IREE's own convolution took
    9-10x im2col's time there (2-core CPU, f32, batch 32: 3x3 64->64 @16 NHWC 63.5 against
    7.0 ms, 3x3/2 128->256 @8 NCHW 21.0 against 3.4, the 7x7/2 stem NHWC 93.1 against 10.6;
    NCHW stride 1 is the exception, 5.7 against 7.5), and NCHW stride-1 ones whose output rows
    are at most :data:`IM2COL_FROM_WIDTH` wide, where IREE's convolution runs on short rows
    (batch 8, 3x3 512->512 @2 8.0 against 2.1 ms, 256->256 @4 2.1 against 1.1; at 7 wide,
    batch 1, 256->512, 1.1 against 2.6)."""
    if target.backend != "llvm-cpu" or s.groups != 1:
        return False
    short_rows = s.mode == "fwd" and s.output_spatial[-1] <= IM2COL_FROM_WIDTH
    return not _all_logical(s) or any(st > 1 for st in s.stride) or short_rows


#: The widest output rows an NCHW stride-1 forward takes im2col first for on the CPU.
IM2COL_FROM_WIDTH = 4


def _all_logical(s: ConvSignature) -> bool:
    logical = layouts.LOGICAL[s.spatial_rank]
    return s.input_layout == s.kernel_layout == s.output_layout == logical


def _logical_signature(s: ConvSignature, **changes: object) -> ConvSignature:
    """``s`` with every tensor in logical layout (and ``changes`` applied)."""
    return dataclasses.replace(s, input_layout=None, kernel_layout=None, output_layout=None,
                               shared_layout=layouts.LOGICAL[s.spatial_rank], **changes)


def _to_logical(s: ConvSignature, args: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """The kernel's inputs in logical layout (mode by mode: see ConvSignature)."""
    which = {"fwd": ("x", "w", "b"), "bwd": ("y", "w"), "wrw": ("y", "x"), "bwd_bias": ("y",)}[s.mode]
    layout = {"x": s.input_layout, "w": s.kernel_layout, "y": s.output_layout}
    return [layouts.permute(t, layouts.to_logical(layout[name])) if name in layout else t
            for t, name in zip(args, which)]


def _store(s: ConvSignature, result: torch.Tensor) -> torch.Tensor:
    """A logical result stored in the layout of the kernel's output."""
    layout = {"fwd": s.output_layout, "bwd": s.input_layout, "wrw": s.kernel_layout}.get(s.mode)
    return result if layout is None else layouts.permute(result, layouts.to_physical(layout))


def _pad(s: ConvSignature, x: torch.Tensor, crop: bool) -> torch.Tensor:
    """``x`` (logical) padded explicitly; with ``crop``, cut to the extent the windows read."""
    return _pad_to(x, s.padding, s.read_extents if crop else None)


def _pad_to(x: torch.Tensor, padding: tuple[int, ...], extents: tuple[int, ...] | None, *,
            channels_last: bool = False) -> torch.Tensor:
    """A logical ``x`` (with ``channels_last``, one as (N, *spatial, C)) padded by ``padding``
    at both ends of each spatial axis; with ``extents``, then cut (or zero-extended) to them."""
    first = 1 if channels_last else 2  # the first spatial axis
    pads: list[int] = [0, 0] if channels_last else []  # F.pad lists the last dimension first
    for axis in reversed(range(len(padding))):
        n, p = x.shape[first + axis], padding[axis]
        pads += [p, p if extents is None else max(0, extents[axis] - n - p)]
    padded = F.pad(x, pads) if any(pads) else x
    if extents is not None:
        padded = padded[(*(slice(None),) * first, *(slice(0, extent) for extent in extents))]
    return padded


# -- formulations --------------------------------------------------------------------------------


def _unpadded(s: ConvSignature, args: tuple[torch.Tensor, ...], crop: bool) -> torch.Tensor:
    """``cropped`` and ``explicit_pad``: an unpadded convolution of the padded (and cut) input."""
    logical = _to_logical(s, args)
    position = 0 if s.mode == "fwd" else 1
    x = _pad(s, logical[position], crop)
    logical[position] = x
    inner = _logical_signature(s, input_shape=tuple(x.shape), padding=0)
    return _store(s, inner.reference(*logical))


def _adjoint_cropped(s: ConvSignature, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``cropped`` for a transposed convolution's data and weight gradients: they are the
    ordinary convolution of dY (its adjoint) and that convolution's weight gradient, with dY
    padded explicitly and cut to what x's positions read. An output padding leaves a tail of
    dY that no such window reads, which IREE 3.13 rejects as it does for ``cropped``."""
    dy, other = _to_logical(s, args)
    extents = tuple((n - 1) * st + d * (f - 1) + 1
                    for n, st, d, f in zip(s.input_shape[2:], s.stride, s.dilation, s.window))
    dy = _pad_to(dy, s.padding, extents)
    adjoint = ConvSignature(tuple(dy.shape), s.kernel_shape, stride=s.stride, dilation=s.dilation,
                            groups=s.groups, dtype=s.dtype, mode="fwd" if s.mode == "bwd" else "wrw")
    # The adjoint conv's output has x's shape: its forward gives dx; its weight gradient takes x as its dY.
    return _store(s, adjoint.reference(dy, other) if s.mode == "bwd" else adjoint.reference(other, dy))


def _beyond_the_window(s: ConvSignature) -> bool:
    """Padding wider than a dilated window reaches on some axis (p > d * (f - 1)): windows
    that read padding only. IREE's CPU kernels of the data gradient and of the transposed
    forward come out wrong for it (benchmarks/random_commands.py: 12 of 2,006 conv kernels)."""
    return any(p > d * (f - 1) for p, d, f in zip(s.padding, s.dilation, s.window))


def _crop_spatial(s: ConvSignature, x: torch.Tensor) -> torch.Tensor:
    """A logical tensor with ``s.padding`` cut from both ends of every spatial axis."""
    return x[(slice(None), slice(None), *(slice(p, x.shape[2 + i] - p) for i, p in enumerate(s.padding)))]


def _padded_then_cropped(s: ConvSignature, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``explicit_pad`` of a data gradient or a transposed forward: the same computation
    with no padding (on the padded input's shape for a data gradient), cut back by the
    padding, so that no window reads padding only."""
    logical = _to_logical(s, args)
    zero = (0,) * s.spatial_rank
    if s.mode == "bwd":  # the gradient with respect to the padded input, then its interior
        n, c, *spatial = s.input_shape
        padded = tuple(size + 2 * p for size, p in zip(spatial, s.padding))
        inner = _logical_signature(s, input_shape=(n, c, *padded), padding=zero)
    else:  # a transposed convolution's padding cuts its output
        inner = _logical_signature(s, padding=zero)
    return _store(s, _crop_spatial(s, inner.reference(*logical)).contiguous())


def _in_logical_layout(s: ConvSignature, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``logical_layout``: the same convolution on contiguous NC[D]HW copies."""
    logical = [t.contiguous() for t in _to_logical(s, args)]
    return _store(s, _logical_signature(s).reference(*logical))


def _bias_gradient_in_parts(s: ConvSignature, args: tuple[torch.Tensor, ...], rows: int) -> torch.Tensor:
    """The bias gradient summed over parts of ``rows`` pixels each, then over the parts."""
    dy = _to_logical(s, args)[0]
    accumulate = torch.promote_types(dy.dtype, torch.float32)
    flat = _channels_last(dy).reshape(-1, dy.shape[1])
    return _in_parts(flat, rows).sum(1, dtype=accumulate).sum(0).to(dy.dtype)


def _bias_gradient_per_image(s: ConvSignature, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The bias gradient of a channels-first dY: each image's channel summed over its pixels,
    then the images."""
    dy = _to_logical(s, args)[0]
    accumulate = torch.promote_types(dy.dtype, torch.float32)
    return dy.flatten(2).sum(2, dtype=accumulate).sum(0).to(dy.dtype)


def _in_parts(t: torch.Tensor, rows: int) -> torch.Tensor:
    """``t`` (..., R, C) as (..., parts, rows, C): its R rows cut into parts of ``rows``, the
    last part padded with zero rows (which add nothing to the sums taken over them)."""
    parts = -(-t.shape[-2] // rows)
    if parts * rows != t.shape[-2]:
        t = F.pad(t, (0, 0, 0, parts * rows - t.shape[-2]))
    return t.reshape(*t.shape[:-2], parts, rows, t.shape[-1])


def _channels_last(x: torch.Tensor) -> torch.Tensor:
    """A logical (N, C, *spatial) tensor as (N, *spatial, C)."""
    return x.permute(0, *range(2, x.dim()), 1)


def _patchifies(s: ConvSignature) -> bool:
    """Whether ``s``'s windows tile its input without overlap or gaps (unpadded, undilated,
    stride = window > 1, one group, not transposed: a patch embedding, a 2x2/s2
    downsampling), so its unfolded windows are a reshape of the input."""
    return (not s.transposed and s.groups == 1 and not any(s.padding) and all(d == 1 for d in s.dilation)
            and tuple(s.stride) == tuple(s.window) and any(f > 1 for f in s.window))


def _patches(s: ConvSignature, x: torch.Tensor) -> torch.Tensor:
    """A patchifying convolution's (:func:`_patchifies`) unfolded windows of logical ``x``:
    (N * output pixels, taps * C), channels minor, by a reshape and one permutation."""
    n, c, rank = x.shape[0], x.shape[1], s.spatial_rank
    x = x[(slice(None), slice(None), *(slice(0, o * f) for o, f in zip(s.output_spatial, s.window)))]
    x = x.reshape(n, c, *itertools.chain.from_iterable(zip(s.output_spatial, s.window)))
    order = (0, *range(2, 2 + 2 * rank, 2), *range(3, 3 + 2 * rank, 2), 1)  # (N, *output, *window, C)
    return x.permute(order).reshape(n * math.prod(s.output_spatial), -1)


def _from_patches(s: ConvSignature, patches: torch.Tensor) -> torch.Tensor:
    """The logical (N, C, *input) tensor whose :func:`_patches` are ``patches``; zeros where
    no window reads (the input's remainder past the last whole window)."""
    n, c, rank = s.input_shape[0], s.input_shape[1], s.spatial_rank
    x = patches.reshape(n, *s.output_spatial, *s.window, c)
    order = (0, 2 * rank + 1, *itertools.chain.from_iterable((1 + i, 1 + rank + i) for i in range(rank)))
    x = x.permute(order).reshape(n, c, *(o * f for o, f in zip(s.output_spatial, s.window)))
    missing = [extent - o * f for extent, o, f in zip(s.input_shape[2:], s.output_spatial, s.window)]
    return F.pad(x, tuple(itertools.chain.from_iterable((0, m) for m in reversed(missing)))) if any(missing) else x


def _patch_data_gradient(s: ConvSignature, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``patches``: the data gradient of a patchifying convolution, dY (channels minor) times
    the filter, each row a patch of dX put back in place. 16-bit operands accumulate in
    float32, rounded once."""
    dy, w = _to_logical(s, args)
    rows = _channels_last(dy).reshape(-1, s.output_channels)
    values = torch.matmul(rows.float(), _tap_major(w, 1)[0].T.float())  # (N * P, taps * C)
    return _store(s, _from_patches(s, values).to(s.dtype))


#: Channels a group from which ``_columns`` pads the input channels-last. With fewer (the
#: 3-channel stem), IREE folds that padding into each tap's copy, rows of a few bytes each:
#: the stem's weight gradient took 4.0 ms on the CPU that way, 1.9 with the padding made
#: channels-first and transposed once (2-core machine, f32, batch 8 at 64 x 64).
CHANNELS_LAST_PAD_FROM = 16


def _columns(s: ConvSignature, x: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """The unfolded windows of a logical input, channels minor: (groups, N * output pixels,
    taps * C/groups), built from strided slices of the padded channels-last input (a
    patchifying convolution's by a reshape: :func:`_patches`). With ``in_place`` (the CPU's
    modules; the GPU's stay as the Hopper library knows them), padded channels-last."""
    if _patchifies(s):
        return _patches(s, x).unsqueeze(0)
    if in_place and x.shape[1] // s.groups >= CHANNELS_LAST_PAD_FROM:
        # padded as (N, *spatial, C): a channels-last input is padded where it lies, not transposed first
        x = _pad_to(_channels_last(x), s.padding, s.read_extents, channels_last=True)  # (N, *read extent, C)
    else:
        x = _channels_last(_pad(s, x, crop=True))
    taps = []
    for offsets in itertools.product(*(range(f) for f in s.window)):
        index = tuple(slice(o * d, o * d + (out - 1) * st + 1, st)
                      for o, d, out, st in zip(offsets, s.dilation, s.output_spatial, s.stride))
        taps.append(x[(slice(None), *index, slice(None))])  # (N, *output, C)
    columns = torch.stack(taps, dim=-2)  # (N, *output, taps, C)
    pixels, g = x.shape[0] * math.prod(s.output_spatial), s.groups
    columns = columns.reshape(pixels, len(taps), g, -1).permute(2, 0, 1, 3)  # (G, N*P, taps, C/G)
    return columns.reshape(g, pixels, -1)


def _filter_rows(w: torch.Tensor, groups: int) -> torch.Tensor:
    """A logical (K, C/G, *window) filter read channels-last, (G, K/G, taps * C/G): a filter
    stored channels-last (K, *window, C/G) is that view, one stored channels-first is copied
    once."""
    k = w.shape[0]
    return _channels_last(w).reshape(groups, k // groups, -1)


def _tap_major(w: torch.Tensor, groups: int, in_place: bool = False) -> torch.Tensor:
    """A logical (K, C/G, *window) filter as (G, taps * C/G, K/G): the right operand of the
    columns' matmul. With ``in_place``, the transpose of :func:`_filter_rows`, so the product
    can read a channels-last filter where it is (the logical filter reshaped first moved a
    channels-last one twice: two transposes of 9.4 MB at 512 -> 512 3x3 on the CPU)."""
    if in_place:
        return _filter_rows(w, groups).transpose(-1, -2)
    k, cg = w.shape[:2]
    taps = math.prod(w.shape[2:])
    return w.reshape(groups, k // groups, cg, taps).permute(0, 3, 2, 1).reshape(groups, taps * cg, k // groups)


def _im2col(s: ConvSignature, args: tuple[torch.Tensor, ...], in_place: bool = False) -> torch.Tensor:
    """``im2col``: the forward convolution as one matmul per group of the unfolded windows
    (channels minor, so a channels-last input is read in order) by the filter; 16-bit
    operands accumulate in float32, rounded once. ``in_place``: the CPU's module (:func:`_columns`,
    :func:`_tap_major`)."""
    x, w, *b = _to_logical(s, args)
    columns = _columns(s, x, in_place)  # (G, N*P, T*C/G)
    n, k = s.input_shape[0], s.output_channels
    if in_place and s.groups == 1 and columns.shape[1] < k:
        # A filter larger than the columns (few pixels: a late stage's maps) is read where it
        # lies, as the product's transposed B, not copied tap-major first: on the CPU that
        # copy took most of a 512 -> 512 3x3 at 2 x 2 (docs/cli.md). Where the columns are
        # larger, IREE's CPU product reading B transposed is the slower part.
        y = F.linear(columns[0].float(), _filter_rows(w, 1)[0].float()).unsqueeze(0)
    else:
        y = torch.matmul(columns.float(), _tap_major(w, s.groups, in_place).float())  # (G, N*P, K/G)
    y = y.permute(1, 0, 2).reshape(n, *s.output_spatial, k)  # channels-last output
    if b:
        y = y + b[0].float()
    if s.activation:
        y = ACTIVATIONS[s.activation](y)
    y = y.permute(0, y.dim() - 1, *range(1, y.dim() - 1))  # back to logical (N, K, *output)
    return _store(s, y.to(s.dtype))


def im2col_forward(s: ConvSignature, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *,
                   in_place: bool) -> torch.Tensor:
    """``s``'s forward convolution of logical (NC[D]HW) ``x``, ``w`` and ``b`` through
    ``im2col``, for ``s`` in logical layouts (CBAInfer's conv stage on the CPU: ``in_place``)."""
    return _im2col(s, (x, w) if b is None else (x, w, b), in_place)


def _split(pixels: int, splits: int) -> int:
    """Rows per part of a reduction over ``pixels`` rows cut into about ``splits`` parts
    (a multiple of 64)."""
    return max(64, -(-pixels // (splits * 64)) * 64)


def _im2col_weight_gradient(s: ConvSignature, args: tuple[torch.Tensor, ...], splits: int,
                            in_place: bool = False) -> torch.Tensor:
    """``im2col`` and ``im2col_splitN`` for the weight gradient: dW = dY^T @ columns per
    group, the sum over images and pixels cut into ``splits`` partial products (summed in
    float32) so that the long reduction runs in parallel."""
    dy, x = _to_logical(s, args)
    columns = _columns(s, x, in_place)  # (G, N*P, T*C/G)
    g, pixels = s.groups, columns.shape[1]
    grads = _channels_last(dy).reshape(pixels, g, -1).permute(1, 0, 2)  # (G, N*P, K/G)
    rows = _split(pixels, splits) if splits > 1 else pixels
    columns, grads = _in_parts(columns, rows), _in_parts(grads, rows)
    dw = torch.matmul(grads.transpose(-1, -2).float(), columns.float()).sum(dim=1)  # (G, K/G, T*C/G)
    k, cg = s.output_channels, s.kernel_shape[1]
    dw = dw.reshape(g, k // g, math.prod(s.window), cg).permute(0, 1, 3, 2)  # (G, K/G, C/G, T)
    return _store(s, dw.reshape(s.kernel_shape).to(s.dtype))


def _input_major(s: ConvSignature, w: torch.Tensor) -> torch.Tensor:
    """A logical filter (K, C/G, *taps) with its channel roles swapped per group:
    (C, K/G, *taps), the filter of the convolution of dY that is the data gradient."""
    g, k, cg = s.groups, s.output_channels, s.kernel_shape[1]
    taps = tuple(w.shape[2:])
    return w.reshape(g, k // g, cg, *taps).transpose(1, 2).reshape(g * cg, k // g, *taps)


def _data_gradient_as_forward(s: ConvSignature, args: tuple[torch.Tensor, ...],
                              in_place: bool = False) -> torch.Tensor:
    """``im2col`` for the data gradient of a stride-1 convolution: the forward convolution
    of dY, padded by d(f-1)-p, with the filter flipped and its channel roles swapped."""
    dy, w = _to_logical(s, args)
    rank = s.spatial_rank
    flipped = _input_major(s, w).flip(list(range(2, 2 + rank)))
    padding = tuple(d * (f - 1) - p for d, f, p in zip(s.dilation, s.window, s.padding))
    forward = _logical_signature(s, input_shape=tuple(dy.shape), kernel_shape=tuple(flipped.shape), padding=padding,
                                 mode="fwd", bias=False, activation=None)
    return _store(s, _im2col(forward, (dy, flipped), in_place))


def _in_phases(s: ConvSignature) -> bool:
    """Whether ``phases`` serves ``s``: the data gradient of a strided, undilated convolution
    of a window of several taps, padded within the window, that does not patchify (whose
    data gradient ``patches`` computes as one matmul)."""
    return (s.mode == "bwd" and not s.transposed and any(st > 1 for st in s.stride) and math.prod(s.window) > 1
            and all(d == 1 for d in s.dilation) and all(p < f for p, f in zip(s.padding, s.window))
            and not _patchifies(s))


def _phase_data_gradient(s: ConvSignature, args: tuple[torch.Tensor, ...], in_place: bool = False) -> torch.Tensor:
    """``phases``: the data gradient of a strided convolution without zeros inserted in dY.
    The pixels of dX at ``i * stride + phase`` (per axis, phase < stride) are the stride-1
    convolution of dY with the filter's taps ``rho + stride * u`` (``rho = (phase + padding)
    mod stride``), reversed; each phase is an ``im2col`` convolution of dY (cut or padded to
    the rows it reads), its pixels put in place by strided slices of dX; a phase no tap
    reaches is zero."""
    dy, w = _to_logical(s, args)
    rank, (n, c), size = s.spatial_rank, s.input_shape[:2], s.input_shape[2:]
    lengths = [-(-h // st) for h, st in zip(size, s.stride)]  # each phase's pixels, rounded up
    flipped = _input_major(s, w).flip(list(range(2, 2 + rank)))
    dx = dy.new_zeros(n, c, *size)
    for phase in itertools.product(*(range(st) for st in s.stride)):
        taps, reads, pads = [], [], []
        for ph, st, p, f, o, length in zip(phase, s.stride, s.padding, s.window, s.output_spatial, lengths):
            rho = (ph + p) % st
            count = -(-(f - rho) // st)  # the taps rho, rho + st, ... within the window
            low = count - 1 - (ph + p) // st  # rows of dY before the first a phase pixel reads
            taps.append(slice(f - 1 - rho - st * (count - 1), f - rho, st))  # of the reversed filter
            reads.append((max(0, -low), o - max(0, -(length + count - 1 - o - low))))
            pads.append((max(0, low), max(0, length + count - 1 - o - low)))
        if any(tap.start >= tap.stop for tap in taps):
            continue
        source = dy[(slice(None), slice(None), *(slice(a, b) for a, b in reads))]
        source = F.pad(source, [v for pair in reversed(pads) for v in pair]) if any(map(any, pads)) else source
        sub = flipped[(slice(None), slice(None), *taps)]
        forward = _logical_signature(s, input_shape=tuple(source.shape), kernel_shape=tuple(sub.shape),
                                     padding=(0,) * rank, stride=(1,) * rank, mode="fwd", bias=False, activation=None)
        values = _im2col(forward, (source, sub), in_place)  # (N, C, *lengths), rounded once
        placed = (slice(None), slice(None), *(slice(ph, None, st) for ph, st in zip(phase, s.stride)))
        dx[placed] = values[(slice(None), slice(None), *(slice(0, len(range(ph, h, st)))
                                                          for ph, h, st in zip(phase, size, s.stride)))]
    return _store(s, dx)


def _scatters(s: ConvSignature) -> bool:
    """Whether ``matmul_scatter`` serves ``s``: the data gradient of an unpadded, ungrouped,
    strided 1x1 convolution."""
    return (s.mode == "bwd" and not s.transposed and s.groups == 1 and all(f == 1 for f in s.window)
            and not any(s.padding) and any(st > 1 for st in s.stride))


def _strided_1x1_data_gradient(s: ConvSignature, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``matmul_scatter``: dX of an unpadded strided 1x1 convolution. dY (channels minor)
    times the filter is dX at the pixels ``o * stride``; along each spatial axis the values
    get ``stride - 1`` zeros after each (a pad of a new axis, merged), then the axis is cut
    to the input's extent (``outputs * stride`` is never short of it). 16-bit operands
    accumulate in float32, rounded once."""
    dy, w = _to_logical(s, args)
    n, k, c = s.input_shape[0], s.output_channels, s.input_shape[1]
    values = torch.matmul(_channels_last(dy).reshape(-1, k).float(), w.reshape(k, c).float())
    dx = values.reshape(n, *s.output_spatial, c)  # channels-last, at the strided pixels
    for axis, (stride, extent) in enumerate(zip(s.stride, s.input_shape[2:]), start=1):
        if stride > 1:
            spread = F.pad(dx.unsqueeze(axis + 1), (0, 0) * (dx.dim() - axis - 1) + (0, stride - 1))
            dx = spread.flatten(axis, axis + 1).narrow(axis, 0, extent)  # each value, then stride - 1 zeros
    dx = dx.permute(0, dx.dim() - 1, *range(1, dx.dim() - 1))  # logical (N, C, *input)
    return _store(s, dx.to(s.dtype))


def _in_float32(s: ConvSignature, *args: torch.Tensor) -> torch.Tensor:
    """``f32_compute``: the reference on float32 copies, rounded once."""
    return s.reference(*(a.float() for a in args)).to(s.dtype)


def _one_by_one_matmul(s: ConvSignature, x: torch.Tensor, w: torch.Tensor,
                       b: torch.Tensor | None = None) -> torch.Tensor:
    """``matmul_1x1``: an unpadded NCHW 1x1 convolution as a batched matmul."""
    sampled = x[(slice(None), slice(None), *(slice(None, None, st) for st in s.stride))]
    k = s.output_channels
    w2d = layouts.permute(w, layouts.to_logical(s.kernel_layout)).reshape(k, -1)
    y = torch.matmul(w2d, sampled.reshape(x.shape[0], x.shape[1], -1))  # (N, K, pixels)
    y = y.reshape(x.shape[0], k, *s.output_spatial)
    if b is not None:
        y = y + b.reshape(k, *(1,) * s.spatial_rank)
    if s.activation:
        y = ACTIVATIONS[s.activation](y)
    return layouts.permute(y, layouts.to_physical(s.output_layout))
