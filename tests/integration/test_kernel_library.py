"""The example kernel library (examples/boo_kernels_hopper) where it cannot build kernels:
installed beside the ops, it must supply nothing and change nothing. Its kernels themselves
are tested on a Hopper GPU (tests/gpu/test_kernel_library.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from boo_core import Target, get_launchable
from boo_core.plugins.registry import BooOpRegistry
from boo_core.substitute import executables_of
from boo_ops_conv import ConvSignature
from boo_ops_matmul import MatmulSignature

gemm = pytest.importorskip("boo_kernels_hopper.gemm")
conv = pytest.importorskip("boo_kernels_hopper.conv")
hooks = pytest.importorskip("boo_kernels_hopper.hooks")
ptx = pytest.importorskip("boo_kernels_hopper.ptx")
wgrad = pytest.importorskip("boo_kernels_hopper.wgrad")
dgrad = pytest.importorskip("boo_kernels_hopper.dgrad")
layernorm = pytest.importorskip("boo_kernels_hopper.layernorm")
batchnorm = pytest.importorskip("boo_kernels_hopper.batchnorm")

SERVED = MatmulSignature(m=256, n=512, k=512, dtype=torch.bfloat16)


def resnet_conv(c: int, k: int, window: int, stride: int, size: int, mode: str, **epilogue: object) -> ConvSignature:
    """A ResNet-50 row of benchmarks/gpu.py (bf16, NHWC, batch 32); ``epilogue``: a
    forward's ``bias`` and ``activation`` (a batch norm folded into the conv, its ReLU)."""
    return ConvSignature((32, c, size, size), (k, c, window, window), stride=stride, padding=window // 2,
                         dtype=torch.bfloat16, shared_layout="NHWC", mode=mode, **epilogue)


def test_it_knows_which_matmuls_it_serves():
    served = [SERVED, MatmulSignature(m=6304, n=768, k=3072, trans_b=True, bias=True, dtype=torch.bfloat16),
              MatmulSignature(m=100, n=50, k=70, trans_a=True, trans_b=True, alpha=2.0, beta=0.5, bias=True,
                              activation="gelu", dtype=torch.float16),
              MatmulSignature(m=197, n=197, k=64, batch=12, trans_b=True, dtype=torch.bfloat16)]
    for signature in served:
        problem = gemm.problem_of(signature)
        assert (problem.m, problem.n, problem.k, problem.batch) == (signature.m, signature.n, signature.k,
                                                                    signature.batch)
    for other in (MatmulSignature(m=256, n=512, k=512),  # float32: IREE's kernels (TF32 is the user's call)
                  MatmulSignature(m=256, n=512, k=512, col_major=True, dtype=torch.bfloat16),
                  ConvSignature((32, 64, 56, 56), (64, 64, 3, 3), padding=1, dtype=torch.bfloat16)):
        assert gemm.problem_of(other) is None


@pytest.mark.parametrize("signature", [
    MatmulSignature(m=1, n=1000, k=2048, trans_b=True, bias=True, dtype=torch.bfloat16),  # a classifier at batch 1
    MatmulSignature(m=1, n=256, k=512, trans_a=True, bias=True, dtype=torch.bfloat16),
    MatmulSignature(m=1, n=256, k=512, bias=True, alpha=2.0, beta=0.5, activation="relu", dtype=torch.bfloat16)],
    ids=lambda s: s.func_name)
def test_a_one_row_product_is_recognized_as_iree_binds_it(private_cache, signature):
    """IREE binds a one-row product's bias as a 1 x N row and A stored transposed as the row
    it is (the same memory): the plan finds the executable, and the kernel reads A as a row."""
    problem = gemm.problem_of(signature)
    found = executables_of(signature, "cuda:sm_80", "default")
    executable = gemm.plan(problem, found.executables)
    assert not gemm.kernel_problem(problem, executable).trans_a
    assert [b.tensor for b in executable.exports[0].bindings][-2] == f"tensor<1x{signature.n}xbf16>"


def test_small_products_get_smaller_tiles_so_that_every_sm_has_work():
    def first(m: int, n: int, k: int) -> tuple[int, int]:
        config = gemm.choose_config(gemm.problem_of(MatmulSignature(m=m, n=n, k=k, dtype=torch.bfloat16)))
        return config.bm, config.bn

    assert first(8192, 4096, 1024) == (128, 256)  # 1024 programs of the largest tile
    assert first(768, 768, 6304) == (64, 128)  # 72 programs, not 18
    assert first(100, 50, 70) == (64, 64)
    every = gemm.configs_for(gemm.problem_of(MatmulSignature(m=64, n=64, k=64, dtype=torch.bfloat16)))
    assert {(c.bm, c.bn) for c in every} == {(c.bm, c.bn) for c in gemm.CONFIGS}  # all of them, for the tuner
    assert all(c.num_stages == 2 for c in every)  # one step of K: no deeper pipeline



def test_tiles_rank_as_the_sweeps_measured_them():
    def ranked(m: int, n: int, k: int, **kw: bool) -> list[str]:
        signature = MatmulSignature(m=m, n=n, k=k, dtype=torch.bfloat16, **kw)
        return [c.label for c in gemm.configs_for(gemm.problem_of(signature))]

    assert ranked(6304, 2304, 768, trans_b=True)[:2] == ["tma_128x128", "tma_128x256"]  # ViT's qkv: 43.5 us, 53.3
    assert ranked(6304, 3072, 768, trans_b=True)[0] == "tma_128x256"  # 5 waves of either: the larger tiles
    assert ranked(6304, 768, 768)[0] == "tma_128x128"  # short K, no pieces: 3 rounds of 128 x 128 beat 2 of 256
    # Long K: one round of 128 x 256 and a round of quarters against two rounds of 128 x 128 and
    # one of halves (an H100: 41.0 + 18.6 us against 2 x 22.6 + 18.6, the parts timed alone).
    assert ranked(6304, 768, 3072)[0] == "tma_128x256"
    assert ranked(6304, 768, 2304)[0] == "tma_128x256"
    # A stored transposed: a TMA tile ranks as its cp.async twin does, behind it (66.0 us, 67.6),
    # unless its last round is in pieces (128 x 128 with 12 tiles in halves: 71.7 us, cp.async 79.7)
    wgrad = ranked(3072, 768, 6304, trans_a=True)
    assert wgrad[:2] == ["128x256", "tma_128x256"] and wgrad.index("tma_128x128") < wgrad.index("128x128")


def test_the_tma_kernel_cuts_its_last_round_in_pieces_only_where_the_pieces_fill_one_round():
    def pieces(m: int, n: int, k: int, config: gemm.GemmConfig) -> int:
        return gemm.tail_pieces(gemm.problem_of(MatmulSignature(m=m, n=n, k=k, dtype=torch.bfloat16)), config)

    tma_128, tma_256 = gemm.TMA_CONFIGS[(128, 128)], gemm.TMA_CONFIGS[(128, 256)]
    assert pieces(6304, 768, 3072, tma_128) == 2  # 300 tiles: two rounds of 132, then 36 tiles as 72 halves
    assert pieces(6304, 768, 3072, tma_256) == 4  # 150: one round, then 18 tiles as 72 quarters
    assert pieces(8192, 1280, 4096, tma_256) == 2  # 320: two rounds, 56 tiles left: 112 halves, not 224 quarters
    assert pieces(21120, 128, 3072, tma_128) == 2  # 165 tiles, 33 left: 128-wide tiles are only halved
    assert pieces(6304, 768, 768, tma_128) == 0  # a short K: the pieces' fixed costs outweigh them
    assert pieces(4096, 4096, 4096, tma_256) == 0  # 512 tiles: 116 left over, 232 halves would not fit
    assert pieces(768, 768, 4096, tma_128) == 0  # 36 tiles: one round only
    assert pieces(6304, 768, 3072, gemm.CONFIGS[1]) == 0  # the cp.async kernel has no tail of its own


# The product's executable in IREE's module for each class the library serves: one executable
# of the op's tensors, or (both operands transposed) IREE's transpose of A, then the product.
@pytest.mark.parametrize(("signature", "executables", "trans_a"), [
    (MatmulSignature(m=6304, n=2304, k=768, trans_b=True, bias=True, dtype=torch.bfloat16), 1, False),
    (MatmulSignature(m=768, n=768, k=6304, trans_a=True, dtype=torch.bfloat16), 1, True),
    (MatmulSignature(m=300, n=100, k=200, trans_a=True, trans_b=True, alpha=2.0, beta=0.5, bias=True,
                     activation="gelu", dtype=torch.bfloat16), 2, False),
    (MatmulSignature(m=197, n=197, k=64, batch=12, trans_b=True, dtype=torch.float16), 1, False)])
