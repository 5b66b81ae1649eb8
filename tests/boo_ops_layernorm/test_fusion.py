"""torch.compile with BOO's backends runs nn.LayerNorm's aten ops on layernorm kernels."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from boo_core.dynamo import offload_summary, reset_offload_summary
from boo_core.settings import settings_override
from boo_core.verify.numerics import compare

from . import reference


@pytest.fixture
def fresh_compile():
    torch._dynamo.reset()
    reset_offload_summary()
    yield
    torch._dynamo.reset()


def test_inference_offloads_native_layer_norm(fresh_compile):
    model = nn.LayerNorm(16).eval()
    with torch.no_grad():
        model.weight.normal_()
        model.bias.normal_()
        x = torch.randn(4, 7, 16)
        got = torch.compile(model, backend="iree_boo", dynamic=False)(x)
    assert offload_summary().offloaded["layernorm.forward"] == 1
    expected = reference.forward(x, 1, model.weight.detach(), model.bias.detach())[0]
    assert compare("y", got, expected, accumulation_length=16).passed


@pytest.fixture
def bound_specs(monkeypatch):
    """The spec of every layer-norm forward call the test's compiled graphs bind."""
    from boo_core.dynamo.kernel_call import KernelCall

    specs: list[dict] = []
    original = KernelCall.bind

    def remember(self, inputs):
        if self.pattern.name == "layernorm.forward":
            specs.append(self.spec)
        return original(self, inputs)

    monkeypatch.setattr(KernelCall, "bind", remember)
    return specs


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_the_match_says_whether_the_graph_reads_the_statistics(fresh_compile, bound_specs, training):
    """An inference graph reads only y (a direct call then allocates nothing else); a training
    forward saves mean and rstd for its backward."""
    model = nn.LayerNorm(16).train(training)
    x = torch.randn(4, 7, 16)
    with torch.set_grad_enabled(training):
        torch.compile(model, backend="iree_boo", dynamic=False)(x)
    assert [spec["stats_read"] for spec in bound_specs] == [training]


def test_training_offloads_the_backward_under_backward_kernels(fresh_compile):
    model = nn.LayerNorm(16, bias=False)
    x = torch.randn(4, 7, 16, requires_grad=True)
    dy = torch.randn(4, 7, 16)
    with settings_override(use_backward_kernels=True):
        torch.compile(model, backend="iree_boo", dynamic=False)(x).backward(dy)
    offloaded = offload_summary().offloaded
    assert offloaded["layernorm.forward"] == 1 and offloaded["layernorm.backward"] == 1
    expected = reference.backward(dy, x.detach(), 1, model.weight.detach())
    assert compare("dx", x.grad, expected["dx"], accumulation_length=16).passed
    assert compare("dw", model.weight.grad, expected["dw"], accumulation_length=28).passed


class _SequenceFirstNorm(nn.Module):
    """A layer norm of a batch-first view of sequence-first rows (the residual stream of a
    batch-first ``nn.MultiheadAttention``): its input is not contiguous."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.transpose(0, 1) * 2)


def test_a_strided_input_goes_through_the_bound_call_not_the_general_launch(fresh_compile, monkeypatch):
    """The bound calls take a layer norm's input, and its backward's dy and x, laid out as the
    graph has them: non-contiguous ones are made contiguous there, and no call falls back to
    the pattern's general launch (a lookup and a signature per call: about 350 us of host
    time per ViT-B/16 layer norm on an H200's host)."""
    from boo_ops_layernorm import fusion

    general: list[str] = []
    for pattern in (fusion.LayerNormForward, fusion.LayerNormBackward):
        original = pattern.launch
        monkeypatch.setattr(pattern, "launch", lambda self, spec, inputs, original=original:
                            general.append(self.name) or original(self, spec, inputs))
    torch.manual_seed(0)
    model = _SequenceFirstNorm()
    with torch.no_grad():
        model.norm.weight.normal_()
        model.norm.bias.normal_()
    compiled = torch.compile(model, backend="iree_boo", dynamic=False)
    with settings_override(use_backward_kernels=True):
        for _ in range(2):
            model.zero_grad()
            x = torch.randn(7, 4, 16, requires_grad=True)
            dy = torch.randn(4, 7, 16)
            y = compiled(x)
            y.backward(dy)
            rows = (x.detach().transpose(0, 1) * 2).contiguous()
            weight = model.norm.weight.detach()
            want_y = reference.forward(rows, 1, weight, model.norm.bias.detach())[0]
            want = reference.backward(dy, rows, 1, weight)
            assert compare("y", y, want_y, accumulation_length=16).passed
            assert compare("dx", x.grad, want["dx"].transpose(0, 1) * 2, accumulation_length=16).passed
            assert compare("dw", model.norm.weight.grad, want["dw"], accumulation_length=28).passed
    offloaded = offload_summary().offloaded
    assert offloaded["layernorm.forward"] == 1 and offloaded["layernorm.backward"] == 1
    assert general == [], general


def test_a_call_given_strided_rows_keeps_the_outputs_it_sets_aside():
    """A bound call that sets outputs aside (an inference layer norm's statistics: None in its
    results) says so also where it is given strided rows to copy first; the compiled graph's
    node reads ``discarded`` to accept those Nones (without it, every such layer norm of a ViT
    under Inductor failed and fell back to PyTorch on the GPU)."""
    from boo_ops_layernorm import fusion

    seen: list[bool] = []

    def call(*tensors: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        seen.append(all(t.is_contiguous() for t in tensors))
        return tensors[0] * 2, None, None

    call.discarded = (1, 2)
    rows = torch.randn(7, 4, 16).transpose(0, 1)
    assert fusion._densing(call, [rows.contiguous()]) is call
    strided = fusion._densing(call, [rows])
    assert strided.discarded == (1, 2)
    y, mean, rstd = strided(rows)
    assert seen == [True] and mean is None and rstd is None
    torch.testing.assert_close(y, rows * 2, rtol=0, atol=0)
