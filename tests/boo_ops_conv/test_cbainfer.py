"""MIOpen's CBAInfer (conv + bias + batch norm + activation, inference) as a BOO op: its
commands, its computation against PyTorch's own ops, its kernels on the CPU with outputs
poisoned, and the commands file of every bnorm and CBAInfer mode."""

from __future__ import annotations

import dataclasses
import shlex

import pytest
import torch
import torch.nn.functional as F

from boo_core import BooOpRegistry, CommandError, Target, UnsupportedError
from boo_core.signatures.commands import read_command_file
from boo_core.testing import assert_numerics, assert_round_trip
from boo_core.testing.models import with_running_statistics
from boo_ops_conv import ConvBatchNormActivationSignature as S
from boo_ops_conv.cba_formulations import cba_formulations
from boo_ops_conv.cba_signature import ACTIVATION_MODES, miopen_activation

from ..conftest import REPO

f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
COMMANDS_FILE = REPO / "examples" / "bnorm_cbainfer_commands.txt"


def parse(command: str) -> list[S]:
    return BooOpRegistry.parse_signatures(command)


def test_defaults_are_miopen_drivers():
    [signature] = parse("CBAInfer")
    assert signature == S(32, 3, 32, 32, k=32, fil_h=3, fil_w=3, fusion="cbna", bn_mode="per_activation",
                          activation="relu", alpha=1.0, beta=0.0, gamma=1.0)
    assert signature.eps == 1e-3 and signature.output_shape == (32, 32, 30, 30)
    assert [spec.name for spec in signature.input_specs()] == ["x", "w", "b", "scale", "shift", "mean", "var"]
    assert signature.input_specs()[-1].shape == (32, 30, 30)  # per-activation: one statistic per (k, pixel)


@pytest.mark.parametrize(("command", "inputs", "output"), [
    ("CBAInfer -F 0 -M 1", ["x", "w", "b", "scale", "shift", "mean", "var"], (32, 32, 30, 30)),
    ("CBAInfer -F 1 -M 1", ["x", "w", "scale", "shift", "mean", "var"], (32, 32, 30, 30)),
    ("CBAInfer -F 2 -M 1", ["x", "scale", "shift", "mean", "var"], (32, 3, 32, 32)),  # no conv: norm of x
    ("CBAInfer -F 3", ["x", "w", "scale", "shift", "mean", "var"], (32, 32, 30, 30)),
    ("CBAInfer -F 4", ["x", "w", "b"], (32, 32, 30, 30)),
    ("CBAInfer -F 5", ["x", "w"], (32, 32, 30, 30)),
    ("CBAInfer -F 6", ["x", "w", "b"], (32, 32, 30, 30)),
])
def test_the_fusion_mode_says_which_stages_run(command, inputs, output):
    [signature] = parse(command)
    assert [spec.name for spec in signature.input_specs()] == inputs
    assert signature.output_shape == output
    assert signature.has_activation == (signature.fusion in ("cbna", "cna", "na", "cba", "ca"))
    assert_round_trip(signature)


@pytest.mark.parametrize(("command", "expected"), [
    ("CBAInferbfp16 -n 2 -c 8 -H 6 -W 6 -k 16 -p 1 -q 1 -F 4 -M 1 -m 8 -A 0.1",
     S(2, 8, 6, 6, k=16, pad_h=1, pad_w=1, fusion="cba", bn_mode="spatial", activation="leakyrelu", alpha=0.1,
       dtype=bf16)),
    ("CBAInferfp16 -n 2 -c 4 -H 9 -W 8 -k 4 -g 2 -y 1 -x 5 -u 2 -v 3 -l 2 -j 1 -z same -m 2 -A 0.5 -B 2 -G 3",
     S(2, 4, 9, 8, k=4, groups=2, fil_h=1, fil_w=5, stride_h=2, stride_w=3, dilation_h=2, pad_mode="same",
       activation="tanh", alpha=0.5, beta=2.0, gamma=3.0, dtype=f16)),
    ("./bin/MIOpenDriver CBAInfer -n 1 -c 2 -H 5 -W 5 -k 2 -z conv -i 5 -t 1 -V 0 -w 1 -r 0",
     S(1, 2, 5, 5, k=2)),  # MIOpen's own default pad mode, "conv", is the default padding
])
def test_commands_mean_their_signatures(command, expected):
    assert parse(command) == [expected]
    assert_round_trip(expected)


