"""boo_matmul, boo_linear and BooLinear against PyTorch: values, gradients, drop-in behaviour."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from boo_core import ArgumentError, UnsupportedError
from boo_core.settings import settings_override
from boo_core.verify.numerics import compare
from boo_ops_matmul import BooLinear, MatmulSignature, boo_linear, boo_matmul, eager, matmul_signature_for

f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
TORCH_ACTIVATION = {None: lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}


def assert_matches(name: str, actual: torch.Tensor, expected: torch.Tensor, n: int) -> None:
    """``actual`` against a float64 ``expected``, with the dtype-aware tolerance for n-term sums."""
    assert actual.dtype != torch.float64 and expected.dtype == torch.float64
    result = compare(name, actual, expected, accumulation_length=n)
    assert result.passed, str(result)


def operand(rows: int, cols: int, transposed: bool, dtype=f32, batch: int | None = None) -> torch.Tensor:
    """A rows×cols operand; ``transposed``: a transposed view of a contiguous cols×rows tensor."""
    lead = () if batch is None else (batch,)
    if transposed:
        return torch.randn(*lead, cols, rows, dtype=dtype).mT
    return torch.randn(*lead, rows, cols, dtype=dtype)


# -- boo_matmul -------------------------------------------------------------------------------------


@pytest.mark.parametrize("trans_a, trans_b", list(itertools.product([False, True], repeat=2)))
def test_boo_matmul_runs_transposed_views_in_the_kernel(trans_a, trans_b):
    a, b = operand(7, 3, trans_a), operand(3, 5, trans_b)
    signature = matmul_signature_for(a, b)
    assert (signature.trans_a, signature.trans_b) == (trans_a, trans_b)
    assert_matches("out", boo_matmul(a, b), a.double() @ b.double(), 3)


@pytest.mark.parametrize("trans_a, trans_b, dtype", [(False, False, f32), (True, False, f16), (False, True, bf16),
                                                     (True, True, f32)])
def test_boo_matmul_batched(trans_a, trans_b, dtype):
    a, b = operand(6, 11, trans_a, dtype, batch=3), operand(11, 9, trans_b, dtype, batch=3)
    assert matmul_signature_for(a, b).batch == 3
    assert_matches("out", boo_matmul(a, b), a.double() @ b.double(), 11)


def test_a_batch_of_one_runs_the_unbatched_kernel():
    a, b = torch.randn(1, 7, 3), torch.randn(1, 3, 5)
    assert matmul_signature_for(a, b) == MatmulSignature(m=7, n=5, k=3)
    out = boo_matmul(a, b)
    assert out.shape == (1, 7, 5)
    assert_matches("out", out, a.double() @ b.double(), 3)


def test_other_non_contiguous_operands_are_copied():
    a = torch.randn(7, 6)[:, ::2]
    b = torch.randn(3, 10)[:, 1::2]
    assert not a.is_contiguous() and not a.mT.is_contiguous()
    assert matmul_signature_for(a, b) == MatmulSignature(m=7, n=5, k=3)
    assert_matches("out", boo_matmul(a, b), a.double() @ b.double(), 3)


def test_boo_matmul_alpha_beta_bias_activation():
    a, b = operand(6, 11, False, batch=2), operand(11, 9, True, batch=2)
    c, bias = torch.randn(2, 6, 9), torch.randn(9)
    out = boo_matmul(a, b, c, alpha=0.75, beta=-1.0, bias=bias, activation="gelu")
    expected = F.gelu(0.75 * (a.double() @ b.double()) - c.double() + bias.double())
    assert_matches("out", out, expected, 11)


def test_beta_zero_ignores_c_as_torch_addmm_does():
    a, b = torch.randn(7, 3), torch.randn(3, 5)
    c = torch.full((7, 5), float("nan"))
    assert matmul_signature_for(a, b, c, beta=0.0).beta == 0.0
    assert_matches("out", boo_matmul(a, b, c, beta=0.0), a.double() @ b.double(), 3)


def test_boo_matmul_default_beta_is_one():
    a, b, c = torch.randn(9, 31, dtype=bf16), torch.randn(31, 13, dtype=bf16), torch.randn(9, 13, dtype=bf16)
    assert matmul_signature_for(a, b, c).beta == 1.0
    assert_matches("out", boo_matmul(a, b, c), a.double() @ b.double() + c.double(), 31)


@pytest.mark.parametrize("call, error, pattern", [
    (lambda: boo_matmul(torch.randn(2, 3), torch.randn(4, 5)), ArgumentError,
     r"boo_matmul: shapes \(2, 3\) and \(4, 5\) do not multiply"),
    (lambda: boo_matmul(torch.randn(2, 2, 3), torch.randn(3, 3, 5)), ArgumentError,
     r"boo_matmul: shapes \(2, 2, 3\) and \(3, 3, 5\) do not multiply .*batch sizes must match"),
    (lambda: boo_matmul(torch.randn(2, 3), torch.randn(1, 3, 5)), ArgumentError,
     r"boo_matmul: a and b must both be 2-D .* or both 3-D"),
    (lambda: boo_matmul(torch.randn(1, 1, 2, 3), torch.randn(1, 1, 3, 5)), ArgumentError,
     r"boo_matmul: a and b must both be 2-D"),
    (lambda: boo_matmul(torch.randn(2, 3), torch.randn(3, 5, dtype=f16)), ArgumentError,
     r"boo_matmul: b has dtype torch.float16, a torch.float32; they must match"),
    (lambda: boo_matmul(torch.randn(2, 3), torch.randn(3, 5), torch.randn(5, 2)), ArgumentError,
     r"boo_matmul: c has shape \(5, 2\); the result has shape \(2, 5\)"),
    (lambda: boo_matmul(torch.randn(2, 3), torch.randn(3, 5), bias=torch.randn(2, 5)), ArgumentError,
     r"boo_matmul: bias has shape \(2, 5\); expected \(5,\)"),
    (lambda: boo_matmul(torch.randn(7, 3), torch.randn(3, 5), activation="tanh"), UnsupportedError,
     r"activation 'tanh' is not supported"),
    (lambda: boo_matmul(torch.randn(7, 3), torch.randn(3, 5).mT.contiguous().mT, torch.randn(7, 5, dtype=f16),
                        beta=0.5, alpha=1.0), ArgumentError,
     r"boo_matmul: c has dtype torch.float16, a torch.float32; they must match"),
    (lambda: boo_linear(torch.randn(4, 7), torch.randn(7)), ArgumentError,
     r"boo_linear: w must be 2-D \(out_features, in_features\), got shape \(7,\)"),
    (lambda: boo_linear(torch.randn(4, 6), torch.randn(3, 7)), ArgumentError,
     r"boo_linear: x of shape \(4, 6\) does not end in in_features = 7"),
    (lambda: BooLinear(7, 3, activation="swish"), UnsupportedError, r"activation 'swish' is not supported"),
])
def test_bad_arguments_are_refused_clearly(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# -- boo_linear and BooLinear ------------------------------------------------------------------------


@pytest.mark.parametrize("shape, features", [((2, 5, 7), 3), ((10, 7), 3), ((7,), 16)])
def test_boo_linear_matches_f_linear(shape, features):
    x, w, b = torch.randn(shape), torch.randn(features, 7), torch.randn(features)
    out = boo_linear(x, w, b)
    assert out.shape == (*shape[:-1], features)
    assert_matches("out", out, F.linear(x.double(), w.double(), b.double()), 7)


@pytest.mark.parametrize("activation, dtype, sizes", [
    ("relu", f16, (10, 3, 7)), ("gelu", bf16, (19, 23, 45)), ("silu", f32, (10, 3, 7))])
def test_boo_linear_activations(activation, dtype, sizes):
    m, n, k = sizes
    x, w, b = (torch.randn(m, k, dtype=dtype), torch.randn(n, k, dtype=dtype), torch.randn(n, dtype=dtype))
    expected = TORCH_ACTIVATION[activation](F.linear(x.double(), w.double(), b.double()))
    assert_matches("out", boo_linear(x, w, b, activation), expected, k)


def test_boo_linear_is_a_drop_in_for_torch_linear():
    torch.manual_seed(3)
    reference = torch.nn.Linear(7, 3)
    torch.manual_seed(3)
    layer = BooLinear(7, 3)
    assert isinstance(layer, torch.nn.Linear)
    assert list(layer.state_dict()) == list(reference.state_dict()) == ["weight", "bias"]
    for name, tensor in reference.state_dict().items():  # same initialization
        assert torch.equal(layer.state_dict()[name], tensor)
    other = torch.nn.Linear(7, 3)
    layer.load_state_dict(other.state_dict())
    x = torch.randn(2, 5, 7)
    with torch.no_grad():
        assert_matches("out", layer(x), other.double()(x.double()), 7)


def test_boo_linear_module_arguments():
    layer = BooLinear(7, 3, bias=False, dtype=bf16, device="cpu", activation="relu")
    assert layer.bias is None and layer.weight.dtype == bf16 and list(layer.state_dict()) == ["weight"]
    assert repr(layer) == "BooLinear(in_features=7, out_features=3, bias=False, activation=relu)"
    assert repr(BooLinear(7, 3)) == "BooLinear(in_features=7, out_features=3, bias=True)"
    x = torch.randn(10, 7, dtype=bf16)
    with torch.no_grad():
        expected = F.relu(x.double() @ layer.weight.double().T)
        assert_matches("out", layer(x), expected, 7)


# -- gradients ----------------------------------------------------------------------------------------


@pytest.fixture
def count_boo_matmul(monkeypatch):
    """Count calls of boo_matmul made through boo_ops_matmul.eager (forward and backward)."""
    calls = []
    original = eager.boo_matmul

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(eager, "boo_matmul", counting)
    return calls


@pytest.mark.parametrize("kernels", [False, True], ids=["torch_backward", "boo_backward"])
@pytest.mark.parametrize("bias, activation, dtype", [
    (True, None, f32), (False, "relu", f32), (True, "gelu", f32), (True, "silu", f32), (True, "relu", bf16)])
def test_boo_linear_gradients_match_torch_linear(kernels, bias, activation, dtype, count_boo_matmul):
    torch.manual_seed(0)
    layer = BooLinear(7, 3, bias=bias, dtype=dtype, activation=activation)
    reference = torch.nn.Linear(7, 3, bias=bias, dtype=torch.float64)
    reference.load_state_dict(layer.state_dict())
    x = torch.randn(2, 5, 7, dtype=dtype, requires_grad=True)
    x64 = x.detach().double().requires_grad_()
    grad = torch.randn(2, 5, 3, dtype=dtype)
    with settings_override(use_backward_kernels=kernels):
        out = layer(x)
        out.backward(grad)
    expected = TORCH_ACTIVATION[activation](reference(x64))
    expected.backward(grad.double())
    assert_matches("out", out, expected, 7)
    assert_matches("dx", x.grad, x64.grad, 3)
    assert_matches("dw", layer.weight.grad, reference.weight.grad, 10)
    if bias:
        assert_matches("db", layer.bias.grad, reference.bias.grad, 10)
    assert len(count_boo_matmul) == (3 if kernels else 1)  # forward, then dx and dw as BOO kernels


@pytest.mark.parametrize("kernels", [False, True], ids=["torch_backward", "boo_backward"])
@pytest.mark.parametrize("trans_a, trans_b", list(itertools.product([False, True], repeat=2)))
def test_boo_matmul_gradients_for_every_transpose(kernels, trans_a, trans_b):
    a, b = operand(7, 3, trans_a).requires_grad_(), operand(3, 5, trans_b).requires_grad_()
    grad = torch.randn(7, 5)
    with settings_override(use_backward_kernels=kernels):
        boo_matmul(a, b).backward(grad)
    a64, b64 = (t.detach().double().requires_grad_() for t in (a, b))
    (a64 @ b64).backward(grad.double())
    assert_matches("da", a.grad, a64.grad, 5)
    assert_matches("db", b.grad, b64.grad, 7)


@pytest.mark.parametrize("kernels", [False, True], ids=["torch_backward", "boo_backward"])
def test_boo_matmul_gradients_batched_with_alpha_beta_bias(kernels):
    a = operand(6, 11, True, batch=2).requires_grad_()
    b = operand(11, 9, False, batch=2).requires_grad_()
    c = torch.randn(2, 6, 9, requires_grad=True)
    bias = torch.randn(9, requires_grad=True)
    grad = torch.randn(2, 6, 9)
    with settings_override(use_backward_kernels=kernels):
        out = boo_matmul(a, b, c, alpha=0.5, beta=-1.5, bias=bias, activation="silu")
        out.backward(grad)
    leaves = [t.detach().double().requires_grad_() for t in (a, b, c, bias)]
    a64, b64, c64, bias64 = leaves
    expected = F.silu(0.5 * (a64 @ b64) - 1.5 * c64 + bias64)
    expected.backward(grad.double())
    assert_matches("out", out, expected, 11)
    for name, got, leaf, n in (("da", a.grad, a64, 9), ("db", b.grad, b64, 12), ("dc", c.grad, c64, 1),
                               ("dbias", bias.grad, bias64, 12)):
        assert_matches(name, got, leaf.grad, n)


def test_outside_autograd_the_activation_is_fused_into_the_kernel():
    x, w = torch.randn(10, 7, requires_grad=True), torch.randn(3, 7)
    assert matmul_signature_for(x, w.mT, activation="gelu").activation == "gelu"
    with torch.no_grad():
        fused = boo_linear(x, w, activation="gelu")
    recorded = boo_linear(x, w, activation="gelu")
    assert fused.grad_fn is None and recorded.grad_fn is not None
    assert_matches("out", fused, F.gelu(x.double() @ w.double().T), 7)
    assert_matches("out", recorded, F.gelu(x.double() @ w.double().T), 7)


# -- the driver --------------------------------------------------------------------------------------
