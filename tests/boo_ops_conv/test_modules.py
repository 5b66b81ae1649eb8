"""Autograd, the BooConv* modules, model conversion and memory formats."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from boo_core import ArgumentError
from boo_core.settings import settings_override
from boo_ops_conv import (
    BooConv1d,
    BooConv2d,
    BooConv3d,
    BooConvTranspose1d,
    BooConvTranspose2d,
    BooConvTranspose3d,
    boo_conv,
    conv_signature_for,
    convert_convs,
)

BACKWARD = pytest.mark.parametrize("boo_backward", [False, True], ids=["torch-backward", "boo-backward"])


def grads_of(fn, *tensors, grad_output):
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    fn(*leaves).backward(grad_output)
    return [leaf.grad for leaf in leaves]


def assert_all_close(got, expected, tol=2e-4):
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


GRAD_CASES = {
    "1d": (torch.randn(2, 4, 11), torch.randn(6, 2, 3), torch.randn(6), dict(stride=2, padding=1, groups=2)),
    "2d": (torch.randn(2, 3, 9, 8), torch.randn(5, 3, 3, 2), torch.randn(5), dict(stride=(2, 1), dilation=(1, 2))),
    "3d": (torch.randn(1, 4, 5, 6, 5), torch.randn(4, 1, 3, 3, 3), torch.randn(4), dict(padding=1, groups=4)),
    "2d_transposed": (torch.randn(2, 4, 5, 5), torch.randn(4, 3, 3, 3), torch.randn(3),
                      dict(stride=2, padding=1, output_padding=1, transposed=True)),
    "2d_channels_last": (torch.randn(2, 4, 7, 7).to(memory_format=torch.channels_last),
                         torch.randn(6, 4, 3, 3).to(memory_format=torch.channels_last), torch.randn(6),
                         dict(padding=1)),
}
FUNCTIONAL = {(1, False): F.conv1d, (2, False): F.conv2d, (3, False): F.conv3d, (2, True): F.conv_transpose2d}


@BACKWARD
@pytest.mark.parametrize("name", GRAD_CASES)
def test_boo_conv_gradients_match_torch(name, boo_backward):
    x, w, b, options = GRAD_CASES[name]
    transposed = options.get("transposed", False)
    torch_options = {k: v for k, v in options.items() if k != "transposed"}
    functional = FUNCTIONAL[(x.dim() - 2, transposed)]
    reference = functional(x, w, b, **torch_options)
    grad_output = torch.randn_like(reference)
    expected = grads_of(lambda *t: functional(*t, **torch_options), x, w, b, grad_output=grad_output)
    with settings_override(use_backward_kernels=boo_backward):
        got = grads_of(lambda *t: boo_conv(*t, **options), x, w, b, grad_output=grad_output)
    assert_all_close(got, expected)


@BACKWARD
def test_gradients_through_fused_activation(boo_backward):
    x, w, b = torch.randn(2, 4, 6, 6), torch.randn(4, 4, 3, 3), torch.randn(4)
    grad_output = torch.randn(2, 4, 6, 6)
    expected = grads_of(lambda *t: F.gelu(F.conv2d(*t, padding=1)), x, w, b, grad_output=grad_output)
    with settings_override(use_backward_kernels=boo_backward):
        got = grads_of(lambda *t: boo_conv(*t, padding=1, activation="gelu"), x, w, b, grad_output=grad_output)
    assert_all_close(got, expected)


def test_boo_backward_kernels_are_really_used(monkeypatch):
    import boo_core.runtime.launchable

    launched = []
    original = boo_core.runtime.launchable.Launchable.__call__

    def recording(self, *args, **kwargs):
        launched.append(self.signature.mode)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(boo_core.runtime.launchable.Launchable, "__call__", recording)
    x, w = torch.randn(1, 3, 7, 7, requires_grad=True), torch.randn(2, 3, 3, 3, requires_grad=True)
    with settings_override(use_backward_kernels=True):
        boo_conv(x, w, stride=2).sum().backward()
    assert sorted(launched) == ["bwd", "fwd", "wrw"]
    launched.clear()
    boo_conv(x, w, stride=2).sum().backward()
    assert launched == ["fwd"]


MODULE_PAIRS = [
    (nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), BooConv1d, (2, 4, 9)),
    (nn.Conv2d(3, 5, (3, 2), stride=(2, 1), padding="valid", bias=False), BooConv2d, (2, 3, 8, 7)),
    (nn.Conv2d(4, 4, 4, padding="same", dilation=1), BooConv2d, (1, 4, 7, 7)),
    (nn.Conv2d(4, 6, 3, padding=1, padding_mode="reflect"), BooConv2d, (2, 4, 6, 6)),
    (nn.Conv2d(4, 6, 3, padding=(2, 1), padding_mode="circular"), BooConv2d, (2, 4, 6, 6)),
    (nn.Conv3d(2, 4, 3, padding=1, padding_mode="replicate"), BooConv3d, (1, 2, 4, 5, 4)),
    (nn.ConvTranspose1d(4, 2, 3, stride=2, output_padding=1), BooConvTranspose1d, (2, 4, 6)),
    (nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, groups=2), BooConvTranspose2d, (2, 4, 5, 5)),
    (nn.ConvTranspose3d(3, 2, 2, stride=2), BooConvTranspose3d, (1, 3, 3, 3, 3)),
]


@pytest.mark.parametrize("torch_module, boo_class, shape", MODULE_PAIRS,
                         ids=[f"{type(m).__name__}-{i}" for i, (m, _, _) in enumerate(MODULE_PAIRS)])
def test_modules_are_drop_in_replacements(torch_module, boo_class, shape):
    boo = boo_class(**_constructor_args(torch_module))
    assert boo.state_dict().keys() == torch_module.state_dict().keys()
    boo.load_state_dict(torch_module.state_dict())
    x = torch.randn(shape)
    torch.testing.assert_close(boo(x), torch_module(x), rtol=1e-4, atol=1e-4)


def _constructor_args(module: nn.Module) -> dict:
    args = dict(in_channels=module.in_channels, out_channels=module.out_channels, kernel_size=module.kernel_size,
                stride=module.stride, padding=module.padding, dilation=module.dilation, groups=module.groups,
                bias=module.bias is not None, padding_mode=module.padding_mode)
    if module.transposed:
        args["output_padding"] = module.output_padding
    return args


def test_transposed_module_output_size_and_unbatched_input():
    torch_module = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1)
    boo = BooConvTranspose2d(4, 2, 3, stride=2, padding=1)
    boo.load_state_dict(torch_module.state_dict())
    x = torch.randn(1, 4, 5, 5)
    for size in ([9, 9], [10, 10], [1, 2, 10, 9]):
        torch.testing.assert_close(boo(x, output_size=size), torch_module(x, output_size=size), rtol=1e-4, atol=1e-4)
    with pytest.raises(ArgumentError, match=r"output_size \(12, 12\) is not reachable; dim 0 must be in \[9, 10\]"):
        boo(x, output_size=[12, 12])
    conv1d = BooConv1d(3, 2, 3)
    unbatched = torch.randn(3, 8)
    torch.testing.assert_close(conv1d(unbatched), nn.Conv1d.forward(conv1d, unbatched), rtol=1e-5, atol=1e-5)


@BACKWARD
def test_converted_model_gives_the_same_outputs_and_gradients(boo_backward):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, padding_mode="reflect"), nn.ReLU(),
        nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1), nn.Tanh(),
        nn.Conv2d(4, 2, 1),
    )
    x = torch.randn(2, 3, 8, 8)
    expected_out = model(x)
    expected_grads = torch.autograd.grad(expected_out.square().sum(), list(model.parameters()))
    parameters_before = list(model.parameters())
    assert convert_convs(model) is model
    assert [type(m).__name__ for m in model if "Conv" in type(m).__name__] == [
        "BooConv2d", "BooConv2d", "BooConvTranspose2d", "BooConv2d"]
    assert all(a is b for a, b in zip(model.parameters(), parameters_before))
    with settings_override(use_backward_kernels=boo_backward):
        out = model(x)
        grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
    torch.testing.assert_close(out, expected_out, rtol=1e-4, atol=1e-4)
    assert_all_close(grads, expected_grads, tol=1e-3)


def test_convert_convs_leaves_other_modules_and_subclasses_alone():
    class MyConv(nn.Conv2d):
        pass

    model = nn.Sequential(MyConv(2, 2, 1), nn.Linear(2, 2), nn.Conv1d(2, 2, 1))
    convert_convs(model)
    assert [type(m) for m in model] == [MyConv, nn.Linear, BooConv1d]


def test_channels_last_input_is_read_in_place_without_a_copy(monkeypatch):
    x = torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last)
    w = torch.randn(8, 4, 3, 3).to(memory_format=torch.channels_last)
    signature = conv_signature_for(x, w, padding=1)
    assert (signature.input_layout, signature.kernel_layout, signature.output_layout) == ("NHWC", "NHWC", "NHWC")
    expected = F.conv2d(x, w, padding=1)
    boo_conv(x, w, padding=1)  # compile outside the guarded region

    def no_copies(*args, **kwargs):
        raise AssertionError("a hidden copy")

    monkeypatch.setattr(torch.Tensor, "contiguous", no_copies)
    monkeypatch.setattr(torch.Tensor, "clone", no_copies)
    y = boo_conv(x, w, padding=1)
    monkeypatch.undo()
    assert y.shape == (2, 8, 6, 6) and y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-4)


def test_channels_last_3d_and_1d_channels_last_strides():
    x3 = torch.randn(1, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d)
    w3 = torch.randn(2, 3, 3, 3, 3)
    assert conv_signature_for(x3, w3).input_layout == "NDHWC"
    torch.testing.assert_close(boo_conv(x3, w3), F.conv3d(x3, w3), rtol=1e-4, atol=1e-4)
    x1 = torch.randn(2, 9, 4).transpose(1, 2)  # (N, C, W) with NWC strides
    w1 = torch.randn(3, 4, 3)
    assert conv_signature_for(x1, w1).input_layout == "NWC"
    torch.testing.assert_close(boo_conv(x1, w1), F.conv1d(x1, w1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(2, 1, 5, 5), (2, 4, 1, 1)])
def test_tensor_both_contiguous_and_channels_last_counts_as_contiguous(shape):
    x = torch.randn(shape)
    assert x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
    w = torch.randn(3, shape[1], 1, 1)
    assert conv_signature_for(x, w).input_layout == "NCHW"
    torch.testing.assert_close(boo_conv(x, w), F.conv2d(x, w), rtol=1e-5, atol=1e-5)


def test_a_1x1_filter_both_contiguous_and_channels_last_takes_the_inputs_layout():
    """A 1x1 filter's memory is both (K, C) NCHW and KRSC: beside a channels-last input it is
    read as NHWC (the layout kernel libraries serve), beside a contiguous one as NCHW."""
    w = torch.randn(8, 4, 1, 1)
    x = torch.randn(2, 4, 6, 6)
    nhwc = conv_signature_for(x.to(memory_format=torch.channels_last), w)
    assert (nhwc.input_layout, nhwc.kernel_layout) == ("NHWC", "NHWC")
    assert conv_signature_for(x, w).kernel_layout == "NCHW"
    y = boo_conv(x.to(memory_format=torch.channels_last), w)
    torch.testing.assert_close(y, F.conv2d(x, w), rtol=1e-4, atol=1e-4)


def test_other_strides_are_copied_and_computed_correctly():
    x = torch.randn(2, 6, 8, 4).permute(0, 3, 2, 1)  # (N, C=4, H=8, W=6) stored N W H C: no layout
    w = torch.randn(3, 4, 3, 3)
    assert conv_signature_for(x, w).input_layout == "NCHW"
    torch.testing.assert_close(boo_conv(x, w), F.conv2d(x, w), rtol=1e-4, atol=1e-4)
