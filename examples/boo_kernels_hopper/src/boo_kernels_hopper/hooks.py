"""The ``boo`` entry point ``hopper_kernels``: 16-bit matmuls, bf16 convolutions, layer norms
and batch-norm backwards for Hopper GPUs.

For a CUDA target, when Triton is installed and the GPU is a Hopper (compute capability
9.0), a matmul, conv or layer-norm signature this library serves (``gemm.problem_of``,
``conv.problem_of``, ``wgrad.problem_of``, ``layernorm.problem_of``) gets candidate substitutions: executables with no
code of their own that run Triton's sm_90a PTX, built only on a cache miss.

* A matmul: one candidate per tile configuration (``gemm.configs_for``), each replacing the
  product's executable of the ``default`` formulation's module (``gemm.plan``). Where one
  program per tile would leave SMs idle (``gemm.stream_k_serves``), the stream-K kernel in a
  module of its own (``stream_k_substitution``), after the first configuration (first where
  ``gemm.stream_k_first`` says so). Where the
  matmul op offers ``split_k`` (a long K, few output tiles) for a product with A transposed,
  first one candidate per rank of configuration replacing that module's batched product of
  slices of K (``gemm.split_k_plan``): the configurations are ranked once the module's
  slices are known.
* A conv, or a CBAInfer (conv + bias + batch norm + activation) in NHWC: every executable
  of the ``default`` formulation's module (``conv.plan``); first, for a forward of few
  output tiles (small batches) where the op offers ``split_k``, that module's products
  (``conv.split_plan``: float32 partial sums over splits of the reduction, which IREE's next
  executable adds with the epilogue); for a padded forward or a padded
  stride-1 data gradient, first the ``channels_last`` formulation's module (one executable,
  or the filter's copy and one), the padding applied as the kernel reads x or dY. After
  each module's candidate with its chosen tiles, the same modules with other tiles
  (``conv.alternatives``), which BOO reaches only if those fail and ``boo tune`` times.
* A strided data gradient (strides 1 and 2, ``dgrad.problem_of``): first the ``phase_axes``
  formulation's module (the filter rearranged, then one contraction over dY as stored),
  each phase of dX computed with the taps it reads (``dgrad.plan``), ahead of the
  ``default`` module's candidate (zeros inserted into dY, or for 1x1 windows scattered).
* A weight gradient: every executable of an ``im2col_splitN`` formulation's module
  (``wgrad.plan``); first, where that module would move x or dY, the two of the
  ``implicit_split`` formulation's, the products reading x itself (``wgrad.implicit_plan``).

* A depthwise convolution (NHWC, one channel per group): the conv op's ``depthwise``
  module, its convolution (a forward's, a stride-1 data gradient's) replaced by the library's
  depthwise kernel (``depthwise.plan``), or its weight gradient's products
  (``depthwise.plan_wgrad``); the chosen tiles first, then the others for ``boo tune``.

* A batch-norm backward (statistics saved, channels last): the op's staged module, its
  first stage and elementwise pass (the two executables that read dY and x) replaced by the
  library's kernels (``batchnorm.plan``), the stages between them IREE's.

* A layer-norm forward: the op's ``mean_statistics`` module, one executable, replaced by
  the library's kernel (``layernorm.plan``). A backward with a weight: its two dx executables
  (``layernorm.plan_dx``), one kernel summing both row sums and writing dx, and an entry
  that returns at once in place of the executable whose row sum it no longer reads.

BOO verifies a candidate against PyTorch before first use and passes it over (the next
candidate, then IREE's kernels, serve) if it fails. Anywhere else the hook answers None and
says why at debug level.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from boo_core.plugin import (
    EXTERN_FLAGS,
    BooOpRegistry,
    Formulation,
    KernelExecutables,
    Substitution,
    Target,
    external_source,
    hookimpl,
)

from . import __version__ as VERSION
from . import batchnorm, conv, depthwise, dgrad, gemm, layernorm, ptx, wgrad

logger = logging.getLogger(__name__)
OBJECT = "objects/hopper_gemm.ptx"
CONV_FORMULATION = "default"  # the conv op's module whose executables conv.plan knows
#: The conv op's module of one executable for a padded channels-last forward (its padding
#: fused in), which the kernel reads unpadded (conv.padding_as_it_reads).
CHANNELS_LAST_FORMULATION = "channels_last"
GEMM_FORMULATION = "default"  # the matmul op's module whose executables gemm.plan knows
SPLIT_K_FORMULATION = "split_k"  # the matmul op's (gemm.split_k_plan) and the conv op's (conv.split_plan)
#: Whether to offer the split-K candidates at all, the GEMM's and the convolution's (bench.py
#: --long-k measures without them).
OFFER_SPLIT_K = True


def _replaced(executable: Any, made: ptx.Kernel, obj: str) -> dict[str, str]:
    """The files replacing ``executable`` with the kernel ``made``, kept as ``obj``."""
    source = external_source(executable, [obj], workgroup_size=(made.block, 1, 1), workgroup_count=made.grid_xyz,
                             workgroup_local_memory=made.shared_bytes)
    return {f"sources/{executable.name}.mlir": source, obj: made.ptx}


def _gemm_build(choose: Callable[[Sequence[Any]], tuple[Any, gemm.GemmProblem, gemm.GemmConfig]]):
    """A build replacing one executable: ``choose(executables)`` gives it, the problem it
    computes and the tiles."""
    def build(kernel: KernelExecutables) -> dict[str, str]:
        executable, problem, config = choose(kernel.executables)
        return _replaced(executable, gemm.generate(problem, config, executable.exports[0].kernel_name), OBJECT)

    return build


def _product(problem: gemm.GemmProblem, config: gemm.GemmConfig):
    def choose(executables: Sequence[Any]) -> tuple[Any, gemm.GemmProblem, gemm.GemmConfig]:
        executable = gemm.plan(problem, executables)
        return executable, gemm.kernel_problem(problem, executable), config

    return choose


def _split_product(problem: gemm.GemmProblem, rank: int):
    def choose(executables: Sequence[Any]) -> tuple[Any, gemm.GemmProblem, gemm.GemmConfig]:
        executable, split = gemm.split_k_plan(problem, executables)
        return executable, split, gemm.configs_for(split)[rank]

    return choose


def _gemm_substitutions(signature: Any, target: Target) -> list[Substitution] | None:
    """One candidate per tile configuration, the likely fastest first (``gemm.configs_for``),
    after the split-K candidates where the op offers ``split_k``: BOO uses the first that
    verifies, ``boo tune`` times them all."""
    problem = gemm.problem_of(signature)
    if problem is None:
        return None
    found = []
    if OFFER_SPLIT_K and problem.batch == 1 and problem.trans_a and not problem.trans_b and \
            _offers(signature, target, SPLIT_K_FORMULATION):
        found += [Substitution(f"hopper_split_k_{rank + 1}", build=_gemm_build(_split_product(problem, rank)),
                               key=_key("split_k", problem, "rank", rank), formulation=SPLIT_K_FORMULATION)
                  for rank in range(len(gemm.CONFIGS))]
    first_config = len(found)
    found += [Substitution(f"hopper_gemm_{config.label}", build=_gemm_build(_product(problem, config)),
                           key=_key("gemm", problem, config), formulation=GEMM_FORMULATION)
              for config in gemm.configs_for(problem)]
    if gemm.stream_k_serves(problem):
        found.insert(0 if gemm.stream_k_first(problem) else first_config + 1, stream_k_substitution(signature, problem))
    return found


STREAM_K_EXPORT = "hopper_gemm_stream_k"
STREAM_K_OBJECT = "objects/hopper_gemm_stream_k.ptx"


def stream_k_substitution(signature: Any, problem: gemm.GemmProblem,
                          config: gemm.GemmConfig = gemm.STREAM_K) -> Substitution:
    """The stream-K kernel in its own module (``gemm.stream_k_module``): the substitution
    brings the formulation, and its files are the kernel's PTX alone."""
    module = gemm.stream_k_module(signature, problem, config, STREAM_K_EXPORT, STREAM_K_OBJECT)
    formulation = Formulation(f"hopper_stream_k_{config.bm}x{config.bn}", mlir=lambda: module, flags=EXTERN_FLAGS,
                              description="the library's stream-K kernel, one launch with zeroed counters and "
                                          "memory for split tiles")

    def build(kernel: KernelExecutables) -> dict[str, str]:
        return {STREAM_K_OBJECT: gemm.generate(problem, config, STREAM_K_EXPORT).ptx}

    return Substitution(f"hopper_gemm_{config.label}", build=build, key=_key("gemm", problem, config),
                        formulation=formulation)


