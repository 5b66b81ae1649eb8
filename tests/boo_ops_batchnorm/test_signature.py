"""BatchNormSignature: tensors, validation and the reference against PyTorch's own kernels
(no kernels compiled)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from boo_core import UnsupportedError
from boo_ops_batchnorm import BatchNormSignature as S

f32, bf16 = torch.float32, torch.bfloat16


def specs(tensor_specs):
    return [(s.name, s.shape, s.dtype) for s in tensor_specs]


def test_training_forward_tensors_nhwc():
    s = S((2, 3, 4, 5), channels_last=True, save=True, running=True, dtype=bf16)
    assert specs(s.input_specs()) == [("x", (2, 4, 5, 3), bf16), ("weight", (3,), bf16), ("bias", (3,), bf16),
                                      ("running_mean", (3,), f32), ("running_var", (3,), f32),
                                      ("momentum", (1,), f32)]
    assert specs(s.output_specs()) == [("y", (2, 4, 5, 3), bf16), ("mean", (3,), f32), ("invstd", (3,), f32),
                                       ("running_mean", (3,), f32), ("running_var", (3,), f32)]


def test_running_statistics_may_be_held_in_another_dtype():
    """A bf16 model's buffers: the kernel reads and writes them in bf16; the batch's own
    statistics stay float32. Where running_dtype is the stats dtype, or there are no running
    statistics, the signature is the one without it (one signature, one name)."""
    s = S((2, 3, 4, 5), save=True, running=True, dtype=bf16, running_dtype=bf16)
    assert specs(s.input_specs())[3:] == [("running_mean", (3,), bf16), ("running_var", (3,), bf16),
                                          ("momentum", (1,), f32)]
    assert specs(s.output_specs())[1:] == [("mean", (3,), f32), ("invstd", (3,), f32),
                                           ("running_mean", (3,), bf16), ("running_var", (3,), bf16)]
    assert "_runbf16_" in s.func_name
    assert S((2, 3, 4, 5), running=True, dtype=bf16, running_dtype=f32) == S((2, 3, 4, 5), running=True, dtype=bf16)
    assert S((2, 3, 4, 5), running=False, running_dtype=bf16).running_dtype is None
    with pytest.raises(UnsupportedError, match="running_dtype"):
        S((2, 3, 4, 5), running=True, running_dtype=torch.float64)


def test_per_activation_parameters_follow_the_layout():
    assert S((2, 3, 4, 5), spatial=False).param_shape == (3, 4, 5)
    assert S((2, 3, 4, 5), spatial=False, channels_last=True).param_shape == (4, 5, 3)
    assert S((2, 3, 4, 5), mode="bwd", spatial=False, save=True).input_specs()[3].shape == (3, 4, 5)


@pytest.mark.parametrize("bad", [dict(input_shape=(3,)), dict(input_shape=(2, 0, 4)), dict(mode="eval"),
                                 dict(input_shape=(2, 3, 4), channels_last=True), dict(eps=-1.0),
                                 dict(mode="bwd", running=True)])
def test_invalid_signatures_are_refused(bad):
    with pytest.raises(ValueError):
        S(**{"input_shape": (2, 3, 4, 5), **bad})


CASES = [S((4, 6, 5, 3), mode=mode, channels_last=cl, save=save, running=running)
         for cl in (False, True) for mode in ("train", "infer", "bwd") for save in ((False, True) if mode != "infer"
                                                                                      else (False,))
         for running in ((False, True) if mode != "bwd" else (False,))]


@pytest.mark.parametrize("signature", CASES, ids=lambda s: s.func_name)
def test_the_reference_is_pytorchs_batch_norm_in_float64(signature):
    args = [a.double() for a in signature.get_sample_args()]
    expected = signature.eager(*args)  # aten.native_batch_norm and its backward
    got = signature.reference(*args)
    expected, got = ((t,) if isinstance(t, torch.Tensor) else t for t in (expected, got))
    assert len(got) == len(signature.output_specs())
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("mode", "running"), [("bwd", False), ("train", True), ("train", False), ("infer", True)])
def test_the_eager_baseline_of_a_16_bit_batch_norm_runs_on_the_cpu(dtype, mode, running):
    """ATen's CPU kernels refuse a 16-bit weight beside float32 statistics, and with 16-bit
    parameters save 16-bit statistics: the baseline runs their mixed-type path (the
    parameters in float32), each output in its own dtype."""
    signature = S((4, 6, 5, 3), mode=mode, channels_last=True, save=mode != "infer", running=running, dtype=dtype)
    args = signature.get_sample_args()
    got = signature.eager(*args)
    expected = signature.reference(*(a.double() for a in args))
    got, expected = ((t,) if isinstance(t, torch.Tensor) else t for t in (got, expected))
    for g, e, spec in zip(got, expected, signature.output_specs(), strict=True):
        assert g.dtype == spec.dtype and g.shape == e.shape
        assert float((g.double() - e).norm() / e.norm()) < 2e-2


def test_per_activation_normalizes_each_position_over_the_batch():
    s = S((5, 3, 2, 2), spatial=False, save=True, running=True)
    x, w, b, rm, rv, m = (a.double() for a in s.get_sample_args())
    y, mean, invstd, new_mean, new_var = s.reference(x, w, b, rm, rv, m)
    torch.testing.assert_close(mean, x.mean(0))
    torch.testing.assert_close(invstd, torch.rsqrt(x.var(0, unbiased=False) + s.eps))
    torch.testing.assert_close(y, (x - x.mean(0)) * invstd * w + b)
    torch.testing.assert_close(new_var, (1 - m) * rv + m * x.var(0))  # the running variance is unbiased
    torch.testing.assert_close(new_mean, (1 - m) * rm + m * x.mean(0))


def test_per_activation_backward_is_autograd_of_its_forward():
    s = S((5, 3, 2, 2), mode="bwd", spatial=False)
    x, dy, w = (a.double() for a in s.get_sample_args())
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    br = torch.zeros_like(w, requires_grad=True)
    ((xr - xr.mean(0)) * torch.rsqrt(xr.var(0, unbiased=False) + s.eps) * wr + br).backward(dy)
    for got, want in zip(s.reference(x, dy, w), (xr.grad, wr.grad, br.grad), strict=True):
        torch.testing.assert_close(got, want)


def test_a_relu_follows_the_normalization():
    s = S((4, 3, 2, 2), mode="infer", running=True, activation="relu")
    args = [a.double() for a in s.get_sample_args()]
    plain = S((4, 3, 2, 2), mode="infer", running=True).reference(*args)
    torch.testing.assert_close(s.reference(*args), plain.clamp_min(0))


def test_a_residual_is_added_before_the_relu_and_taken_before_the_momentum():
    s = S((4, 3, 2, 2), channels_last=True, save=True, running=True, residual=True, activation="relu")
    assert [t.name for t in s.input_specs()] == ["x", "weight", "bias", "running_mean", "running_var", "residual",
                                                 "momentum"]
    assert s.input_specs()[5].shape == s.stored_shape and s.func_name.endswith("_res_relu")
    args = [a.double() for a in s.get_sample_args()]
    plain = S((4, 3, 2, 2), channels_last=True, save=True, running=True).reference(*args[:5], args[6])
    got = s.reference(*args)
    torch.testing.assert_close(got[0], (plain[0] + args[5]).clamp_min(0))
    for g, e in zip(got[1:], plain[1:], strict=True):  # the statistics are x's alone
        torch.testing.assert_close(g, e)
    torch.testing.assert_close(s.eager(*args)[0], got[0])


def test_a_residual_blocks_backward_sums_y_s_two_gradients_and_returns_the_sums_gradient():
    s = S((4, 3, 2, 2), mode="bwd", channels_last=True, save=True, residual=True, activation="relu")
    assert [t.name for t in s.input_specs()] == ["x", "dy", "weight", "mean", "invstd", "y", "dy2"]
    assert [t.name for t in s.output_specs()] == ["dx", "dweight", "dbias", "dresidual"]
    args = [a.double() for a in s.get_sample_args()]
    x, dy, weight, mean, invstd, y, dy2 = args
    y = torch.where(torch.rand_like(y) < 0.5, -y.abs(), y.abs())  # a ReLU's mask with both sides
    summed = torch.where(y > 0, dy + dy2, 0.0)
    plain = S((4, 3, 2, 2), mode="bwd", channels_last=True, save=True).reference(x, summed, weight, mean, invstd)
    got = s.reference(x, dy, weight, mean, invstd, y, dy2)
    for g, e in zip(got, (*plain, summed), strict=True):
        torch.testing.assert_close(g, e)
    for g, e in zip(s.eager(x, dy, weight, mean, invstd, y, dy2), got, strict=True):
        torch.testing.assert_close(g, e)


STAGED = [S((9, 5, 3, 2), save=True, running=True), S((9, 5, 3, 2), channels_last=True, save=True, running=True),
          S((9, 5, 3, 2), channels_last=True, save=True, running=True, residual=True, activation="relu"),
          S((64, 3, 7, 9), channels_last=True, save=True, running=True),  # 4032 rows: stages of 32 padded, of 64 not
          S((130, 3, 5), channels_last=False, spatial=False, save=True),  # 130 rows: pairs, then padded stages
          S((17, 4, 3), spatial=False, save=True), S((9, 5, 3, 2), mode="infer"),
          S((9, 5, 3, 2), mode="bwd", channels_last=True), S((9, 5, 3, 2), mode="bwd", save=True, spatial=False),
          S((9, 5, 3, 2), mode="bwd", channels_last=True, save=True, activation="relu"),
          S((9, 5, 3, 2), mode="bwd", channels_last=True, save=True, residual=True, activation="relu"),
          S((5, 4, 21, 21), mode="bwd", channels_last=True, save=True, activation="relu")]  # 21 parts of 105 rows


@pytest.mark.parametrize("signature", STAGED, ids=lambda s: s.func_name)
def test_gpu_formulation_sums_in_stages_to_the_same_values(signature):
    from boo_core import Target
    from boo_ops_batchnorm.hooks import formulations

    *staged, default = formulations(signature, Target.parse("cuda:sm_80"))
    # short channels-last reductions (here 54 rows: 6 partial sums of 9) in two stages first
    two_stages = ["staged_sums_two_stages"] if signature.channels_last and signature.reduction_size == 54 else []
    # a longer backward's (2,205 rows) also from 21 parts of 105 rows, last
    few_parts = ["staged_sums_few_parts"] if signature.reduction_size == 2205 else []
    assert [f.name for f in (*staged, default)] == [*two_stages, "staged_sums", "staged_sums_64", *few_parts,
                                                    "default"]
    args = [a.double() for a in signature.get_sample_args()]
    expected = signature.reference(*args)
    expected = (expected,) if isinstance(expected, torch.Tensor) else expected
    for formulation in staged:
        got = formulation.computation(*args)
        got = (got,) if isinstance(got, torch.Tensor) else got
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12, msg=formulation.name)


def test_short_reductions_sum_in_two_stages_first():
    """ResNet-50's 7x7 maps at batch 32 (1,568 rows): 32 partial sums of 49 rows, then each
    term's last stage; at 14x14 (6,272 rows) the first stage would have too few threads."""
    from boo_core import Target
    from boo_ops_batchnorm.hooks import formulations, two_stage_groups

    gpu = Target.parse("cuda:sm_90")
    short = S((32, 2048, 7, 7), mode="bwd", save=True, channels_last=True, dtype=torch.bfloat16)
    assert two_stage_groups(short) == 49 and short.first_stage_parts(49) == 32
    assert [f.name for f in formulations(short, gpu)][:2] == ["staged_sums_two_stages", "staged_sums"]
    assert [f.name for f in formulations(S((32, 2048, 7, 7), mode="bwd", save=True), gpu)][0] == "staged_sums"
    longer = S((32, 512, 14, 14), mode="bwd", save=True, channels_last=True, dtype=torch.bfloat16)
    assert two_stage_groups(longer) is None  # it would be 196
    assert "staged_sums_two_stages" not in [f.name for f in formulations(longer, gpu)]


