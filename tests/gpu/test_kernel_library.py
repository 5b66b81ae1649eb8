"""The Hopper kernel library (examples/boo_kernels_hopper) on a Hopper GPU: 16-bit matmuls
of any shape (the bf16 ones of benchmarks/gpu.py, odd sizes, transposes, batches, epilogues)
are served by its Triton-built sm_90a kernel, substituted into IREE's module, verified by BOO,
and right against float64. Skipped without the library, Triton or a GPU of compute capability
9.0.
Run on the GPU machine: ``pytest -m gpu tests/gpu/test_kernel_library.py``."""

from __future__ import annotations

import pytest
import torch

from boo_core import get_launchable
from boo_ops_matmul import BooLinear, MatmulSignature

pytestmark = pytest.mark.gpu
gemm = pytest.importorskip("boo_kernels_hopper.gemm")
ptx = pytest.importorskip("boo_kernels_hopper.ptx")

DEVICE = "cuda:0"
BF16 = torch.bfloat16
BENCHMARK_SHAPES = ((8192, 4096, 1024), (8192, 1024, 4096), (4096, 4096, 4096))  # (m, n, k)


@pytest.fixture(autouse=True)
def hopper():
    reason = ptx.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def assert_right_on_fresh_inputs(launchable, bounds: float | tuple[float, ...]) -> None:
    """Twice, on fresh random inputs: each output within its bound (one for all, or one
    each) of the signature's float64 reference, as a relative error."""
    signature = launchable.signature
    for _ in range(2):
        args = signature.get_sample_args(device=DEVICE)
        refs = signature.reference(*(a.double() for a in args))
        outs = launchable(*args)
        outs, refs = (t if isinstance(t, tuple) else (t,) for t in (outs, refs))
        each = bounds if isinstance(bounds, tuple) else (bounds,) * len(refs)
        for out, ref, bound in zip(outs, refs, each, strict=True):
            assert relative_error(out, ref) < bound


@pytest.mark.parametrize(("m", "n", "k"), BENCHMARK_SHAPES)
def test_a_benchmark_matmul_is_served_by_the_library_kernel(private_cache, m, n, k):
    launchable = get_launchable(MatmulSignature(m=m, n=n, k=k, dtype=BF16), DEVICE)
    assert launchable.substitution is not None and launchable.substitution.name.startswith("hopper_gemm")
    assert launchable.verified and not launchable.passed_over
    assert launchable.launch == "direct"  # launched by BOO on torch's stream, from the launch plan
    a = torch.randn(m, k, device=DEVICE, dtype=BF16)
    b = torch.randn(k, n, device=DEVICE, dtype=BF16)
    assert relative_error(launchable(a, b), a.double() @ b.double()) < 1e-2


def test_a_linear_layer_with_bias_is_served_too(private_cache):
    linear = BooLinear(512, 1024, device=DEVICE, dtype=BF16)  # x @ W.T + bias: B transposed, a bias vector
    x = torch.randn(2048, 512, device=DEVICE, dtype=BF16)
    with torch.no_grad():
        out = linear(x)
    ref = x.double() @ linear.weight.detach().double().T + linear.bias.detach().double()
    assert relative_error(out, ref) < 1e-2
    signature = MatmulSignature(m=2048, n=1024, k=512, trans_b=True, bias=True, dtype=BF16)
    launchable = get_launchable(signature, DEVICE)
    assert launchable.substitution is not None and launchable.substitution.name.startswith("hopper_gemm")
    assert launchable.verified


# Every class of the library's matmuls: edges in M, N and K (masked tiles), A transposed (and
# both, where IREE transposes A first), batches, float16, and the whole epilogue.
ANY_SHAPE = [
    MatmulSignature(m=6304, n=768, k=768, trans_b=True, bias=True, dtype=BF16),  # a ViT-B/16 linear, batch 32
    MatmulSignature(m=768, n=768, k=6304, trans_a=True, dtype=BF16),  # its weight gradient
    MatmulSignature(m=6304, n=3072, k=768, dtype=torch.float16, activation="gelu", bias=True, trans_b=True),
    MatmulSignature(m=100, n=50, k=70, dtype=BF16),
    MatmulSignature(m=1, n=64, k=64, dtype=BF16),  # one row
    MatmulSignature(m=1, n=1000, k=2048, trans_b=True, bias=True, dtype=BF16),  # a classifier at batch 1: a bias row
    MatmulSignature(m=1, n=256, k=512, trans_a=True, bias=True, dtype=BF16),  # one row of A transposed: the row itself
    MatmulSignature(m=300, n=100, k=200, trans_a=True, trans_b=True, alpha=2.0, beta=0.5, bias=True,
                    activation="silu", dtype=BF16),
    MatmulSignature(m=197, n=197, k=64, batch=12, trans_b=True, dtype=BF16),  # attention scores
    MatmulSignature(m=197, n=64, k=197, batch=12, dtype=torch.float16, activation="relu"),
]