def test_same_and_valid_padding_follow_miopendrivers_rule():
    # odd input at stride 2: (5 - 31 % 2) // 2 = 2; even input at stride 1: (5 - 1) // 2 = 2
    assert parse("CBAInfer -H 31 -W 32 -y 5 -x 5 -u 2 -z same")[0].padding == (2, 2)
    assert parse("CBAInfer -H 32 -W 32 -y 3 -x 3 -u 2 -v 2 -z same")[0].padding == (0, 0)  # max(3 - 2, 0) // 2
    assert parse("CBAInfer -p 2 -q 1 -z valid")[0].padding == (0, 0)
    assert parse("CBAInfer -p 2 -q 1")[0].padding == (2, 1)


@pytest.mark.parametrize(("command", "flag", "error"), [
    ("CBAInfer -F 7", "-F/--fusion_mode", CommandError),
    ("CBAInfer -M 2", "-M/--bnMode", CommandError),
    ("CBAInfer -m 10", "-m/--activMode", CommandError),
    ("CBAInfer -g 2 -c 3", "-g/--group_count", CommandError),
    ("CBAInfer -y 40", "-y/--fil_h", CommandError),  # the window does not fit the input
    ("CBAInfer -z full", "-z/--pad_mode", CommandError),
    ("CBAInfer -n 0", "-n/--batchsize", CommandError),
    ("CBAInfer -A nan", "-A/--alpha", CommandError),
    ("CBAInfer -D plan.dot", "-D/--dot_graph", UnsupportedError),
    ("CBAInfer --forw 1", "--forw", CommandError),  # CBAInfer's -F is the fusion mode: no --forw
    ("CBAInfer --epsilon 0", "--epsilon", CommandError),
    ("CBAInfer --epsilon -1e-5", "--epsilon", CommandError),
    ("CBAInfer --layout CHWN", "--layout", CommandError),
    ("CBAInfer --residual 2", "--residual", CommandError),
])
def test_bad_commands_name_the_flag(command, flag, error):
    with pytest.raises(error) as raised:
        parse(command)
    assert flag in str(raised.value)


def test_boos_epsilon_nhwc_layout_and_residual_parse_and_round_trip():
    [signature] = parse("CBAInferbfp16 -n 2 -c 8 -H 6 -W 5 -k 16 -p 1 -q 1 -M 1 --epsilon 1e-5 --layout nhwc "
                        "--residual 1")
    assert (signature.eps, signature.layout, signature.residual) == (1e-5, "NHWC", True)
    assert [t.shape for t in signature.input_specs()][:2] == [(2, 6, 5, 8), (16, 3, 3, 8)]  # x NHWC, filter KRSC
    assert [(t.name, t.shape) for t in signature.input_specs()][-1] == ("r", (2, 6, 5, 16))  # stored like y
    assert signature.output_specs()[0].shape == (2, 6, 5, 16)
    assert_round_trip(signature)
    assert "--layout" not in parse("CBAInfer")[0].to_command()  # MIOpen's defaults are left out
    assert "--residual" not in parse("CBAInfer")[0].to_command()


def test_nhwc_computes_what_nchw_does_on_the_same_tensors():
    nchw = S(2, 4, 7, 6, k=8, pad_h=1, pad_w=1, stride_w=2, bn_mode="spatial", eps=1e-5)
    nhwc = S(2, 4, 7, 6, k=8, pad_h=1, pad_w=1, stride_w=2, bn_mode="spatial", eps=1e-5, layout="NHWC")
    x, w, *rest = nchw.get_sample_args(seed=1)
    expected = nchw.reference(x, w, *rest)
    got = nhwc.reference(x.permute(0, 2, 3, 1), w.permute(0, 2, 3, 1), *rest)
    torch.testing.assert_close(got.permute(0, 3, 1, 2), expected)