def test_backwards_of_short_parts_or_many_channels_also_sum_from_few_parts_last():
    """For a kernel library's first stage: 32 parts of 196 rows at 14x14; 32 of 784 rows only
    with 512 channels or more (16,384 partial sums); 7x7 maps take two stages already."""
    from boo_core import Target
    from boo_ops_batchnorm.hooks import few_parts_groups, formulations

    def backward(channels: int, size: int, **changes: object) -> S:
        fields = dict(mode="bwd", save=True, channels_last=True, dtype=torch.bfloat16)
        return S((32, channels, size, size), **{**fields, **changes})

    for channels, size, rows in ((256, 14, 196), (1024, 14, 196), (512, 28, 784), (64, 14, 196)):
        signature = backward(channels, size)
        assert few_parts_groups(signature) == rows and signature.first_stage_parts(rows) == 32
        names = [f.name for f in formulations(signature, Target.parse("cuda:sm_90"))]
        assert names.index("staged_sums_few_parts") == len(names) - 2  # IREE's first stage alone is slow there
    for signature in (backward(256, 28), backward(64, 56), backward(2048, 7), backward(256, 14, mode="train"),
                      backward(256, 14, channels_last=False)):
        assert few_parts_groups(signature) is None
        assert "staged_sums_few_parts" not in [f.name for f in formulations(signature, Target.parse("cuda:sm_90"))]