@pytest.mark.parametrize("signature", ANY_SHAPE, ids=lambda s: s.func_name)
def test_a_matmul_of_any_shape_is_served_and_right(private_cache, signature):
    assert_served_and_right(signature, "hopper_")


def assert_served_and_right(signature: MatmulSignature, substitution: str) -> None:
    """The library's substitution named ``substitution...`` serves ``signature``, verified,
    launched directly, and right against float64 on fresh inputs."""
    launchable = get_launchable(signature, DEVICE)
    assert launchable.substitution is not None and launchable.substitution.name.startswith(substitution)
    assert launchable.verified and launchable.launch == "direct"
    for _ in range(2):  # fresh inputs each time
        args = signature.get_sample_args(device=DEVICE)
        ref = signature.reference(*(a.double() for a in args))
        assert relative_error(launchable(*args), ref) < 1e-2


# Long K, few output tiles: the matmul op's split_k, its partial products the library's kernel.
SPLIT_K = [
    MatmulSignature(m=96, n=384, k=100352, trans_a=True, dtype=BF16),  # ConvNeXt-T's stage 1 weight gradient
    MatmulSignature(m=192, n=768, k=25088, trans_a=True, alpha=0.5, bias=True, activation="gelu",
                    dtype=torch.float16),  # the epilogue in IREE's sum of the slices
    MatmulSignature(m=1024, n=1024, k=32768, trans_a=True, dtype=BF16),  # a decoder block's weight gradient
]


@pytest.mark.parametrize("signature", SPLIT_K, ids=lambda s: s.func_name)
def test_a_long_k_weight_gradient_is_split_and_right(private_cache, signature):
    assert_served_and_right(signature, "hopper_split_k")


# The persistent kernel fed by tensor maps it builds on the device (their memory the module's
# own, boo_kernels_hopper.descriptor_scratch): first wherever it can read the operands' rows.
TMA_SHAPES = [
    MatmulSignature(m=6304, n=2304, k=768, trans_b=True, bias=True, dtype=BF16),  # a ViT-B/16 qkv projection
    MatmulSignature(m=6304, n=768, k=3072, trans_b=True, bias=True, beta=1.0, dtype=BF16),  # MLP down + residual
    MatmulSignature(m=6304, n=3072, k=768, dtype=torch.float16, activation="gelu", bias=True, trans_b=True),
    MatmulSignature(m=6304, n=768, k=3072, dtype=BF16),  # a data gradient: one round, then 72 quarters
    MatmulSignature(m=6300, n=1000, k=1000, dtype=BF16),  # edges in M, N and K: zeros from the hardware
    MatmulSignature(m=8192, n=1280, k=4096, dtype=torch.float16),  # two rounds of 128 x 256, then 112 halves
]


@pytest.mark.parametrize("signature", TMA_SHAPES, ids=lambda s: s.func_name)
def test_the_tma_kernel_serves_the_products_whose_rows_it_can_read(private_cache, signature, monkeypatch):
    monkeypatch.setattr(gemm, "OFFER_STREAM_K", False)  # which comes first on some of these
    assert_served_and_right(signature, "hopper_gemm_tma_")


# Stream-K: the TMA kernel's K steps shared out evenly between the programs, in a module of the
# library's own (zeroed counters, memory for split tiles), put first where one program a tile
# leaves a round's SMs idle (the default does not yet: gemm.STREAM_K_FIRST_BELOW).
STREAM_K_SHAPES = [
    MatmulSignature(m=6304, n=768, k=3072, trans_b=True, bias=True, beta=1.0, dtype=BF16),  # MLP down + residual
    MatmulSignature(m=3072, n=768, k=6304, trans_a=True, dtype=BF16),  # MLP up's weight gradient: 144 tiles
    MatmulSignature(m=768, n=768, k=6304, trans_a=True, dtype=BF16),  # 36 tiles, each split between ~4 programs
    MatmulSignature(m=6300, n=1000, k=1000, alpha=0.5, activation="gelu", dtype=BF16),  # edges in M, N and K
    MatmulSignature(m=1000, n=520, k=2056, trans_b=True, bias=True, dtype=torch.float16),
]