def test_a_grouped_count_that_does_not_matter_without_a_conv_is_accepted():
    [signature] = parse("CBAInfer -F 2 -g 2 -c 3")  # na: the convolution's flags describe nothing
    assert signature.output_shape == (32, 3, 32, 32) and not signature.has_conv


@pytest.mark.parametrize("mode", ACTIVATION_MODES)
def test_each_activation_is_miopens_formula(mode):
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)
    alpha, beta, gamma = 0.5, 1.5, 2.0
    expected = {
        "passthru": x, "logistic": torch.sigmoid(x), "tanh": beta * torch.tanh(alpha * x), "relu": F.relu(x),
        "softrelu": F.softplus(x), "abs": x.abs(), "power": (alpha + beta * x) ** gamma,
        "clippedrelu": F.hardtanh(x, 0.0, alpha), "leakyrelu": F.leaky_relu(x, alpha), "elu": F.elu(x, alpha),
    }[mode]
    torch.testing.assert_close(miopen_activation(mode, alpha, beta, gamma)(x), expected)


@pytest.mark.parametrize("bn_mode", ["spatial", "per_activation"])
def test_the_reference_is_pytorchs_conv_batch_norm_and_activation(bn_mode):
    signature = S(2, 4, 7, 6, k=6, pad_h=1, pad_w=1, groups=2, bn_mode=bn_mode, activation="elu", alpha=0.3)
    x, w, b, scale, shift, mean, var = (t.double() for t in signature.get_sample_args(seed=0))
    y = F.conv2d(x, w, b, 1, 1, 1, 2)
    if bn_mode == "spatial":
        y = F.batch_norm(y, mean, var, scale, shift, training=False, eps=1e-3)
    else:  # one statistic per (channel, pixel): batch norm over (N, K*P*Q) features
        flat = F.batch_norm(y.flatten(1), mean.flatten(), var.flatten(), scale.flatten(), shift.flatten(),
                            training=False, eps=1e-3)
        y = flat.reshape(y.shape)
    torch.testing.assert_close(signature.reference(x, w, b, scale, shift, mean, var), F.elu(y, 0.3))


@pytest.mark.parametrize("fusion", ["cna", "cn"])
def test_a_residual_is_added_after_the_batch_norm_and_before_the_activation(fusion):
    signature = S(2, 4, 7, 6, k=6, pad_h=1, pad_w=1, fusion=fusion, bn_mode="spatial", activation="leakyrelu",
                  alpha=0.2, residual=True)
    args = [t.double() for t in signature.get_sample_args(seed=2)]
    plain = S(**{**signature.__dict__, "residual": False, "fusion": "cn"})
    y = plain.reference(*args[:-1]) + args[-1]
    torch.testing.assert_close(signature.reference(*args), F.leaky_relu(y, 0.2) if "a" in fusion else y)
    assert signature.flops == plain.flops + y.numel() * (1 + ("a" in fusion))


def test_a_plain_1x1_on_cuda_is_first_built_as_a_matmul_that_computes_the_same():
    signature = S(2, 8, 5, 6, k=12, fil_h=1, fil_w=1, bn_mode="spatial", activation="logistic", dtype=f16)
    formulations = cba_formulations(signature, Target.parse("cuda:sm_80"))
    assert [f.name for f in formulations] == ["matmul_1x1", "default"]
    assert [f.name for f in cba_formulations(signature, Target.parse("cpu"))] == ["default"]
    padded = S(2, 8, 5, 6, k=12, fil_h=1, fil_w=1, pad_h=1, dtype=f16)
    assert [f.name for f in cba_formulations(padded, Target.parse("cuda:sm_80"))] == ["default"]
    nhwc = dataclasses.replace(padded, layout="NHWC")  # its padding fused into IREE's channels-last conv
    assert [f.name for f in cba_formulations(nhwc, Target.parse("cuda:sm_80"))] == ["default", "channels_last"]
    assert [f.name for f in cba_formulations(nhwc, Target.parse("cpu"))] == ["im2col", "default"]
    args = [t.double() for t in signature.get_sample_args(seed=1)]
    torch.testing.assert_close(formulations[0].computation(*args), signature.reference(*args))


