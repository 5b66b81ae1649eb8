"""Under BOO_GRAPH_REWRITES (on GPUs by default), an inference batch norm after a convolution
is folded into it (the batch-norm plugin's GraphRewrite), and the conv plugin's pattern takes
the result, with the ReLU that follows, as one kernel: two plugins cooperating through aten
ops only. A 2-D conv + batch norm (+ activation) with one dtype throughout is the conv
plugin's CBAInfer kernel instead (tests/boo_ops_conv/test_cbainfer.py): the fold serves 1-D
and 3-D convolutions and statistics in another dtype than the data's."""

from __future__ import annotations

import pytest
import torch

from boo_core.dynamo import offload_summary, reset_offload_summary
from boo_core.settings import get_settings, settings_override
from boo_core.testing.models import with_running_statistics

from .recording import record_signatures


def with_statistics(model: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial running statistics and affine parameters in every batch norm."""
    for module in with_running_statistics(model).modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.weight.data.normal_()
            module.bias.data.normal_()
    return model.eval()


def compiled(model: torch.nn.Module, x: torch.Tensor, backend: str = "iree_boo", rewrites: bool | None = True):
    """``rewrites``: BOO_GRAPH_REWRITES on, off, or (None) its default."""
    torch._dynamo.reset()
    reset_offload_summary()
    changes = {} if rewrites is None else {"graph_rewrites": rewrites}
    with settings_override(**changes), torch.no_grad():
        return torch.compile(model, backend=backend, dynamic=False)(x), offload_summary()


@pytest.mark.parametrize("backend", ["iree_boo", "iree_boo_inductor"])
def test_batch_norms_after_convolutions_fold_into_them(backend):
    torch.manual_seed(0)
    model = with_statistics(torch.nn.Sequential(
        torch.nn.Conv1d(3, 8, 3, padding=1), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
        torch.nn.Conv1d(8, 8, 3, padding=1, bias=False, groups=2), torch.nn.BatchNorm1d(8)))
    x = torch.randn(2, 3, 10)
    got, summary = compiled(model, x, backend)
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
    assert summary.rewritten == {"bnorm.fold_into_conv": 2}
    assert summary.offloaded == {"conv.forward": 2}, summary.offloaded  # no batch-norm kernel left


def test_the_folds_of_a_graph_share_one_vector_of_zeros_per_channel_count():
    """Each fold normalizes its weight with a zero mean; one vector of zeros per channel
    count, made at the graph's start, serves every fold (each would be a launch per step)."""
    from boo_core.dynamo.backends import boo_backend

    graphs = []

    def nested(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.manual_seed(0)
    model = with_statistics(torch.nn.Sequential(
        torch.nn.Conv1d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
        torch.nn.Conv1d(8, 8, 3, padding=1, bias=False), torch.nn.BatchNorm1d(8),
        torch.nn.Conv1d(8, 16, 1), torch.nn.BatchNorm1d(16)))
    x = torch.randn(2, 3, 10)
    torch._dynamo.reset()
    with settings_override(graph_rewrites=True), torch.no_grad():
        got = torch.compile(model, backend=boo_backend(nested), dynamic=False)(x)
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
    [graph] = graphs
    zeros = [n for n in graph.graph.nodes if n.target is torch.ops.aten.full.default]
    assert sorted(n.args[0] for n in zeros) == [[8], [16]]
    folds = [n for n in graph.graph.nodes if n.target is torch.ops.aten._native_batch_norm_legit_no_training.default]
    assert len(folds) == 6  # the weight's and the bias's of each of the three


@pytest.mark.parametrize("backend", ["iree_boo", "iree_boo_inductor"])
def test_bfloat16_data_with_float32_statistics_folds_into_a_channels_last_conv_with_its_relu(backend, monkeypatch):
    """A bf16 channels-last conv whose batch norm keeps float32 statistics (no CBAInfer
    signature has that mix): the folded weight keeps the channels-last layout (kernel
    libraries serve KRSC filters only), the bias and the ReLU go into the conv's kernel, and
    the folding's own batch norms are left to the nested backend (no batch-norm kernel)."""
    from boo_ops_conv.fusion import ConvForward

    compiled_for = record_signatures(monkeypatch, ConvForward)
    torch.manual_seed(0)
    model = with_statistics(torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1, bias=False),
                                                torch.nn.BatchNorm2d(16), torch.nn.ReLU()))
    model[0].to(torch.bfloat16)
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(2, 8, 6, 6, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    got, summary = compiled(model, x, backend)
    with torch.no_grad():
        want = torch.nn.Sequential(model[0].float(), *model[1:])(x.float())
    torch.testing.assert_close(got.float(), want, rtol=3e-2, atol=3e-2)
    assert summary.rewritten == {"bnorm.fold_into_conv": 1} and summary.offloaded == {"conv.forward": 1}
    (signature,) = compiled_for
    assert (signature.bias, signature.activation, signature.kernel_layout) == (True, "relu", "NHWC"), signature


@pytest.mark.parametrize("rewrites", [False, None], ids=["off", "default-on-the-cpu"])
def test_without_the_setting_nothing_is_rewritten(rewrites):
    """Off, or by default on the CPU (where folding measured slower); the default folds on GPUs."""
    torch.manual_seed(0)
    model = with_statistics(torch.nn.Sequential(torch.nn.Conv1d(3, 8, 3), torch.nn.BatchNorm1d(8)))
    _, summary = compiled(model, torch.randn(2, 3, 8), rewrites=rewrites)
    assert not summary.rewritten and summary.offloaded == {"conv.forward": 1, "bnorm.inference": 1}
    defaults = get_settings() if rewrites is None else None
    assert defaults is None or (defaults.rewrites_graphs("cuda") and not defaults.rewrites_graphs("cpu"))


class TwoUses(torch.nn.Module):
    """A convolution whose output the batch norm shares with a residual add: not folded."""

    def __init__(self):
        super().__init__()
        self.conv, self.norm = torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.conv(x)
        return self.norm(y) + y


@pytest.mark.parametrize("model", [
    TwoUses(),
    torch.nn.Sequential(torch.nn.ConvTranspose2d(4, 4, 3), torch.nn.BatchNorm2d(4)),  # weight is (in, out, ...)
    torch.nn.Sequential(torch.nn.ReLU(), torch.nn.BatchNorm2d(4)),  # no convolution before it
], ids=["shared-output", "transposed", "no-conv"])
def test_batch_norms_that_cannot_fold_stay_batch_norms(model):
    torch.manual_seed(0)
    model = with_statistics(model)
    x = torch.randn(2, 4, 6, 6)
    got, summary = compiled(model, x)
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
    assert not summary.rewritten and summary.offloaded["bnorm.inference"] == 1, summary.offloaded


def test_an_opspec_refuses_rewrites_that_are_not_graph_rewrites_or_misnamed():
    from boo_core import OpSpec
    from boo_ops_batchnorm import BatchNormParser, BatchNormSignature
    from boo_ops_batchnorm.folding import FoldIntoConvolution

    def spec(rewrites):
        return OpSpec(name="bnorm", keywords=("bnorm",), signature_class=BatchNormSignature, parser=BatchNormParser(),
                      graph_rewrites=rewrites)

    assert spec((FoldIntoConvolution(),)).graph_rewrites[0].name == "bnorm.fold_into_conv"
    with pytest.raises(TypeError, match="graph_rewrites holds a object, not a GraphRewrite"):
        spec((object(),))

    class Misnamed(FoldIntoConvolution):
        name = "conv.fold"

    with pytest.raises(ValueError, match="graph rewrite Misnamed has name 'conv.fold'"):
        spec((Misnamed(),))
