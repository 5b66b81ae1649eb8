"""Launchables: argument checks, destination passing, shared runtime state, the hot path."""

from __future__ import annotations

import builtins
import hashlib
import subprocess

import pytest
import torch

from boo_core import ArgumentError, DeviceError, get_launchable, resolve_device
from boo_core.settings import SETTINGS, settings_override
from boo_core.signatures.signature import bounded_symbol

from .fake_plugins.scale_op import ScaleSignature


@pytest.fixture
def scale8(scale_registry):
    return get_launchable(ScaleSignature(8))


@pytest.mark.parametrize("args, message", [
    ((), r"scale_fwd_f32_n8_f2 takes 1 tensors \(x\), got 0"),
    ((torch.ones(8), torch.ones(8)), r"takes 1 tensors \(x\), got 2"),
    ((torch.ones(9),), r"argument 0 \(x\) has shape \(9,\); expected x: \(8,\) f32 on cpu, contiguous"),
    ((torch.ones(8, dtype=torch.float64),), r"argument 0 \(x\) has dtype torch.float64"),
    ((torch.ones(16)[::2],), r"argument 0 \(x\) is not contiguous \(strides \(2,\)\)"),
    ((torch.ones(8, device="meta"),), r"argument 0 \(x\) is on meta"),
    (([1.0] * 8,), r"argument 0 \(x\) must be a torch.Tensor, got list"),
])
def test_mismatched_arguments_are_refused_with_a_clear_error(scale8, args, message):
    with pytest.raises(ArgumentError, match=message):
        scale8(*args)


def test_outputs_are_written_in_place_into_out(scale8):
    x = torch.randn(8)
    out = torch.full((8,), float("nan"))
    result = scale8(x, out=out)
    assert result is out
    torch.testing.assert_close(out, x * 2)
    with pytest.raises(ArgumentError, match=r"out\[0\] \(y\) has shape \(7,\)"):
        scale8(x, out=torch.empty(7))
    with pytest.raises(ArgumentError, match=r"writes 1 outputs, out= has 2"):
        scale8(x, out=(torch.empty(8), torch.empty(8)))


def test_inputs_at_a_storage_offset_and_requiring_grad_are_read_correctly(scale8):
    base = torch.randn(3, 8)
    torch.testing.assert_close(scale8(base[1]), base[1] * 2)  # 32 bytes in: IREE needs 64, so copied
    aligned = torch.randn(4, 16)[2, :8]  # 128 bytes in: imported as it is
    torch.testing.assert_close(scale8(aligned), aligned * 2)
    x = torch.randn(8, requires_grad=True)
    torch.testing.assert_close(scale8(x), x.detach() * 2)


def test_misaligned_out_view_is_refused(scale8):
    out = torch.empty(3, 8)
    with pytest.raises(ArgumentError, match=r"out\[0\] \(y\) is not 64-byte aligned"):
        scale8(torch.ones(8), out=out[1])
    scale8(torch.ones(8), out=torch.empty(4, 16)[2, :8])


def test_each_call_allocates_fresh_outputs(scale8):
    x = torch.randn(8)
    first, second = scale8(x), scale8(x)
    assert first.data_ptr() != second.data_ptr()


def test_a_launchable_is_remembered_per_value_of_every_setting_that_selects_kernels(scale_registry, private_cache,
                                                                                  tmp_path):
    signature = ScaleSignature(24)
    first = get_launchable(signature)
    assert get_launchable(signature) is first
    for change in ({"cuda_launch": "iree"}, {"cache_dir": tmp_path / "other"}, {"verify": "all"},
                   {"compile_timeout": 60.0}, {"use_tuned": False}):
        with settings_override(**change):
            assert get_launchable(signature) is not first, change
    with settings_override(lock_timeout=5.0, use_backward_kernels=True, compile_strict=True):
        assert get_launchable(signature) is first  # these choose no kernel
    selecting = {s.name for s in SETTINGS if s.selects_kernel}
    assert {"cuda_launch", "cache_dir", "verify", "substitutions", "extra_compile_flags"} <= selecting


def test_launchables_share_one_runtime_per_device(scale_registry):
    a = get_launchable(ScaleSignature(8))
    b = get_launchable(ScaleSignature(9))
    assert a is not b
    assert a.runtime is b.runtime
    assert a.runtime.hal_device is b.runtime.hal_device


