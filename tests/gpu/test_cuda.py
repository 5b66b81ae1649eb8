"""BOO on NVIDIA GPUs. Run on a GPU machine: ``source .gpu/setup.sh; pytest -m gpu tests/gpu``."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest
import torch

from boo_core import BooOpRegistry, DeviceError, clear_launchables, get_launchable, resolve_device
from boo_core.settings import settings_override
from boo_core.verify.numerics import check_launchable
from boo_ops_conv import MODES, ConvSignature, boo_conv
from boo_ops_matmul import MatmulSignature, boo_linear

from ..conftest import REPO

pytestmark = pytest.mark.gpu
DEVICE = "cuda:0"


f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16


def assert_matches_pytorch(signature, device=DEVICE):
    comparisons = check_launchable(get_launchable(signature, device))
    failed = [str(c) for c in comparisons if not c.passed]
    assert not failed, f"{signature.to_command()}: {failed}"


CONV_CASES = [
    ConvSignature((4, 32, 14, 14), (48, 32, 3, 3), padding=1, stride=stride, dtype=dtype, shared_layout=layout,
                  mode=mode)
    for dtype, layout, mode, stride in itertools.product((f32, f16, bf16), ("NCHW", "NHWC"), MODES, (1, 2))
]


@pytest.mark.parametrize("signature", CONV_CASES, ids=lambda s: s.func_name)
def test_conv_numerics_every_mode_dtype_layout(signature):
    assert_matches_pytorch(signature)


@pytest.mark.parametrize("dtype", [f32, f16, bf16])
@pytest.mark.parametrize("channels", [16, 64, 128])
def test_the_3x3_nhwc_padded_conv_is_right(dtype, channels):
    # IREE's default CUDA path returned wrong bf16 results for this class (DESIGN.md).
    signature = ConvSignature((8, channels, 28, 28), (channels, channels, 3, 3), padding=1, dtype=dtype,
                              shared_layout="NHWC")
    assert_matches_pytorch(signature)


@pytest.mark.parametrize("dtype", [f32, f16, bf16])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("channels", [(64, 64), (64, 256)])
def test_the_1x1_nchw_conv_is_right(dtype, stride, channels):
    # IREE's CUDA code for 1x1 NCHW convolutions is wrong too (benchmarks/gpu_conv_scan.py).
    c, k = channels
    assert_matches_pytorch(ConvSignature((8, c, 28, 28), (k, c, 1, 1), stride=stride, dtype=dtype, bias=True))


@pytest.mark.parametrize("dtype", [f32, f16, bf16])
@pytest.mark.parametrize("trans", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_numerics(dtype, trans):
    assert_matches_pytorch(MatmulSignature(m=96, n=160, k=200, trans_a=trans[0], trans_b=trans[1], dtype=dtype))


@pytest.mark.parametrize("dtype", [f32, f16, bf16])
def test_layernorm_numerics(dtype):
    pytest.importorskip("boo_ops_layernorm")
    for command in (f"layernorm{'' if dtype == f32 else 'fp16' if dtype == f16 else 'bfp16'} "
                    f"--input {rows}x384 -o 1 -m {m} -F {f}" for rows in (64, 100)
                    for m, f in ((0, 1), (0, 2), (1, 1), (1, 2), (1, 14))):  # forward; dx; dx, dw and db
        for signature in BooOpRegistry.parse_signatures(command):
            assert_matches_pytorch(signature)
            if signature.mode == "bwd" and "dw" in signature.gradients:  # summed in stages, and verified
                assert get_launchable(signature, DEVICE).formulation == "chunked_column_sums"


def test_eager_calls_with_cuda_tensors_select_the_gpu():
    x = torch.randn(2, 8, 10, 10, device=DEVICE).to(memory_format=torch.channels_last)
    w = torch.randn(16, 8, 3, 3, device=DEVICE)
    y = boo_conv(x, w, padding=1)
    assert y.device == x.device and y.is_contiguous(memory_format=torch.channels_last)
    # float64 references: torch's own float32 convolutions and matmuls on CUDA use TF32 by default
    torch.testing.assert_close(y.double(), torch.nn.functional.conv2d(x.double(), w.double(), padding=1),
                               rtol=1e-4, atol=1e-4)
    a = torch.randn(5, 7, device=DEVICE)
    weight = torch.randn(3, 7, device=DEVICE)
    torch.testing.assert_close(boo_linear(a, weight).double(), a.double() @ weight.double().T, rtol=1e-4, atol=1e-4)


def test_no_copies_inputs_are_read_in_place_and_outputs_written_in_place():
    signature = ConvSignature((2, 16, 16, 16), (16, 16, 3, 3), padding=1, shared_layout="NHWC")
    launchable = get_launchable(signature, DEVICE)
    x, w = signature.get_sample_args(device=DEVICE)
    out = torch.full(signature.output_specs()[0].shape, float("nan"), device=DEVICE)
    pointer = out.data_ptr()
    assert launchable(x, w, out=out) is out and out.data_ptr() == pointer
    first = out.clone()
    x.mul_(2)  # an in-place change must be seen: the kernel reads x's memory, not a copy
    launchable(x, w, out=out)
    torch.testing.assert_close(out, first * 2, rtol=1e-4, atol=1e-4)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    launchable(x, w, out=out)
    # Nothing allocated but the kernel's own scratch (its intermediates, with direct launch):
    # a copy of x or w would come on top of it.
    scratch = -(-launchable.scratch_bytes // 512) * 512  # the caching allocator's rounding
    assert torch.cuda.max_memory_allocated() - before <= scratch


def test_stream_order_with_async_producers_and_consumers_on_a_side_stream():
    signature = ConvSignature((8, 32, 28, 28), (32, 32, 3, 3), padding=1, dtype=f16, shared_layout="NHWC")
    launchable = get_launchable(signature, DEVICE)
    base_x, base_w = signature.get_sample_args(device=DEVICE)
    stream = torch.cuda.Stream()
    checks = []
    with torch.cuda.stream(stream):
        for iteration in range(100):
            torch.cuda._sleep(400_000 if iteration % 4 == 0 else 1_000)  # a slow producer now and then
            x = base_x * (1 + iteration % 7)  # fresh data, written on the side stream just before
            w = base_w.flip(0) if iteration % 2 else base_w
            y = launchable(x, w)
            y.mul_(0.5)  # a consumer queued right after the call
            checks.append((y, (signature.reference(x.float(), w.float()) * 0.5).half()))
    stream.synchronize()
    wrong = [i for i, (y, expected) in enumerate(checks)
             if not torch.allclose(y.float(), expected.float(), rtol=2e-2, atol=5e-1)]
    assert not wrong


@pytest.mark.parametrize("route", ["direct", "iree"])
def test_two_launchables_on_one_device_do_not_interfere(route):
    first = ConvSignature((2, 8, 12, 12), (8, 8, 3, 3), padding=1, dtype=f32)
    second = MatmulSignature(m=64, n=48, k=32, dtype=f32)
    clear_launchables()
    with settings_override(cuda_launch=route):
        a, b = get_launchable(first, DEVICE), get_launchable(second, DEVICE)
    assert a.launch == b.launch == route
    if route == "iree":
        assert a.runtime is b.runtime
    for _ in range(20):
        x1, w1 = first.get_sample_args(device=DEVICE)
        x2, w2 = second.get_sample_args(device=DEVICE)
        y1, y2 = a(x1, w1), b(x2, w2)
        torch.testing.assert_close(y1, first.reference(x1, w1), rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(y2, second.reference(x2, w2), rtol=1e-3, atol=1e-3)
    clear_launchables()


def test_second_device_or_same_index_twice():
    count = torch.cuda.device_count()
    devices = [f"cuda:{i}" for i in range(min(count, 2))] if count > 1 else [DEVICE, DEVICE]
    signature = MatmulSignature(m=32, n=32, k=32)
    launchables = [get_launchable(signature, device) for device in devices]
    for device, launchable in zip(devices, launchables):
        a, b = signature.get_sample_args(device=device)
        torch.testing.assert_close(launchable(a, b), a @ b, rtol=1e-3, atol=1e-3)


def test_target_comes_from_capability_and_can_be_overridden():
    device = resolve_device(DEVICE)
    assert device.target.backend == "cuda" and device.target.arch.startswith("sm_")
    with settings_override(cuda_target="sm_89"):
        assert resolve_device(DEVICE).target.arch == "sm_89"
        launchable = get_launchable(MatmulSignature(m=16, n=16, k=16), DEVICE)
        assert launchable.device.target.arch == "sm_89"
        assert_matches_pytorch(MatmulSignature(m=16, n=16, k=16))
    assert get_launchable(MatmulSignature(m=16, n=16, k=16), DEVICE, target="cuda:sm_86").device.target.arch == "sm_86"
    with pytest.raises(DeviceError, match=r"torch sees \d+ CUDA devices"):
        resolve_device(f"cuda:{torch.cuda.device_count()}")


def test_verification_records_a_verdict_on_the_gpu(tmp_path):
    env = {**os.environ, "BOO_VERIFY": "1", "BOO_CACHE_DIR": str(tmp_path)}
    code = ("import torch\n"
            "from boo_core import get_launchable\n"
            "from boo_ops_conv import ConvSignature\n"
            "s = ConvSignature((4, 32, 14, 14), (32, 32, 3, 3), padding=1, dtype=torch.bfloat16,\n"
            "                  shared_layout='NHWC')\n"
            "l = get_launchable(s, 'cuda:0')\n"
            "print((l.cache_directory / 'verdicts.json').read_text())\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert '"pass"' in result.stdout and "cuda NVIDIA" in result.stdout


def test_kernels_load_and_run_from_other_threads():
    from concurrent.futures import ThreadPoolExecutor

    signatures = [MatmulSignature(m=16 + i, n=24, k=40, dtype=bf16) for i in range(6)]

    def run(signature):
        launchable = get_launchable(signature, DEVICE)  # loaded on this worker thread
        a, b = signature.get_sample_args(device=DEVICE)
        return [c.passed for c in check_launchable(launchable, (a, b))]

    with ThreadPoolExecutor(3) as pool:
        assert all(all(v) for v in pool.map(run, signatures))


@pytest.mark.parametrize("boo_backward", [False, True])
def test_autograd_on_cuda_with_and_without_boo_backward_kernels(boo_backward):
    # torch runs CUDA backward passes on a thread of its own: BOO kernels must run there too.
    x = torch.randn(2, 8, 9, 9, device=DEVICE, dtype=torch.float64).float().requires_grad_()
    w = torch.randn(6, 8, 3, 3, device=DEVICE, dtype=torch.float64).float().requires_grad_()
    grad = torch.randn(2, 6, 5, 5, device=DEVICE)
    with settings_override(use_backward_kernels=boo_backward):
        boo_conv(x, w, stride=2, padding=1).backward(grad)
    x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
    torch.nn.functional.conv2d(x64, w64, stride=2, padding=1).backward(grad.double())
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1e-4, atol=1e-4)


def test_driver_times_device_kernels_on_the_gpu(tmp_path):
    csv_path = tmp_path / "times.csv"
    command = [sys.executable, "-m", "boo_core.tools.cli", "driver", "--device", DEVICE, "--backend", "boo",
               "--backend", "torch", "--iter", "5", "--csv", str(csv_path),
               "gemmbfp16", "-m", "512", "-k", "256", "-n", "384"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    import csv

    rows = list(csv.DictReader(csv_path.open()))
    assert {row["backend"] for row in rows} == {"boo", "torch"}
    for row in rows:
        assert row["status"] == "ok" and float(row["median_us"]) > 0 and row["device"] == DEVICE
