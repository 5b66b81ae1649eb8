"""Property-based: the eager entry points' argument handling against PyTorch's own.

Hypothesis draws arguments (shapes with zeros, dtypes BOO does not serve, mismatched
channels and groups, strides and paddings of every type and sign, NaN scales...) and
calls the function that turns them into a signature (``conv_signature_for`` and its
siblings: everything ``boo_conv`` checks, without compiling a kernel). The property:

* the call returns a signature or raises a BOO error: never a ``TypeError``,
  ``AttributeError``, plain ``ValueError``...;
* when it returns one, PyTorch accepts the same arguments and its result has the shape the
  signature's output has (BOO never runs what PyTorch calls invalid);
* arguments of the wrong Python type are refused with an ``ArgumentError``.
"""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boo_core import ArgumentError, BooError
from boo_ops_conv import conv_signature_for
from boo_ops_layernorm import layer_norm_signature_for
from boo_ops_matmul import matmul_signature_for
from boo_ops_softmax.eager import softmax_signature_for

EXAMPLES = 300


@st.composite
def mostly(draw: st.DrawFn, usual: st.SearchStrategy, odd: st.SearchStrategy, one_in: int = 8) -> object:
    """A draw from ``usual``, or one time in ``one_in`` from ``odd``."""
    return draw(odd) if draw(st.integers(1, one_in)) == one_in else draw(usual)


DTYPES = mostly(st.sampled_from((torch.float32, torch.float16, torch.bfloat16)),
                st.sampled_from((torch.float64, torch.int32)))
#: Values that are not ints, for int arguments: each must be an ArgumentError.
NOT_INTS = st.sampled_from((1.5, "2", None, True, (1.0, 1.0), [], b"1"))

SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def outcome(boo, reference) -> str:
    """Check the property for one draw: ``boo()`` makes a signature or raises a BooError;
    a signature means ``reference()`` (PyTorch) works too, with as many elements and the
    same trailing dims (a matmul batch of 1 has no batch dim in the kernel). Returns what
    happened."""
    try:
        signature = boo()
    except BooError:
        return "refused"
    try:
        result = reference()
    except (RuntimeError, ValueError, TypeError, IndexError) as e:
        pytest.fail(f"BOO accepted ({signature}) what PyTorch refuses: {type(e).__name__}: {e}")
    physical = tuple(signature.output_specs()[0].shape)
    assert result.numel() == signature.output_specs()[0].numel, (signature, result.shape)
    assert tuple(result.shape)[-len(physical):] == physical or physical == (), (signature, result.shape)
    return "accepted"


def _tensor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(shape).to(dtype)


@st.composite
def int_arg(draw: st.DrawFn, rank: int, low: int, high: int) -> object:
    """An int, or a tuple of ``rank`` of them, from ``low`` to ``high``; now and then one
    below ``low``, a tuple of another length, or not an int at all."""
    values = mostly(st.integers(low, high), st.integers(low - 2, low - 1))
    roll = draw(st.integers(0, 19))
    if roll < 10:
        return draw(values)
    if roll < 17:
        return tuple(draw(values) for _ in range(rank))
    if roll < 19:
        return tuple(draw(values) for _ in range(draw(st.integers(0, 4))))
    return draw(NOT_INTS)