def test_it_finds_the_product_in_the_modules_iree_makes(private_cache, signature, executables, trans_a):
    problem = gemm.problem_of(signature)
    found = executables_of(signature, "cuda:sm_80", hooks.GEMM_FORMULATION)  # cross-compiled: no GPU needed
    assert len(found.executables) == executables
    product = gemm.plan(problem, found.executables)
    assert product.name == found.names[-1]
    assert gemm.kernel_problem(problem, product).trans_a == trans_a
    bindings = [b.tensor for b in product.exports[0].bindings]
    assert bindings[-1] == f"tensor<{'x'.join(map(str, signature.output_shape))}x{problem.dtype}>"
    with pytest.raises(ValueError):  # another size's module: BOO would pass the substitution over
        gemm.plan(gemm.problem_of(dataclasses.replace(signature, n=signature.n + 1)), found.executables)


@pytest.mark.parametrize(("signature", "parts"), [
    (MatmulSignature(m=96, n=384, k=100352, trans_a=True, dtype=torch.bfloat16), 49),
    (MatmulSignature(m=1024, n=1024, k=32768, trans_a=True, alpha=2.0, bias=True, activation="gelu",
                     dtype=torch.float16), 2)])
def test_it_finds_the_batched_product_of_slices_of_k_in_the_split_k_module(private_cache, signature, parts):
    problem = gemm.problem_of(signature)
    found = executables_of(signature, "cuda:sm_80", hooks.SPLIT_K_FORMULATION)  # cross-compiled: no GPU needed
    assert len(found.executables) == 2  # the partial products, then IREE's sum with the epilogue
    product, split = gemm.split_k_plan(problem, found.executables)
    assert product.name == found.names[0]
    assert (split.batch, split.k * split.batch, split.trans_a, split.out_dtype) == (parts, signature.k, True, "f32")
    assert (split.bias, split.activation, split.alpha) == (False, None, 1.0)  # the epilogue stays in the sum
    with pytest.raises(ValueError):  # the default module has no partial products
        gemm.split_k_plan(problem, executables_of(signature, "cuda:sm_80", hooks.GEMM_FORMULATION).executables)
    with pytest.raises(ValueError):  # served only with A transposed and B not
        gemm.split_k_plan(dataclasses.replace(problem, trans_b=True), found.executables)


@pytest.mark.skipif(ptx.unavailable_reason() is None, reason="this machine can build the library's kernels")
def test_without_triton_or_a_hopper_gpu_it_supplies_nothing(private_cache):
    assert hooks.boo_kernel_substitutions(SERVED, Target.parse("cuda:sm_80")) is None
    assert hooks.boo_kernel_substitutions(SERVED, Target.parse("cpu")) is None
    assert "hopper_kernels" in {p.name for p in BooOpRegistry.default().plugins.plugins}
    # BOO's own kernel serves, unchanged, on the CPU.
    launchable = get_launchable(MatmulSignature(m=8, n=8, k=8, dtype=torch.bfloat16), "cpu")
    assert launchable.substitution is None and launchable.formulation == "default"


def test_stream_k_is_offered_where_one_program_a_tile_leaves_a_round_idle(monkeypatch):
    monkeypatch.setattr(gemm, "STREAM_K_FIRST_BELOW", 0.8)  # first where 128 x 128 tiles fill < 80% of their rounds
    bf16 = torch.bfloat16
    first = [MatmulSignature(m=6304, n=768, k=3072, dtype=bf16),  # 300 tiles: 2.27 rounds of 132
             MatmulSignature(m=3072, n=768, k=6304, trans_a=True, dtype=bf16),  # a weight gradient: 144 tiles
             MatmulSignature(m=768, n=768, k=6304, trans_a=True, dtype=bf16)]  # 36 tiles
    for signature in first:
        found = hooks.candidates(signature, Target.parse("cuda:sm_90a"))
        assert found[0].name == "hopper_gemm_stream_k_128x128"
        assert found[0].own_formulation is not None and found[0].own_formulation.name == "hopper_stream_k_128x128"
        assert sum(s.own_formulation is not None for s in found) == 1
    # rounds that are nearly full (ViT-B/16's qkv: 900 tiles in 7 rounds), a short K, several batches,
    # rows TMA cannot read: nothing of stream-K
    for other in (MatmulSignature(m=6304, n=2304, k=768, trans_b=True, bias=True, dtype=bf16),
                  MatmulSignature(m=6304, n=768, k=256, dtype=bf16),
                  MatmulSignature(m=197, n=197, k=1024, batch=12, trans_b=True, dtype=bf16),
                  MatmulSignature(m=300, n=50, k=4096, dtype=bf16)):
        assert not gemm.stream_k_serves(gemm.problem_of(other))
        assert all(s.own_formulation is None for s in hooks.candidates(other, Target.parse("cuda:sm_90a")))
    # a round 80-90% full: offered after the first configuration, for boo tune
    between = MatmulSignature(m=6304, n=1152, k=1024, dtype=bf16)  # 450 tiles in 4 rounds: 85%
    names = [s.name for s in hooks.candidates(between, Target.parse("cuda:sm_90a"))]
    assert names.index("hopper_gemm_stream_k_128x128") == 1
    # until it is timed on a GPU, the default puts it after the first configuration everywhere
    monkeypatch.undo()
    names = [s.name for s in hooks.candidates(first[0], Target.parse("cuda:sm_90a"))]
    assert names.index("hopper_gemm_stream_k_128x128") == 1


#: A kernel taking A, B, the bias, the counters, the split tiles and out, doing nothing: what
#: the stream-K module launches, on a machine that cannot build the real one.
STAND_IN_PTX = """.version 8.0
.target sm_80
.address_size 64
.visible .entry hopper_gemm_stream_k(.param .u64 p0, .param .u64 p1, .param .u64 p2, .param .u64 p3,
    .param .u64 p4, .param .u64 p5)
{
    ret;
}
"""


def test_the_stream_k_module_zeroes_its_counters_before_each_launch(private_cache):
    from boo_core.kernels.launch_plan import LaunchPlan, plan_for_entry
    from boo_core.kernels.request import KernelRequest

    signature = MatmulSignature(m=6304, n=768, k=3072, trans_b=True, bias=True, dtype=torch.bfloat16)
    problem = gemm.problem_of(signature)
    real = hooks.stream_k_substitution(signature, problem)
    stand_in = dataclasses.replace(real, build=lambda kernel: {hooks.STREAM_K_OBJECT: STAND_IN_PTX},
                                   key=real.key + " stand-in")
    kernel = KernelRequest.create(signature, Target.parse("cuda:sm_80"), stand_in.own_formulation,
                                  substitution=stand_in).fetch()
    plan = plan_for_entry(kernel.directory, kernel.vmfb, signature.func_name)
    assert isinstance(plan, LaunchPlan), plan
    counters, partials = gemm.stream_k_buffers(problem)
    assert counters == 300 and partials == 2 * 132 * 128 * 128 * 4
    fill, launch = plan.commands
    assert (fill.op, fill.pattern, fill.length) == ("fill", 0, 4 * counters)
    assert launch.grid == (132, 1, 1) and len(launch.bindings) == 6
    slots = [plan.slots[b.slot] for b in launch.bindings]
    assert [s.arg for s in slots] == [0, 1, 2, None, None, 3]  # A, B, bias; the two buffers; out, written in place
    assert (launch.bindings[3].slot, launch.bindings[3].length) == (fill.slot, 4 * counters)
    assert launch.bindings[4].length == partials
    [launched] = plan.kernels
    assert (launched.name, launched.block, launched.shared_memory) == ("hopper_gemm_stream_k", (256, 1, 1),
                                                                       gemm.MAX_SHARED_BYTES)


def _assembles_without_spills(ptx: str, entry: str, tmp_path) -> None:
    """Triton's own ptxas for sm_90a assembles ``ptx``: no spills in ``entry``."""
    import subprocess

    from triton.backends.nvidia.compiler import get_ptxas

    source = tmp_path / f"{entry}.ptx"
    source.write_text(ptx)
    assembled = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", str(source), "-o", str(tmp_path / "k.o")],
                               capture_output=True, text=True, timeout=300)
    assert assembled.returncode == 0, assembled.stderr[-2000:]
    report = assembled.stdout + assembled.stderr
    assert "0 bytes spill stores" in report and f"Compiling entry function '{entry}'" in report, report