def test_inference_with_running_statistics_has_no_sums_to_stage():
    from boo_core import Target
    from boo_ops_batchnorm.hooks import formulations

    signature = S((9, 5, 3, 2), mode="infer", running=True)
    assert [f.name for f in formulations(signature, Target.parse("cuda:sm_80"))] == ["default"]
    assert [f.name for f in formulations(S((9, 5, 3, 2)), Target.parse("cpu"))] == ["default"]


def test_channels_last_gpu_kernels_configure_their_elementwise_pass_and_tune_the_other_configurations():
    from boo_core import Target
    from boo_ops_batchnorm.hooks import elementwise_pass_configs, formulations, tuning_space

    gpu, cpu = Target.parse("cuda:sm_80"), Target.parse("cpu")
    infer = S((32, 64, 56, 56), mode="infer", running=True, channels_last=True, dtype=torch.bfloat16)
    first, *others = elementwise_pass_configs(infer, gpu)
    assert first["workgroup_size"] == [256, 1, 1] and others
    assert [(f.name, f.config) for f in formulations(infer, gpu)] == [("wide_accesses", first), ("default", None)]
    assert [c.label for c in tuning_space(infer, gpu)] == [f"wide_accesses/wg{c['workgroup'][0]}x64_th1x8"
                                                         for c in others]
    train = S((32, 64, 56, 56), save=True, running=True, channels_last=True, dtype=torch.bfloat16)
    assert [(f.name, f.config is not None) for f in formulations(train, gpu)] == [
        ("staged_sums_paired", True), ("staged_sums", True), ("staged_sums_64", True),
        ("staged_sums_iree_tiles", False), ("default", False)]
    space = tuning_space(train, gpu)
    assert {c.formulation for c in space} == {"staged_sums_paired", "staged_sums", "staged_sums_64"}
    # the first stage of sums (3136 parts of 32 rows x 2 sums x 64 channels) configured
    paired, staged = formulations(train, gpu)[:2]
    first_stages = [c.config["reductions"] for c in space
                    if c.formulation == "staged_sums" and "reductions" in c.config]
    assert first_stages and all(c["workgroup"][1:] == [2, 32] and 3136 % c["workgroup"][0] == 0 for c in first_stages)
    assert "reductions" not in staged.config
    # a training forward's default: each thread both sums of 8 channels (one 16-byte read)
    assert paired.config["reductions"]["thread"] == [1, 2, 8] and paired.config["reductions"] in first_stages
    # its elementwise candidates keep that first stage
    assert all(c.config["reductions"] == paired.config["reductions"] for c in space
               if c.formulation == "staged_sums_paired")
    backward = S((32, 64, 56, 56), mode="bwd", save=True, channels_last=True, dtype=torch.bfloat16)
    assert formulations(backward, gpu)[0].name == "staged_sums"  # paired sums were slower there
    # on the CPU, no configuration: the channels-last sums in stages (no GPU flags), then the export
    assert tuning_space(train, cpu) == [] and [f.name for f in formulations(train, cpu)] == ["staged_sums", "default"]
    assert not any(f.config or "llvmgpu" in " ".join(f.flags) for f in formulations(train, cpu))
    assert [f.name for f in formulations(infer, cpu)] == ["own_scale", "default"]  # no sums; the scale once
    # channels-first: whole planes to a CPU workgroup (8 x 64 x 56 x 56: 4 channels' planes, 12,544 elements)
    nchw_infer = dataclasses.replace(infer, channels_last=False)
    assert [f.name for f in formulations(nchw_infer, cpu)] == ["whole_rows", "default"]
    assert formulations(nchw_infer, cpu)[0].config == {"distribution": [4, 3136], "vector_common_parallel": [1, 16]}
    assert tuning_space(nchw_infer, cpu) == []
    assert [f.name for f in formulations(dataclasses.replace(train, channels_last=False), cpu)] == ["default"]
    nchw = S((32, 64, 56, 56), mode="infer", running=True, dtype=torch.bfloat16)
    assert tuning_space(nchw, gpu) == [] and [f.name for f in formulations(nchw, gpu)] == ["default"]


