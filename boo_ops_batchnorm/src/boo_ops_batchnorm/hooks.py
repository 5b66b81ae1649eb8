"""Registration of the bnorm op with BOO (the ``boo`` entry point ``bnorm``)."""

from __future__ import annotations

import functools
import math

from boo_core import Formulation, OpSpec, Target, hookimpl
from boo_core.kernels.configs import REDUCTIONS
from boo_core.tune.space import TuningCandidate, elementwise_configs, reduction_configs

from .folding import FoldIntoConvolution
from .fusion import PATTERNS
from .parser import BatchNormParser
from .saved import BackwardReadsNoRunningStatistics
from .signature import BatchNormSignature

#: iree-compile flags on the CPU: aggressive fusion puts the statistics' reductions and the
#: normalization that consumes them into fewer dispatches; reassociating floating-point
#: reductions lets them accumulate in vector registers.
CPU_FLAGS = ("--iree-dispatch-creation-enable-aggressive-fusion=true",
             "--iree-llvmcpu-reassociate-fp-reductions=true")


#: GPU formulations (measured on an H200, docs/gpu.md "Batch norm"). IREE gives a plain sum
#: over N·H·W one thread per channel (8 workgroups for 256 channels at ResNet-50's sizes):
#: ``staged_sums`` sums ``GROUPS`` rows per thread and stage instead, reading the input in its
#: first stage (its conversion and centring fused there) and only partial sums after it.
#: IREE's reduction vector distribution, which it picks for groups of 32 and 64, measured
#: 3-6x slower than its tile-and-fuse pipeline on these outer reductions, so it is off here.
GROUPS = 32
SECOND_GROUPS = 64  # a second candidate for the tuner: it wins on some shapes by 2-15%
NO_REDUCTION_VECTOR_DISTRIBUTION = ("--iree-codegen-llvmgpu-use-reduction-vector-distribution=false",)
#: The staged formulations' flags: the above, and aggressive fusion, which puts the small
#: elementwise passes over the statistics (rounding dweight and dbias, the saved and running
#: statistics) into the last stages' dispatches or into one beside them (docs/gpu.md, "One
#: reduction per pass", counts the dispatches).
STAGED_FLAGS = (*NO_REDUCTION_VECTOR_DISTRIBUTION, "--iree-dispatch-creation-enable-aggressive-fusion=true")
CPU_STAGED_FLAGS = ("--iree-dispatch-creation-enable-aggressive-fusion=true",)
#: Where a backward's sums may start with at most ``GROUPS`` parts (:func:`few_parts_groups`):
#: parts of at most this many rows, or at least this many partial sums (parts x channels).
FEW_PARTS_ROWS = 256
FEW_PARTS_COLUMNS = 16384
#: Elements a CPU workgroup of ``whole_rows`` covers at most (whole channel planes of one image).
CPU_ROWS_ELEMENTS = 16384


def elementwise_pass_configs(signature: BatchNormSignature, target: Target) -> list[dict]:
    """The core's elementwise configurations for the pass over (pixels, channels) that
    writes y or dx of a channels-last spatial input on a GPU (IREE gives it one warp per
    workgroup and, with few channels, short accesses); none elsewhere."""
    if target.backend == "llvm-cpu" or not (signature.spatial and signature.channels_last):
        return []
    return elementwise_configs(signature.reduction_size, signature.channels, signature.dtype.itemsize)


def first_stage_configs(signature: BatchNormSignature, target: Target, groups: int) -> list[dict]:
    """The core's reduction configurations for the first stage of a channels-last spatial
    input's staged sums on a GPU (parts of ``groups`` rows x 2 sums x channels: IREE gives
    it 32-thread workgroups, each thread one sum of 4 channels): threads of one sum each,
    then threads of both sums of 16 bytes of channels (one read of each input serving both);
    none elsewhere."""
    if target.backend == "llvm-cpu" or not (signature.spatial and signature.channels_last):
        return []
    shape = (signature.first_stage_parts(groups), 2, signature.channels)
    return [*reduction_configs(shape), *paired_first_stage_configs(signature, target, groups)]