@pytest.fixture
def stream_k_first(monkeypatch):
    monkeypatch.setattr(gemm, "STREAM_K_FIRST_BELOW", 0.8)


@pytest.mark.parametrize("signature", STREAM_K_SHAPES, ids=lambda s: s.func_name)
def test_the_stream_k_kernel_serves_products_of_idle_rounds_and_writes_every_element(private_cache, signature,
                                                                                      stream_k_first):
    launchable = get_launchable(signature, DEVICE)
    assert launchable.substitution is not None and launchable.substitution.name == "hopper_gemm_stream_k_128x128"
    assert launchable.formulation == "hopper_stream_k_128x128"
    assert launchable.verified and launchable.launch == "direct"
    for _ in range(3):  # fresh inputs, the output poisoned: a tile left unwritten or half-summed fails
        args = signature.get_sample_args(device=DEVICE)
        ref = signature.reference(*(a.double() for a in args))
        out = torch.full(signature.output_shape, float("nan"), device=DEVICE, dtype=signature.dtype)
        launchable(*args, out=out)
        assert relative_error(out, ref) < 1e-2


def launched_on_two_streams(launchable) -> list[list[torch.Tensor]]:
    """Twenty launches on each of two streams at once, each stream on its own fresh inputs:
    every output right against float64; the outputs, by stream."""
    signature = launchable.signature
    streams = [torch.cuda.Stream() for _ in range(2)]
    inputs = [signature.get_sample_args(device=DEVICE) for _ in streams]
    outputs: list[list[torch.Tensor]] = [[], []]
    torch.cuda.synchronize()
    for _ in range(20):
        for stream, args, outs in zip(streams, inputs, outputs, strict=True):
            with torch.cuda.stream(stream):
                outs.append(launchable(*args))
    torch.cuda.synchronize()
    for args, outs in zip(inputs, outputs, strict=True):
        ref = signature.reference(*(a.double() for a in args))
        assert all(relative_error(out, ref) < 1e-2 for out in outs)
    return outputs


def test_stream_k_launches_on_two_streams_at_once_each_count_their_own_tiles(private_cache, stream_k_first):
    """Two streams launching the stream-K kernel at once: each launch has its own counters and
    split tiles (the module's transients), so neither adds the other's parts."""
    signature = MatmulSignature(m=3072, n=768, k=6304, trans_a=True, dtype=BF16)
    launchable = get_launchable(signature, DEVICE)
    assert launchable.substitution.name == "hopper_gemm_stream_k_128x128" and launchable.launch == "direct"
    for outs in launched_on_two_streams(launchable):
        assert all(torch.equal(out, outs[0]) for out in outs)  # the parts added in one order, whoever came last


def test_launches_on_two_streams_at_once_each_read_their_own_tensors(private_cache):
    """Two streams launching the same TMA kernel on different tensors, overlapping: each
    program's tensor maps live in an area no running program holds, so neither launch reads
    the other's operands."""
    signature = MatmulSignature(m=2048, n=1024, k=4096, trans_b=True, dtype=BF16)  # 128 programs, a long K
    launchable = get_launchable(signature, DEVICE)
    assert launchable.substitution.name.startswith("hopper_gemm_tma_") and launchable.launch == "direct"
    launched_on_two_streams(launchable)


LAYER_NORMS = [  # (input shape, weight, bias, dtype): the issue's rows, ViT-B/16's (3-D), odd widths
    ((8192, 1024), True, True, BF16), ((8192, 4096), True, True, BF16), ((32, 197, 768), True, True, BF16),
    ((100, 1000), False, False, torch.float32), ((37, 8192), True, False, torch.float16),
    ((3, 5, 17), True, True, BF16)]