def _offered(signature: Any, target: Target) -> set[str]:
    """The names of the formulations ``signature``'s op offers on ``target``."""
    return {f.name for f in BooOpRegistry.default().formulations(signature, target)}


def _offers(signature: Any, target: Target, formulation: str) -> bool:
    """Whether ``signature``'s op offers ``formulation`` on ``target``."""
    return formulation in _offered(signature, target)


def _buildable(signature: Any) -> bool:
    """Whether this machine can build the library's kernels (it says why not at debug level)."""
    reason = ptx.unavailable_reason()
    if reason is not None:
        logger.debug("boo_kernels_hopper supplies nothing for %s: %s", signature.func_name, reason)
    return reason is None


def _key(*parts: object) -> str:
    """A substitution's key: the library's and Triton's versions, the target, what it builds."""
    return " ".join(["boo_kernels_hopper", VERSION, "triton", ptx.triton_version(), "sm_90a", *map(str, parts)])


def _build_launches(plan: Callable[[Sequence[Any]], list[Any]], generate: Callable[[Any, str], Any], prefix: str):
    """A build replacing every executable of the module: ``plan(executables)`` gives one
    launch per executable (ValueError for a module it does not know), ``generate(launch,
    kernel_name)`` its PTX and geometry."""
    def build(kernel: KernelExecutables) -> dict[str, str]:
        files: dict[str, str] = {}
        for index, launch in enumerate(plan(kernel.executables)):
            executable = launch.executable
            made = generate(launch, executable.exports[0].kernel_name)
            obj = f"objects/{prefix}_{index}_{launch.kernel}.ptx"  # one per executable: each names its own entry
            files.update(_replaced(executable, made, obj))
        return files

    return build