def paired_first_stage_configs(signature: BatchNormSignature, target: Target, groups: int) -> list[dict]:
    """Of :func:`first_stage_configs`, those whose threads compute both sums of 16 bytes of
    channels, from one read of each input (IREE's own tiles read 8 bytes, once per sum).
    The first is a training forward's default: on an H200, 6-14% faster than IREE's first
    stage on 8 of ResNet-50's 10 rows that take it, 2-3% slower on two 14x14 rows; backwards
    measured up to 40% slower, so it is only a tuning candidate for them."""
    if target.backend == "llvm-cpu" or not (signature.spatial and signature.channels_last):
        return []
    shape = (signature.first_stage_parts(groups), 2, signature.channels)
    return reduction_configs(shape, vector=16 // signature.dtype.itemsize, limit=2, whole_middle=True)


def two_stage_groups(signature: BatchNormSignature) -> int | None:
    """Rows per thread of a first stage that leaves at most ``GROUPS`` partial sums per
    column, and no more than it sums, so that the sums take two stages (the first, and each
    term's last) instead of three or more: the smallest such divisor of the reduction where
    it is at most ``SECOND_GROUPS`` (ResNet-50's 7x7 maps at batch 32: 49 rows), else None.
    One dispatch fewer measured 10-15% faster there on an H100 (docs/gpu.md); with more rows
    per thread the first stage has too few threads (1.5-16x slower at 14x14 and above)."""
    if not (signature.spatial and signature.channels_last):
        return None
    rows = signature.reduction_size
    smallest = max(-(-rows // GROUPS), math.isqrt(rows - 1) + 1)  # rows / d <= GROUPS and rows / d <= d
    return next((d for d in range(smallest, SECOND_GROUPS + 1) if rows % d == 0), None)


def few_parts_groups(signature: BatchNormSignature) -> int | None:
    """Rows per part of a backward's first stage that leaves at most ``GROUPS`` parts, so
    that its sums take the first stage and each term's last (one adding stage fewer than
    ``staged_sums`` at 14x14, two at 56x56): the smallest such divisor of the reduction, for
    a kernel library's first stage whose programs each sum whole parts (IREE's own first
    stage has too few threads for it). Offered where :func:`two_stage_groups` offers none
    and the parts are short (at most ``FEW_PARTS_ROWS`` rows) or, with their channels, make
    at least ``FEW_PARTS_COLUMNS`` columns of partial sums; else None. On an H200 with
    ``boo_kernels_hopper`` (ResNet-50's rows at batch 32, docs/gpu.md) that took 256 @14
    from 10.3 to 9.8 us and 512 @28 from 47.7 to 43.8; rows of longer parts and fewer
    columns went up to 2.7x slower (64 @112: 82 to 219 us)."""
    if signature.mode != "bwd" or not (signature.spatial and signature.channels_last):
        return None
    if two_stage_groups(signature) is not None:
        return None
    rows, channels = signature.reduction_size, signature.channels
    # past this, a part is longer than FEW_PARTS_ROWS and the parts hold too few partial sums
    longest = min(rows, max(FEW_PARTS_ROWS, rows * channels // FEW_PARTS_COLUMNS))
    d = next((d for d in range(-(-rows // GROUPS), longest + 1) if rows % d == 0), None)
    return d if d is not None and (d <= FEW_PARTS_ROWS or rows // d * channels >= FEW_PARTS_COLUMNS) else None


def formulations(signature: BatchNormSignature, target: Target) -> tuple[Formulation, ...]:
    """On GPUs, where the kernel sums over the batch (training, backward, inference without
    running statistics), the sums in two stages where the reduction is short
    (:func:`two_stage_groups`), then, for a training forward, in stages of ``GROUPS`` rows
    whose first stage's threads compute both sums (:func:`paired_first_stage_configs`),
    in stages of ``GROUPS`` rows, then of ``SECOND_GROUPS``;
    a channels-last input's elementwise pass configured (the first of
    :func:`elementwise_pass_configs`: within 1-3% of the best of them on an H200), then the
    same without that configuration, then a backward's in few parts (:func:`few_parts_groups`,
    for a kernel library); then the reference's export. On the CPU the export,
    after :func:`cpu_staged_sums`, :func:`cpu_own_scale` or :func:`cpu_whole_rows` where they
    offer theirs."""
    default = Formulation("default")
    if target.backend == "llvm-cpu":
        return (*cpu_staged_sums(signature), *cpu_own_scale(signature), *cpu_whole_rows(signature), default)
    configs = elementwise_pass_configs(signature, target)
    config = configs[0] if configs else None
    if signature.mode == "infer" and signature.running:
        if config is None:
            return (default,)
        return (Formulation("wide_accesses", config=config, description="the export, its elementwise pass with "
                            "16-byte accesses and 256-thread workgroups"), default)
    compute = signature._backward if signature.mode == "bwd" else signature._forward
    variants = [("staged_sums", GROUPS, config), (f"staged_sums_{SECOND_GROUPS}", SECOND_GROUPS, config)]
    if (first_groups := two_stage_groups(signature)) is not None:
        variants.insert(0, ("staged_sums_two_stages", first_groups, config))
    paired = paired_first_stage_configs(signature, target, GROUPS) if signature.mode == "train" else []
    if config is not None and paired:  # before the plain stages: 2-3% slower to 14% faster (docs/gpu.md)
        variants.insert(variants.index(("staged_sums", GROUPS, config)),
                        ("staged_sums_paired", GROUPS, {**config, REDUCTIONS: paired[0]}))
    if config is not None:  # should IREE refuse the configuration, the sums with its own
        variants.append(("staged_sums_iree_tiles", GROUPS, None))
    if (few := few_parts_groups(signature)) is not None:
        variants.append(("staged_sums_few_parts", few, config))
    staged = [Formulation(name, computation=functools.partial(compute, groups=groups), config=tiles,
                          flags=STAGED_FLAGS,
                          description=_staged_description(name, groups))
              for name, groups, tiles in variants]
    return (*staged, default)


def _staged_description(name: str, groups: int) -> str:
    if name == "staged_sums_few_parts":
        return f"sums over the batch from at most {GROUPS} parts of {groups} rows (for a kernel library's first stage)"
    threads = ("the first stage's threads each both sums of 16 bytes of channels" if name == "staged_sums_paired"
               else "a thread per output")
    return f"sums over the batch in stages of {groups} rows ({threads})"


def cpu_staged_sums(signature: BatchNormSignature) -> tuple[Formulation, ...]:
    """On the CPU, a channels-last spatial input's sums over the batch in stages of
    ``GROUPS`` rows (no GPU flags): IREE's CPU code for the export's sums down the rows,
    channels innermost, took 2-6x the time (docs/architecture.md, "Batch norms on the CPU");
    none for other inputs, or an inference with running statistics (no sums)."""
    if (signature.mode == "infer" and signature.running) or not (signature.spatial and signature.channels_last):
        return ()
    # a forward's scale once per channel too (cpu_own_scale): 8-16% faster training forwards
    compute = signature._backward if signature.mode == "bwd" else functools.partial(signature._forward, own_scale=True)
    return (Formulation("staged_sums", computation=functools.partial(compute, groups=GROUPS), flags=CPU_STAGED_FLAGS,
                        description=f"sums over the batch in stages of {GROUPS} rows"),)


def cpu_own_scale(signature: BatchNormSignature) -> tuple[Formulation, ...]:
    """On the CPU, an inference with running statistics of a channels-last spatial input with
    each channel's scale computed once, in a dispatch of its own: IREE's export computed its
    ``rsqrt`` for every element, 1.7-2.6x ATen's time (docs/architecture.md, "Batch norms on
    the CPU"). A channels-first input's pass gained nothing from it."""
    if not (signature.mode == "infer" and signature.running and signature.spatial and signature.channels_last):
        return ()
    return (Formulation("own_scale", computation=functools.partial(signature._forward, own_scale=True),
                        description="each channel's scale computed once, in a dispatch of its own"),)


def cpu_whole_rows(signature: BatchNormSignature) -> tuple[Formulation, ...]:
    """On the CPU, an inference with running statistics of a channels-first spatial input: the
    export's one elementwise pass (loops N, C, and the plane) with each workgroup whole planes
    of a few channels of one image (at most :data:`CPU_ROWS_ELEMENTS` elements). IREE 3.13
    tiles it 8 x 64 x 64, every workgroup 512 short pieces of rows 12 KB apart (8 x 64 x
    56 x 56): 2.2-2.7x ATen's time, 1.2-1.6x with whole planes (docs/architecture.md, "Batch
    norms on the CPU")."""
    shape = signature.input_shape
    if not (signature.mode == "infer" and signature.running and signature.spatial and not signature.channels_last
            and len(shape) >= 3):
        return ()
    plane = math.prod(shape[2:])
    rows = 1
    while shape[1] % (2 * rows) == 0 and 2 * rows * plane <= CPU_ROWS_ELEMENTS:
        rows *= 2
    config = {"distribution": [rows, plane], "vector_common_parallel": [1, 16]}
    return (Formulation("whole_rows", config=config,
                        description=f"the export, each CPU workgroup {rows} whole plane(s) of one image"),)


def tuning_space(signature: BatchNormSignature, target: Target) -> list[TuningCandidate]:
    """The other elementwise configurations (:func:`elementwise_pass_configs`) on each
    configured formulation, each replacing the formulation's own (its first stage's kept); then ``staged_sums`` with
    its first stage configured (:func:`first_stage_configs`). As every row's formulation on
    an H100 (ResNet-50's rows, one run), the first of those took a training forward from 2%
    slower to 7% faster, a backward from 4% faster to 33% slower: candidates, not a default."""
    configured = [f for f in formulations(signature, target) if f.config]
    candidates = [TuningCandidate(f.name, {**config, **_first_stage(f)}) for f in configured
                  for config in elementwise_pass_configs(signature, target)[1:]]
    for f in configured:
        if f.name == "staged_sums":
            candidates += [TuningCandidate(f.name, {**f.config, REDUCTIONS: sums})
                           for sums in first_stage_configs(signature, target, GROUPS)]
    return candidates


def _first_stage(formulation: Formulation) -> dict:
    """The part of ``formulation``'s configuration that configures its first stage of sums."""
    return {REDUCTIONS: formulation.config[REDUCTIONS]} if REDUCTIONS in formulation.config else {}


def compile_flags(signature: BatchNormSignature, target: Target) -> tuple[str, ...]:
    return CPU_FLAGS if target.backend == "llvm-cpu" else ()


@hookimpl
def boo_register_ops(register):
    register(OpSpec(
        name="bnorm",
        keywords=("bnorm",),
        signature_class=BatchNormSignature,
        parser=BatchNormParser(),
        description="batch normalization: training and inference forwards, backward (MIOpenDriver bnorm, "
                    "bnormfp16, bnormbfp16; bnormfp16fp32 and bnormbfp16fp32 are the 16-bit two)",
        formulations=formulations,
        compile_flags=compile_flags,
        tuning_space=tuning_space,
        fusion_patterns=PATTERNS,
        graph_rewrites=(FoldIntoConvolution(), BackwardReadsNoRunningStatistics()),
    ))