@st.composite
def conv_calls(draw: st.DrawFn):
    rank = draw(st.integers(1, 3))
    sizes = mostly(st.integers(1, 6), st.just(0), 12)
    n, c, k = draw(sizes), draw(sizes), draw(sizes)
    groups = draw(mostly(st.sampled_from((1, 1, 2, 3)), st.integers(-1, 0) | NOT_INTS))
    g = groups if type(groups) is int and groups > 0 else 1  # for the shapes: groups itself may be anything
    transposed = draw(st.booleans())
    per_group = max(c // g, 1) if c else draw(st.integers(0, 3))
    window = tuple(draw(mostly(st.integers(1, 3), st.integers(0, 5))) for _ in range(rank))
    weight = (c, max(k // g, 1)) if transposed else (k, per_group)
    if draw(st.integers(0, 9)) == 9:  # channels that do not fit
        weight = (weight[0] + 1, weight[1])
    dtype = draw(DTYPES)
    x = _tensor((n, c, *(draw(mostly(st.integers(3, 7), st.integers(0, 2))) for _ in range(rank))), dtype)
    w = _tensor((*weight, *window)[: rank + 1 if draw(st.integers(0, 19)) == 19 else rank + 2], dtype)
    out_channels = weight[1] * g if transposed else weight[0]
    b = None if draw(st.booleans()) else _tensor((out_channels + draw(st.sampled_from((0, 0, 0, 1))),), dtype)
    stride = draw(int_arg(rank, 1, 3))
    padding = draw(mostly(int_arg(rank, 0, 3), st.sampled_from(("same", "valid", "full")), 4))
    dilation = draw(int_arg(rank, 1, 3))
    output_padding = draw(int_arg(rank, 0, 2)) if draw(st.integers(0, 3)) == 0 else 0
    return dict(x=x, w=w, b=b, stride=stride, padding=padding, dilation=dilation, groups=groups,
                transposed=transposed, output_padding=output_padding)


def torch_conv(x, w, b, stride, padding, dilation, groups, transposed, output_padding):
    rank = x.dim() - 2
    if transposed:
        function = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[rank - 1]
        return function(x, w, b, stride, padding, output_padding, groups, dilation)
    if output_padding not in (0, (0,) * rank):
        raise ValueError("torch's conv has no output padding")
    return (F.conv1d, F.conv2d, F.conv3d)[rank - 1](x, w, b, stride, padding, dilation, groups)


def _wrong_types(call: dict) -> bool:
    def bad(value):
        items = value if isinstance(value, tuple) else (value,)
        return any(isinstance(v, bool) or not isinstance(v, int) for v in items) or isinstance(value, list)

    padding = call["padding"]
    return any(bad(call[name]) for name in ("stride", "dilation", "groups", "output_padding")) or (
        not isinstance(padding, str) and bad(padding))


def test_conv_arguments_property():
    counts: collections.Counter = collections.Counter()

    @SETTINGS
    @given(conv_calls())
    def check(call):
        x, w, b = call.pop("x"), call.pop("w"), call.pop("b")
        result = outcome(lambda: conv_signature_for(x, w, b, **call),
                         lambda: torch_conv(x, w, b, **call))
        if _wrong_types(call):
            assert result == "refused"
            if x.dtype in (torch.float32, torch.float16, torch.bfloat16) and x.dim() == w.dim():
                with pytest.raises(ArgumentError):
                    conv_signature_for(x, w, b, **call)
        counts[result] += 1

    check()
    assert counts["accepted"] >= EXAMPLES // 10 and counts["refused"] >= EXAMPLES // 10, counts


@st.composite
def matmul_calls(draw: st.DrawFn):
    batched = draw(st.booleans())
    m, n, k = (draw(st.integers(0, 4)) for _ in range(3))
    batch = (draw(st.integers(0, 3)),) if batched else ()
    dtype = draw(DTYPES)
    a = _tensor((*batch, m, k + draw(st.sampled_from((0, 0, 0, 0, 1)))), dtype)
    b = _tensor((*batch, k, n), dtype)
    if draw(st.integers(0, 3)) == 0:
        b = b.mT.contiguous().mT  # stored transposed
    c = None if draw(st.booleans()) else _tensor((*batch, m, n)[draw(st.integers(0, 1)) if batched else 0:], dtype)
    bias = None if draw(st.booleans()) else _tensor((n + draw(st.sampled_from((0, 0, 1))),), dtype)
    scales = st.floats(-2, 2) | st.sampled_from((0.0, 1.0, float("nan"), float("inf"), "1", None))
    return dict(a=a, b=b, c=c, bias=bias, alpha=draw(scales), beta=draw(scales),
                activation=draw(st.sampled_from((None, None, "relu", "gelu", "tanh"))))


def torch_matmul(a, b, c, bias, alpha, beta, activation):
    y = alpha * torch.matmul(a, b)
    if c is not None and beta != 0.0:
        if c.shape != y.shape:
            raise ValueError("c does not have the result's shape")
        y = y + beta * c
    if bias is not None:
        y = y + bias
    return {"relu": F.relu, "gelu": F.gelu}[activation](y) if activation else y


def test_matmul_arguments_property():
    counts: collections.Counter = collections.Counter()

    @SETTINGS
    @given(matmul_calls())
    def check(call):
        a, b = call.pop("a"), call.pop("b")
        result = outcome(lambda: matmul_signature_for(a, b, **call), lambda: torch_matmul(a, b, **call))
        if not isinstance(call["alpha"], float) or not isinstance(call["beta"], float):
            assert result == "refused"
        counts[result] += 1

    check()
    assert counts["accepted"] >= EXAMPLES // 10 and counts["refused"] >= EXAMPLES // 10, counts


@st.composite
def layer_norm_calls(draw: st.DrawFn):
    sizes = st.integers(1, 4) if draw(st.integers(0, 4)) else st.integers(0, 4)
    shape = tuple(draw(st.lists(sizes, min_size=0, max_size=4)))
    dtype = draw(DTYPES)
    trailing = shape[len(shape) - draw(st.integers(min(1, len(shape)), len(shape))):]
    normalized = draw(mostly(st.just(trailing), st.sampled_from((tuple(d + 1 for d in trailing), (3, 3, 3, 3, 3),
                                                                "4", 4.0, None))))
    params = trailing if draw(st.integers(0, 4)) else tuple(d + 1 for d in trailing)
    weight = _tensor(params, dtype) if draw(st.booleans()) else None
    bias = _tensor(params, dtype) if draw(st.booleans()) else None
    eps = draw(st.floats(0, 1e-3)) if draw(st.integers(0, 5)) else draw(st.sampled_from((-1e-5, float("nan"), "1e-5",
                                                                                           None)))
    return dict(x=_tensor(shape, dtype), normalized_shape=normalized, weight=weight, bias=bias, eps=eps)


def test_layer_norm_arguments_property():
    counts: collections.Counter = collections.Counter()

    @SETTINGS
    @given(layer_norm_calls())
    def check(call):
        result = outcome(lambda: layer_norm_signature_for(**call),
                         lambda: F.layer_norm(call["x"], call["normalized_shape"], call["weight"], call["bias"],
                                              call["eps"]))
        if not isinstance(call["eps"], float) or not isinstance(call["normalized_shape"], tuple):
            assert result == "refused"
        counts[result] += 1

    check()
    assert counts["accepted"] >= EXAMPLES // 10 and counts["refused"] >= EXAMPLES // 10, counts


def test_softmax_arguments_property():
    counts: collections.Counter = collections.Counter()

    @SETTINGS
    @given(st.lists(st.integers(0, 4), max_size=4), DTYPES, st.integers(-5, 5) | NOT_INTS, st.booleans())
    def check(shape, dtype, dim, log):
        x = _tensor(tuple(shape), dtype)

        def reference():
            return (torch.log_softmax if log else torch.softmax)(x, dim).reshape(
                softmax_signature_for(x, dim, log).output_specs()[0].shape)

        counts[outcome(lambda: softmax_signature_for(x, dim, log), reference)] += 1

    check()
    assert counts["accepted"] >= EXAMPLES // 10 and counts["refused"] >= EXAMPLES // 10, counts