def _wgrad_substitutions(signature: Any, target: Target, problem: wgrad.WgradProblem) -> list[Substitution]:
    """The products over x itself (the op's ``implicit_split`` module) first, where the op
    offers it and the columns' module would move x or dY (``wgrad.reads_x_itself_first``);
    then the products over IREE's columns; then both with the other tiles
    (``wgrad.alternatives``), for ``boo tune``."""
    chosen = wgrad.choose_config(problem)
    formulation = wgrad.formulation_of(problem)
    implicit = wgrad.reads_x_itself_first(problem) and _offers(signature, target, wgrad.IMPLICIT_FORMULATION)

    def columns(tiles: wgrad.WgradTiles | None, name: str) -> Substitution:
        config = chosen if tiles is None else wgrad.choose_config(problem, tiles=tiles)
        build = _build_launches(lambda executables: wgrad.plan(problem, config, executables), wgrad.generate,
                                "hopper_wgrad")
        return Substitution(name, build=build, key=_key("wgrad", problem, config, formulation),
                            formulation=formulation)

    def over_x(tiles: wgrad.WgradTiles | None, name: str) -> Substitution:
        # the splits follow from the module's parts, which the op's version (in the key) decides
        build = _build_launches(lambda executables: wgrad.implicit_plan(problem, executables, tiles=tiles),
                                wgrad.generate, "hopper_wgrad")
        key = _key("wgrad", problem, wgrad.IMPLICIT_FORMULATION, *([] if tiles is None else [tiles]))
        return Substitution(name, build=build, key=key, formulation=wgrad.IMPLICIT_FORMULATION)

    makers = [over_x, columns] if implicit else [columns]
    return [make(None, "hopper_conv") for make in makers] + [
        make(tiles, f"hopper_conv_{tiles}") for make in makers for tiles in wgrad.alternatives(problem, chosen)]