@pytest.mark.parametrize("signature", [
    S(2, 8, 7, 6, k=16, pad_h=1, pad_w=1, bn_mode="spatial", eps=1e-5, layout="NHWC", residual=True),
    S(2, 6, 9, 8, k=4, fil_h=1, fil_w=1, stride_h=2, stride_w=2, fusion="cbna"),
    S(1, 3, 11, 10, k=8, fil_h=5, fil_w=3, stride_w=2, dilation_h=2, pad_mode="same", fusion="cba",
      activation="leakyrelu", alpha=0.1, layout="NHWC"),
], ids=lambda s: s.func_name)
def test_an_nhwc_or_strided_conv_stage_on_the_cpu_is_first_built_through_im2col(signature):
    """IREE's own convolution is 9-10x slower there (the conv op's rule); the formulation
    computes what the reference does. Grouped and unstrided NCHW ones keep the export."""
    formulations = cba_formulations(signature, Target.parse("cpu"))
    assert [f.name for f in formulations] == ["im2col", "default"]
    args = signature.get_sample_args(seed=2)
    torch.testing.assert_close(formulations[0].computation(*args), signature.reference(*args), rtol=1e-4, atol=1e-4)
    for plain in (dataclasses.replace(signature, layout="NCHW", stride_h=1, stride_w=1),
                  dataclasses.replace(signature, c=8, k=8, groups=2)):
        assert [f.name for f in cba_formulations(plain, Target.parse("cpu"))] == ["default"], plain


KERNELS = [
    S(2, 4, 7, 6, k=8, pad_h=1, pad_w=1),  # cbna, per-activation, relu
    S(2, 8, 6, 6, k=16, pad_h=1, pad_w=1, fusion="cba", bn_mode="spatial", activation="leakyrelu", alpha=0.1,
      dtype=bf16),
    S(2, 4, 5, 5, fusion="na", bn_mode="spatial", activation="elu", alpha=0.5, dtype=f16),
    S(2, 4, 8, 8, k=6, groups=2, stride_h=2, fusion="cna", bn_mode="spatial", activation="tanh", alpha=0.7,
      beta=1.5),
    S(2, 3, 6, 6, k=5, fusion="cn", residual=True),
    S(2, 3, 6, 6, k=5, dilation_h=2, dilation_w=2, pad_mode="same", fusion="ca", activation="clippedrelu",
      alpha=0.5),
    S(2, 3, 6, 6, k=5, fil_h=1, fil_w=1, fusion="cb", dtype=f16),
    S(2, 8, 7, 6, k=16, pad_h=1, pad_w=1, stride_h=2, fusion="cna", bn_mode="spatial", eps=1e-5, dtype=bf16,
      layout="NHWC", residual=True),  # what torch.compile hands over for a channels-last ResNet block
    S(2, 8, 2, 2, k=32, pad_h=1, pad_w=1, fusion="cna", bn_mode="spatial", layout="NHWC", dtype=bf16),  # late stage
]


@pytest.mark.parametrize("signature", KERNELS, ids=lambda s: s.func_name)
def test_kernel_matches_its_reference_with_poisoned_outputs(signature):
    assert_numerics(signature)


def test_every_line_of_the_bnorm_and_cbainfer_commands_file_parses():
    lines = [command for _, command in read_command_file(COMMANDS_FILE)]
    ops = {BooOpRegistry.default().resolve_base(shlex.split(line)[0]).op.name for line in lines}
    assert ops == {"bnorm", "cbainfer"}
    fusions = set()
    for line in lines:
        signatures = parse(line)
        fusions |= {s.fusion for s in signatures if isinstance(s, S)}
    assert fusions == {"cbna", "cna", "na", "cn", "cba", "ca", "cb"}  # every CBAInfer mode