def test_staged_statistics_shift_by_the_first_element_and_do_not_cancel():
    """The GPU formulations sum x - s and (x - s)**2 in one pass (s: each channel's first
    element). In float32 with a mean 3,000 times the spread, the plain one-pass formula
    E[x**2] - E[x]**2 would lose the variance to cancellation; the shifted sums keep it."""
    from boo_core import Target
    from boo_ops_batchnorm.hooks import formulations

    s = S((32, 4, 6, 6), channels_last=True, save=True)
    x, w, b = s.get_sample_args()
    x = 3000 + x.float()
    staged = formulations(s, Target.parse("cuda:sm_80"))[0]
    _, mean, invstd = staged.computation(x, w, b)
    _, want_mean, want_invstd = s.reference(x.double(), w.double(), b.double())
    torch.testing.assert_close(mean.double(), want_mean, rtol=1e-6, atol=0)
    torch.testing.assert_close(invstd.double(), want_invstd, rtol=1e-4, atol=0)
    rows = x.reshape(-1, 4)
    naive_var = (rows.square().mean(0) - rows.mean(0).square()).double()
    assert not torch.allclose(naive_var, want_invstd.pow(-2) - s.eps, rtol=1e-2)  # what the shift avoids


@pytest.mark.parametrize(("rows", "groups", "chosen"), [(196, 32, 28), (98, 32, 14), (49, 32, 32), (97, 32, 32),
                                                        (3136, 32, 32), (7, 64, 64), (27, 2, 2), (27, 4, 3)])