def conv_candidates(signature: Any, target: Target) -> list[Substitution]:
    """A convolution's (or CBAInfer's) candidates, whether or not this machine can build
    them: each module's kernel with the tiles chosen for it, the one likely fastest first;
    then, for ``boo tune`` to time, each with the other tiles (:func:`conv.alternatives`),
    named ``hopper_conv_<tiles>``."""
    problem = conv.problem_of(signature)
    by_phase = dgrad.problem_of(signature)
    modules: list[tuple[Callable[[conv.ConvConfig | None, str], Substitution], conv.ConvConfig, int, int]] = []
    if by_phase is not None and _offers(signature, target, dgrad.FORMULATION):
        # no zeros inserted into dY, no multiply-add of one
        modules.append((lambda config, name, pb=by_phase: _phase_launches(pb, config, name),
                        dgrad.choose_config(by_phase), by_phase.k, by_phase.c))
    if OFFER_SPLIT_K and problem is not None and problem.mode == "fwd" and \
            _offers(signature, target, SPLIT_K_FORMULATION):
        # few output tiles (late maps at small batches): several programs a tile, each a split of its
        # reduction, with the unsplit problem's tiles (conv.choose_config)
        tiles = conv.choose_config(conv.padding_as_it_reads(problem) or problem)
        modules.append((lambda config, name, pb=problem: _split_launches(pb, config, name), tiles, problem.cin,
                        problem.cout))
    if problem is not None:
        # reading x (or dY) unpadded, where the kernel can: no padded copy, ahead of the pad + conv
        implicit = conv.padding_as_it_reads(problem)
        for pb, formulation in ((implicit, CHANNELS_LAST_FORMULATION), (problem, CONV_FORMULATION)):
            if pb is not None:
                modules.append((lambda config, name, pb=pb, f=formulation: _conv_launches(pb, f, config, name),
                                conv.choose_config(pb), pb.cin, pb.cout))
    chosen = [make(None, "hopper_conv") for make, _, _, _ in modules]
    others = [make(config, f"hopper_conv_{conv.config_label(config)}") for make, tiles, cin, cout in modules
              for config in conv.alternatives(tiles, cin, cout)]
    return chosen + others


def _phase_launches(problem: dgrad.PhaseProblem, config: conv.ConvConfig | None = None,
                    name: str = "hopper_conv") -> Substitution:
    """A strided data gradient computed phase by phase over dY as stored (``dgrad.plan``)."""
    config = config or dgrad.choose_config(problem)
    build = _build_launches(lambda executables: dgrad.plan(problem, executables, config), dgrad.generate,
                            "hopper_dgrad")
    return Substitution(name, build=build, key=_key("dgrad", problem, config, dgrad.FORMULATION),
                        formulation=dgrad.FORMULATION)


def _split_launches(problem: conv.ConvProblem, config: conv.ConvConfig | None = None,
                    name: str = "hopper_conv") -> Substitution:
    """A forward in the conv op's ``split_k`` module: its products replaced by the kernel in
    the module's splits (``conv.split_plan``), tiles chosen for the split problem unless given."""
    def build(kernel: KernelExecutables) -> dict[str, str]:
        split, launches = conv.split_plan(problem, kernel.executables)
        tiles = config or conv.choose_config(split)
        files: dict[str, str] = {}
        for launch in launches:
            made = conv.generate(split, tiles, launch, launch.executable.exports[0].kernel_name)
            files.update(_replaced(launch.executable, made, "objects/hopper_conv_split.ptx"))
        return files

    # the splits follow from the module, which the op's version (in BOO's key) decides
    key = _key("conv", problem, config or "chosen", SPLIT_K_FORMULATION)
    return Substitution(name, build=build, key=key, formulation=SPLIT_K_FORMULATION)


