"""benchmarks/models.py's summary of a step's GPU kernels by what they compute (``--profile``)."""

import importlib.util
import sys
from pathlib import Path

MODELS = Path(__file__).resolve().parents[2] / "benchmarks" / "models.py"


def _models():
    spec = importlib.util.spec_from_file_location("models_benchmark", MODELS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_kernels_are_summed_by_what_they_compute_costliest_first():
    kernels = [  # names as torch.profiler reports them on an H100 (BOO's, cuDNN's, cuBLAS's, torch's, Inductor's)
        ("conv2d_wrw_bf16_n32c256h14w14_k256c256y3x3_s1x1_p1x1_d1x1_g1_nhwc_nhwc_nhwc_async_dispatch", 24.0, 1),
        ("conv2d_wrw_bf16_n32c256h14w14_k256c256y3x3_s1x1_p1x1_d1x1_g1_nhwc_nhwc_nhwc_async_dispatch_1", 2.5, 1),
        ("conv2d_bwd_bf16_n32c512h7w7_k512c512y3x3_s1x1_p1x1_d1x1_g1_nhwc_nhwc_nhwc_async_dispatch_0", 2.0, 1),
        ("cbainfer_cna_bf16_n32c64h56w56_k64y3x3_async_dispatch_0", 20.0, 1),
        ("bnorm_bwd_bf16_32x64x56x56_nhwc_spatial_save_eps1em05_relu_async_dispatch_2", 7.0, 2),
        ("sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x64x64", 30.0, 1),
        ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc>", 40.0, 1),
        ("nvjet_sm90_tst_64x64_64x13_1x2_h_bz_splitK_NTT", 11.0, 2),
        ("triton_per_fused__native_batch_norm_legit_functional_relu_3", 9.0, 1),
        ("void at::native::batch_norm_collect_statistics_channels_last_kernel<at::native::Var>", 26.0, 1),
        ("void at::native::(anonymous namespace)::max_pool_backward_nhwc<c10::BFloat16, float>", 238.0, 1),
        ("Memset (Device)", 1.5, 3),
        ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>>", 5.0, 1),
    ]
    summary = _models().by_kind(kernels).split("; ")
    assert summary == [
        "torch pooling 238 us (1)", "cuDNN conv forward 40 us (1)", "cuDNN conv weight gradient 30 us (1)",
        "BOO conv weight gradient 26 us (2)", "torch batch norm 26 us (1)", "BOO conv + batch norm 20 us (1)",
        "cuBLAS/CUTLASS (matmuls, cuDNN's 1x1 convs) 11 us (2)", "Inductor's Triton kernels 9 us (1)",
        "BOO batch norm 7 us (2)", "other torch kernels 5 us (1)", "BOO conv data gradient 2 us (1)",
        "memsets and copies 2 us (3)"]
