"""Compiled graphs' BOO nodes go straight to their kernels: every first-party pattern binds
its launch when the graph compiles, and later calls never go through the op's eager entry
point (argument resolution, kernel lookup, autograd)."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from boo_core import BooOpRegistry
from boo_core.dynamo.kernel_call import KernelCall
from boo_core.dynamo.rewrite import rewrite
from boo_core.settings import settings_override

aten = torch.ops.aten


def _conv_relu(x, w, b):
    return torch.relu(aten.convolution(x, w, b, [2, 1], [1, 1], [1, 1], False, [0, 0], 1))


def _conv_backward(dy, x, w):
    return aten.convolution_backward(dy, x, w, [6], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])


def _linear_gelu(x, w, b):
    return torch.nn.functional.gelu(aten.addmm(b, x, w.t()))


def _mm_transposed(a, b):
    return aten.mm(a.t(), b)


def _layer_norm(x, w, b):
    return aten.native_layer_norm(x, [16], w, b, 1e-5)


def _layer_norm_backward(dy, x, w, b):
    _, mean, rstd = aten.native_layer_norm(x, [16], w, b, 1e-5)
    return aten.native_layer_norm_backward(dy, x, [16], mean, rstd, w, b, [True, True, True])


def _channels_last(t):
    return t.contiguous(memory_format=torch.channels_last)


CASES = {
    "conv+relu, NCHW": (_conv_relu, lambda: (torch.randn(2, 4, 9, 7), torch.randn(6, 4, 3, 3), torch.randn(6))),
    "conv+relu, channels-last": (_conv_relu, lambda: (_channels_last(torch.randn(2, 4, 9, 7)),
                                                      _channels_last(torch.randn(6, 4, 3, 3)), torch.randn(6))),
    "conv backward, channels-last": (_conv_backward, lambda: (_channels_last(torch.randn(2, 6, 5, 4)),
                                                              _channels_last(torch.randn(2, 4, 5, 4)),
                                                              _channels_last(torch.randn(6, 4, 3, 3)))),
    "linear+gelu": (_linear_gelu, lambda: (torch.randn(10, 12), torch.randn(8, 12), torch.randn(8))),
    "mm, a transposed": (_mm_transposed, lambda: (torch.randn(12, 10), torch.randn(12, 8))),
    "layer norm": (_layer_norm, lambda: (torch.randn(3, 5, 16), torch.randn(16), torch.randn(16))),
    "layer norm backward": (_layer_norm_backward, lambda: (torch.randn(3, 5, 16), torch.randn(3, 5, 16),
                                                           torch.randn(16), torch.randn(16))),
}


@pytest.fixture
def counted_launches(monkeypatch):
    """How many times each first-party pattern's general ``launch`` ran."""
    counts: dict[str, int] = {}
    for pattern in BooOpRegistry.default().fusion_patterns():
        general = pattern.launch

        def counted(spec, inputs, general=general, name=pattern.name):
            counts[name] = counts.get(name, 0) + 1
            return general(spec, inputs)

        monkeypatch.setattr(pattern, "launch", counted)
    return counts


@pytest.mark.parametrize("as_custom_op", [False, True], ids=["iree_boo", "custom op"])
@pytest.mark.parametrize("case", list(CASES))
def test_each_node_is_bound_at_compile_and_runs_its_kernel_directly(case, as_custom_op, counted_launches):
    fn, make_inputs = CASES[case]
    example = make_inputs()
    gm = make_fx(fn, tracing_mode="fake")(*example)
    with settings_override(use_backward_kernels=True):
        report = rewrite(gm, backend="test", kind="backward" if "backward" in case else "inference",
                         as_custom_op=as_custom_op)
    assert report.offloaded and set(report.fallbacks) <= {"aten.t"}, report.line()
    for _ in range(2):
        inputs = make_inputs()
        expected = fn(*(t.double() for t in inputs))
        got = gm(*inputs)
        for g, e in zip(*(v if isinstance(v, (tuple, list)) else (v,) for v in (got, expected))):
            if e is not None:
                assert g.stride() == e.stride() or g.is_contiguous(memory_format=torch.channels_last)
                torch.testing.assert_close(g.double(), e, rtol=1e-4, atol=1e-4)
    assert counted_launches == {}, "a compiled node went through the op's eager entry point"
    if not as_custom_op:
        calls = [n.target for n in gm.graph.nodes if isinstance(n.target, KernelCall)]
        assert calls and all(call._bound is not None for call in calls)


def test_a_tensor_in_another_memory_format_than_compiled_for_is_copied_into_the_bound_layout(counted_launches):
    """Inductor may hand a node an NCHW buffer where the graph it was given said channels-last."""
    fn, make_inputs = CASES["conv+relu, channels-last"]
    gm = make_fx(fn, tracing_mode="fake")(*make_inputs())
    rewrite(gm, backend="test", kind="inference", as_custom_op=True)
    x, w, b = make_inputs()
    x = x.contiguous()  # NCHW now
    torch.testing.assert_close(gm(x, w, b).double(), fn(x.double(), w.double(), b.double()), rtol=1e-4, atol=1e-4)
    assert counted_launches == {}


def test_boo_conv_reads_a_filter_in_another_memory_format_than_its_input():
    """An NCHW input with a channels-last filter: a kernel of mixed layouts."""
    from boo_ops_conv import boo_conv

    x = torch.randn(2, 8, 9, 7)
    w = torch.randn(6, 8, 3, 3).contiguous(memory_format=torch.channels_last)
    want = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    torch.testing.assert_close(boo_conv(x, w, padding=1).double(), want, rtol=1e-4, atol=1e-4)



@torch.library.custom_op("boo_test::conv_inside", mutates_args=())
def _conv_inside(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A kernel built while a compiled graph runs (as a BOO node meeting new tensors does)."""
    from boo_core import get_launchable
    from boo_ops_conv import ConvSignature

    return get_launchable(ConvSignature(tuple(x.shape), tuple(w.shape), stride=2))(x, w)


@_conv_inside.register_fake
def _(x, w):
    return x.new_empty((x.shape[0], w.shape[0], (x.shape[2] + 1) // 2, (x.shape[3] + 1) // 2))


def test_a_kernel_built_while_a_compiled_graph_runs_writes_its_output(private_cache):
    """torch.export, run inside a compiled graph's call, dropped the writes into the outputs:
    the kernel wrote nothing (NaN in an eval-mode ResNet under iree_boo_inductor)."""
    x, w = torch.randn(2, 8, 10, 10), torch.randn(16, 8, 1, 1)
    got = torch.compile(lambda x, w: torch.ops.boo_test.conv_inside(x, w) * 2, backend="inductor")(x, w)
    want = torch.nn.functional.conv2d(x.double(), w.double(), stride=2) * 2
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