def _conv_launches(problem: conv.ConvProblem, formulation: str, config: conv.ConvConfig | None = None,
                   name: str = "hopper_conv") -> Substitution:
    config = config or conv.choose_config(problem)
    key = _key("conv", problem, config, formulation)
    build = _build_launches(lambda executables: conv.plan(problem, executables),
                            lambda launch, entry: conv.generate(problem, config, launch, entry), "hopper_conv")
    return Substitution(name, build=build, key=key, formulation=formulation)


def _layernorm_substitutions(signature: Any, target: Target) -> list[Substitution] | None:
    """A layer norm's candidates: a forward's single-executable module
    (``layernorm.FORMULATION``) with the library's kernel in place of IREE's; a backward's
    module (the first of ``layernorm.BACKWARD_FORMULATIONS`` the op offers) with its two dx
    executables replaced (``layernorm.plan_dx``). The chosen configuration first, then, for
    ``boo tune``, the others (``layernorm.alternatives``, named ``..._r<rows>_w<warps>``)."""
    problem = layernorm.problem_of(signature)
    if problem is None:
        return None
    chosen = layernorm.choose_config(problem)
    configs = [(chosen, ""), *((c, "_" + layernorm.config_label(c)) for c in layernorm.alternatives(problem, chosen))]
    if problem.mode == "fwd":
        if not _offers(signature, target, layernorm.FORMULATION):
            return None

        def forward(config: layernorm.LayerNormConfig) -> Callable[[KernelExecutables], dict[str, str]]:
            def build(kernel: KernelExecutables) -> dict[str, str]:
                executable = layernorm.plan(problem, kernel.executables)
                made = layernorm.generate(problem, config, executable.exports[0].kernel_name)
                return _replaced(executable, made, "objects/hopper_layernorm.ptx")

            return build

        return [Substitution("hopper_layernorm" + suffix, build=forward(config), key=_key("layernorm", problem, config),
                             formulation=layernorm.FORMULATION) for config, suffix in configs]
    names = _offered(signature, target)
    formulation = next((f for f in layernorm.BACKWARD_FORMULATIONS if f in names), None)
    if formulation is None:
        return None

    def dx(config: layernorm.LayerNormConfig) -> Callable[[KernelExecutables], dict[str, str]]:
        def build(kernel: KernelExecutables) -> dict[str, str]:
            sums, dx = layernorm.plan_dx(problem, kernel.executables)
            made = layernorm.generate_dx(problem, config, dx.exports[0].kernel_name)
            skipped = layernorm.nothing(sums.exports[0].kernel_name, len(sums.exports[0].bindings), made.ptx)
            return {**_replaced(dx, made, "objects/hopper_layernorm_dx.ptx"),
                    **_replaced(sums, skipped, "objects/hopper_layernorm_sums_skipped.ptx")}

        return build

    return [Substitution("hopper_layernorm_dx" + suffix, build=dx(config),
                         key=_key("layernorm", problem, config, formulation), formulation=formulation)
            for config, suffix in configs]