@pytest.mark.parametrize(("shape", "weight", "bias", "dtype"), LAYER_NORMS, ids=str)
def test_a_layer_norm_forward_is_served_by_the_library_kernel_and_right(private_cache, shape, weight, bias, dtype):
    from boo_ops_layernorm import LayerNormSignature

    signature = LayerNormSignature(shape, len(shape) - 1, weight=weight, bias=bias, dtype=dtype)
    launchable = get_launchable(signature, DEVICE)
    assert launchable.substitution is not None and launchable.substitution.name == "hopper_layernorm"
    assert launchable.verified and launchable.launch == "direct"
    assert_right_on_fresh_inputs(launchable, (1e-2, 1e-4, 1e-4))  # y, mean, rstd


LAYER_NORM_BACKWARDS = [  # (command, served): dx alone, and dx with dw and db (IREE's staged sums after it)
    ("layernormbfp16 --input 8192x4096 -o 1 -m 1 -F 2", True),
    ("layernormbfp16 --input 8192x1024 -o 1 -m 1 -F 14", True),
    ("layernormbfp16 --input 8192x4096 -o 1 -m 1 -F 14", True),
    ("layernormbfp16 --input 32x197x768 -o 2 -m 1 -F 14", True),
    ("layernormfp16 --input 37x1000 -o 1 -m 1 -F 2", True),
    ("layernorm --input 100x8192 -o 1 -m 1 -F 14", False)]  # float32: IREE's module has another shape, its own serves


@pytest.mark.parametrize(("command", "served"), LAYER_NORM_BACKWARDS)
def test_a_layer_norm_backward_takes_dx_from_the_library_kernel_and_is_right(private_cache, command, served):
    from boo_core.plugins.registry import BooOpRegistry

    (signature,) = BooOpRegistry.parse_signatures(command)
    launchable = get_launchable(signature, DEVICE)
    name = launchable.substitution.name if launchable.substitution is not None else None
    assert name == ("hopper_layernorm_dx" if served else None)
    assert launchable.verified and launchable.launch == "direct"
    assert_right_on_fresh_inputs(launchable, 1e-2)  # dx[, dw, db]


BATCH_NORM_BACKWARDS = [  # ResNet-50's (groups of 32 rows; a 7x7 map's two stages), f32, f16 per activation, 3-D, odd
    "bnormbfp16 -n 32 -c 64 -H 56 -W 56 -F 0 -b 1 -m 1 -s 1 -L NHWC",
    "bnormbfp16 -n 32 -c 256 -H 14 -W 14 -F 0 -b 1 -m 1 -s 1 -L NHWC",
    "bnormbfp16 -n 32 -c 2048 -H 7 -W 7 -F 0 -b 1 -m 1 -s 1 -L NHWC",
    "bnorm -n 8 -c 48 -H 10 -W 10 -F 0 -b 1 -m 1 -s 1 -L NHWC",
    "bnormfp16 -n 4 -c 24 -H 5 -W 7 -F 0 -b 1 -m 0 -s 1 -L NHWC",
    "bnormbfp16 -n 4 -c 16 -D 3 -H 5 -W 5 -F 0 -b 1 -m 1 -s 1 -L NDHWC",
    "bnormbfp16 -n 3 -c 40 -H 5 -W 7 -F 0 -b 1 -m 1 -s 1 -L NHWC",
    # a ResNet-50 training step's (--backward-kernels bnorm): after a ReLU, and a residual added before it
    "bnormbfp16 -n 32 -c 256 -H 14 -W 14 -F 0 -b 1 -m 1 -s 1 -L NHWC --activation relu",
    "bnormbfp16 -n 32 -c 1024 -H 14 -W 14 -F 0 -b 1 -m 1 -s 1 -L NHWC --residual 1 --activation relu",
    "bnormbfp16 -n 32 -c 2048 -H 7 -W 7 -F 0 -b 1 -m 1 -s 1 -L NHWC --residual 1 --activation relu",
    "bnormbfp16 -n 5 -c 24 -H 3 -W 7 -F 0 -b 1 -m 1 -s 1 -L NHWC --residual 1"]


@pytest.mark.parametrize("command", BATCH_NORM_BACKWARDS)
def test_a_batch_norm_backward_takes_its_sums_and_dx_from_the_library_and_is_right(private_cache, command):
    from boo_core.plugins.registry import BooOpRegistry

    (signature,) = BooOpRegistry.parse_signatures(command)
    launchable = get_launchable(signature, DEVICE)
    assert launchable.substitution is not None and launchable.substitution.name == "hopper_bnorm"
    assert launchable.verified and launchable.launch == "direct"
    assert_right_on_fresh_inputs(launchable, 1e-2)  # dx, dw, db[, the residual's gradient]