@pytest.mark.parametrize("signature", [
    MatmulSignature(m=6304, n=768, k=3072, trans_b=True, bias=True, beta=1.0, dtype=torch.bfloat16),
    MatmulSignature(m=3072, n=768, k=6304, trans_a=True, dtype=torch.bfloat16)], ids=lambda s: s.func_name)
def test_the_stream_k_kernel_builds_for_sm_90a_in_its_registers_and_shared_memory(signature, tmp_path):
    """Triton's build of the kernel, as BOO's cache gets it (IREE's ABI, the descriptor scratch
    rewritten), assembled by Triton's own ptxas for sm_90a: no spills, and the shared memory the
    module declares is enough. Needs Triton, not a GPU."""
    pytest.importorskip("triton")
    made = gemm.generate(gemm.problem_of(signature), gemm.STREAM_K, hooks.STREAM_K_EXPORT)
    assert made.grid == (132, 1, 1) and made.block == 256 and made.shared_bytes == gemm.MAX_SHARED_BYTES
    _assembles_without_spills(made.ptx, hooks.STREAM_K_EXPORT, tmp_path)


@pytest.mark.parametrize("signature", [
    MatmulSignature(m=6304, n=768, k=3072, trans_b=True, bias=True, beta=1.0, dtype=torch.bfloat16),  # quarters
    MatmulSignature(m=6300, n=1000, k=1000, alpha=0.5, activation="gelu", dtype=torch.bfloat16)],
    ids=lambda s: s.func_name)
def test_the_tma_kernels_128x256_tiles_four_stages_deep_fit_an_sm(signature, tmp_path):
    """The TMA kernel's 128 x 256 tiles, four stages deep, with the epilogues that take the most
    registers and a last round in quarters: assembled for sm_90a without spills, in at most
    the 227 KiB of shared memory a Hopper SM gives a kernel. Needs Triton, not a GPU."""
    pytest.importorskip("triton")
    problem, config = gemm.problem_of(signature), gemm.TMA_CONFIGS[(128, 256)]
    assert config.num_stages == 4 and gemm.tail_pieces(problem, config) == (4 if signature.k == 3072 else 0)
    made = gemm.generate(problem, config, "hopper_gemm_tma")
    assert made.shared_bytes <= gemm.MAX_SHARED_BYTES
    _assembles_without_spills(made.ptx, "hopper_gemm_tma", tmp_path)


def test_it_knows_which_convolutions_it_serves():
    assert conv.problem_of(resnet_conv(64, 64, 3, 1, 56, "fwd")) is not None
    assert conv.problem_of(resnet_conv(128, 128, 3, 2, 56, "bwd")) is not None
    with_epilogue = conv.problem_of(resnet_conv(64, 64, 3, 1, 56, "fwd", bias=True, activation="relu"))
    assert (with_epilogue.bias, with_epilogue.activation) == (True, "relu")
    for other in (resnet_conv(3, 64, 7, 2, 224, "bwd"),  # 3 output channels
                  resnet_conv(64, 64, 3, 1, 56, "wrw"),
                  ConvSignature((32, 64, 56, 56), (64, 64, 3, 3), padding=1, shared_layout="NHWC")):  # float32
        assert conv.problem_of(other) is None


# Each shape of IREE's module conv.plan knows: one executable, pad + conv, pad + filter copy + conv
# (a strided 1x1 data gradient: dY copied compact + the conv scattering into dx);
# a forward's bias and activation inside the conv's executable (the bias a binding of its own).
RELU_BIAS = {"bias": True, "activation": "relu"}


@pytest.mark.parametrize(("row", "epilogue", "kernels"), [((64, 256, 1, 1, 56, "fwd"), {}, ["conv"]),
                                                          ((64, 64, 3, 1, 56, "fwd"), {}, ["pad", "conv"]),
                                                          ((64, 64, 3, 1, 56, "bwd"), {}, ["pad", "copy", "conv"]),
                                                          ((256, 512, 1, 2, 56, "bwd"), {}, ["compact", "conv"]),
                                                          ((64, 256, 1, 1, 56, "fwd"), RELU_BIAS, ["conv"]),
                                                          ((64, 64, 3, 1, 56, "fwd"), RELU_BIAS, ["pad", "conv"]),
                                                          ((3, 64, 7, 2, 224, "fwd"), RELU_BIAS, ["pad", "conv"]),
                                                          ((64, 64, 3, 1, 56, "fwd"), {"bias": True}, ["pad", "conv"]),
                                                          ((64, 256, 1, 1, 56, "fwd"), {"activation": "gelu"},
                                                           ["conv"])])