def _batchnorm_substitutions(signature: Any, target: Target) -> list[Substitution] | None:
    """A batch-norm backward's candidates: each staged module the op offers
    (``batchnorm.FORMULATIONS``, in that order) with its first stage and elementwise pass
    replaced (``batchnorm.plan``), first-stage programs of ``batchnorm.PROGRAM_ROWS`` rows;
    then, for ``boo tune``, the first module's with programs of the other rows (named
    ``hopper_bnorm_rows<rows>``)."""
    problem = batchnorm.problem_of(signature)
    if problem is None:
        return None
    names = _offered(signature, target)
    offered = [f for f in batchnorm.FORMULATIONS if f in names]
    if not offered:
        return None

    def replaced(program_rows: int) -> Callable[[KernelExecutables], dict[str, str]]:
        def build(kernel: KernelExecutables) -> dict[str, str]:
            chosen = batchnorm.plan(problem, kernel.executables)
            sums = batchnorm.generate_sums(problem, chosen, program_rows, chosen.sums.exports[0].kernel_name)
            dx = batchnorm.generate_dx(problem, chosen, chosen.dx.exports[0].kernel_name)
            return {**_replaced(chosen.sums, sums, "objects/hopper_bnorm_sums.ptx"),
                    **_replaced(chosen.dx, dx, "objects/hopper_bnorm_dx.ptx")}

        return build

    def substitution(name: str, program_rows: int, formulation: str) -> Substitution:
        return Substitution(name, build=replaced(program_rows), key=_key("bnorm", problem, program_rows, formulation),
                            formulation=formulation)

    first = [substitution("hopper_bnorm", batchnorm.PROGRAM_ROWS, f) for f in offered]
    return first + [substitution(f"hopper_bnorm_rows{r}", r, offered[0]) for r in batchnorm.OTHER_PROGRAM_ROWS]


def depthwise_substitution(problem: depthwise.DepthwiseProblem, config: depthwise.DepthwiseConfig,
                           name: str = "hopper_depthwise") -> Substitution:
    """The library's depthwise kernel with ``config`` in the op's ``depthwise`` module
    (``depthwise.plan``, or ``depthwise.plan_wgrad`` for a weight gradient)."""
    planner = depthwise.plan_wgrad if problem.mode == "wrw" else depthwise.plan

    def build(kernel: KernelExecutables) -> dict[str, str]:
        launch = planner(problem, kernel.executables)
        made = depthwise.generate(problem, config, launch, launch.executable.exports[0].kernel_name)
        return _replaced(launch.executable, made, "objects/hopper_depthwise.ptx")

    return Substitution(name, build=build, key=_key("depthwise", problem, config), formulation=depthwise.FORMULATION)


def _depthwise_substitutions(signature: Any, target: Target) -> list[Substitution] | None:
    """A depthwise convolution's candidates (``depthwise.problem_of``), where the op offers
    its ``depthwise`` formulation: the chosen tiles first, then, for ``boo tune``, the others
    (``depthwise.alternatives``, named ``hopper_depthwise_<pixels>x<channels>``)."""
    problem = depthwise.problem_of(signature)
    if problem is None or not _offers(signature, target, depthwise.FORMULATION):
        return None
    chosen = depthwise.choose_config(problem)
    return [depthwise_substitution(problem, chosen)] + [
        depthwise_substitution(problem, config, f"hopper_depthwise_{depthwise.config_label(config)}")
        for config in depthwise.alternatives(problem, chosen)]


def candidates(signature: Any, target: Target) -> list[Substitution] | None:
    """What this library offers ``signature`` on CUDA ``target``, in the order BOO tries it,
    whether or not this machine can build it (None: nothing)."""
    if getattr(signature, "op_name", None) == "layernorm":
        return _layernorm_substitutions(signature, target)
    if getattr(signature, "op_name", None) == "bnorm":
        return _batchnorm_substitutions(signature, target)
    if depthwise.problem_of(signature) is not None:
        return _depthwise_substitutions(signature, target)
    if getattr(signature, "op_name", None) not in ("conv", "cbainfer"):
        return _gemm_substitutions(signature, target)
    if getattr(signature, "mode", None) == "wrw":
        problem = wgrad.problem_of(signature)
        return _wgrad_substitutions(signature, target, problem) if problem is not None else None
    return conv_candidates(signature, target) or None


@hookimpl
def boo_kernel_substitutions(signature: Any, target: Target) -> Sequence[Substitution] | Substitution | None:
    if target.backend != "cuda":
        return None
    found = candidates(signature, target)
    return found if found and _buildable(signature) else None