def test_the_call_path_does_no_file_io_hashing_or_compiling(scale8, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the call path must not do this")

    x = torch.randn(8)
    scale8(x)
    monkeypatch.setattr(builtins, "open", forbidden)
    monkeypatch.setattr(hashlib, "sha256", forbidden)
    monkeypatch.setattr(subprocess, "run", forbidden)
    monkeypatch.setattr(torch.export, "export", forbidden)
    for _ in range(3):
        torch.testing.assert_close(scale8(x), x * 2)


def test_forked_child_reloads_the_kernel(scale8):
    import multiprocessing

    context = multiprocessing.get_context("fork")
    queue = context.Queue()

    def child(q):
        x = torch.arange(8, dtype=torch.float32)
        q.put(scale8(x).tolist())

    process = context.Process(target=child, args=(queue,))
    process.start()
    result = queue.get(timeout=60)
    process.join(timeout=60)
    assert result == [2.0 * i for i in range(8)]


def test_devices():
    assert resolve_device("cpu").target.name == "cpu"
    assert resolve_device(None).driver == "local-task"
    assert resolve_device(torch.device("cpu")) is resolve_device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match=r"device 'cuda:0': torch sees 0 CUDA devices"):
            resolve_device("cuda:0")
    with pytest.raises(DeviceError, match=r"unknown device 'tpu'"):
        resolve_device("tpu")
    with pytest.raises(DeviceError, match=r"device 'meta': BOO launches on 'cpu' and 'cuda:N'"):
        resolve_device("meta")


@pytest.mark.parametrize("capability, target", [
    ((9, 0), "sm_80"),  # Hopper: IREE 3.13 has no sm_90; chosen by measurement
    ((8, 9), "sm_89"), ((8, 6), "sm_86"), ((8, 0), "sm_80"), ((7, 5), "sm_75"),
    ((10, 0), "sm_89"),  # newer than every target IREE knows up to 12.0: the newest older one
    ((12, 0), "sm_120"),
])
def test_cuda_targets_follow_compute_capability(capability, target):
    from boo_core.runtime.devices import cuda_target_for

    assert cuda_target_for(capability) == target


def test_a_gpu_iree_cannot_target_is_refused_by_capability():
    from boo_core.runtime.devices import cuda_target_for

    with pytest.raises(DeviceError, match=r"compute capability 5.2 cannot be targeted: IREE compiles for sm_60"):
        cuda_target_for((5, 2))


def test_cuda_compile_flags_cross_compile_here():
    from boo_core.runtime.devices import Target

    flags = Target.parse("cuda:sm_80").compile_flags()
    assert "--iree-cuda-target=sm_80" in flags and "--iree-execution-model=async-external" in flags


@pytest.mark.parametrize("readable, expected", [
    ("conv2d_fwd_f32", "conv2d_fwd_f32"),
    ("a-b.c", "a_b_c"),
    ("3x3", "f_3x3"),
])
def test_bounded_symbol_sanitizes(readable, expected):
    assert bounded_symbol(readable) == expected


def test_bounded_symbol_keeps_long_names_distinct_and_bounded():
    a, b = "x" * 200 + "a", "x" * 200 + "b"
    assert len(bounded_symbol(a)) == 96 and bounded_symbol(a) != bounded_symbol(b)
    assert bounded_symbol(a) == bounded_symbol(a)


def test_small_kernels_run_inline_and_large_ones_on_worker_threads(scale_registry):
    from boo_core.runtime.devices import INLINE_FLOPS_LIMIT
    from boo_core.settings import settings_override

    assert get_launchable(ScaleSignature(8)).driver == "local-sync"
    big = ScaleSignature(INLINE_FLOPS_LIMIT)
    assert resolve_device("cpu").driver_for(big.flops) == "local-task"
    for policy in ("local-task", "local-sync"):
        with settings_override(cpu_driver=policy):
            launchable = get_launchable(ScaleSignature(8))
            assert launchable.driver == policy and launchable.runtime.driver_name == policy
            x = torch.randn(8)
            torch.testing.assert_close(launchable(x), x * 2)
    with settings_override(cpu_driver="cuda"):
        with pytest.raises(DeviceError, match=r"driver 'cuda' cannot run on cpu: use auto, local-task or local-sync"):
            get_launchable(ScaleSignature(8))


@pytest.mark.parametrize("policy", ["local-sync", "local-task"])
def test_outputs_iree_writes_by_a_copy_work_on_both_drivers(scale_registry, policy):
    # x * 1.0 compiles to a buffer copy into the output, not a dispatch: IREE maps the
    # output with DISCARD_WRITE, which a DLPack-imported buffer did not allow on local-sync.
    from boo_core.settings import settings_override

    with settings_override(cpu_driver=policy):
        launchable = get_launchable(ScaleSignature(8, factor=1.0))
    x = torch.randn(8)
    torch.testing.assert_close(launchable(x), x)


def test_target_argument_must_fit_the_device(scale_registry):
    assert get_launchable(ScaleSignature(8), "cpu", target="cpu").device.target.name == "cpu"
    with pytest.raises(DeviceError, match=r"target cuda:sm_89 cannot run on cpu \(its targets are llvm-cpu\)"):
        get_launchable(ScaleSignature(8), "cpu", target="cuda:sm_89")