@pytest.mark.slow
def test_the_driver_verifies_every_line_of_the_bnorm_and_cbainfer_commands_file():
    from boo_core.tools.cli import main

    assert main(["driver", "--verify-numerics", "--iter", "1", "--warmup", "0", "--commands-file",
                 str(COMMANDS_FILE)]) == 0


class ConvNet(torch.nn.Module):
    """conv + bias + batch norm + ReLU; conv + batch norm + the block's input + ReLU (a
    residual); two conv + batch norm chains added, then tanh (a downsampling block's: the
    later chain takes the add), one strided and grouped: four CBAInfer kernels."""

    def __init__(self):
        super().__init__()
        self.conv1, self.norm1 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.conv2, self.norm2 = torch.nn.Conv2d(8, 8, 1, bias=False), torch.nn.BatchNorm2d(8, eps=1e-3)
        self.conv3 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2, bias=False)
        self.norm3 = torch.nn.BatchNorm2d(8)
        self.conv4, self.norm4 = torch.nn.Conv2d(8, 8, 1, stride=2, bias=False), torch.nn.BatchNorm2d(8)

    def forward(self, x):
        y = torch.relu(self.norm1(self.conv1(x)))
        y = torch.relu(self.norm2(self.conv2(y)) + y)
        return torch.tanh(self.norm3(self.conv3(y)) + self.norm4(self.conv4(y)))


@pytest.mark.parametrize("backend", ["iree_boo", "iree_boo_inductor"])
@pytest.mark.parametrize(("dtype", "channels_last"), [(f32, False), (bf16, True)], ids=["f32-nchw", "bf16-nhwc"])
def test_torch_compile_runs_conv_and_inference_batch_norm_as_one_cbainfer_kernel(backend, dtype, channels_last,
                                                                               monkeypatch):
    from boo_core.dynamo import offload_summary, reset_offload_summary
    from boo_core.settings import settings_override
    from boo_ops_conv.cba_fusion import ConvBatchNormInference

    from ..boo_ops_batchnorm.recording import record_signatures

    compiled_for = record_signatures(monkeypatch, ConvBatchNormInference)
    torch.manual_seed(0)
    model = with_running_statistics(ConvNet().eval())
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            torch.nn.init.normal_(module.weight)
            torch.nn.init.normal_(module.bias)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(dtype).to(memory_format=memory_format)
    x = torch.randn(2, 3, 10, 10, dtype=dtype).to(memory_format=memory_format)
    torch._dynamo.reset()
    reset_offload_summary()
    # graph rewrites on: the batch-norm plugin's fold leaves the batch norms the pattern takes alone;
    # off, as on the CPU by default, for the channels-first network, which they would make channels-last
    with settings_override(graph_rewrites=channels_last), torch.no_grad():
        got = torch.compile(model, backend=backend, dynamic=False)(x)
        expected = model.double()(x.double())
    tolerance = 1e-4 if dtype == f32 else 5e-2
    torch.testing.assert_close(got.double(), expected, rtol=tolerance, atol=tolerance)
    summary = offload_summary()
    assert summary.offloaded == {"cbainfer.conv_batch_norm": 4} and not summary.rewritten, summary
    assert not summary.fallbacks.get("aten.add") and not summary.fallbacks.get("aten.relu"), summary
    layout = "NHWC" if channels_last else "NCHW"
    assert [(s.fusion, s.activation if s.has_activation else None, s.eps, s.residual, s.layout)
            for s in compiled_for] == [("cbna", "relu", 1e-5, False, layout), ("cna", "relu", 1e-3, True, layout),
                                       ("cn", None, 1e-5, False, layout), ("cna", "tanh", 1e-5, True, layout)]