def test_later_stages_sum_a_divisor_of_the_rows_where_one_is_near_the_group_size(rows, groups, chosen):
    from boo_ops_batchnorm.signature import _stage_group

    assert _stage_group(rows, groups) == chosen


def test_stages_of_two_rows_sum_an_odd_count_of_rows():
    """Groups of 2 over 27 rows (no divisor of 2): a first stage of 27 single-row partial
    sums, then stages of 2 leaving 14 (the last padded), 7, 4 and 2, then the last sum; never
    a later stage of single rows, which would leave the count where it was forever."""
    s = S((27, 3), save=True, spatial=False)
    x = torch.randn(27, 3, dtype=torch.float64)
    mean, var = s._mean_var(x, groups=2)
    torch.testing.assert_close(mean.reshape(3), x.mean(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(var.reshape(3), x.var(0, unbiased=False), rtol=1e-12, atol=1e-12)


def cuda_plan_commands(signature: S) -> list[str]:
    """The kinds of the commands in ``signature``'s launch plan, cross-compiled for CUDA."""
    from boo_core import Target
    from boo_core.kernels import launch_plan
    from boo_core.kernels.request import KernelRequest

    kernel = KernelRequest.create(signature, Target.parse("cuda:sm_80")).fetch()
    plan = launch_plan.read_plan(kernel.directory, kernel.vmfb)
    assert isinstance(plan, launch_plan.LaunchPlan), plan
    return [type(c).__name__ for c in plan.commands]


def test_a_gpu_training_forward_writes_its_saved_statistics_where_the_caller_wants_them():
    """Cross-compiled for CUDA (no GPU needed): the staged formulation's launch plan is its
    dispatches alone. Returned as the same values the pass over y reads, the saved mean and
    inverse deviation were kept in IREE's transient buffer and copied out: two copies a call."""
    signature = S((32, 256, 14, 14), channels_last=True, save=True, running=True, dtype=torch.bfloat16,
                  running_dtype=torch.bfloat16)
    assert cuda_plan_commands(signature) == ["Dispatch"] * 5


@pytest.mark.parametrize("residual", [False, True], ids=["relu", "residual+relu"])
def test_a_gpu_backward_computes_ys_gradient_where_it_reads_it(residual):
    """A backward starting with the ReLU's gradient (and a residual block's sum) has the plain
    backward's five dispatches. With the gradient computed once, IREE wrote it to a transient
    in a dispatch of its own that both passes read, and, returned as dresidual too, copied it
    out after: a sixth dispatch and a copy of the whole tensor a call."""
    common = dict(mode="bwd", channels_last=True, save=True, dtype=torch.bfloat16)
    plain = cuda_plan_commands(S((32, 256, 14, 14), **common))
    assert plain == ["Dispatch"] * 5
    assert cuda_plan_commands(S((32, 256, 14, 14), **common, residual=residual, activation="relu")) == plain


def test_a_substitution_leaves_the_formulations_configuration_on_the_executables_it_does_not_replace(
        private_cache, tmp_path):
    """Cross-compiled for CUDA: the staged module's first stage replaced by IREE's own PTX for
    it (as a kernel library replaces it with its own), the pass writing dx keeps the
    formulation's configuration (16-byte accesses, 256-thread workgroups) instead of falling
    back to IREE's (docs/gpu.md: 1.5-2x slower there)."""
    from boo_core import Target
    from boo_core.kernels.request import KernelRequest
    from boo_core.signatures.installed import installed_ops
    from boo_core.substitute import Substitution, dump_kernel

    signature = S((32, 256, 14, 14), mode="bwd", channels_last=True, save=True, dtype=torch.bfloat16)
    sm80 = Target.parse("cuda:sm_80")
    staged = installed_ops().formulations(signature, sm80)[0]
    assert staged.config and staged.config["thread"] == [1, 8]
    dump = dump_kernel(signature, sm80, tmp_path / "dump", formulation=staged.name)
    first = dump.executables[0].name.split("$")[-1]
    [ptx] = [p for p in (dump.directory / "binaries").iterdir() if first in p.name]
    substitution = Substitution("first stage", {f"binaries/{ptx.name}": ptx.read_bytes()}, formulation=staged.name)
    request = KernelRequest.create(signature, sm80, staged, substitution=substitution)
    assert request.config == staged.config
    kernel = request.fetch()
    command = (kernel.directory / "compile_command.txt").read_text()
    assert "--iree-hal-substitute-executable-objects-from=" in command
    assert f"--iree-hal-substitute-executable-configurations-from={kernel.directory}/configurations" in command
    [configured] = list((kernel.directory / "configurations").glob("*.mlir"))
    assert "elementwise" in configured.read_text() and first not in configured.name
    without = KernelRequest.create(signature, sm80, dataclasses.replace(staged, config=None),
                                   substitution=substitution)
    assert without.config is None and without.key.digest != request.key.digest