def test_it_recognizes_the_modules_iree_makes_for_the_resnet_rows(private_cache, row, epilogue, kernels):
    signature = resnet_conv(*row, **epilogue)
    found = executables_of(signature, "cuda:sm_80", "default")  # cross-compiled: no GPU needed
    launches = conv.plan(conv.problem_of(signature), found.executables)
    assert [launch.kernel for launch in launches] == kernels
    assert [launch.executable.name for launch in launches] == found.names
    # The same module does not fit a problem of another size: BOO would pass the substitution over.
    other = conv.problem_of(resnet_conv(row[0], row[1], row[2], row[3], row[4] // 2, row[5], **epilogue))
    with pytest.raises(ValueError):
        conv.plan(other, found.executables)
    if epilogue.get("bias"):  # nor a problem without the bias binding
        with pytest.raises(ValueError):
            conv.plan(conv.problem_of(resnet_conv(*row)), found.executables)


def resnet_cba(c: int, k: int, window: int, stride: int, size: int, fusion: str = "cna", **options: object):
    """A ResNet-50 conv + batch norm (+ ReLU) as torch.compile hands it over: CBAInfer, bf16, NHWC."""
    from boo_ops_conv import ConvBatchNormActivationSignature

    return ConvBatchNormActivationSignature(32, c, size, size, k=k, fil_h=window, fil_w=window, stride_h=stride,
                                            stride_w=stride, pad_h=window // 2, pad_w=window // 2, fusion=fusion,
                                            bn_mode="spatial", eps=1e-5, dtype=torch.bfloat16, layout="NHWC",
                                            **options)


@pytest.mark.parametrize(("row", "fusion", "kernels"), [((64, 256, 1, 1, 56), "cn", ["conv"]),
                                                        ((64, 64, 3, 1, 56), "cna", ["pad", "conv"]),
                                                        ((64, 128, 3, 2, 56), "cbna", ["pad", "conv"]),
                                                        ((3, 64, 7, 2, 224), "cna", ["pad", "conv"])])
def test_it_runs_a_conv_batch_norm_and_relu_with_the_batch_norm_in_the_epilogue(private_cache, row, fusion, kernels):
    signature = resnet_cba(*row, fusion=fusion)
    problem = conv.problem_of(signature)
    assert (problem.norm, problem.eps, problem.bias) == (True, 1e-5, fusion == "cbna")
    assert problem.activation == ("relu" if "a" in fusion else None)
    found = executables_of(signature, "cuda:sm_80", "default")
    launches = conv.plan(problem, found.executables)
    assert [launch.kernel for launch in launches] == kernels
    # the same module without the batch norm's four bindings is not this problem
    with pytest.raises(ValueError):
        conv.plan(dataclasses.replace(problem, norm=False), found.executables)
    for other in (dataclasses.replace(signature, bn_mode="per_activation"),  # a statistic per pixel
                  dataclasses.replace(signature, layout="NCHW"),
                  dataclasses.replace(signature, fusion="cna", activation="elu"),
                  dataclasses.replace(signature, dtype=torch.float16)):
        assert conv.problem_of(other) is None


# A padded forward on the conv op's channels_last module (IREE's padding fused into its
# channels-last convolution): one executable reading x as stored, which the kernel pads as it reads.
@pytest.mark.parametrize("signature", [resnet_conv(64, 64, 3, 1, 56, "fwd"),
                                       resnet_conv(128, 128, 3, 2, 56, "fwd", **RELU_BIAS),
                                       resnet_cba(128, 128, 3, 2, 56), resnet_cba(512, 512, 3, 1, 7, residual=True)],
                         ids=lambda s: s.func_name[:40])
def test_a_padded_forward_reads_x_unpadded_from_the_channels_last_module(private_cache, signature):
    padded = conv.problem_of(signature)
    implicit = conv.padding_as_it_reads(padded)
    assert implicit.implicit_pad and conv.kernel_geometry(implicit)["PAD_H"] == padded.lo_h > 0
    found = executables_of(signature, "cuda:sm_80", "channels_last")
    [launch] = conv.plan(implicit, found.executables)
    assert (launch.kernel, launch.offsets) == ("conv", (0, 0))
    with pytest.raises(ValueError):  # the explicit pad's problem needs its padded copy of x
        conv.plan(padded, found.executables)
    with pytest.raises(ValueError):  # and this problem never runs on the pad + conv module
        conv.plan(implicit, executables_of(signature, "cuda:sm_80", "default").executables)
    assert conv.padding_as_it_reads(conv.problem_of(resnet_conv(64, 256, 1, 1, 56, "fwd"))) is None  # nothing to pad
    assert conv.padding_as_it_reads(conv.problem_of(resnet_conv(256, 256, 3, 2, 28, "bwd"))) is None  # zeros inserted
    assert conv.padding_as_it_reads(conv.problem_of(resnet_conv(3, 64, 7, 2, 224, "fwd"))) is None  # the stem: padded


# A forward of few output tiles (a ResNet's 7x7 maps at batch 8: 16 of 128 x 128) on the conv
# op's split_k module: the products bind x as stored, the filter and float32 partial sums,
# which the kernel writes in as many splits, reading x unpadded; IREE's sum adds the epilogue.
@pytest.mark.parametrize(("signature", "splits"),
                         [(dataclasses.replace(resnet_conv(512, 512, 3, 1, 7, "fwd", **RELU_BIAS),
                                               input_shape=(8, 512, 7, 7)), 8),
                          (dataclasses.replace(resnet_cba(512, 512, 3, 2, 14, residual=True), n=8), 8),
                          (dataclasses.replace(resnet_cba(2048, 512, 1, 1, 7, fusion="cbna"), n=8), 8)],
                         ids=lambda case: getattr(case, "func_name", str(case))[:40])
def test_a_forward_of_few_tiles_runs_split_in_the_split_k_module(private_cache, signature, splits):
    problem = conv.problem_of(signature)
    found = executables_of(signature, "cuda:sm_80", hooks.SPLIT_K_FORMULATION)
    split, [launch] = conv.split_plan(problem, found.executables)
    assert (launch.kernel, launch.offsets, launch.executable.name) == ("conv", (0, 0), found.names[0])
    assert split.splits == splits and split.implicit_pad == (problem.r > 1) and split.direct == (problem.r == 1)
    config = conv.choose_config(split)
    assert config == conv.choose_config(problem if problem.r == 1 else conv.padding_as_it_reads(problem))
    assert conv.conv_grid(split, config) == splits * conv.conv_grid(dataclasses.replace(split, splits=1), config)
    offered = hooks.candidates(signature, Target.parse("cuda:sm_80"))
    assert offered[0].formulation == hooks.SPLIT_K_FORMULATION and offered[0].name == "hopper_conv"
    # for boo tune: the split module with the other tiles too, after every module's chosen ones
    others = [c.name for c in offered[1:] if c.formulation == hooks.SPLIT_K_FORMULATION]
    assert others and all(name.startswith("hopper_conv_") for name in others)
    with pytest.raises(ValueError):  # the module of a problem of other channels
        conv.split_plan(dataclasses.replace(problem, c=problem.c * 2), found.executables)
    with pytest.raises(ValueError):  # nor is this problem ever run on another module
        conv.split_plan(problem, executables_of(signature, "cuda:sm_80", "default").executables)
    for many in (resnet_conv(512, 512, 3, 1, 7, "fwd"), resnet_conv(256, 256, 3, 1, 14, "fwd")):  # batch 32
        offered = hooks.candidates(many, Target.parse("cuda:sm_80"))
        assert all(c.formulation != hooks.SPLIT_K_FORMULATION for c in offered)


# A stride-1 padded data gradient on the conv op's channels_last module (written as linalg):
# the filter reversed into a transient (which the library's copy writes as stored, the kernel
# reversing the taps as it reads them), then one contraction reading dY as stored.
@pytest.mark.parametrize("row", [(64, 64, 3, 1, 56), (512, 512, 3, 1, 7)])
def test_a_stride_1_data_gradient_reads_dy_unpadded_from_the_channels_last_module(private_cache, row):
    signature = resnet_conv(*row, "bwd")
    padded = conv.problem_of(signature)
    implicit = conv.padding_as_it_reads(padded)
    geometry = conv.kernel_geometry(implicit)
    assert (geometry["PAD_H"], geometry["HP"], implicit.in_major) == (1, padded.h, True)
    found = executables_of(signature, "cuda:sm_80", "channels_last")
    launches = conv.plan(implicit, found.executables)
    assert [(launch.kernel, launch.offsets) for launch in launches] == [("copy", (0,)), ("conv", (0, 0))]
    assert not launches[1].w_from_x  # the filter from its own binding: the transient the copy wrote
    with pytest.raises(ValueError):
        conv.plan(padded, found.executables)
    with pytest.raises(ValueError):  # this problem never runs on the default module (pad, filter copy, conv)
        conv.plan(implicit, executables_of(signature, "cuda:sm_80", "default").executables)


@pytest.mark.parametrize("channels", [64, 128, 192, 320, 384])
def test_a_conv_tile_never_straddles_the_last_output_channel(channels):
    """Every output channel lies in a whole tile: a 128-wide tile over 192 channels left the
    last 64 unwritten (found on an H100 by a data gradient of 192 channels, which BOO's
    verification refused)."""
    for mode, size in (("fwd", 56), ("bwd", 56), ("fwd", 7), ("bwd", 7)):
        c, k = (channels, 64) if mode == "bwd" else (64, channels)  # a data gradient's outputs are x's channels
        problem = conv.problem_of(resnet_conv(c, k, 3, 1, size, mode))
        assert problem.cout == channels and problem.cout % conv.choose_config(problem).bn == 0


def test_a_conv_with_few_output_tiles_runs_smaller_tiles():
    def tiles(signature) -> tuple[int, int, int, int]:
        config = conv.choose_config(conv.problem_of(signature))
        return config.bm, config.bn, config.num_warps, config.num_stages

    assert conv.choose_config(conv.problem_of(resnet_conv(64, 256, 1, 1, 56, "fwd"))).bm == 128
    assert conv.choose_config(conv.problem_of(resnet_conv(256, 256, 3, 1, 14, "fwd"))).bm == 128  # 98 tiles
    # 7x7 outputs (52 tiles of 128x128): a forward's window 4 warps and 3 stages, its 1x1 window
    # 8 warps and 4, with CBAInfer's epilogue too; a data gradient's 4 warps and 4 stages.
    for few in (resnet_conv(512, 512, 3, 1, 7, "fwd"), resnet_conv(512, 512, 3, 2, 14, "fwd"),
                resnet_cba(512, 512, 3, 1, 7)):
        assert tiles(few) == (64, 128, 4, 3)
    assert tiles(resnet_conv(2048, 512, 1, 1, 7, "fwd")) == tiles(resnet_cba(2048, 512, 1, 1, 7)) == (64, 128, 8, 4)
    assert tiles(resnet_conv(512, 512, 3, 1, 7, "bwd")) == tiles(resnet_conv(512, 2048, 1, 1, 7, "bwd")) == (
        64, 128, 4, 4)


def test_stages_and_warps_follow_the_window_the_reduction_and_the_tiles():
    """3 stages (two programs a multiprocessor) for every window; 4 warps and 2 stages where a
    1x1 window reduces two steps of 64 channels, or where a plain 1x1 forward has at least
    :data:`conv.MANY_TILES` tiles, but not with CBAInfer's epilogue nor for data gradients."""
    def config(signature) -> tuple[int, int, int]:
        chosen = conv.choose_config(conv.problem_of(signature))
        return chosen.bn, chosen.num_warps, chosen.num_stages

    for window in (1, 3):
        assert config(resnet_conv(1024, 256, window, 1, 14, "fwd")) == (128, 8, conv.STAGES)  # 98 tiles
        assert config(resnet_conv(256, 512, window, 1, 28, "bwd")) == (128, 8, conv.STAGES)
        assert config(resnet_conv(256, 64, window, 1, 56, "fwd")) == (64, 4, conv.STAGES)
    assert config(resnet_conv(128, 512, 1, 1, 28, "fwd")) == config(resnet_conv(512, 128, 1, 1, 28, "bwd")) == (
        128, 4, 2)  # 128 channels reduced
    # 392 tiles reducing 512 channels: a plain forward's many short programs; not CBAInfer's.
    assert config(resnet_conv(512, 256, 1, 1, 28, "fwd")) == (128, 4, 2)
    assert config(resnet_cba(512, 256, 1, 1, 28)) == (128, 8, conv.STAGES)
    assert config(resnet_conv(512, 256, 1, 1, 28, "fwd", bias=True)) == (128, 8, conv.STAGES)
    assert config(resnet_conv(64, 256, 1, 1, 56, "fwd")) == (128, 8, conv.STAGES)  # one step: 1,568 tiles


# A ResNet block's last conv + batch norm + identity + ReLU: the identity bound after the
# batch norm's vectors, read in the conv's epilogue.
@pytest.mark.parametrize(("row", "kernels"), [((512, 2048, 1, 1, 7), ["conv"]), ((512, 512, 3, 1, 7), ["pad", "conv"])])
def test_it_adds_a_residual_in_the_conv_epilogue(private_cache, row, kernels):
    problem = conv.problem_of(resnet_cba(*row, residual=True))
    assert (problem.residual, problem.norm, problem.activation) == (True, True, "relu")
    found = executables_of(resnet_cba(*row, residual=True), "cuda:sm_80", "default")
    assert [launch.kernel for launch in conv.plan(problem, found.executables)] == kernels
    with pytest.raises(ValueError):  # the module binds one more tensor than a problem without it reads
        conv.plan(dataclasses.replace(problem, residual=False), found.executables)
    assert conv.problem_of(resnet_cba(*row)).residual is False


@pytest.mark.skipif(ptx.unavailable_reason() is None, reason="this machine can build the library's kernels")
def test_without_triton_or_a_hopper_gpu_it_supplies_no_conv_kernel():
    assert hooks.boo_kernel_substitutions(resnet_conv(64, 64, 3, 1, 56, "fwd"), Target.parse("cuda:sm_90")) is None
    assert hooks.boo_kernel_substitutions(resnet_conv(64, 64, 3, 1, 56, "fwd"), Target.parse("cpu")) is None
    # ... though it says what it would offer where it could build (benchmarks/plan_census.py asks)
    offered = hooks.candidates(resnet_conv(64, 64, 3, 1, 56, "fwd"), Target.parse("cuda:sm_90"))
    assert [s.formulation for s in offered if s.name == "hopper_conv"] == ["channels_last", "default"]
    assert hooks.candidates(resnet_conv(3, 64, 7, 2, 224, "bwd"), Target.parse("cuda:sm_90")) is None  # not served


def test_it_knows_which_weight_gradients_it_serves():
    assert wgrad.problem_of(resnet_conv(256, 512, 1, 2, 56, "wrw")) is not None
    three = wgrad.problem_of(resnet_conv(128, 128, 3, 2, 56, "wrw"))
    assert (three.taps, three.columns, three.hp, three.wp) == (9, 1152, 57, 57)  # the extent the windows read
    stem = wgrad.problem_of(resnet_conv(3, 64, 7, 2, 224, "wrw"))  # 3 channels: columns gathered one by one
    assert (stem.gathered, stem.columns, stem.hp, three.gathered) == (True, 147, 229, False)
    for other in (resnet_conv(3, 64, 1, 1, 56, "wrw"),  # a 1x1 window of 3 channels
                  ConvSignature((32, 64, 56, 56), (64, 64, 3, 3), padding=3, dtype=torch.bfloat16,
                                shared_layout="NHWC", mode="wrw"),  # padding beyond the window
                  ConvSignature((32, 64, 56, 56), (64, 64, 3, 3), padding=1, shared_layout="NHWC", mode="wrw"),
                  resnet_conv(64, 256, 1, 1, 56, "fwd")):
        assert wgrad.problem_of(other) is None


IMAGE = ["pad", "copy"] + ["copy"] * 9  # a 3x3 window's columns, made the padded image


# Each shape of IREE's im2col_splitN module wgrad.plan knows: products + sum on the op's own
# tensors (split32 at 56x56, split128 at 28x28), strided (subsample + products + sum), dY
# and x padded into one transient by IREE (1568 pixels), and a 3x3 window's columns (two
# transposes and a copy per tap before the products) on the op's own dY, strided, and
# through IREE's transient.
@pytest.mark.parametrize(("row", "kernels"), [((64, 256, 1, 1, 56, "wrw"), ["wgrad", "sum"]),
                                              ((512, 128, 1, 1, 28, "wrw"), ["wgrad", "sum"]),
                                              ((256, 512, 1, 2, 56, "wrw"), ["subsample", "wgrad", "sum"]),
                                              ((2048, 512, 1, 1, 7, "wrw"), ["wgrad", "sum"]),
                                              ((64, 64, 3, 1, 56, "wrw"), IMAGE + ["wgrad", "sum"]),
                                              ((128, 128, 3, 2, 56, "wrw"), IMAGE + ["wgrad", "sum"]),
                                              ((512, 512, 3, 1, 7, "wrw"), IMAGE + ["wgrad", "sum"]),
                                              ((3, 64, 7, 2, 224, "wrw"), ["pad", "copy"] + ["copy"] * 49
                                               + ["wgrad", "sum"])])
def test_it_recognizes_the_weight_gradient_modules_iree_makes_for_the_resnet_rows(private_cache, row, kernels):
    signature = resnet_conv(*row)
    problem = wgrad.problem_of(signature)
    config = wgrad.choose_config(problem)
    found = executables_of(signature, "cuda:sm_80", wgrad.formulation_of(problem))  # cross-compiled
    launches = wgrad.plan(problem, config, found.executables)
    assert [launch.kernel for launch in launches] == kernels
    assert [launch.executable.name for launch in launches] == found.names  # in the module's order
    copies = [launch.constants for launch in launches if launch.kernel == "copy"][1:]
    # The taps' copies move the whole image, chunk after chunk, each once.
    assert sum(c["COUNT"] for c in copies) == (problem.image_numel if copies else 0)
    assert [c["START"] for c in copies] == sorted(c["START"] for c in copies)
    # The same module does not fit a problem of other channels: BOO would pass the substitution over.
    other = wgrad.problem_of(resnet_conv(row[0] * 2, row[1], *row[2:]))
    with pytest.raises(ValueError):
        wgrad.plan(other, wgrad.choose_config(other), found.executables)


@pytest.mark.parametrize("row", [(64, 64, 3, 1, 56), (128, 128, 3, 2, 56), (256, 256, 3, 1, 14), (512, 512, 3, 1, 7),
                                 (256, 512, 1, 2, 56), (512, 2048, 1, 1, 7), (1024, 2048, 1, 2, 14),
                                 (3, 64, 7, 2, 224)])
def test_a_weight_gradient_reads_x_itself_from_the_implicit_split_module(private_cache, row):
    """The op's implicit_split module (cross-compiled): products binding x and dY as stored,
    then the sum. The kernel reads x unpadded (masked taps), and no executable moves x: first
    for every 3x3 row and the 3-channel stem (whose columns it gathers one by one, each
    column's tap masked: its columns' module is 53 executables), and for the 1x1 rows whose
    columns' module moves x or dY (strided; 7x7 outputs, which no split tiles)."""
    signature = resnet_conv(*row, "wrw")
    problem = wgrad.problem_of(signature)
    assert wgrad.reads_x_itself_first(problem)
    found = executables_of(signature, "cuda:sm_80", wgrad.IMPLICIT_FORMULATION)
    launches = wgrad.implicit_plan(problem, found.executables)
    assert [launch.kernel for launch in launches] == ["wgrad", "sum"]
    products, total = (launch.constants for launch in launches)
    assert (products["HP"], products["WP"], products["PAD_H"], products["PAD_W"]) == (problem.h, problem.w,
                                                                                        row[2] // 2, row[2] // 2)
    assert not products["X_IN_B"] and products["DY_IN_B"]  # x is the generic's first operand, dY its second
    parts = int(found.executables[1].text.split("readonly:tensor<")[1].split("x")[0])
    assert 1 <= total["SPLITS"] <= parts and launches[0].grid == problem.tiles(
        products["BM"], products["BN"]) * total["SPLITS"]
    assert total["SPLITS"] * products["STEPS"] * products["BK"] >= problem.pixels  # every pixel in some split
    other = wgrad.problem_of(resnet_conv(row[0] * 2, *row[1:], "wrw"))
    with pytest.raises(ValueError):
        wgrad.implicit_plan(other, found.executables)
    assert hooks._offers(signature, Target.parse("cuda:sm_80"), wgrad.IMPLICIT_FORMULATION)


def test_a_1x1_weight_gradient_whose_split_tiles_its_pixels_keeps_the_columns_module_first():
    for row in ((64, 256, 1, 1, 56), (512, 128, 1, 1, 28), (1024, 512, 1, 1, 14)):
        assert not wgrad.reads_x_itself_first(wgrad.problem_of(resnet_conv(*row, "wrw")))


def test_each_replaced_executable_runs_its_own_object(private_cache):
    """A module whose executables share a kernel (a 3x3 weight gradient's ten copies) still
    gets one object per executable, each holding that executable's entry: the PTX compiler is
    stood in for by a text naming the entry (building PTX needs Triton and a Hopper GPU)."""
    signature = resnet_conv(64, 64, 3, 1, 56, "wrw")
    problem = wgrad.problem_of(signature)
    found = executables_of(signature, "cuda:sm_80", wgrad.formulation_of(problem))
    build = hooks._build_launches(lambda executables: wgrad.plan(problem, wgrad.choose_config(problem), executables),
                                  lambda launch, entry: ptx.Kernel(f".entry {entry}", 128, 1, 0), "hopper_wgrad")
    files = build(found)
    objects = {name: text for name, text in files.items() if name.startswith("objects/")}
    assert len(objects) == len(found.executables) == 13
    for executable in found.executables:
        source = files[f"sources/{executable.name}.mlir"]
        [obj] = [name for name in objects if f'"{name}"' in source]
        assert objects[obj] == f".entry {executable.exports[0].kernel_name}"


@pytest.mark.parametrize("row", [(128, 128, 3, 2, 56), (256, 256, 3, 2, 28), (512, 512, 3, 2, 14), (64, 64, 3, 2, 56),
                                 (256, 512, 1, 2, 56), (1024, 2048, 1, 2, 14)])
def test_a_strided_data_gradient_is_computed_phase_by_phase_from_the_phase_axes_module(private_cache, row):
    """The op's phase_axes module (cross-compiled): the filter's copies along its slots, then
    one kernel over dY as stored, bound where IREE binds it. Every phase runs only the taps it
    reads (nine multiply-adds per dX pixel of a 3x3/2 window in all, not 36), the most first."""
    signature = resnet_conv(*row, "bwd")
    problem = dgrad.problem_of(signature)
    found = executables_of(signature, "cuda:sm_80", dgrad.FORMULATION)
    launches = dgrad.plan(problem, found.executables)
    assert [launch.kernel for launch in launches] == ["copy"] * (len(found.executables) - 1) + ["phases"]
    assert [launch.executable.name for launch in launches] == found.names
    copies, phases = [launch.constants for launch in launches[:-1]], launches[-1].constants
    assert copies[0]["SRC_OFF"] == 0 and all(c["COUNT"] == problem.weight_numel for c in copies)
    assert [c["SRC_OFF"] for c in copies[1:]] == [c["DST_OFF"] for c in copies[:-1]]  # each reads the last slot
    assert phases["W_OFF"] == copies[-1]["DST_OFF"] and phases["DY_OFF"] == phases["DX_OFF"] == 0
    window = row[2]
    assert dgrad.multiply_adds(problem) * 4 == window * window * problem.dx_numel * problem.k
    assert problem.taps(*problem.phase_order[0]) == (window + 1) // 2 * ((window + 1) // 2)
    assert launches[-1].grid == 4 * -(-problem.pixels_per_phase // phases["BM"]) * (problem.c // phases["BN"])
    for other in (resnet_conv(row[0], row[1] * 2, *row[2:], "bwd"), resnet_conv(row[0] * 2, *row[1:], "bwd")):
        with pytest.raises(ValueError):  # other channels: BOO would pass the substitution over
            dgrad.plan(dgrad.problem_of(other), found.executables)
    assert hooks._offers(signature, Target.parse("cuda:sm_80"), dgrad.FORMULATION)


def test_it_computes_by_phase_only_strides_of_1_and_2_that_divide_dx():
    assert dgrad.problem_of(resnet_conv(128, 128, 3, 2, 56, "bwd")) is not None
    assert dgrad.problem_of(resnet_conv(256, 512, 1, 2, 15, "bwd")) is None  # 15 rows: not phases of equal size
    assert dgrad.problem_of(resnet_conv(128, 128, 3, 1, 56, "bwd")) is None  # stride 1: channels_last's
    assert dgrad.problem_of(resnet_conv(3, 64, 7, 2, 224, "bwd")) is None  # 3 channels of dX
    assert dgrad.problem_of(resnet_conv(128, 128, 3, 2, 56, "wrw")) is None
    assert dgrad.problem_of(ConvSignature((32, 64, 56, 56), (64, 64, 3, 3), stride=3, padding=1,
                                          dtype=torch.bfloat16, shared_layout="NHWC", mode="bwd")) is None


def test_a_strided_data_gradient_gets_the_tiles_measured_for_its_phases():
    """128x128 tiles (3 stages) where 128 pixels tile each phase's exactly, 64x128 where they
    do not (14x14 dX: 1568 pixels a phase), 128x64 for a dX of 64 channels."""
    def tiles(*row: int) -> tuple[int, int, int]:
        config = dgrad.choose_config(dgrad.problem_of(resnet_conv(*row, "bwd")))
        return config.bm, config.bn, config.num_stages

    assert tiles(128, 128, 3, 2, 56) == tiles(512, 1024, 1, 2, 28) == (128, 128, 3)
    assert tiles(512, 512, 3, 2, 14) == tiles(1024, 2048, 1, 2, 14) == (64, 128, 4)
    assert tiles(64, 64, 3, 2, 56) == (128, 64, 4)


@pytest.mark.parametrize(("row", "formulations"), [
    ((128, 128, 3, 2, 56, "bwd"), ["phase_axes", "default"]),  # strided: by phase, then zeros inserted
    ((64, 64, 3, 1, 56, "fwd"), ["channels_last", "default"]),  # padded: read unpadded, then the pad
    ((256, 1024, 1, 1, 14, "fwd"), ["default"]),
    ((512, 512, 3, 1, 7, "bwd"), ["channels_last", "default"]),  # 7x7 outputs: 64x128 tiles chosen
])
def test_a_convs_other_tiles_come_after_every_module_with_its_chosen_tiles(row, formulations):
    """What BOO tries first is unchanged (each module with the tiles chosen for it); the
    same modules with the other tiles follow, for ``boo tune`` to time, each a substitution
    of its own (distinct name and key)."""
    found = hooks.conv_candidates(resnet_conv(*row), Target.parse("cuda:sm_90"))
    chosen = [s for s in found if s.name == "hopper_conv"]
    assert found[:len(chosen)] == chosen and [s.formulation for s in chosen] == formulations
    others = found[len(chosen):]
    assert others and all(s.name.startswith("hopper_conv_") for s in others)
    assert {s.formulation for s in others} == set(formulations)
    assert len({s.name + s.formulation for s in others}) == len(others)
    assert len({s.digest for s in found}) == len(found)  # BOO keeps one candidate per digest


def test_the_tuners_tiles_fit_the_output_channels_and_leave_the_stem_alone():
    chosen = conv.ConvConfig(128, 64, 64, 8, 4, 3)
    others = conv.alternatives(chosen, 256, 192)  # 192 output channels: tiles 64 wide only
    assert chosen not in others and all(192 % c.bn == 0 for c in others)
    assert {c.num_stages for c in others if (c.bm, c.bn) == (128, 64)} == {2, 4}
    assert (64, 128) not in {(c.bm, c.bn) for c in others}
    assert {(c.bm, c.bn) for c in conv.alternatives(conv.ConvConfig(128, 128, 64, 8, 8, 4), 64, 256)} == {
        (128, 128), (128, 64), (64, 128)}
    assert conv.alternatives(conv.ConvConfig(128, 64, 32, 8, 4, 2), 3, 64) == []  # the stem's gathered reduction


def test_the_stems_gathered_columns_get_narrow_tiles_and_every_part_a_split():
    """Its programs wait on scalar gathers: five tiles of 32 of its 147 columns, each over
    every one of the 32 parts (160 programs) measured fastest (bench_wgrad.py, H200)."""
    stem = wgrad.problem_of(resnet_conv(3, 64, 7, 2, 224, "wrw"))
    config = wgrad.choose_config(stem, parts=32)
    assert (config.bm, config.bn, config.num_warps, config.num_stages, config.splits) == (64, 32, 4, 4, 32)
    assert stem.tiles(config.bm, config.bn) == 5
    others = wgrad.alternatives(stem, config)
    assert {(t.bm, t.bn) for t in others} == {(64, 32), (64, 64)} and config.tiles not in others
    assert wgrad.choose_config(stem, parts=32, tiles=wgrad.WgradTiles(64, 64, 4, 3)).splits == 32


def test_a_weight_gradients_other_tiles_come_after_its_chosen_candidates():
    """Over x itself, then over the columns, each with its chosen tiles; then both with every
    other tile shape and stage count that fits, each its own substitution, for ``boo tune``."""
    signature = resnet_conv(128, 128, 3, 1, 28, "wrw")
    problem = wgrad.problem_of(signature)
    found = hooks._wgrad_substitutions(signature, Target.parse("cuda:sm_90"), problem)
    assert [(s.name, s.formulation) for s in found[:2]] == [("hopper_conv", wgrad.IMPLICIT_FORMULATION),
                                                           ("hopper_conv", wgrad.formulation_of(problem))]
    others = found[2:]
    assert others and all(s.name.startswith("hopper_conv_") for s in others)
    assert len({s.digest for s in found}) == len(found)
    chosen = wgrad.choose_config(problem)
    tiles = wgrad.alternatives(problem, chosen)
    assert {(t.bm, t.bn) for t in tiles} == {(128, 128), (128, 64), (64, 64)}
    assert {t.num_stages for t in tiles} == {3, 4}
    assert all(problem.k % t.bm == 0 and problem.c % t.bn == 0 for t in tiles)
    assert (chosen.bm, chosen.bn, chosen.num_warps, chosen.num_stages) not in {
        (t.bm, t.bn, t.num_warps, t.num_stages) for t in tiles}
    assert chosen.tiles == wgrad.WgradTiles(chosen.bm, chosen.bn, chosen.num_warps, chosen.num_stages)
    # a tile's splits are one wave again, within the workspace's parts
    config = wgrad.choose_config(problem, parts=8, tiles=wgrad.WgradTiles(64, 64, 4, 3))
    assert (config.bm, config.bn, config.num_stages) == (64, 64, 3) and 1 <= config.splits <= 8


def test_the_tma_kernel_comes_first_where_it_can_read_the_operands():
    vit_linear = gemm.problem_of(MatmulSignature(m=6304, n=3072, k=768, trans_b=True, bias=True,
                                                 dtype=torch.bfloat16))  # ViT-B/16's MLP up
    ranked = gemm.configs_for(vit_linear)
    assert ranked[0].tma and not ranked[1].tma and (ranked[0].bm, ranked[0].bn) == (ranked[1].bm, ranked[1].bn)
    assert sum(c.tma for c in ranked) == len(gemm.TMA_CONFIGS)
    # A weight gradient (A stored transposed, long K): the cp.async kernel first, its TMA twin next
    wgrad_product = gemm.problem_of(MatmulSignature(m=3072, n=768, k=6304, trans_a=True, dtype=torch.bfloat16))
    ranked = gemm.configs_for(wgrad_product)
    assert not ranked[0].tma and ranked[1].tma and ranked[1].bn == ranked[0].bn
    # rows TMA cannot read (N = 50 bf16: 100 bytes), or several batches: the cp.async kernel alone
    for other in (MatmulSignature(m=100, n=50, k=72, dtype=torch.bfloat16),
                  MatmulSignature(m=100, n=56, k=70, trans_b=True, dtype=torch.bfloat16),
                  MatmulSignature(m=197, n=197, k=64, batch=12, trans_b=True, dtype=torch.bfloat16)):
        problem = gemm.problem_of(other)
        assert not gemm.tma_serves(problem) and not any(c.tma for c in gemm.configs_for(problem))
    assert gemm.tma_serves(gemm.problem_of(MatmulSignature(m=100, n=56, k=72, dtype=torch.bfloat16)))


def test_every_matmul_candidate_has_its_own_name_and_key():
    signature = MatmulSignature(m=6304, n=3072, k=768, trans_b=True, bias=True, dtype=torch.bfloat16)
    found = hooks.candidates(signature, Target.parse("cuda:sm_90a"))
    assert [s.name for s in found[:2]] == ["hopper_gemm_tma_128x256", "hopper_gemm_128x256"]
    assert len({s.name for s in found}) == len({s.key for s in found}) == len(found)


def test_it_knows_which_layer_norms_it_serves():
    from boo_ops_layernorm import LayerNormSignature

    served = LayerNormSignature((32, 197, 768), 2, weight=True, bias=True, dtype=torch.bfloat16)
    problem = layernorm.problem_of(served)
    assert (problem.rows, problem.width, problem.dtype) == (32 * 197, 768, "bf16")
    assert layernorm.problem_of(LayerNormSignature((8, 4, 5), 1, dtype=torch.float32)).width == 20
    for other in (LayerNormSignature((2, 32768), 1, dtype=torch.bfloat16),  # wider than a program holds
                  LayerNormSignature((8, 64), 1, mode="bwd", dtype=torch.bfloat16),  # a backward without a weight
                  LayerNormSignature((8, 64), 1, weight=True, mode="bwd", gradients=("dw",), dtype=torch.bfloat16),
                  MatmulSignature(m=8, n=8, k=8, dtype=torch.bfloat16)):
        assert layernorm.problem_of(other) is None
    # narrow rows several to a program, wide ones a program each with more warps
    narrow, wide = (layernorm.choose_config(layernorm.problem_of(LayerNormSignature((64, n), 1, dtype=torch.bfloat16)))
                    for n in (768, 8192))
    assert (narrow.block, narrow.rows_per) == (1024, 4) and (wide.block, wide.rows_per, wide.num_warps) == (8192, 1, 16)
    found = hooks.candidates(served, Target.parse("cuda:sm_90a"))
    # the chosen configuration first; the others after it, for boo tune, each its own name and key
    assert found[0].name == "hopper_layernorm" and {s.formulation for s in found} == {layernorm.FORMULATION}
    assert [s.name for s in found[1:]] == ["hopper_layernorm_" + layernorm.config_label(c)
                                           for c in layernorm.alternatives(problem, layernorm.choose_config(problem))]
    assert len(found) > 1 and len({s.name for s in found}) == len({s.key for s in found}) == len(found)
    assert hooks.candidates(served, Target.parse("cpu")) is None  # the op offers its one-executable module on GPUs


@pytest.mark.parametrize(("shape", "weight", "bias", "dtype"), [
    ((8192, 4096), True, True, torch.bfloat16),
    ((32, 197, 768), True, True, torch.bfloat16),
    ((100, 1000), False, False, torch.float32),
    ((64, 8192), True, False, torch.float16)])
def test_it_finds_the_layer_norm_in_the_module_iree_makes(private_cache, shape, weight, bias, dtype):
    from boo_ops_layernorm import LayerNormSignature

    signature = LayerNormSignature(shape, len(shape) - 1, weight=weight, bias=bias, dtype=dtype)
    problem = layernorm.problem_of(signature)
    found = executables_of(signature, "cuda:sm_80", layernorm.FORMULATION)  # cross-compiled: no GPU needed
    executable = layernorm.plan(problem, found.executables)
    assert executable.name == found.names[0]
    assert [layernorm.elements(b.tensor) for b in executable.exports[0].bindings] == problem.bindings()
    with pytest.raises(ValueError):  # another size's module: BOO would pass the substitution over
        wider = LayerNormSignature((*shape[:-1], shape[-1] + 8), len(shape) - 1, weight=weight, bias=bias, dtype=dtype)
        layernorm.plan(layernorm.problem_of(wider), found.executables)


@pytest.mark.parametrize(("command", "formulation", "executables"), [
    ("layernormbfp16 --input 8192x4096 -o 1 -m 1 -F 2", "default", 2),  # dx alone
    ("layernormbfp16 --input 32x197x768 -o 2 -m 1 -F 14", "chunked_column_sums", 7),  # dx, dw, db
    ("layernormfp16 --input 37x1000 -o 1 -m 1 -F 2", "default", 2)])
def test_it_replaces_the_two_dx_executables_of_a_backward(private_cache, command, formulation, executables):
    (signature,) = BooOpRegistry.parse_signatures(command)
    problem = layernorm.problem_of(signature)
    found = executables_of(signature, "cuda:sm_80", formulation)  # cross-compiled: no GPU needed
    assert len(found.executables) == executables
    sums, dx = layernorm.plan_dx(problem, found.executables)
    assert [sums.name, dx.name] == list(found.names[:2])  # IREE's row sum first, then dx reading it
    assert [b.access for b in sums.exports[0].bindings][-1] == "writeonly"
    assert [b.access for b in dx.exports[0].bindings][-2:] == ["readonly", "writeonly"]
    candidates = hooks.candidates(signature, Target.parse("cuda:sm_90a"))
    assert (candidates[0].name, candidates[0].formulation) == ("hopper_layernorm_dx", formulation)
    assert all(c.name.startswith("hopper_layernorm_dx_r") and c.formulation == formulation for c in candidates[1:])
    with pytest.raises(ValueError):  # a forward's module has neither
        forward = dataclasses.replace(signature, mode="fwd", gradients=None)
        layernorm.plan_dx(problem, executables_of(forward, "cuda:sm_80", layernorm.FORMULATION).executables)


def test_a_layer_norms_other_configurations_keep_every_thread_busy():
    from boo_ops_layernorm import LayerNormSignature

    for width in (768, 1024, 4096, 8192, 16384):
        problem = layernorm.problem_of(LayerNormSignature((64, width), 1, dtype=torch.bfloat16))
        chosen = layernorm.choose_config(problem)
        others = layernorm.alternatives(problem, chosen)
        # the widest rows fill 16 warps' registers already: nothing else fits
        assert bool(others) == (width < layernorm.MAX_WIDTH) and chosen not in others
        assert len(set(others)) == len(others)
        for config in others:
            assert config.block == chosen.block and 1 <= config.rows_per <= 16 and 4 <= config.num_warps <= 16
            # 4 to 32 values a thread (more spill registers: ptxas said so for 64 of a 16,384-wide dx)
            assert 4 * 32 * config.num_warps <= config.block * config.rows_per <= 32 * 32 * config.num_warps


def test_it_knows_which_batch_norms_it_serves():
    from boo_ops_batchnorm import BatchNormSignature

    def bnorm(**changes: object) -> BatchNormSignature:
        fields = dict(input_shape=(32, 64, 56, 56), mode="bwd", channels_last=True, save=True, dtype=torch.bfloat16)
        return BatchNormSignature(**{**fields, **changes})

    assert batchnorm.problem_of(bnorm()) == batchnorm.BatchNormProblem(32 * 56 * 56, 64, "bf16")
    per_activation = batchnorm.problem_of(bnorm(input_shape=(4, 24, 5, 7), spatial=False, dtype=torch.float16))
    assert (per_activation.rows, per_activation.columns) == (4, 24 * 5 * 7)
    relu_and_residual = batchnorm.problem_of(bnorm(activation="relu", residual=True))
    assert (relu_and_residual.relu, relu_and_residual.residual) == (True, True)
    assert relu_and_residual.dx_tensors() == ["w", "invstd", "y", "dy", "dy2", "sum_g", "x", "mean", "sum_g_xhat",
                                              "dres", "dx"]
    for other in (bnorm(mode="train"), bnorm(save=False), bnorm(channels_last=False)):  # modules of other shapes
        assert batchnorm.problem_of(other) is None
    found = hooks.candidates(bnorm(), Target.parse("cuda:sm_90a"))
    assert [s.name for s in found] == ["hopper_bnorm", *(f"hopper_bnorm_rows{r}" for r in batchnorm.OTHER_PROGRAM_ROWS)]
    assert {s.formulation for s in found} == {"staged_sums"} and len({s.key for s in found}) == len(found)
    # a 7x7 map's sums take the module with one stage fewer
    assert hooks.candidates(bnorm(input_shape=(32, 2048, 7, 7)), Target.parse("cuda:sm_90a"))[0].formulation == \
        "staged_sums_two_stages"
    # a 14x14 map's, the module of 32 parts first, then staged_sums; the other rows on the first
    found = hooks.candidates(bnorm(input_shape=(32, 256, 14, 14)), Target.parse("cuda:sm_90a"))
    assert [(s.name, s.formulation) for s in found] == [
        ("hopper_bnorm", "staged_sums_few_parts"), ("hopper_bnorm", "staged_sums"),
        *((f"hopper_bnorm_rows{r}", "staged_sums_few_parts") for r in batchnorm.OTHER_PROGRAM_ROWS)]
    assert len({s.key for s in found}) == len(found)
    assert hooks.boo_kernel_substitutions(bnorm(), Target.parse("cpu")) is None  # CUDA targets only


@pytest.mark.parametrize(("command", "parts"), [
    ("bnormbfp16 -n 32 -c 64 -H 56 -W 56 -F 0 -b 1 -m 1 -s 1 -L NHWC", 3136),  # ResNet-50's, groups of 32 rows
    ("bnormbfp16 -n 32 -c 2048 -H 7 -W 7 -F 0 -b 1 -m 1 -s 1 -L NHWC", 32),  # two stages: 49 rows a part
    ("bnorm -n 8 -c 48 -H 10 -W 10 -F 0 -b 1 -m 1 -s 1 -L NHWC", 25),
    ("bnormfp16 -n 4 -c 24 -H 5 -W 7 -F 0 -b 1 -m 0 -s 1 -L NHWC", 1),  # per activation
    ("bnormbfp16 -n 4 -c 16 -D 3 -H 5 -W 5 -F 0 -b 1 -m 1 -s 1 -L NDHWC", 15),
    ("bnormbfp16 -n 32 -c 128 -H 28 -W 28 -F 0 -b 1 -m 1 -s 1 -L NHWC --activation relu", 784),  # y read too
    # 32 parts of 196 rows (staged_sums_few_parts)
    ("bnormbfp16 -n 32 -c 256 -H 14 -W 14 -F 0 -b 1 -m 1 -s 1 -L NHWC --activation relu", 32),
    ("bnormbfp16 -n 32 -c 256 -H 14 -W 14 -F 0 -b 1 -m 1 -s 1 -L NHWC --residual 1 --activation relu", 32)])
def test_it_finds_the_batch_norm_backwards_first_stage_and_elementwise_pass(private_cache, command, parts):
    (signature,) = BooOpRegistry.parse_signatures(command)
    problem = batchnorm.problem_of(signature)
    formulation = hooks.candidates(signature, Target.parse("cuda:sm_90a"))[0].formulation
    found = executables_of(signature, "cuda:sm_80", formulation)  # cross-compiled: no GPU needed
    chosen = batchnorm.plan(problem, found.executables)
    assert chosen.parts == parts and (chosen.sums.name, chosen.dx.name) == (found.names[0], found.names[-1])
    # both sums in one binding of the elementwise pass, at the offsets the stages before it write
    sum_g, sum_g_xhat = chosen.dx_tensors["sum_g"], chosen.dx_tensors["sum_g_xhat"]
    assert sum_g.binding == sum_g_xhat.binding and sum_g.offset != sum_g_xhat.offset
    assert list(chosen.sums_tensors) == problem.sums_tensors() and list(chosen.dx_tensors) == problem.dx_tensors()
    assert chosen.sums_tensors["partials"].access != "readonly" and chosen.dx_tensors["dx"].access != "readonly"
    with pytest.raises(ValueError):  # another size's module: BOO would pass the substitution over
        wider = dataclasses.replace(signature, input_shape=(signature.input_shape[0] + 1, *signature.input_shape[1:]))
        batchnorm.plan(batchnorm.problem_of(wider), found.executables)


def test_a_first_stage_program_sums_whole_parts():
    problem = batchnorm.BatchNormProblem(rows=100352, columns=64, dtype="bf16")
    assert batchnorm.parts_per(problem, 3136) == 8  # 8 parts of 32 rows
    assert batchnorm.parts_per(batchnorm.BatchNormProblem(1568, 2048, "bf16"), 32) == 6  # 6 of 49
    assert batchnorm.parts_per(batchnorm.BatchNormProblem(4, 840, "f16"), 1) == 1  # no more parts than there are
    assert batchnorm.parts_per(problem, 3136, 1024) == 32
