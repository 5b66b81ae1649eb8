"""boo_batch_norm and BooBatchNorm{1,2,3}d against torch's batch norm: outputs, running
statistics, gradients, modules' state and every module option."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from boo_core import ArgumentError
from boo_core.settings import settings_override
from boo_ops_batchnorm import BooBatchNorm1d, BooBatchNorm2d, BooBatchNorm3d, boo_batch_norm, convert_batch_norms

f32, bf16 = torch.float32, torch.bfloat16


def close(got, want, dtype=f32):
    tol = {f32: 1e-4, bf16: 2e-2}[dtype]
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape, channels_last", [((6, 5), False), ((4, 5, 7), False), ((3, 5, 4, 6), False),
                                                  ((3, 5, 4, 6), True), ((2, 5, 3, 4, 2), True)])
def test_training_matches_torch_and_updates_running_statistics(shape, channels_last):
    x = torch.randn(shape) * 3 + 1
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    weight, bias = torch.randn(5), torch.randn(5)
    ours, theirs = (torch.randn(5), torch.rand(5) + 0.5), None
    theirs = tuple(t.clone() for t in ours)
    y = boo_batch_norm(x, *ours, weight, bias, training=True, momentum=0.3)
    expected = F.batch_norm(x, *theirs, weight, bias, training=True, momentum=0.3)
    close(y, expected)
    close(ours[0], theirs[0])
    close(ours[1], theirs[1])
    assert y.stride() == expected.stride()  # channels-last in, channels-last out


def test_inference_uses_the_running_statistics():
    x = torch.randn(4, 3, 5, 5).to(memory_format=torch.channels_last)
    running = (torch.randn(3), torch.rand(3) + 0.5)
    params = (torch.randn(3), torch.randn(3))
    close(boo_batch_norm(x, *running, *params), F.batch_norm(x, *running, *params))


def test_gradients_match_torch_with_and_without_boo_backward_kernels():
    x = torch.randn(4, 3, 5, 5, dtype=torch.float64).float()
    weight, bias = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    dy = torch.randn(4, 3, 5, 5)
    xt = x.clone().requires_grad_()
    F.batch_norm(xt, None, None, weight, bias, training=True).backward(dy)
    expected = (xt.grad, weight.grad.clone(), bias.grad.clone())
    for backward_kernels in (False, True):
        weight.grad = bias.grad = None
        xb = x.clone().requires_grad_()
        with settings_override(use_backward_kernels=backward_kernels):
            boo_batch_norm(xb, None, None, weight, bias, training=True).backward(dy)
        for got, want in zip((xb.grad, weight.grad, bias.grad), expected):
            close(got, want)


def test_eval_mode_gradients_match_torch():
    x = torch.randn(4, 3, 5, 5, requires_grad=True)
    running = (torch.randn(3), torch.rand(3) + 0.5)
    weight = torch.randn(3, requires_grad=True)
    boo_batch_norm(x, *running, weight).sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    F.batch_norm(x2, *running, w2).sum().backward()
    close(x.grad, x2.grad)
    close(weight.grad, w2.grad)


@pytest.mark.parametrize("module_class, shape", [(BooBatchNorm1d, (8, 4)), (BooBatchNorm1d, (8, 4, 6)),
                                                 (BooBatchNorm2d, (4, 4, 3, 5)), (BooBatchNorm3d, (3, 4, 2, 3, 4))])
@pytest.mark.parametrize("options", [{}, {"momentum": None}, {"affine": False}, {"track_running_stats": False}])
def test_modules_behave_as_torchs_over_several_steps(module_class, shape, options):
    torch_class = module_class.__mro__[2]
    theirs = torch_class(4, **options)
    ours = module_class(4, **options)
    ours.load_state_dict(theirs.state_dict())
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    for _ in range(3):
        x = torch.randn(shape) * 2 + 0.5
        close(ours(x), theirs(x))
    for name, buffer in theirs.named_buffers():
        torch.testing.assert_close(dict(ours.named_buffers())[name], buffer, rtol=1e-4, atol=1e-5)
    ours.eval()
    theirs.eval()
    x = torch.randn(shape)
    close(ours(x), theirs(x))


def test_a_bf16_model_keeps_bf16_running_statistics(monkeypatch):
    """The kernel reads and writes them in bf16 itself (no conversions around the call)."""
    from boo_ops_batchnorm import eager

    kernels = []
    original = eager.launchable_for
    monkeypatch.setattr(eager, "launchable_for", lambda *a: kernels.append(original(*a)) or kernels[-1])
    ours, theirs = BooBatchNorm2d(3).to(bf16), torch.nn.BatchNorm2d(3).to(bf16)
    x = torch.randn(4, 3, 6, 6).to(bf16)
    close(ours(x), theirs(x), bf16)
    assert ours.running_mean.dtype == bf16
    close(ours.running_var, theirs.running_var, bf16)
    assert [k.signature.running_dtype for k in kernels] == [bf16]


def test_convert_batch_norms_switches_classes_in_place():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    reference = copy.deepcopy(model)
    weight = model[1].weight
    assert convert_batch_norms(model) is model
    assert type(model[1]) is BooBatchNorm2d and model[1].weight is weight
    x = torch.randn(2, 3, 8, 8)
    close(model(x), reference(x))


@pytest.mark.parametrize("call, message", [
    (lambda: boo_batch_norm(torch.randn(2, 3, 4), None, None), "training=False needs"),
    (lambda: boo_batch_norm(torch.randn(2, 3), torch.zeros(4), torch.ones(4)), "running_mean has shape"),
    (lambda: boo_batch_norm(torch.randn(2, 3), torch.zeros(3), None), "both running_mean and running_var"),
    (lambda: boo_batch_norm(torch.randn(3), None, None, training=True), "(N, C, *spatial)"),
    (lambda: boo_batch_norm(torch.randn(2, 3), None, None, torch.ones(3, dtype=bf16), training=True),
     "weight has dtype"),
])
def test_bad_arguments_are_clear_errors(call, message):
    with pytest.raises(ArgumentError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        call()
